# The two commands a new user needs: `make demo` and `make test`.
# Both install what they need (pip packages, PostgreSQL from Debian if missing) first.

PYTHON ?= python3
SERVICES := scripts/local-services

.PHONY: setup demo test unit lint typecheck bench services-start services-stop

setup:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev]'

services-start:
	$(SERVICES) start pg

services-stop:
	$(SERVICES) stop all

demo: setup
	bash scripts/demo

lint:
	$(PYTHON) -m ruff check capture pipeline tests bench
	$(PYTHON) -m ruff format --check capture pipeline tests bench

typecheck:
	$(PYTHON) -m mypy

unit: setup
	$(PYTHON) -m pytest -m "not integration" -q

test: setup lint typecheck
	eval "$$($(SERVICES) start pg)" && $(PYTHON) -m pytest -q

bench: setup
	eval "$$($(SERVICES) start pg)" && $(PYTHON) bench/tail_vs_recvlogical.py

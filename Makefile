# The two commands a new user needs: `make demo` and `make test`.
# Both install what they need first: Python packages (PyPI), PostgreSQL (Debian, if
# missing), Kafka and Spark's connector jars (Maven Central, cached in ~/.cache/walcast).

PYTHON ?= python3
SERVICES := scripts/local-services

.PHONY: setup demo test unit lint typecheck bench services-start services-stop

setup:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev,spark]'
	scripts/fetch-spark-jars >/dev/null

services-start:
	$(SERVICES) start all

services-stop:
	$(SERVICES) stop all

demo: setup
	bash scripts/demo

lint:
	$(PYTHON) -m ruff check capture pipeline tests bench
	$(PYTHON) -m ruff format --check capture pipeline tests bench

typecheck:
	$(PYTHON) -m mypy

unit:
	$(PYTHON) -m pytest -m "not integration" -q

test: setup lint typecheck
	eval "$$($(SERVICES) start all)" && $(PYTHON) -m pytest -q

bench: setup
	eval "$$($(SERVICES) start all)" && \
	  $(PYTHON) bench/tail_vs_recvlogical.py && \
	  $(PYTHON) bench/encode_formats.py && \
	  $(PYTHON) bench/run_e2e.py && \
	  $(PYTHON) bench/spark_normalize.py

# The two commands a new user needs: `make demo` and `make test`.
# Both install what they need first: Python packages (PyPI), PostgreSQL (Debian, if
# missing), Kafka and Spark's connector jars (Maven Central, cached in ~/.cache/walcast).

# Everything runs in a project venv (.venv): Debian/Ubuntu's system pip refuses installs
# (PEP 668, "externally-managed-environment"). BOOTSTRAP_PYTHON only creates it.
BOOTSTRAP_PYTHON ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
SERVICES := scripts/local-services
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup demo test test-versions unit lint typecheck bench services-start services-stop

$(PYTHON):
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --upgrade pip

setup: $(PYTHON)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev,spark]'
	PYTHON=$(PYTHON) scripts/fetch-spark-jars >/dev/null
	scripts/build-readers >/dev/null

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

unit: $(PYTHON)
	$(PYTHON) -m pytest -m "not integration" -q

# Every test on PostgreSQL 15 (Debian's), then the capture core on the other majors.
test: setup lint typecheck
	eval "$$($(SERVICES) start all)" && $(PYTHON) -m pytest -q
	$(MAKE) --no-print-directory test-versions PG_MAJORS="13 14 16 17 18"

# The capture core (tests marked `core`) once per PostgreSQL major, in one pytest session
# (test ids [pg13] ...). 15 is Debian's; the others are fetched once from Maven Central and
# started beside it by scripts/local-services (WALCAST_PG_VERSION). One major:
# `make test-versions PG_MAJORS=13`.
PG_MAJORS ?= 13 14 15 16 17 18
test-versions: setup
	eval "$$($(SERVICES) start kafka)" && \
	  WALCAST_TEST_PG_VERSIONS="$(PG_MAJORS)" $(PYTHON) -m pytest -q -m core

bench: setup
	eval "$$($(SERVICES) start all)" && \
	  $(PYTHON) bench/tail_vs_recvlogical.py && \
	  $(PYTHON) bench/encode_formats.py && \
	  $(PYTHON) bench/run_e2e.py && \
	  $(PYTHON) bench/spark_normalize.py

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

.PHONY: setup prerequisites test-prerequisites demo test test-integration test-versions unit unit-nospark jvm-archive lint \
	typecheck bench services-start services-stop

# What the set-up needs from the system, checked before anything is downloaded: ONE line
# naming every missing command and the Debian/Ubuntu package that has it (the README's
# first set-up line installs them all). The interpreter is checked only while $(VENV) is
# missing: once the venv exists, BOOTSTRAP_PYTHON is not used again.
# $(call missing_commands,command:package ...) -> "command not found: install package; ..."
missing_commands = $(foreach pair,$(1),$(if $(shell command -v $(firstword $(subst :, ,$(pair))) 2>/dev/null),,$(firstword $(subst :, ,$(pair))) not found: install $(lastword $(subst :, ,$(pair)));))
JDK_PACKAGE := openjdk-17-jdk-headless
javac_major = $(shell javac -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p')
python_problem = $(shell \
	if ! command -v $(BOOTSTRAP_PYTHON) >/dev/null 2>&1; then \
	  echo "$(BOOTSTRAP_PYTHON) not found: install python3 python3-venv;"; \
	elif ! $(BOOTSTRAP_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
	  echo "$(BOOTSTRAP_PYTHON) is $$($(BOOTSTRAP_PYTHON) -c 'import platform; print(platform.python_version())'), walcast needs 3.11+: install python3.11 python3.11-venv and run make BOOTSTRAP_PYTHON=python3.11;"; \
	elif ! $(BOOTSTRAP_PYTHON) -c 'import ensurepip' 2>/dev/null; then \
	  echo "$(BOOTSTRAP_PYTHON) cannot create a venv (no ensurepip): install $$($(BOOTSTRAP_PYTHON) -c 'import sys; print("python%d.%d-venv" % sys.version_info[:2])');"; \
	fi)
setup_problems = $(strip \
	$(if $(wildcard $(PYTHON)),,$(python_problem)) \
	$(call missing_commands,javac:$(JDK_PACKAGE) mvn:maven) \
	$(if $(javac_major),$(if $(filter 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16,$(javac_major)),javac is $(javac_major)$(,) walcast needs 17+: install $(JDK_PACKAGE) and select it (sudo update-alternatives --config javac);)))
, := ,

test_problems = $(call missing_commands,unzip:unzip xz:xz-utils)
# $(call stop_if,problems): stop make with them as one line (clauses end with ";").
stop_if = $(if $(strip $(1)),$(error $(subst ;;,,$(strip $(1));)))

prerequisites:
	$(call stop_if,$(setup_problems))
	@:

# make test also runs the capture core on PostgreSQL majors fetched from Maven Central,
# which scripts/local-services unpacks with unzip and xz.
test-prerequisites:
	$(call stop_if,$(setup_problems) $(test_problems))
	@:

# A venv that ensurepip could not finish is removed, so the next run creates it again.
$(PYTHON): | prerequisites
	$(BOOTSTRAP_PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --upgrade pip

# walcast and its dependencies, installed in place (editable: a code change needs no new
# install); again when pyproject.toml changes. PYTHONWARNINGS: setuptools' 11-line
# "Editable installation" notice (a warning of the build backend, which pip's --quiet does
# not silence) says nothing a user needs.
INSTALLED := $(VENV)/.walcast-installed
$(INSTALLED): pyproject.toml | $(PYTHON)
	PYTHONWARNINGS='ignore:Editable installation' \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev,spark]'
	@touch $@

setup: prerequisites $(INSTALLED)
	PYTHON=$(PYTHON) scripts/fetch-spark-jars >/dev/null
	scripts/build-readers >/dev/null
	@echo "set-up done: walcast is in $(VENV)/bin; put it on PATH in your shell with: . $(VENV)/bin/activate"

# This checkout's own services (scripts/local-services keeps them in a state dir of the
# checkout and the user: `scripts/local-services dir`); another checkout's are never touched.
services-start:
	$(SERVICES) start all

services-stop:
	$(SERVICES) stop all
	@# and those of the test workers (make test-integration), if a crashed one left them
	@for d in "$$($(SERVICES) dir)"-gw*; do \
	  if [ -d "$$d" ]; then WALCAST_SERVICES_DIR="$$d" $(SERVICES) stop all; fi; done

demo: setup
	bash scripts/demo

lint: $(INSTALLED)
	$(PYTHON) -m ruff check capture pipeline tests bench
	$(PYTHON) -m ruff format --check capture pipeline tests bench

typecheck: $(INSTALLED)
	$(PYTHON) -m mypy

# The Spark drivers' class-data archive of the integration tier (tests/support/jvm.py).
jvm-archive: $(INSTALLED)
	$(PYTHON) -m tests.support.jvm

# The contributor's loop: every unit test but the slow ones, on both cores.
unit: $(INSTALLED)
	$(PYTHON) -m pytest -m "not integration and not slow" -q -n 2

# The unit tests as a user without the Spark extra runs them (issue 30.5): a throwaway venv
# with walcast's base dependencies and pyproject's `test` extra only, which must not hold
# pyspark. Unit tests that need pyspark are marked `spark` and left out here, and so are the
# `slow` ones (the fuzzer's full run, 66 s on one core: with it this tier took 91 s, 48 s
# without); `make test` runs both (and every integration test) in the project venv, beside
# the integration tier's other workers, so each test runs once.
UNIT_NOSPARK := not integration and not spark and not slow
unit-nospark: | $(PYTHON)
	@venv=$$(mktemp -d "$${TMPDIR:-/tmp}/walcast-nospark.XXXXXX") && trap 'rm -rf "$$venv"' EXIT && \
	  echo "unit-nospark: a venv without pyspark in $$venv" && \
	  $(PYTHON) -m venv "$$venv" && \
	  PYTHONWARNINGS='ignore:Editable installation' "$$venv/bin/python" -m pip install \
	    --quiet --disable-pip-version-check -e '.[test]' && \
	  if "$$venv/bin/python" -c 'import pyspark' 2>/dev/null; then \
	    echo "unit-nospark: pyspark is installed in $$venv; it must not be" >&2; exit 1; fi && \
	  "$$venv/bin/python" -m pytest -m "$(UNIT_NOSPARK)" -q -p no:cacheprovider -n 2

# The system's PostgreSQL major (Debian 12: 15, Ubuntu 24.04: 16; the newest installed, as
# scripts/local-services picks it): every test runs on it; the capture core then runs on
# every other supported major (OTHER_PG_MAJORS), so each major runs once.
SUPPORTED_PG_MAJORS := 13 14 15 16 17 18
SYSTEM_PG_MAJOR = $(shell for d in /usr/lib/postgresql/*/bin/initdb; do [ -x "$$d" ] && echo "$$d"; done \
	| sed -n 's#^/usr/lib/postgresql/\([0-9]*\)/bin/initdb$$#\1#p' | sort -n | tail -n 1)
OTHER_PG_MAJORS = $(filter-out $(SYSTEM_PG_MAJOR),$(SUPPORTED_PG_MAJORS))

# The unit tests without pyspark (unit-nospark), then every other test (integration, and the
# unit tests marked spark) on the system's PostgreSQL (Debian's 15), with the capture core on
# the other majors too, in the same pytest session (CORE_PG_MAJORS). Each test runs once.
# The type check, the class-data archive and unit-nospark run side by side (each alone left
# a core idle: 84 s one after another, 2026-12-05), each target's output in one piece.
# Until 2026-12-05 the other majors ran after the integration tier, in a session of their
# own (make test-versions: 127 s alone, its two workers starting services of their own).
test: test-prerequisites setup lint
	$(MAKE) --no-print-directory -j3 --output-sync=target typecheck jvm-archive unit-nospark
	$(MAKE) --no-print-directory test-integration CORE_PG_MAJORS="$(OTHER_PG_MAJORS)"

# The integration tier (and the unit tests marked spark or slow) on the system's PostgreSQL, on
# TEST_WORKERS pytest-xdist workers, each with services of its own (a PostgreSQL and a Kafka
# in `<state dir>-gwN`, started and stopped by the worker: tests/conftest.py PER_WORKER), so
# tests never meet on a server. The Spark tests run on two of them (SPARK_LANES), first; the
# other workers run the capture tests, which mostly wait. Tests that share a module fixture,
# or the capture scenario's tables, stay on one worker (xdist_group). A worker that crashes
# (a test past its timeout ends its process) ends the run in one line
# (--max-worker-restart=0). The few tests that stop or restart the services (marked
# `exclusive`) run together on one worker, whose services no other worker uses (they ran
# alone afterwards until 2026-12-03: 160 s more). TEST_WORKERS=0 runs everything in one
# process on this checkout's services (62 min, 2026-12-03).
# Every Spark driver of the run maps its classes from one class-data archive, made (about
# 40 s) when this JDK and Spark have none yet (WALCAST_TEST_JVM_ARCHIVE: tests/support/jvm.py;
# `make test` makes it beside the type check and unit-nospark).
# Its in-process Spark drivers compile a method with C2 only after 10 times the JDK's counts:
# with both cores busy that is less CPU (CI rehearsals of 2026-12-05, alike but for these
# flags: the four drivers used 1,409 s of CPU with them, 1,503 s without; make test took
# 1,746 s and 1,818 s), while one Spark file alone on an idle machine takes longer (183 s
# instead of 163 s for test_history and test_materialize), so a contributor's own pytest
# keeps the JDK's counts (tests/pipeline/conftest.py, whose young generation of 600 MB these
# flags keep too). WALCAST_TEST_SPARK_JAVA_OPTIONS set in the environment replaces these flags
# (e.g. to record a profile).
WALCAST_TEST_SPARK_JAVA_OPTIONS ?= -XX:TieredStopAtLevel=4 -XX:+UseSerialGC -Xms1g -Xmn600m \
	-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=15000 \
	-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000
TEST_WORKERS ?= 4
# PostgreSQL majors the capture core (tests marked `core`) runs on besides the system's, each
# a group of tests for one worker, which starts that server (tests/conftest.py
# _core_majors): `make test` gives every other supported major.
CORE_PG_MAJORS ?=
test-integration: test-prerequisites setup
	WALCAST_TEST_SERVICES_PER_WORKER=1 WALCAST_TEST_JVM_ARCHIVE=1 \
	  WALCAST_TEST_CORE_PG_VERSIONS="$(CORE_PG_MAJORS)" \
	  WALCAST_TEST_SPARK_JAVA_OPTIONS="$(WALCAST_TEST_SPARK_JAVA_OPTIONS)" \
	  $(PYTHON) -m pytest -q --durations=25 -n $(TEST_WORKERS) \
	    --dist loadgroup --no-loadscope-reorder --max-worker-restart=0 \
	    -m "integration or spark or slow"

# The capture core (tests marked `core`) once per PostgreSQL major, in one pytest session
# (test ids [pg13] ...). 15 is Debian's; the others are fetched once from Maven Central and
# started beside it by scripts/local-services (WALCAST_PG_VERSION). One major:
# `make test-versions PG_MAJORS=13`.
PG_MAJORS ?= $(SUPPORTED_PG_MAJORS)
# Two workers, each with services of its own (as test-integration's).
test-versions: test-prerequisites setup
	WALCAST_TEST_SERVICES_PER_WORKER=1 WALCAST_TEST_PG_VERSIONS="$(PG_MAJORS)" \
	  $(PYTHON) -m pytest -q -m core -n 2 --dist loadgroup --max-worker-restart=0

bench: setup
	eval "$$($(SERVICES) start all)" && \
	  $(PYTHON) bench/tail_vs_recvlogical.py && \
	  $(PYTHON) bench/encode_formats.py && \
	  $(PYTHON) bench/run_e2e.py && \
	  $(PYTHON) bench/spark_normalize.py

"""Shared fixtures: real services for integration tests.

Services are found in this order, and a missing one FAILS the test (never skips):

1. environment variables (``WALCAST_TEST_DSN``, ``WALCAST_TEST_KAFKA``);
2. local processes started by ``scripts/local-services`` (real PostgreSQL / Kafka);
3. testcontainers, when a Docker engine answers.

PostgreSQL majors: ``WALCAST_TEST_PG_VERSIONS`` (e.g. ``13,14,15,16,17,18``) runs every
selected test that uses ``pg_dsn``/``pg_env`` once per listed major, against a server of
that major started by ``WALCAST_PG_VERSION=<major> scripts/local-services start pg`` (test
ids get ``[pg13]`` ...). ``make test-versions`` runs the ``core`` tests that way. Without
it, tests use the default server as above. ``WALCAST_TEST_CORE_PG_VERSIONS`` (``make test``)
runs the ``core`` tests on the default server (``[pg-default]``) AND once per listed major,
in the same session as every other test (:func:`_core_majors`). ``pg_major`` is the
server's major either way.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import jvm
from tests.support.jvm import LIGHT_JVM_OPTIONS
from tests.support.ports import refused_port

REPO = Path(__file__).resolve().parent.parent
SERVICES = REPO / "scripts" / "local-services"
PG_MAJORS = ("13", "14", "15", "16", "17", "18")
"""Majors scripts/local-services can start (WALCAST_PG_VERSION)."""


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=20)
    return probe.returncode == 0


def _local_services(which: str, pg_version: str | None = None) -> dict[str, str]:
    """Start (or reuse) local services and return the variables the script exports."""
    env = {**os.environ, "WALCAST_PG_VERSION": pg_version} if pg_version else None
    done = subprocess.run(
        [str(SERVICES), "start", which],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env=env,
    )
    if done.returncode != 0:
        where = f"WALCAST_PG_VERSION={pg_version} " if pg_version else ""
        pytest.fail(
            f"{where}scripts/local-services start {which} failed (exit {done.returncode}):\n"
            f"{done.stderr[-4000:]}",
            pytrace=False,
        )
    return _exports(done.stdout)


def _exports(stdout: str) -> dict[str, str]:
    """The variables of scripts/local-services' ``export NAME='value'`` lines."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            found[name] = shlex.split(value)[0] if value else ""
    return found


def _service(var: str, which: str) -> dict[str, str]:
    if os.environ.get(var):
        return {k: v for k, v in os.environ.items() if k.startswith("WALCAST_TEST_")}
    if SERVICES.exists():
        found = _local_services(which)
        if found.get(var):
            os.environ.update(found)
            return found
    if _docker_answers():
        return _testcontainer(which)
    pytest.fail(
        f"no {which} for integration tests: set {var}, or make scripts/local-services work, "
        "or run a Docker engine for testcontainers",
        pytrace=False,
    )


def _testcontainer(which: str) -> dict[str, str]:  # pragma: no cover - needs Docker
    if which == "pg":
        from testcontainers.postgres import PostgresContainer  # noqa: PLC0415

        container = PostgresContainer("postgres:16").with_command(
            "postgres -c wal_level=logical -c max_prepared_transactions=20"
        )
        container.start()
        host = container.get_container_host_ip()
        port = container.get_exposed_port(5432)
        dsn = (
            f"host={host} port={port} user={container.username} "
            f"password={container.password} dbname={container.dbname}"
        )
        return {"WALCAST_TEST_DSN": dsn}
    from testcontainers.kafka import KafkaContainer  # noqa: PLC0415

    kafka = KafkaContainer().with_kraft()
    kafka.start()
    return {"WALCAST_TEST_KAFKA": kafka.get_bootstrap_server()}


def _requested_majors(variable: str = "WALCAST_TEST_PG_VERSIONS") -> list[str]:
    """The majors listed in ``variable`` (commas or spaces), checked."""
    majors = os.environ.get(variable, "").replace(",", " ").split()
    unknown = [m for m in majors if m not in PG_MAJORS]
    if unknown:
        raise pytest.UsageError(
            f"{variable}: {', '.join(unknown)} not among {', '.join(PG_MAJORS)}"
        )
    return majors


CORE_MAJOR_SECONDS = 90
"""Seconds the ``core`` tests of one more major take in ``make test``'s integration tier
(451 s for five majors in the CI rehearsal of a6ef026, 2026-12-05; alone, ``make
test-versions`` ran them in 127 s on its 2 workers)."""


def _core_majors() -> list[str]:
    """The other majors ``WALCAST_TEST_CORE_PG_VERSIONS`` adds to the ``core`` tests.

    ``make test`` runs the capture core on every supported major in its integration tier:
    each ``core`` test runs on the default server and once per listed major, and each major's
    tests are one ``xdist_group`` (one worker starts that server) queued with the capture
    files. Until 2026-12-05 they ran in a pytest session of their own after the tier (``make
    test-versions``, still there), with services of its own: about 90 s more of the
    machine's CPU in all (DEVELOPMENT.md). ``WALCAST_TEST_PG_VERSIONS`` (every test on the
    listed majors only) leaves it unused.
    """
    if _requested_majors():
        return []
    return _requested_majors("WALCAST_TEST_CORE_PG_VERSIONS")


def _major(item: pytest.Item) -> str | None:
    """The major this test runs on when it is one of several (None: the default server)."""
    callspec = getattr(item, "callspec", None)
    major = callspec.params.get("pg_version") if callspec is not None else None
    return str(major) if major is not None else None


SPREAD = frozenset({"test_end_to_end.py"})
"""Files whose module fixtures name everything they make uniquely, and whose tests are long
enough that one worker running them all would be the run's tail (tests/pipeline's end to
end: about 20 minutes in one place, its fixture about 1.5 minutes per worker)."""


SPARK_LANES = 2
"""Under pytest-xdist with :data:`PER_WORKER`, the Spark tests (those of ``tests/pipeline``
and any using the ``spark`` fixture) run on this many workers, whole files each, and come
first in the queue; the other workers run the rest. Spark keeps about one core busy per
running session and a capture test mostly waits (on a server, a timeout, a broker): more
Spark sessions than this only make each slower on 2 cores, and each costs a JVM's start."""
FILE_SECONDS = {
    # Spark (those marked * ran outside the lanes, in a Spark session of their own)
    "test_end_to_end.py": 735,
    "test_history_end_to_end.py": 321,
    "test_parsers.py": 227,
    "test_history.py": 184,
    "test_jobs.py": 170,
    "test_soak.py": 164,
    "test_renamed_columns.py": 164,
    "test_debezium_walcast.py": 152,
    "test_cli.py": 128,
    "test_debezium_spark.py": 109,
    "test_maintain.py": 108,
    "test_materialize.py": 104,
    "test_partitioning.py": 77,
    "test_ibm.py": 76,  # *
    "test_debezium_cli.py": 59,  # *
    "test_type_changes.py": 57,
    "test_ibm_end_to_end.py": 54,  # *
    "test_spark_submit.py": 53,
    "test_added_and_dropped_columns.py": 48,
    "test_iceberg_store.py": 44,  # *
    "test_debezium_values.py": 42,  # *
    "test_debezium.py": 36,
    "test_layout_in_effect.py": 29,
    "test_schema_history.py": 23,
    # the others
    "test_start_timeouts.py": 149,
    "test_readme.py": 126,
    "test_network_faults.py": 114,
    "test_run_integration.py": 112,
    "test_demo.py": 111,
    "test_run_faults.py": 106,
    "test_secured_kafka.py": 103,
    "test_exactly_once.py": 92,
    "test_any_server.py": 92,
    "test_bad_input.py": 66,
    "test_stopped_processes.py": 63,
    "test_fuzz_pipeline.py": 61,
    "test_debezium_compare.py": 58,
    "test_load_integration.py": 58,
    "test_frozen_network.py": 57,
    "test_debezium_reference.py": 36,
    "test_cli_errors.py": 36,
    "test_canal_readers.py": 34,
    "test_failover.py": 33,
    "test_containers.py": 27,
    "test_tail_matches_test_decoding.py": 26,
    "test_kafka_errors.py": 23,
}
"""Seconds each of the longest test files took in a run of the integration tier as
``make test`` runs it (4 workers, Spark in 2 lanes, the two cores busy: about twice a file's
time alone), its tests' durations summed per file, on the default server, in the CI
rehearsal of a6ef026 (2026-12-05: 3,252 s of Spark files, 1,769 s of others, 451 s of the
core on the other majors); any other file counts :data:`OTHER_FILE_SECONDS` (40 Spark and
capture files took 272 s). Used only to order and balance the work under pytest-xdist
(longest first), so a stale figure costs time, never a result."""
OTHER_FILE_SECONDS = 7


def _seconds(item: pytest.Item) -> int:
    if _major(item) is not None:  # a major's tests are queued together
        return CORE_MAJOR_SECONDS
    return FILE_SECONDS.get(item.path.name, OTHER_FILE_SECONDS)


def _uses_spark(item: pytest.Item) -> bool:
    return "tests/pipeline/" in item.nodeid or "spark" in getattr(item, "fixturenames", ())


def _spark_lanes(items: list[pytest.Item]) -> None:
    """Put the Spark tests in :data:`SPARK_LANES` xdist groups (longest files first, each to
    the lane with the least so far), and those groups first in the run's order.

    A Spark test's group is its lane: one given to it by its file would join the lane's name
    (xdist joins a test's groups) and make a scope, and a Spark session, of its own.

    The shortest Spark files, as many seconds of them as make every worker's share equal
    (:func:`_spark_tail`), are left out of the lanes: each is a group of its own, queued
    last, for whichever worker is free first (the capture workers, which finish sooner:
    2026-12-03, the lanes took about 1,675 s each and the other workers about 1,300 s;
    the run's last minutes left a core idle)."""
    files: dict[str, list[pytest.Item]] = {}
    others: set[str] = set()
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if _uses_spark(item):
            files.setdefault(path, []).append(item)
        elif any(item.get_closest_marker(m) is not None for m in ("integration", "slow")):
            # the integration tier's other tests (this runs before `-m` deselects any test)
            others.add(path)
    tail = _spark_tail(
        files,
        sum(FILE_SECONDS.get(Path(p).name, OTHER_FILE_SECONDS) for p in others)
        + CORE_MAJOR_SECONDS * len(_core_majors()),
    )
    load = [0] * SPARK_LANES
    lane_of: dict[str, int] = {}
    for path in sorted(set(files) - tail, key=lambda f: (-_seconds(files[f][0]), f)):
        lane = load.index(min(load))
        lane_of[path] = lane
        load[lane] += _seconds(files[path][0])
    for path, members in files.items():
        group = f"spark-tail-{path}" if path in tail else f"spark-lane-{lane_of[path]}"
        for item in members:
            item.add_marker(pytest.mark.xdist_group(group))
    lanes = {id(item) for path in set(files) - tail for item in files[path]}
    last = {id(item) for path in tail for item in files[path]}
    # the lanes first, then the longest files (a major's core tests together, as pytest
    # orders a session parameter's: make test-versions switches servers once per major),
    # the Spark tail last (--no-loadscope-reorder); sorted once pytest has ordered the
    # items by their parameters (_QueueInOrder)
    for item in items:
        item.stash[QUEUE_PLACE] = (
            id(item) not in lanes, id(item) in last, -_seconds(item), _major(item) or ""
        )  # fmt: skip


QUEUE_PLACE = pytest.StashKey[tuple[bool, bool, int, str]]()
"""An item's place in the run's queue (:func:`_spark_lanes`)."""


class _QueueInOrder:
    """Sorts the items by their :data:`QUEUE_PLACE`, after pytest's own ordering.

    pytest moves the tests sharing a session-scoped parameter together (the core tests of
    one major: :func:`_core_majors`), which would put some of them before the Spark lanes;
    this runs after it (a conftest can define a hook once: this is a plugin of its own,
    registered by :func:`pytest_configure`). The sort is stable: pytest's order within a
    place is kept."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if any(QUEUE_PLACE in item.stash for item in items):
            items.sort(key=lambda item: item.stash.get(QUEUE_PLACE, (True, True, 0, "")))


def _spark_tail(files: dict[str, list[pytest.Item]], other_seconds: int) -> set[str]:
    """The shortest Spark files whose seconds, run by the workers outside the lanes, even
    out every worker's share of the run (none when every worker is a lane)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    spark_seconds = sum(_seconds(members[0]) for members in files.values())
    if workers <= SPARK_LANES:
        return set()
    budget = spark_seconds - SPARK_LANES * (spark_seconds + other_seconds) / workers
    tail: set[str] = set()
    for path in sorted(files, key=lambda f: (_seconds(files[f][0]), f)):
        budget -= _seconds(files[path][0])
        if budget < 0:
            break
        tail.add(path)
    return tail


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), keep a file's tests on one worker when they
    share a module- or package-scoped fixture.

    Such a fixture runs once per worker that gets tests of its file: twice the setup, and
    two copies of whatever it names (a schema, a Kafka user's password) at once. A test
    with an ``xdist_group`` of its own keeps it; the files in :data:`SPREAD` are spread.
    With :data:`PER_WORKER`, the Spark tests run in lanes (:func:`_spark_lanes`), and the
    tests marked ``exclusive`` (they stop and start the services, or use fixed names) on
    one worker: its services are its own (``WALCAST_SERVICES_DIR``), so a restart meets
    none of the other workers' tests.
    """
    _mark_pipeline_unit_tests(items)
    _refuse_unmarked_service_users(items)
    others = _core_majors()
    for item in items:
        major = _major(item)
        if major in others:  # one worker starts that server (_core_majors)
            item.add_marker(pytest.mark.xdist_group(f"pg{major}"))
    if _worker_with_own_services():
        _spark_lanes(items)
        for item in items:
            if item.get_closest_marker("exclusive") is not None:
                item.add_marker(pytest.mark.xdist_group("exclusive"))
    for item in items:
        if item.get_closest_marker("xdist_group") is not None or item.path.name in SPREAD:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        scopes = {d.scope for defs in info.name2fixturedefs.values() for d in defs}
        if scopes & {"module", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


SERVICE_FIXTURES = frozenset({"pg_env", "pg_dsn", "kafka_bootstrap"})
"""Fixtures that start (or find) a real server: a test using one is an integration test."""


def _refuse_unmarked_service_users(items: list[pytest.Item]) -> None:
    """One line (UsageError) naming the tests that use a server and are not marked
    ``integration``: the unit tiers would start that server and leave it running
    (``tests/capture/test_consume.py``'s tombstone test started a Kafka broker in every
    ``make test``, 2026-12-05)."""
    unmarked = [
        item.nodeid
        for item in items
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("integration") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            f"{len(unmarked)} test(s) use a server but are not marked integration "
            f"(first: {unmarked[0]}): add @pytest.mark.integration"
        )


def _mark_pipeline_unit_tests(items: list[pytest.Item]) -> None:
    """Mark ``spark`` the tests of ``tests/pipeline`` marked neither ``integration`` nor
    ``spark``: every module there needs pyspark (``make unit-nospark`` leaves the directory
    out), so without the mark such a test ran in no tier of ``make test`` (35 did not,
    2026-12-04: ``tests/pipeline/test_column_numbers.py`` among them)."""
    pipeline_tests = Path(__file__).parent / "pipeline"
    for item in items:
        if not item.path.is_relative_to(pipeline_tests):
            continue
        if item.get_closest_marker("integration") or item.get_closest_marker("spark"):
            continue
        item.add_marker(pytest.mark.spark)


PER_WORKER = "WALCAST_TEST_SERVICES_PER_WORKER"
"""Set to 1 under pytest-xdist (``make test`` does): each worker runs its tests on services
of its own, a PostgreSQL and a Kafka in ``<state dir>-<worker id>`` (``gw0``, ``gw1`` …),
started when the worker starts and stopped when it ends. Nothing a test makes (schemas,
slots, roles, topics, ACLs, server settings) can then meet another worker's tests."""
_WORKER_VARS = ("WALCAST_TEST_DSN", "WALCAST_TEST_KAFKA", "WALCAST_TEST_PG_BIN", "PGPASSWORD")


def _worker_with_own_services() -> str | None:
    """This xdist worker's id (``gw0`` …) when it runs on services of its own, else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return worker if worker and os.environ.get(PER_WORKER) == "1" else None


def _own_services_dir(worker: str) -> str:
    base = (
        os.environ.get("WALCAST_SERVICES_DIR")
        or subprocess.run(
            [str(SERVICES), "dir"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
    )
    return f"{base}-{worker}"


def pytest_configure(config: pytest.Config) -> None:
    """Spark drivers started as processes get :data:`LIGHT_JVM_OPTIONS`; a worker with
    :data:`PER_WORKER` starts its own services, before any test."""
    config.pluginmanager.register(_QueueInOrder(), "walcast-queue-in-order")
    _core_majors()  # a wrong major is one line before anything is collected
    if os.environ.get(jvm.ENV) == "1" and "PYTEST_XDIST_WORKER" not in os.environ:
        # made once, before any worker starts; the workers inherit the variable
        try:
            archive = jvm.ensure(LIGHT_JVM_OPTIONS)
        except (RuntimeError, subprocess.SubprocessError) as failed:
            raise pytest.UsageError(str(failed)) from None
        os.environ.setdefault("SPARK_SUBMIT_OPTS", f"{LIGHT_JVM_OPTIONS} {jvm.options(archive)}")
    os.environ.setdefault("SPARK_SUBMIT_OPTS", LIGHT_JVM_OPTIONS)
    worker = _worker_with_own_services()
    if worker is None:
        return
    os.environ["WALCAST_SERVICES_DIR"] = _own_services_dir(worker)
    for var in _WORKER_VARS:
        os.environ.pop(var, None)
    done = subprocess.run(
        [str(SERVICES), "start", "all"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={"KAFKA_JVM_OPTS": LIGHT_JVM_OPTIONS, **os.environ},
    )
    if done.returncode != 0:
        raise pytest.UsageError(
            f"{worker}: scripts/local-services start all (WALCAST_SERVICES_DIR="
            f"{os.environ['WALCAST_SERVICES_DIR']}) failed (exit {done.returncode}): "
            f"{done.stderr.strip()[-2000:]}"
        )
    os.environ.update(_exports(done.stdout))
    from tests.support import scenario  # noqa: PLC0415

    # The worker's own server: its inactive scenario slots are an earlier run's.
    scenario.drop_stale_slots(os.environ["WALCAST_TEST_DSN"])


def pytest_unconfigure(config: pytest.Config) -> None:
    """A worker with :data:`PER_WORKER` stops its services (and any others of its dir)."""
    del config
    if _worker_with_own_services():
        # `stop all` stops the secured broker and other majors of the dir too
        stop = [str(SERVICES), "stop", "all"]
        subprocess.run(stop, capture_output=True, check=False, timeout=300)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Drop the inactive capture-scenario slots an interrupted earlier run left behind.

    Once per run, before any test (in the xdist controller, or the only process): a
    worker doing it would drop the slots another worker has just prepared (with
    :data:`PER_WORKER`, each worker does it on its own server, in :func:`pytest_configure`).
    """
    if hasattr(session.config, "workerinput") or not os.environ.get("WALCAST_TEST_DSN"):
        return
    from tests.support import scenario  # noqa: PLC0415

    scenario.drop_stale_slots(os.environ["WALCAST_TEST_DSN"])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pg_version" not in metafunc.fixturenames:
        return
    majors = _requested_majors()
    if majors:
        metafunc.parametrize(
            "pg_version", majors, indirect=True, scope="session", ids=[f"pg{m}" for m in majors]
        )
        return
    others = _core_majors()
    if others and metafunc.definition.get_closest_marker("core") is not None:
        metafunc.parametrize(
            "pg_version", [None, *others], indirect=True, scope="session",
            ids=["pg-default", *(f"pg{m}" for m in others)],
        )  # fmt: skip


@pytest.fixture
def refused() -> Iterator[int]:
    """A local port that refuses connections for the whole test (:func:`refused_port`): where
    walcast must find no PostgreSQL or no broker."""
    with refused_port() as port:
        yield port


@pytest.fixture(scope="session")
def pg_version(request: pytest.FixtureRequest) -> str | None:
    """The major asked for by ``WALCAST_TEST_PG_VERSIONS`` (None: the default server)."""
    return getattr(request, "param", None)


@pytest.fixture(scope="session")
def pg_env(pg_version: str | None) -> Iterator[dict[str, str]]:
    """Variables describing the test PostgreSQL (at least ``WALCAST_TEST_DSN``)."""
    if pg_version is None:
        yield _service("WALCAST_TEST_DSN", "pg")
        return
    found = _local_services("pg", pg_version)
    if not found.get("WALCAST_TEST_DSN"):
        pytest.fail(f"scripts/local-services printed no WALCAST_TEST_DSN for {pg_version}")
    # Tests run psql and pg_recvlogical from $WALCAST_TEST_PG_BIN: this server's, while
    # it is the one under test (session fixtures of one major are torn down before the next).
    saved = os.environ.get("WALCAST_TEST_PG_BIN")
    os.environ["WALCAST_TEST_PG_BIN"] = found["WALCAST_TEST_PG_BIN"]
    try:
        yield found
    finally:
        if saved is None:
            os.environ.pop("WALCAST_TEST_PG_BIN", None)
        else:
            os.environ["WALCAST_TEST_PG_BIN"] = saved


@pytest.fixture(scope="session")
def pg_dsn(pg_env: dict[str, str]) -> str:
    """libpq DSN of a real PostgreSQL with ``wal_level=logical`` and a replication role."""
    return pg_env["WALCAST_TEST_DSN"]


@pytest.fixture(scope="session")
def pg_major(pg_dsn: str) -> int:
    """Major version of the test server (13, 14, ...), for expectations that depend on it."""
    import psycopg  # noqa: PLC0415 - only integration tests need it

    with psycopg.connect(pg_dsn) as conn:
        return conn.info.server_version // 10000


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap address of a real Kafka broker."""
    return _service("WALCAST_TEST_KAFKA", "kafka")["WALCAST_TEST_KAFKA"]

"""Shared fixtures: real services for integration tests.

Services are found in this order, and a missing one FAILS the test (never skips):

1. environment variables (``WALCAST_TEST_DSN``, ``WALCAST_TEST_KAFKA``);
2. local processes started by ``scripts/local-services`` (real PostgreSQL / Kafka);
3. testcontainers, when a Docker engine answers.

PostgreSQL majors: ``WALCAST_TEST_PG_VERSIONS`` (e.g. ``13,14,15,16,17,18``) runs every
selected test that uses ``pg_dsn``/``pg_env`` once per listed major, against a server of
that major started by ``WALCAST_PG_VERSION=<major> scripts/local-services start pg`` (test
ids get ``[pg13]`` ...). ``make test-versions`` runs the ``core`` tests that way. Without
it, tests use the default server as above. ``pg_major`` is the server's major either way.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
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


def _requested_majors() -> list[str]:
    """The majors listed in ``WALCAST_TEST_PG_VERSIONS`` (commas or spaces), checked."""
    majors = os.environ.get("WALCAST_TEST_PG_VERSIONS", "").replace(",", " ").split()
    unknown = [m for m in majors if m not in PG_MAJORS]
    if unknown:
        raise pytest.UsageError(
            f"WALCAST_TEST_PG_VERSIONS: {', '.join(unknown)} not among {', '.join(PG_MAJORS)}"
        )
    return majors


SPREAD = frozenset({"test_end_to_end.py"})
"""Files whose module fixtures name everything they make uniquely, and whose tests are long
enough that one worker running them all would be the run's tail (tests/pipeline's end to
end: about 20 minutes in one place, its fixture about 1.5 minutes per worker)."""


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), keep a file's tests on one worker when they
    share a module- or package-scoped fixture.

    Such a fixture runs once per worker that gets tests of its file: twice the setup, and
    two copies of whatever it names (a schema, a Kafka user's password) at once. A test
    with an ``xdist_group`` of its own keeps it; the files in :data:`SPREAD` are spread.
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is not None or item.path.name in SPREAD:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        scopes = {d.scope for defs in info.name2fixturedefs.values() for d in defs}
        if scopes & {"module", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Drop the inactive capture-scenario slots an interrupted earlier run left behind.

    Once per run, before any test (in the xdist controller, or the only process): a
    worker doing it would drop the slots another worker has just prepared.
    """
    if hasattr(session.config, "workerinput") or not os.environ.get("WALCAST_TEST_DSN"):
        return
    from tests.support import scenario  # noqa: PLC0415

    scenario.drop_stale_slots(os.environ["WALCAST_TEST_DSN"])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    majors = _requested_majors()
    if majors and "pg_version" in metafunc.fixturenames:
        metafunc.parametrize(
            "pg_version", majors, indirect=True, scope="session", ids=[f"pg{m}" for m in majors]
        )


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

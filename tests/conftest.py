"""Shared fixtures: real services for integration tests.

Services are found in this order, and a missing one FAILS the test (never skips):

1. environment variables (``WALCAST_TEST_DSN``, ``WALCAST_TEST_KAFKA``);
2. local processes started by ``scripts/local-services`` (real PostgreSQL / Kafka);
3. testcontainers, when a Docker engine answers.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SERVICES = REPO / "scripts" / "local-services"


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=20)
    return probe.returncode == 0


def _local_services(which: str) -> dict[str, str]:
    """Start (or reuse) local services and return the variables the script exports."""
    done = subprocess.run(
        [str(SERVICES), "start", which], capture_output=True, text=True, check=False, timeout=900
    )
    if done.returncode != 0:
        pytest.fail(
            f"scripts/local-services start {which} failed (exit {done.returncode}):\n"
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


@pytest.fixture(scope="session")
def pg_env() -> dict[str, str]:
    """Variables describing the test PostgreSQL (at least ``WALCAST_TEST_DSN``)."""
    return _service("WALCAST_TEST_DSN", "pg")


@pytest.fixture(scope="session")
def pg_dsn(pg_env: dict[str, str]) -> str:
    """libpq DSN of a real PostgreSQL with ``wal_level=logical`` and a replication role."""
    return pg_env["WALCAST_TEST_DSN"]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap address of a real Kafka broker."""
    return _service("WALCAST_TEST_KAFKA", "kafka")["WALCAST_TEST_KAFKA"]

"""A ``walcast run`` start that fails leaves nothing behind; every wait says so at once.

Issue 38.4: every precondition that can fail is checked before walcast writes any state or
creates a slot. Met as a user meets them, through the CLI: ``walcast run --create-slot`` on
a server with ``wal_level=replica``, or as a role without ``REPLICATION``, is one line and
exit 3 (so is one when ``max_replication_slots`` leaves no room for the slot, or the
publication is missing), with no ``slot_generation_started`` event, nothing in the snapshot
topic (not even the topic), no slot and no publication left.

Issue 38.3: ``walcast run`` names the server it connects to before its first attempt, and
the brokers it waits for (with librdkafka's cause) within a second of reaching PostgreSQL,
long before ``kafka.connect_timeout`` (30 s) gives ``kafka_unreachable``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon
from tests.support.ports import free_port
from tests.support.scenario import REPO, drop_slot, walcast

pytestmark = pytest.mark.integration
SERVICES = REPO / "scripts" / "local-services"


def split(stderr: str) -> tuple[list[dict], list[str]]:
    """stderr as (JSON events, ``walcast: error:`` lines); nothing else may be there."""
    events, errors = [], []
    for line in stderr.splitlines():
        if line.startswith("walcast: error: "):
            errors.append(line.removeprefix("walcast: error: "))
        elif line.strip():
            events.append(json.loads(line))  # a traceback or a raw library line fails here
    return events, errors


def own_server(wal_level: str, *, max_slots: int | None = None) -> Iterator[str]:
    """A server of its own (its own state dir, stopped and removed after): its DSN."""
    state = tempfile.mkdtemp(prefix="wc-pre-", dir="/tmp")
    Path(state).chmod(0o755)
    env = {**os.environ, "WALCAST_SERVICES_DIR": state, "WALCAST_PG_WAL_LEVEL": wal_level}
    env.pop("WALCAST_PG_PORT", None)
    env.pop("WALCAST_PG_VERSION", None)
    env.pop("WALCAST_PG_AUTH", None)

    def services(command: str) -> str:
        done = subprocess.run(
            [str(SERVICES), command, "pg"], capture_output=True, text=True, env=env,
            timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        started = services("start")
        dsn = next(
            shlex.split(line.partition("=")[2])[0]
            for line in started.splitlines()
            if line.startswith("export WALCAST_TEST_DSN=")
        )
        if max_slots is not None:  # postgresql.auto.conf wins over the script's settings
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"ALTER SYSTEM SET max_replication_slots = {max_slots}")
            services("stop")
            services("start")
        yield dsn
    finally:
        subprocess.run([str(SERVICES), "stop", "pg"], capture_output=True, env=env, check=False)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def replica_level_dsn() -> Iterator[str]:
    """A second, real server with wal_level=replica."""
    yield from own_server("replica")


@pytest.fixture(scope="module")
def one_slot_dsn() -> Iterator[str]:
    """A server whose max_replication_slots (1) is used up by a slot of another consumer."""
    for dsn in own_server("logical", max_slots=1):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('someone_else', 'pgoutput')")
        yield dsn


def topic_messages(bootstrap: str, topic: str) -> int:
    """Messages in ``topic`` (0 when it does not exist)."""
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    if topic not in listed.topics:
        return 0
    return len(k.read_all(bootstrap, [topic]))


def run_create_slot(
    dsn: str, kafka_bootstrap: str, tag: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    snapshots = f"wc_pre_snapshots_{tag}"
    done = walcast(
        "run", "--dsn", dsn, "--slot", f"wc_pre_{tag}", "--publication", f"wc_pre_{tag}",
        "--create-slot", "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--schema-topic", f"wc_pre_schemas_{tag}", "--metrics-port", "0", *extra,
        env={"WALCAST__DAEMON__SNAPSHOT_TOPIC": snapshots}, timeout=120,
    )  # fmt: skip
    return done, snapshots


def assert_left_nothing(
    done: subprocess.CompletedProcess[str], snapshots: str, kafka_bootstrap: str, dsn: str, tag: str
) -> str:
    assert done.returncode == 3, done.stderr
    events, errors = split(done.stderr)
    assert len(errors) == 1, done.stderr
    assert "hint: " in errors[0]
    names = {e["event"] for e in events}
    assert "slot_generation_started" not in names, done.stderr
    assert not names & {"slot_created", "session_started", "topic_created"}, done.stderr
    assert topic_messages(kafka_bootstrap, snapshots) == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        slots = conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (f"wc_pre_{tag}",)
        ).fetchone()
        publications = conn.execute(
            "SELECT count(*) FROM pg_publication WHERE pubname = %s", (f"wc_pre_{tag}",)
        ).fetchone()
    assert slots == (0,)
    assert publications == (0,)
    return errors[0]


def test_run_create_slot_on_a_wal_level_replica_server_leaves_nothing_behind(
    replica_level_dsn: str, kafka_bootstrap: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(replica_level_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE wc_pre_{tag} (id int PRIMARY KEY)")
    done, snapshots = run_create_slot(
        replica_level_dsn, kafka_bootstrap, tag,
        "--create-publication", "--publish-tables", f"public.wc_pre_{tag}",
    )  # fmt: skip
    line = assert_left_nothing(done, snapshots, kafka_bootstrap, replica_level_dsn, tag)
    assert line.startswith("wal_level is 'replica' on host=127.0.0.1"), line
    assert "ALTER SYSTEM SET wal_level = logical" in line


def test_run_create_slot_when_no_slot_is_left_writes_nothing(
    one_slot_dsn: str, kafka_bootstrap: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(one_slot_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE wc_pre_{tag} (id int PRIMARY KEY)")
    done, snapshots = run_create_slot(
        one_slot_dsn, kafka_bootstrap, tag,
        "--create-publication", "--publish-tables", f"public.wc_pre_{tag}",
    )  # fmt: skip
    line = assert_left_nothing(done, snapshots, kafka_bootstrap, one_slot_dsn, tag)
    assert line.startswith(
        f"cannot create replication slot 'wc_pre_{tag}': all replication slots are in use "
        "(max_replication_slots = 1)"
    ), line
    assert "raise max_replication_slots" in line


@pytest.fixture
def role_without_replication(pg_dsn: str) -> Iterator[tuple[str, str]]:
    """A login role that owns a table and may create in the database, but may not
    replicate: (its DSN, the tag of its names)."""
    tag = uuid.uuid4().hex[:8]
    role = f"wc_pre_role_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        database = conn.info.dbname
        conn.execute(f"CREATE ROLE {role} LOGIN NOREPLICATION")
        conn.execute(f"GRANT CREATE ON DATABASE {database} TO {role}")
        conn.execute(f"CREATE TABLE wc_pre_{tag} (id int PRIMARY KEY)")
        conn.execute(f"ALTER TABLE wc_pre_{tag} OWNER TO {role}")
    yield make_conninfo(pg_dsn, user=role), tag
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        drop_slot(conn, f"wc_pre_{tag}")
        conn.execute(f"DROP PUBLICATION IF EXISTS wc_pre_{tag}")
        conn.execute(f"DROP TABLE IF EXISTS wc_pre_{tag}")
        conn.execute(f"REVOKE CREATE ON DATABASE {database} FROM {role}")
        conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_run_as_a_role_that_may_not_replicate_creates_no_publication(
    role_without_replication: tuple[str, str], kafka_bootstrap: str, pg_dsn: str
) -> None:
    """The publication could be created (the role owns the table): before issue 38.4 it
    was, and then the slot was refused; now the role is refused before anything is made."""
    dsn, tag = role_without_replication
    done, snapshots = run_create_slot(
        dsn, kafka_bootstrap, tag,
        "--create-publication", "--publish-tables", f"public.wc_pre_{tag}",
    )  # fmt: skip
    line = assert_left_nothing(done, snapshots, kafka_bootstrap, pg_dsn, tag)
    role = f"wc_pre_role_{tag}"
    assert line.startswith(f"role '{role}' may not open a replication connection"), line
    assert f"hint: ALTER ROLE {role} WITH REPLICATION" in line


def test_run_without_a_publication_creates_no_slot(pg_dsn: str, kafka_bootstrap: str) -> None:
    tag = uuid.uuid4().hex[:8]
    done, snapshots = run_create_slot(pg_dsn, kafka_bootstrap, tag)
    line = assert_left_nothing(done, snapshots, kafka_bootstrap, pg_dsn, tag)
    assert line.startswith(f"publication 'wc_pre_{tag}' does not exist"), line


@pytest.fixture
def role_without_select(pg_dsn: str) -> Iterator[tuple[str, str]]:
    """A role with REPLICATION that may read one published table but not the other: (its
    DSN, the tag of its names); the publication exists (made by the superuser)."""
    tag = uuid.uuid4().hex[:8]
    role = f"wc_pre_ro_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
        conn.execute(f"CREATE TABLE wc_pre_{tag} (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE wc_pre_{tag}_secret (id int PRIMARY KEY)")
        conn.execute(f"GRANT SELECT ON wc_pre_{tag} TO {role}")
        conn.execute(f"CREATE PUBLICATION wc_pre_{tag} FOR TABLE wc_pre_{tag}, wc_pre_{tag}_secret")
    yield make_conninfo(pg_dsn, user=role), tag
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        drop_slot(conn, f"wc_pre_{tag}")
        conn.execute(f"DROP PUBLICATION IF EXISTS wc_pre_{tag}")
        conn.execute(f"DROP TABLE IF EXISTS wc_pre_{tag}, wc_pre_{tag}_secret")
        conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_run_that_would_load_a_table_its_role_may_not_read_creates_no_slot(
    role_without_select: tuple[str, str], kafka_bootstrap: str, pg_dsn: str
) -> None:
    """The load reads every published table: a table the role may not read is refused
    before the slot is created (before issue 30, after it, at the table's first chunk)."""
    dsn, tag = role_without_select
    done, snapshots = run_create_slot(dsn, kafka_bootstrap, tag)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the publication is the DBA's
        conn.execute(f"DROP PUBLICATION wc_pre_{tag}")
    line = assert_left_nothing(done, snapshots, kafka_bootstrap, pg_dsn, tag)
    role = f"wc_pre_ro_{tag}"
    assert line.startswith(f"role '{role}' may not read table public.wc_pre_{tag}_secret"), line
    assert f"GRANT SELECT ON public.wc_pre_{tag}_secret TO {role}" in line


# -- every wait says so at once (issue 38.3) ----------------------------------------------------


def at(event: dict) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()


def test_run_names_the_brokers_it_waits_for_within_a_second(pg_dsn: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE wc_wait_{tag} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION wc_wait_{tag} FOR TABLE wc_wait_{tag}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"w_{tag}",))
    dead = f"127.0.0.1:{free_port()}"
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", f"w_{tag}", "--publication", f"wc_wait_{tag}",
        "--snapshot", "never", "--bootstrap-servers", dead, "--format", "json",
        "--metrics-port", "0", log_path=tmp_path / "run.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while '"kafka_waiting"' not in daemon.log():
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            assert time.monotonic() < deadline, daemon.log()[-3000:]
            time.sleep(0.1)
        time.sleep(3)
        assert daemon.stop(timeout=60) == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop_slot(conn, f"w_{tag}")
            conn.execute(f"DROP PUBLICATION IF EXISTS wc_wait_{tag}")
            conn.execute(f"DROP TABLE IF EXISTS wc_wait_{tag}")
    events, errors = split(daemon.log())
    assert errors == []
    first, waiting = events[0], next(e for e in events if e["event"] == "kafka_waiting")
    params = conninfo_to_dict(pg_dsn)
    assert first["event"] == "source_connecting", events[:3]
    assert f"host={params['host']} port={params['port']}" in first["detail"]
    assert at(waiting) - at(first) < 1.5, (first, waiting)
    assert waiting["level"] == "warning"
    assert waiting["brokers"] == dead
    assert f"waiting for Kafka at {dead} (" in waiting["detail"]
    assert "Connection refused" in waiting["detail"]
    assert "repeats once a minute" in waiting["detail"]
    names = [e["event"] for e in events]
    assert names.count("kafka_waiting") == 1  # once a minute, not once a probe
    assert "kafka_unreachable" not in names  # that comes after kafka.connect_timeout (30 s)


def test_run_names_the_postgresql_it_connects_to_before_the_first_attempt(
    kafka_bootstrap: str,
) -> None:
    port = free_port()
    done = walcast(
        "run", "--dsn", f"host=127.0.0.1 port={port} dbname=app user=cdc", "--slot", "s",
        "--publication", "p", "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--metrics-port", "0", "--connect-timeout", "1", timeout=60,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    events, errors = split(done.stderr)
    assert len(errors) == 1
    assert [e["event"] for e in events if e["level"] != "debug"][:2] == [
        "source_connecting",
        "source_lost",
    ], events
    assert (
        f"connecting to PostgreSQL at host=127.0.0.1 port={port} dbname=app user=cdc"
        in (events[0]["detail"])
    )

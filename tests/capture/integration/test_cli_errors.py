"""Bad input gets one line naming the problem and the fix, a non-zero exit, no traceback."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.support import scenario as sc

pytestmark = pytest.mark.integration
SERVICES = sc.REPO / "scripts" / "local-services"


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("walcast: error: ")
    assert "hint:" in line
    for needle in needles:
        assert needle in line
    return line


@pytest.fixture
def names(pg_dsn: str):
    tag = uuid.uuid4().hex[:8]
    slot, pub = f"walcast_err_{tag}", f"walcast_err_pub_{tag}"
    yield slot, pub
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        sc.drop_slot(conn, slot)
        conn.execute(f'DROP PUBLICATION IF EXISTS "{pub}"')


def tail(dsn: str, slot: str, pub: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return sc.walcast(
        "tail", "--dsn", dsn, "--slot", slot, "--publication", pub, *extra, timeout=60
    )


def test_unreachable_server(names) -> None:
    slot, pub = names
    done = tail("host=127.0.0.1 port=1 dbname=x user=y password=hunter2", slot, pub)
    line = assert_one_line_error(done, "cannot connect to PostgreSQL", "port=1", "--dsn")
    assert "hunter2" not in done.stderr + done.stdout
    assert line


def test_malformed_dsn(names) -> None:
    slot, pub = names
    done = tail("host=x this is not a dsn password=hunter2", slot, pub)
    assert_one_line_error(done, "--dsn")
    assert "hunter2" not in done.stderr


def test_missing_publication(pg_dsn: str, names) -> None:
    slot, pub = names
    done = tail(pg_dsn, slot, pub, "--create-slot")
    assert_one_line_error(done, f"publication {pub!r} does not exist", "--create-publication")


def test_missing_slot(pg_dsn: str, names) -> None:
    slot, pub = names
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE PUBLICATION "{pub}" FOR ALL TABLES')
    done = tail(pg_dsn, slot, pub)
    assert_one_line_error(done, f"replication slot {slot!r} does not exist", "--create-slot")


def test_slot_with_another_plugin(pg_dsn: str, names) -> None:
    slot, pub = names
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE PUBLICATION "{pub}" FOR ALL TABLES')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
    done = tail(pg_dsn, slot, pub)
    assert_one_line_error(done, "'test_decoding'", "'pgoutput'")


def test_slot_busy_in_another_process(pg_dsn: str, names) -> None:
    slot, pub = names
    first = subprocess.Popen(
        [sys.executable, "-m", "capture", "tail", "--dsn", pg_dsn, "--slot", slot,
         "--publication", pub, "--create-slot", "--create-publication"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=sc.REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with psycopg.connect(pg_dsn) as conn:
                row = conn.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
            if row and row[0]:
                break
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            time.sleep(0.2)
        else:
            pytest.fail("first tail never became active")
        done = tail(pg_dsn, slot, pub)
        assert_one_line_error(done, f"replication slot {slot!r} is in use", f"PID {row[0]}")
    finally:
        first.terminate()
        assert first.wait(timeout=30) == 0, "SIGTERM must end tail cleanly with exit 0"


def test_unknown_format_lists_valid_ones(pg_dsn: str, names) -> None:
    slot, pub = names
    done = tail(pg_dsn, slot, pub, "--format", "xml")
    assert done.returncode != 0
    assert "unknown format 'xml'; valid formats: json, canal" in done.stderr
    assert "Traceback" not in done.stderr


def test_proto_version_too_new_for_server(pg_dsn: str, names) -> None:
    slot, pub = names
    with psycopg.connect(pg_dsn) as conn:
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])
    if version >= 160000:
        pytest.skip("the server supports every protocol version")  # not silent: reported by -ra
    done = tail(pg_dsn, slot, pub, "--proto-version", "4", "--create-slot", "--create-publication")
    assert_one_line_error(done, "--proto-version 4 needs PostgreSQL 16", "--proto-version 3")


@pytest.fixture(scope="module")
def replica_level_dsn():
    """A second, real server with wal_level=replica (its own state dir, stopped after).

    The state dir is made with mkdtemp (pytest's tmp dirs are private to root, and the
    server runs as another OS user).
    """
    state = tempfile.mkdtemp(prefix="walcast-replica-pg-")
    Path(state).chmod(0o755)
    env = {**os.environ, "WALCAST_SERVICES_DIR": str(state), "WALCAST_PG_WAL_LEVEL": "replica"}
    env.pop("WALCAST_PG_PORT", None)
    started = subprocess.run(
        [str(SERVICES), "start", "pg"], capture_output=True, text=True, env=env, timeout=300,
        check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    dsn = next(
        shlex.split(line.partition("=")[2])[0]
        for line in started.stdout.splitlines()
        if line.startswith("export WALCAST_TEST_DSN=")
    )
    yield dsn
    subprocess.run([str(SERVICES), "stop", "pg"], capture_output=True, env=env, check=False)
    shutil.rmtree(state, ignore_errors=True)


def test_wal_level_replica(replica_level_dsn: str, names) -> None:
    slot, pub = names
    done = tail(replica_level_dsn, slot, pub, "--create-slot", "--create-publication")
    assert_one_line_error(
        done, "wal_level is 'replica'", "logical replication needs wal_level=logical",
        "ALTER SYSTEM SET wal_level = logical",
    )  # fmt: skip

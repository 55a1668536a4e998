"""Bad input around loads, through the CLI: one line each, and a dropped table ends cleanly."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from tests.support.scenario import REPO, drop_slot, walcast

pytestmark = pytest.mark.integration
KEPT = 300_000


@pytest.fixture
def published(pg_dsn: str):
    tag = uuid.uuid4().hex[:8]
    schema, pub = f"le_{tag}", f"le_pub_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.kept (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE TABLE {schema}.zdoomed (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE TABLE {schema}.unpublished (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {schema}.kept SELECT g, 'k' FROM generate_series(1, {KEPT}) g")
        conn.execute(f"INSERT INTO {schema}.zdoomed SELECT g, 'd' FROM generate_series(1, 50) g")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {schema}.kept, {schema}.zdoomed")
    yield schema, pub
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _one_line(done: subprocess.CompletedProcess[str], start: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(start), lines[0]
    assert "Traceback" not in done.stderr


def test_walcast_snapshot_refuses_unknown_and_unpublished_tables(
    pg_dsn: str, published: tuple[str, str]
) -> None:
    schema, pub = published
    base = ("snapshot", "--dsn", pg_dsn, "--publication", pub)
    _one_line(
        walcast(*base, "--table", f"{schema}.nope"),
        f"walcast: error: --table {schema}.nope: no such table",
    )
    _one_line(
        walcast(*base, "--table", f"{schema}.unpublished"),
        f"walcast: error: --table {schema}.unpublished: not in publication(s) {pub}",
    )
    _one_line(walcast(*base, "--table", "kept"), "walcast: error: --table 'kept': give it as")
    _one_line(
        walcast("snapshot", "--dsn", pg_dsn, "--publication", "nopub", "--table", f"{schema}.kept"),
        "walcast: error: --publication nopub: no such publication",
    )
    done = walcast(*base, "--table", f"{schema}.kept")
    assert done.returncode == 0, done.stderr
    assert "asked every daemon of this database to load 1 table(s)" in done.stderr


def test_zero_workers_is_one_line(pg_dsn: str) -> None:
    args = ["tail", "--dsn", pg_dsn, "--slot", "s", "--publication", "p"]
    _one_line(
        walcast(*args, "--snapshot-workers", "0"),
        "walcast tail: error: argument --snapshot-workers: '0' must be positive",
    )


def test_a_table_dropped_during_its_load_ends_cleanly(
    pg_dsn: str, published: tuple[str, str]
) -> None:
    schema, pub = published
    slot = f"le_slot_{uuid.uuid4().hex[:8]}"
    tail = subprocess.Popen(
        [sys.executable, "-m", "capture", "tail", "--dsn", pg_dsn, "--slot", slot,
         "--publication", pub, "--create-slot", "--snapshot", "initial-only",
         "--snapshot-workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert tail.stdout is not None
    first = tail.stdout.readline()  # kept is being loaded: zdoomed's turn comes next
    with psycopg.connect(pg_dsn) as locker:
        locker.execute(f"LOCK TABLE {schema}.zdoomed IN ACCESS EXCLUSIVE MODE")
        time.sleep(3)  # the load reaches zdoomed and waits for the lock
        locker.execute(f"DROP TABLE {schema}.zdoomed")
        locker.commit()
    try:
        out = first + tail.stdout.read()  # (communicate would lose what readline buffered)
        assert tail.stderr is not None
        err = tail.stderr.read()
        tail.wait(timeout=60)
    finally:
        if tail.poll() is None:
            tail.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop_slot(conn, slot)
    assert tail.returncode == 0, err
    assert '"event": "snapshot_table_dropped"' in err
    assert f"{schema}.zdoomed" in err
    assert "Traceback" not in err
    kept = [line for line in out.splitlines() if '"table":"kept"' in line]
    assert len(kept) == KEPT

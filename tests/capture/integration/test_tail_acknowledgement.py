"""tail acknowledges exactly what it printed; logs are JSON events without secrets."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from capture.lsn import parse_lsn
from tests.support import scenario as sc

pytestmark = pytest.mark.integration


@pytest.fixture
def stream(pg_dsn: str):
    tag = uuid.uuid4().hex[:8]
    table, pub, slot = f"ack_{tag}", f"ack_pub_{tag}", f"ack_slot_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    yield table, pub, slot
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        sc.drop_slot(conn, slot)
        conn.execute(f"DROP PUBLICATION {pub}")
        conn.execute(f"DROP TABLE {table}")


def confirmed(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn) as conn:
        (lsn,) = conn.execute(
            "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return int(lsn)


def commit_and_get_lsn(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(sql)
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()[0])


def test_whole_transactions_are_acknowledged_and_the_rest_replayed(pg_dsn: str, stream) -> None:
    table, pub, slot = stream
    commit_and_get_lsn(pg_dsn, f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    commit_and_get_lsn(pg_dsn, f"INSERT INTO {table} VALUES (3, 'c'), (4, 'd')")
    start = confirmed(pg_dsn, slot)

    # Stop in the middle of the second transaction: only the first is acknowledged.
    first = sc.tail_events(pg_dsn, slot, pub, 3)
    assert [e["after"]["id"] for e in first] == ["1", "2", "3"]
    first_commit = parse_lsn(first[0]["commit_lsn"])
    second_commit = parse_lsn(first[2]["commit_lsn"])
    acked = confirmed(pg_dsn, slot)
    assert start < first_commit < acked <= second_commit

    # The next run starts with the second transaction again: same commit LSN, all rows.
    # Its last row ends the transaction, so this time the whole of it is acknowledged.
    second = sc.tail_events(pg_dsn, slot, pub, 2)
    assert [e["after"]["id"] for e in second] == ["3", "4"]
    assert second[0]["commit_lsn"] == first[2]["commit_lsn"]
    assert confirmed(pg_dsn, slot) > second_commit
    # Nothing left: a third run sees no old rows, only a new one.
    commit_and_get_lsn(pg_dsn, f"INSERT INTO {table} VALUES (5, 'e')")
    third = sc.tail_events(pg_dsn, slot, pub, 1)
    assert [e["after"]["id"] for e in third] == ["5"]


def test_quiet_database_still_advances_the_slot(pg_dsn: str, stream) -> None:
    table, pub, slot = stream
    commit_and_get_lsn(pg_dsn, f"INSERT INTO {table} VALUES (1, 'a')")
    assert len(sc.tail_events(pg_dsn, slot, pub, 1)) == 1
    # WAL written after that by other tables only: tail prints nothing, yet acknowledges
    # the server's keepalive position, so the slot does not retain that WAL.
    other = commit_and_get_lsn(pg_dsn, "CREATE TEMP TABLE noise AS SELECT 1 AS x")
    done = sc.walcast(
        "tail", "--dsn", pg_dsn, "--slot", slot, "--publication", pub,
        "--status-interval", "0.5", timeout=60, stop_after=6.0,
    )  # fmt: skip
    assert done.stdout == ""
    assert confirmed(pg_dsn, slot) >= other


def test_logs_are_json_events_without_secrets(pg_dsn: str, stream) -> None:
    table, pub, slot = stream
    commit_and_get_lsn(pg_dsn, f"INSERT INTO {table} VALUES (1, 'a')")
    secret = "n0t-a-real-password"
    done = sc.walcast(
        "--log-level", "info", "tail", "--dsn", f"{pg_dsn} password={secret}", "--slot", slot,
        "--publication", pub, "--max-events", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert secret not in done.stderr + done.stdout
    warning, *lines = done.stderr.splitlines()
    assert warning.startswith("walcast: warning: --dsn holds a password")  # issue 22.5
    events = [json.loads(line) for line in lines]
    by_name = {e["event"]: e for e in events}
    assert {"stream_started", "stream_closed"} <= set(by_name)
    started = by_name["stream_started"]
    assert started["slot"] == slot
    assert started["proto_version"] >= 1
    assert "password" not in started["target"]
    assert all(e["level"] == "info" for e in events)
    # One event per state change, never one per row.
    assert len(events) < 10

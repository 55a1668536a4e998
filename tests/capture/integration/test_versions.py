"""What walcast asks each PostgreSQL major for, and what it refuses (core: every major).

* The highest pgoutput protocol the server has is negotiated (1 on 13, 2 on 14, 3 on 15,
  4 on 16+), with streaming and logical messages on where they exist (14+).
* Prepared transactions (``--two-phase``, 15+) are held until COMMIT PREPARED and dropped at
  ROLLBACK PREPARED, also when streamed before their PREPARE (Stream Prepare).
* A new slot loads the existing rows where loads exist (14+), and only streams on 13.
* A feature the server lacks is never asked for by default; asked for explicitly, it is one
  line naming the flag and the first major that has it.

Run on every major with ``make test-versions`` (``WALCAST_TEST_PG_VERSIONS``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.support import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.core]

LOW_WORK_MEM = "options='-c logical_decoding_work_mem=64kB'"
PROTOCOL = {13: 1, 14: 2, 15: 3}
"""Highest pgoutput protocol per major (4 from 16 on)."""


@dataclass
class Objects:
    dsn: str
    schema: str
    publication: str
    tag: str

    def slot(self, name: str, *, two_phase: bool = False) -> str:
        """Create a pgoutput slot (two-phase enabled with ``two_phase``) and return its name."""
        slot = f"ver_{name}_{self.tag}".replace("-", "_")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            if two_phase:
                conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)",
                    (slot,),
                )
            else:  # the two_phase argument came in 14
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        return slot

    def sql(self, *statements: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(f"SET search_path = {self.schema}")
            for statement in statements:
                conn.execute(statement)

    def tail(
        self, slot: str, *args: str, log_level: str = "warning", timeout: float = 120, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        return sc.walcast(
            "--log-level", log_level, "tail", "--dsn", f"{self.dsn} {LOW_WORK_MEM}",
            "--slot", slot, "--publication", self.publication, "--format", "json", *args,
            timeout=timeout, **kwargs,
        )  # fmt: skip


@pytest.fixture
def objects(pg_dsn: str) -> Iterator[Objects]:
    tag = uuid.uuid4().hex[:8]
    made = Objects(pg_dsn, f"ver_{tag}", f"ver_pub_{tag}", tag)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {made.schema}")
        conn.execute(f"CREATE TABLE {made.schema}.t (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {made.publication} FOR TABLE {made.schema}.t")
    yield made
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE %s AND NOT active",
            (f"ver\\_%\\_{tag}",),
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {made.publication}")
        conn.execute(f"DROP SCHEMA {made.schema} CASCADE")


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def _log(stderr: str, event: str) -> dict:
    for line in stderr.splitlines():
        if line.startswith("{") and json.loads(line).get("event") == event:
            return json.loads(line)
    raise AssertionError(f"no {event} in: {stderr[-2000:]}")


def test_the_highest_protocol_is_negotiated(objects: Objects, pg_major: int) -> None:
    slot = objects.slot("proto")
    objects.sql("INSERT INTO t VALUES (1, 'one')")
    done = objects.tail(slot, "--max-events", "1", log_level="info")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [e["after"]["id"] for e in _events(done.stdout)] == ["1"]
    started = _log(done.stderr, "stream_started")
    assert started["proto_version"] == PROTOCOL.get(pg_major, 4)
    assert started["streaming"] == ("on" if pg_major >= 14 else "off")
    assert started["messages"] is (pg_major >= 14)
    assert started["two_phase"] is False
    assert started["binary"] is False


def test_prepared_transactions_plain_and_streamed(objects: Objects, pg_major: int) -> None:
    if pg_major < 15:
        pytest.skip("two-phase decoding needs PostgreSQL 15 (the refusal is tested below)")
    slot = objects.slot("2pc", two_phase=True)
    big = 3000  # over logical_decoding_work_mem = 64kB: streamed before its PREPARE
    objects.sql(
        "BEGIN", "INSERT INTO t VALUES (1, 'committed')", "PREPARE TRANSACTION 'ver_a'",
        "COMMIT PREPARED 'ver_a'",
        "BEGIN", "INSERT INTO t VALUES (2, 'rolled back')", "PREPARE TRANSACTION 'ver_b'",
        "ROLLBACK PREPARED 'ver_b'",
        "BEGIN",
        f"INSERT INTO t SELECT g, repeat('s', 60) FROM generate_series(1000, {999 + big}) g",
        "PREPARE TRANSACTION 'ver_c'", "COMMIT PREPARED 'ver_c'",
        "INSERT INTO t VALUES (99, 'the end')",
    )  # fmt: skip
    done = objects.tail(slot, "--two-phase", "--max-events", str(big + 2), log_level="info")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _log(done.stderr, "stream_started")["two_phase"] is True
    ids = [int(e["after"]["id"]) for e in _events(done.stdout)]
    assert ids == [1, *range(1000, 1000 + big), 99]
    assert _streamed_transactions(objects.dsn, slot) >= 1, "the big one was not streamed"


def _streamed_transactions(dsn: str, slot: str) -> int:
    """pg_stat_replication_slots.stream_txns, once the walsender has reported it."""
    deadline = time.monotonic() + 15
    while True:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
        if (row and row[0]) or time.monotonic() > deadline:
            return int(row[0]) if row else 0
        time.sleep(0.5)


def test_a_new_slot_loads_where_loads_exist(objects: Objects, pg_major: int) -> None:
    objects.sql("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    slot = f"ver_new_{objects.tag}"
    args = ("--create-slot",)
    if pg_major >= 14:
        done = objects.tail(slot, *args, "--max-events", "3")
        assert done.returncode == 0, done.stderr[-3000:]
        events = _events(done.stdout)
        assert [(e["op"], e["after"]["id"]) for e in events] == [
            ("snapshot", "1"),
            ("snapshot", "2"),
            ("snapshot", "3"),
        ]
    else:  # no loads before 14: the slot is created and streamed, nothing is loaded
        done = objects.tail(slot, *args, timeout=60, stop_after=5.0)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout == ""


# (id, flags, first major that has it)
EXPLICIT = [
    ("binary", ("--binary",), 14),
    ("streaming-on", ("--streaming", "on"), 14),
    ("streaming-parallel", ("--streaming", "parallel"), 16),
    ("messages", ("--messages",), 14),
    ("two-phase", ("--two-phase",), 15),
    ("proto-2", ("--proto-version", "2"), 14),
    ("proto-3", ("--proto-version", "3"), 15),
    ("proto-4", ("--proto-version", "4"), 16),
    ("snapshot-initial", ("--snapshot", "initial"), 14),
]


@pytest.mark.parametrize(
    ("flags", "since"), [c[1:] for c in EXPLICIT], ids=[c[0] for c in EXPLICIT]
)
def test_an_explicit_ask_works_or_is_one_line(
    objects: Objects, pg_major: int, flags: tuple[str, ...], since: int
) -> None:
    slot = objects.slot(
        flags[-1].strip("-"), two_phase=flags == ("--two-phase",) and pg_major >= 15
    )
    objects.sql("INSERT INTO t VALUES (1, 'one')")
    done = objects.tail(slot, *flags, "--max-events", "1")
    if pg_major >= since:
        assert done.returncode == 0, done.stderr[-3000:]
        assert [e["after"]["id"] for e in _events(done.stdout)] == ["1"]
        return
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0
    assert len(lines) == 1, done.stderr[-3000:]
    (line,) = lines
    assert line.startswith("walcast: error: "), line
    assert flags[0] in line, f"the line does not name {flags[0]}: {line}"
    assert re.search(rf"\b{since}\b", line), f"the line does not name PostgreSQL {since}: {line}"

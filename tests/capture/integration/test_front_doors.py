"""``tail`` and ``run`` are two front doors of one pump: the same WAL gives the same messages.

Both read the same changes (two slots created at one WAL position) in canal, dataworks,
shareplex and json; every message must be byte for byte the same, apart from the fields
that say when a message was built (canal ``ts``, dataworks ``systemTime``, shareplex
``posttime``). This also pins the bug it fixed: ``tail`` once wrote ``pkNames: null`` for a
REPLICA IDENTITY FULL table that has a primary key, because only ``run`` asked the catalog.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from tests.support.scenario import drop_slot, walcast

pytestmark = pytest.mark.integration

FORMATS = ("json", "canal", "dataworks", "shareplex")
WALL_CLOCK = {"canal": ("ts",), "dataworks": ("systemTime",), "shareplex": ("posttime",)}


def _without_wall_clock(fmt: str, document: dict[str, Any]) -> dict[str, Any]:
    for name in WALL_CLOCK.get(fmt, ()):
        for holder in (document, document.get("meta", {}), document.get("timestamp", {})):
            if isinstance(holder, dict):
                holder.pop(name, None)
        payload = document.get("payload")
        if isinstance(payload, dict) and isinstance(payload.get("timestamp"), dict):
            payload["timestamp"].pop(name, None)
    return document


def test_tail_and_run_write_the_same_messages(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    schema, pub = f"fd_{tag}", f"fd_pub_{tag}"
    slots = {"tail": f"fd_tail_{tag}", "run": f"fd_run_{tag}"}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.full_pk (id int PRIMARY KEY, v text, ok bool)")
        conn.execute(f"ALTER TABLE {schema}.full_pk REPLICA IDENTITY FULL")
        conn.execute(f"CREATE TABLE {schema}.plain (a int, b text, PRIMARY KEY (a, b))")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {schema}.full_pk, {schema}.plain")
        for slot in slots.values():
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("SET synchronous_commit = on")
        with conn.transaction():
            conn.execute(f"INSERT INTO {schema}.full_pk VALUES (1, 'one', true), (2, 'two', false)")
            conn.execute(f"INSERT INTO {schema}.plain VALUES (1, 'x'), (2, 'y')")
        conn.execute(f"UPDATE {schema}.full_pk SET v = 'uno' WHERE id = 1")
        conn.execute(f"UPDATE {schema}.plain SET b = 'z' WHERE a = 2")
        conn.execute(f"DELETE FROM {schema}.full_pk WHERE id = 2")
    changes = 7
    try:
        tailed: dict[str, list[bytes]] = {}
        for fmt in FORMATS:
            # tail consumes its slot; re-read the same WAL from a fresh copy of the slot
            copy = f"fd_t{fmt[:2]}_{tag}"
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_copy_logical_replication_slot(%s, %s)", (slots["tail"], copy)
                )
            done = walcast(
                "tail", "--dsn", pg_dsn, "--slot", copy, "--publication", pub,
                "--format", fmt, "--max-events", str(changes),
            )  # fmt: skip
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                drop_slot(conn, copy)
            assert done.returncode == 0, done.stderr
            tailed[fmt] = done.stdout.encode().splitlines()

        prefix = f"fd_{tag}"
        args = [
            "--dsn", pg_dsn, "--slot", slots["run"], "--publication", pub,
            "--bootstrap-servers", kafka_bootstrap,
            "--topic", prefix + ".{format}.{schema}.{table}",
            "--transaction-topic", prefix + ".{format}", "--schema-topic", prefix + ".schemas",
            "--metrics-port", "0", "--heartbeat-interval", "0",
        ]  # fmt: skip
        for fmt in FORMATS:
            args += ["--format", fmt]
        daemon = RunningDaemon(*args, log_path=tmp_path / "run.log")
        try:
            wait_caught_up(pg_dsn, slots["run"], current_lsn(pg_dsn), daemon)
        finally:
            assert daemon.stop() == 0, daemon.log()[-3000:]
        records = k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, prefix + "."))
        for fmt in FORMATS:
            mine = sorted(
                (r for r in records if r.topic.startswith(f"{prefix}.{fmt}.")),
                key=lambda r: (r.position, r.value),
            )
            from_run = [_without_wall_clock(fmt, orjson.loads(r.value)) for r in mine]
            from_tail = [_without_wall_clock(fmt, orjson.loads(line)) for line in tailed[fmt]]
            key = orjson.dumps
            assert sorted(map(key, from_tail)) == sorted(map(key, from_run)), fmt
            assert len(from_run) >= changes

        canal = [orjson.loads(line) for line in tailed["canal"]]
        assert {tuple(m["pkNames"] or ()) for m in canal if m["table"] == "full_pk"} == {("id",)}
        assert {tuple(m["pkNames"] or ()) for m in canal if m["table"] == "plain"} == {("a", "b")}
        dataworks = [orjson.loads(line) for line in tailed["dataworks"]]
        keys = {
            tuple(d["schema"]["primaryKey"] or ())
            for d in dataworks
            if d["schema"]["source"]["tableName"] == "full_pk"
        }
        assert keys == {("id",)}
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for slot in slots.values():
                drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

"""State keyed by the source's identity, through ``walcast run`` on real services.

* A slot dropped and created again by walcast (``--create-slot``) starts a new generation:
  its initial load runs again, although the topic still holds the old slot's ``done``
  records (walcast 0.1 loaded 0 rows the second time: DBZ-5739's class of bug).
* Load progress of two sources sharing a slot name and one Kafka never mixes.
* An exactly-once offsets record of an earlier life of the slot is not read back.
* ``--create-publication`` never publishes a table whose UPDATE/DELETE PostgreSQL would
  then refuse; ``walcast run`` warns about an existing publication that does.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import psycopg
import pytest
from confluent_kafka import Producer

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon
from capture.replication.slots import source_identity
from capture.state.identity import SourceIdentity
from capture.state.offsets import OffsetRecord, read_offset
from capture.state.progress import KafkaProgress, TableProgress
from tests.support import scenario as sc

pytestmark = pytest.mark.integration

ROWS = 300


def _walcast(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capture", *args],
        capture_output=True, text=True, check=False, timeout=timeout, cwd=sc.REPO,
    )  # fmt: skip


def _load_rows(bootstrap: str, topic: str) -> int:
    records = k.read_all(bootstrap, [topic]) if topic in k.topics(bootstrap, topic) else []
    return sum(1 for r in records if orjson.loads(r.value)["op"] == "snapshot")


def test_a_slot_created_again_by_walcast_loads_every_table_again(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    table, pub, slot, prefix = f"regen_{tag}", f"regen_pub_{tag}", f"regen_slot_{tag}", f"rg_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, {ROWS}) g")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    args = [
        "run", "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--create-slot",
        "--snapshot", "initial-only", "--bootstrap-servers", kafka_bootstrap,
        "--format", "json", "--topic", prefix + ".{table}", "--transaction-topic", prefix,
        "--schema-topic", prefix + ".schemas", "--metrics-port", "0",
    ]  # fmt: skip
    topic = f"{prefix}.{table}"
    try:
        first = _walcast(*args)
        assert first.returncode == 0, first.stderr[-3000:]
        assert _load_rows(kafka_bootstrap, topic) == ROWS
        dropped = _walcast("slot", "drop", "--dsn", pg_dsn, "--slot", slot, "--yes")
        assert dropped.returncode == 0, dropped.stderr
        again = _walcast(*args)
        assert again.returncode == 0, again.stderr[-3000:]
        assert '"event": "slot_generation_started"' in again.stderr
        # The new slot loaded every row again: it did not take the old slot's records.
        assert _load_rows(kafka_bootstrap, topic) == 2 * ROWS
        # A restart on the same slot is the same generation: nothing is loaded a third time.
        resumed = _walcast(*args)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert _load_rows(kafka_bootstrap, topic) == 2 * ROWS
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")


class _Records:
    """What KafkaProgress publishes, produced for real (and confirmed) to a test topic."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap})

    def publish(self, topic: str, key: bytes, value: bytes) -> None:
        self.producer.produce(topic, value, key)
        assert self.producer.flush(30) == 0

    def publish_confirmed(self, topic: str, key: bytes, value: bytes, timeout: float) -> bool:
        self.producer.produce(topic, value, key)
        return self.producer.flush(timeout) == 0


def _progress(bootstrap: str, topic: str, source: SourceIdentity) -> KafkaProgress:
    records = _Records(bootstrap)
    return KafkaProgress(
        {"bootstrap.servers": bootstrap},
        topic,
        source,
        records.publish,
        publish_confirmed=records.publish_confirmed,
    )


def test_load_progress_is_kept_per_source_and_per_slot_generation(kafka_bootstrap: str) -> None:
    topic = f"progress_{uuid.uuid4().hex[:8]}"
    # Two clusters, the same database name and the default slot name, one Kafka.
    a = _progress(kafka_bootstrap, topic, SourceIdentity("111", "app", "walcast"))
    b = _progress(kafka_bootstrap, topic, SourceIdentity("222", "app", "walcast"))
    # Another slot whose name starts with the first one's (no prefix match).
    c = _progress(kafka_bootstrap, topic, SourceIdentity("111", "app", "walcast2"))
    for progress in (a, b, c):
        assert progress.read_generation() is None
    a.save(TableProgress("shop.orders", 1, "initial", "done", rows=10))
    assert [r.table for r in a.load()] == ["shop.orders"]
    assert b.load() == []
    assert c.load() == []
    # walcast 0.1's record of the same slot name names no source: never used.
    _Records(kafka_bootstrap).publish(
        topic, b"walcast/shop.items", TableProgress("shop.items", 2, "initial", "done").to_json()
    )
    assert [r.table for r in b.load()] == []
    # Source a's slot is created again by walcast: a new generation, no old records.
    again = _progress(kafka_bootstrap, topic, a.source)
    assert again.start_generation(30)
    assert again.generation is not None
    assert again.load() == []
    again.save(TableProgress("shop.orders", 1, "initial", "pending"))
    restarted = _progress(kafka_bootstrap, topic, a.source)
    assert restarted.read_generation() == again.generation
    assert [(r.table, r.state) for r in restarted.load()] == [("shop.orders", "pending")]


def test_offsets_of_an_earlier_life_of_the_slot_are_not_read_back(kafka_bootstrap: str) -> None:
    topic = f"offsets_{uuid.uuid4().hex[:8]}"
    key = "333/app/walcast"
    record = OffsetRecord(key, commit_lsn=0x5000, end_lsn=0x5008, generation="old")
    _Records(kafka_bootstrap).publish(topic, key.encode(), record.to_json())
    settings = {"bootstrap.servers": kafka_bootstrap}
    assert read_offset(settings, topic, key, generation="old") == record
    assert read_offset(settings, topic, key, generation="new") is None
    assert read_offset(settings, topic, key, generation=None) is None


def test_create_publication_refuses_tables_whose_writes_postgres_would_refuse(
    pg_dsn: str, kafka_bootstrap: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    keyed, notes, pub, slot = f"pk_{tag}", f"notes_{tag}", f"refuse_pub_{tag}", f"refuse_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {keyed} (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE {notes} (body text)")  # no key, REPLICA IDENTITY DEFAULT
        conn.execute(f"INSERT INTO {notes} VALUES ('a'), ('b')")
    try:
        done = _walcast(
            "run", "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--create-slot",
            "--create-publication", "--publish-tables", f"public.{keyed},public.{notes}",
            "--bootstrap-servers", kafka_bootstrap, "--format", "json", "--metrics-port", "0",
        )  # fmt: skip
        assert done.returncode == 3, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        (line,) = [line for line in lines if line.startswith("walcast: error: ")]
        for other in lines:
            assert other == line or orjson.loads(other)["event"], other  # events only
        assert f"public.{notes}" in line
        assert f"public.{keyed}" not in line
        assert "REPLICA IDENTITY FULL" in line
        assert "was not created" in line
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (pub,))
            assert found.fetchone() is None
            found = conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
            assert found.fetchone() is None
            others = conn.execute(  # a FOR ALL TABLES publication another test left behind
                "SELECT 1 FROM pg_publication_tables WHERE tablename = %s", (notes,)
            ).fetchone()
            if others is None:
                conn.execute(f"UPDATE {notes} SET body = 'c' WHERE body = 'a'")  # still allowed
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {keyed}, {notes}")


def test_run_warns_about_a_publication_that_makes_writes_fail(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    notes, pub, slot = f"warned_{tag}", f"warn_pub_{tag}", f"warn_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {notes} (body text)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {notes}")
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--create-slot",
        "--bootstrap-servers", kafka_bootstrap, "--format", "json", "--metrics-port", "0",
        "--topic", f"warn_{tag}" + ".{table}", "--transaction-topic", f"warn_{tag}",
        log_path=tmp_path / "run.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while '"event": "session_started"' not in daemon.log():
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            assert time.monotonic() < deadline, daemon.log()[-3000:]
            time.sleep(0.2)
        warnings = [
            orjson.loads(line)
            for line in daemon.log().splitlines()
            if '"publication_refuses_writes"' in line
        ]
        assert len(warnings) == 1, daemon.log()[-3000:]
        why = "UPDATE and DELETE refused: no primary key (add one, or REPLICA IDENTITY FULL)"
        assert warnings[0]["tables"] == [f"public.{notes} ({why})"]
        assert warnings[0]["publications"] == [pub]
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {notes}")


def test_messages_and_layouts_name_their_source(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    table, pub, slot, prefix = f"named_{tag}", f"named_pub_{tag}", f"named_{tag}", f"nm_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    try:
        done = _walcast(
            "run", "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--create-slot",
            "--snapshot", "initial-only", "--bootstrap-servers", kafka_bootstrap,
            "--format", "json", "--format", "ibm", "--topic", prefix + ".{format}.{table}",
            "--transaction-topic", prefix + ".{format}", "--schema-topic", prefix + ".schemas",
            "--metrics-port", "0",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        key = source_identity(pg_dsn, slot).key
        json_data = k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, prefix + ".json"))
        data = json_data + k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, prefix + ".ibm"))
        assert len(data) >= 3
        assert {r.headers.get("walcast.source") for r in data} == {key}
        (layout,) = k.read_all(kafka_bootstrap, [prefix + ".schemas"])
        record = orjson.loads(layout.value)
        version = record["version"]
        assert layout.key == f"{key}/public.{table}/{version}".encode()  # one key per version
        assert layout.partition == 0
        assert record["source"] == key
        # every change names the layout it was encoded with (the loaded rows too; IBM names
        # it in plan_name instead)
        rows = [r for r in json_data if r.headers.get("walcast.ordinal")]
        assert len(rows) == 2
        assert {r.headers.get("walcast.layout") for r in rows} == {version}
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")

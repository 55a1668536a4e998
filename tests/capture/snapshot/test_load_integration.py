"""The initial load on a real PostgreSQL and Kafka: every row exactly, across kill -9.

Half a million rows over four tables (a big one, one with TOASTed values and NULLs, one
with a composite key, one without any key) are in PostgreSQL before walcast starts. A
writer keeps inserting, updating, deleting and moving keys (TOASTed rows included) the
whole time. ``walcast run`` creates the slot (so it loads first), is killed with SIGKILL
in the middle of the load, and is started again: it resumes from the chunks Kafka
confirmed. Folding the json topics in order (snapshot rows and inserts set a row, updates
replace it, keeping unchanged TOAST values, deletes remove it) must give exactly
``SELECT *`` of every table. Then ``walcast snapshot`` re-loads one table while streaming,
and the fold must still be exact.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Self

import orjson
import psycopg
import pytest

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from bench.kit.fold import fold_json
from tests.support import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.core]

ROWS = {"big": 400_000, "docs": 20_000, "pairs": 80_000, "bag": 5_000}
KEYS = {"big": ("id",), "docs": ("id",), "pairs": ("a", "b")}
COLUMNS = {
    "big": ("id", "v", "n"),
    "docs": ("id", "body", "note"),
    "pairs": ("a", "b", "payload"),
    "bag": ("x", "y"),
}


def create(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.big (id bigint PRIMARY KEY, v text, n int)")
        conn.execute(f"CREATE TABLE {schema}.docs (id int PRIMARY KEY, body text, note text)")
        conn.execute(f"ALTER TABLE {schema}.docs ALTER body SET STORAGE EXTERNAL")
        conn.execute(
            f"CREATE TABLE {schema}.pairs (a int, b text, payload jsonb, PRIMARY KEY (a, b))"
        )
        conn.execute(f"CREATE TABLE {schema}.bag (x int, y text)")
        conn.execute(f"ALTER TABLE {schema}.bag REPLICA IDENTITY FULL")
        conn.execute(
            f"INSERT INTO {schema}.big SELECT g, 'v' || g, CASE WHEN g % 10 = 0 THEN NULL "
            f"ELSE g % 1000 END FROM generate_series(1, {ROWS['big']}) g"
        )
        conn.execute(
            f"INSERT INTO {schema}.docs SELECT g, CASE WHEN g % 50 = 0 THEN "
            "repeat(md5(g::text), 150) ELSE 'short ' || g END, "
            f"CASE WHEN g % 3 = 0 THEN NULL ELSE E'tab\\there' END "
            f"FROM generate_series(1, {ROWS['docs']}) g"
        )
        conn.execute(
            f"INSERT INTO {schema}.pairs SELECT g / 4, 'k' || (g % 4), "
            "jsonb_build_object('g', g, 's', 'x\"y') "
            f"FROM generate_series(1, {ROWS['pairs']}) g"
        )
        conn.execute(
            f"INSERT INTO {schema}.bag SELECT g % 100, 'dup' "
            f"FROM generate_series(1, {ROWS['bag']}) g"
        )


class Writer:
    """Inserts, updates, deletes and key moves on every table until stopped."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(60)

    def check(self) -> None:
        assert self.error is None, self.error

    def _run(self) -> None:
        rng = random.Random(7)
        s = self.schema
        fresh = 10_000_000
        statements = [
            lambda: (f"UPDATE {s}.big SET v = v || 'u' WHERE id = %s", (rng.randint(1, 400_000),)),
            lambda: (f"DELETE FROM {s}.big WHERE id = %s", (rng.randint(1, 400_000),)),
            lambda: (
                f"INSERT INTO {s}.big VALUES (%s, 'new', NULL)",
                (fresh + rng.randint(1, 10**6),),
            ),
            lambda: (
                f"UPDATE {s}.big SET id = id + 20000000 WHERE id = %s",
                (rng.randint(1, 400_000),),
            ),
            lambda: (
                f"UPDATE {s}.big SET id = id - 19990000 WHERE id = %s",  # into an early range
                (20_000_000 + rng.randint(390_000, 400_000),),
            ),
            lambda: (f"UPDATE {s}.docs SET note = 'n' WHERE id = %s", (rng.randint(1, 400) * 50,)),
            lambda: (
                f"UPDATE {s}.docs SET id = -id WHERE id = %s",  # a TOASTed row's key moves
                (rng.randint(1, 400) * 50,),
            ),
            lambda: (
                (
                    f"UPDATE {s}.pairs SET payload = payload || '{{\"w\": 1}}' "
                    "WHERE a = %s AND b = 'k1'"
                ),
                (rng.randint(0, 20_000),),
            ),
            lambda: (
                f"UPDATE {s}.pairs SET b = b || 'm' WHERE a = %s AND b = 'k2'",
                (rng.randint(0, 20_000),),
            ),
            lambda: (
                f"DELETE FROM {s}.bag WHERE ctid = (SELECT ctid FROM {s}.bag WHERE x = %s LIMIT 1)",
                (rng.randint(0, 99),),
            ),
            lambda: (f"INSERT INTO {s}.bag VALUES (%s, 'dup')", (rng.randint(0, 99),)),
            lambda: (
                (
                    f"UPDATE {s}.bag SET y = 'upd' WHERE ctid = "
                    f"(SELECT ctid FROM {s}.bag WHERE x = %s AND y = 'dup' LIMIT 1)"
                ),
                (rng.randint(0, 99),),
            ),
        ]
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = on")
                while not self.stop.is_set():
                    with conn.transaction():
                        for _ in range(rng.randint(1, 5)):
                            query, params = rng.choice(statements)()
                            try:
                                with conn.transaction():
                                    conn.execute(query, params)
                            except psycopg.errors.UniqueViolation:
                                pass
                            self.count += 1
                    time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.error = exc


def fold(records: list[k.Record]) -> dict[str, Any]:
    """The tables the json messages describe, as a consumer folds them (:mod:`bench.kit.fold`).

    The consumer contract (README): per source and partition, a position not above the
    last one seen is a replay and is dropped; the first row of a load chunk of a keyless
    table (ordinal 1) starts that table over, since the chunk holds the whole table.
    """
    folded = fold_json(records, {**KEYS, "bag": None})
    assert len(folded.sources) == 1, sorted(folded.sources)
    (tables,) = folded.sources.values()
    assert not tables.below_zero(), f"rows removed more often than added: {tables.below_zero()}"
    return {t: sorted(tables.rows(t, COLUMNS[t])) for t in COLUMNS}


def _explain(table: str, got: list[Any], want: list[Any], records: list[k.Record]) -> str:
    """Which rows differ, and every message that touched them, for the failure message."""
    extra = sorted(set(got) - set(want))[:5]
    missing = sorted(set(want) - set(got))[:5]
    ids = {row[0] for row in extra + missing}
    lines = [f"{table}: {len(got)} rows folded, {len(want)} in PostgreSQL"]
    lines += [f"  only in Kafka: {row}" for row in extra]
    lines += [f"  only in PostgreSQL: {row}" for row in missing]
    for record in records:
        m = orjson.loads(record.value)
        images = [m["before"] or {}, m["after"] or {}]
        if m["table"] == table and any(str(i.get(COLUMNS[table][0])) in ids for i in images):
            lines.append(f"  {record.topic}@{record.offset} {record.position} {m['op']} {images}")
    return "\n".join(lines[:60])


def source_tables(dsn: str, schema: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sc.SESSION)
        for table, columns in COLUMNS.items():
            texts = ", ".join(f"{c}::text" for c in columns)
            rows = conn.execute(f"SELECT {texts} FROM {schema}.{table}").fetchall()
            out[table] = sorted(tuple(r) for r in rows)
    return out


def log_count(daemon: RunningDaemon, event: str) -> int:
    return daemon.log().count(f'"event": "{event}"')


def test_initial_load_with_a_kill_in_the_middle_and_a_reload_while_streaming(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path, pg_major: int
) -> None:
    if pg_major < 14:
        pytest.skip("loads need PostgreSQL 14 (the refusal: test_versions.py)")
    tag = uuid.uuid4().hex[:8]
    schema, pub, slot, prefix = f"load_{tag}", f"load_pub_{tag}", f"load_slot_{tag}", f"ld_{tag}"
    create(pg_dsn, schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        if pg_major >= 15:
            conn.execute(f"CREATE PUBLICATION {pub} FOR TABLES IN SCHEMA {schema}")
        else:  # FOR TABLES IN SCHEMA came in 15
            tables = ", ".join(f"{schema}.{t}" for t in ROWS)
            conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {tables}")
    args = [
        "--dsn", pg_dsn, "--slot", slot, "--publication", pub,
        "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--topic", prefix + ".{format}.{table}", "--schema-topic", prefix + ".schemas",
        "--metrics-port", "0", "--heartbeat-interval", "1",
        "--snapshot-workers", "2", "--snapshot-chunk-rows", "10000",
    ]  # fmt: skip
    daemons: list[RunningDaemon] = []
    try:
        with Writer(pg_dsn, schema) as writer:
            first = RunningDaemon(*args, "--create-slot", log_path=tmp_path / "first.log")
            daemons.append(first)
            deadline = time.monotonic() + 180
            while log_count(first, "snapshot_chunk") < 6:
                assert first.process.poll() is None, first.log()[-3000:]
                assert time.monotonic() < deadline, first.log()[-3000:]
                time.sleep(0.05)
            first.kill()  # in the middle of the load
            assert "snapshot_table_done" not in first.log() or log_count(
                first, "snapshot_table_done"
            ) < len(ROWS)
            second = RunningDaemon(*args, log_path=tmp_path / "second.log")
            daemons.append(second)
            deadline = time.monotonic() + 300
            while log_count(second, "snapshot_table_done") + log_count(
                first, "snapshot_table_done"
            ) < len(ROWS):
                assert second.process.poll() is None, second.log()[-3000:]
                assert time.monotonic() < deadline, second.log()[-3000:]
                time.sleep(0.2)
            assert "snapshot_resumed" in second.log()
            # a re-load of one table while the stream goes on
            done = sc.walcast(
                "snapshot", "--dsn", pg_dsn, "--table", f"{schema}.docs", "--publication", pub
            )
            assert done.returncode == 0, done.stderr
            deadline = time.monotonic() + 120
            while log_count(second, "snapshot_table_done") < 1 + (
                len(ROWS) - log_count(first, "snapshot_table_done")
            ):
                assert time.monotonic() < deadline, second.log()[-3000:]
                time.sleep(0.2)
            time.sleep(1)
        writer.check()
        assert writer.count > 100
        wait_caught_up(pg_dsn, slot, current_lsn(pg_dsn), second)
        assert second.stop() == 0, second.log()[-3000:]
        assert "Traceback" not in first.log() + second.log()

        records = k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, f"{prefix}.json."))
        snapshot_rows = sum(1 for r in records if b'"op":"snapshot"' in r.value)
        assert snapshot_rows >= sum(ROWS.values())
        folded = fold(records)
        expected = source_tables(pg_dsn, schema)
        for table in COLUMNS:
            if folded[table] != expected[table]:
                pytest.fail(_explain(table, folded[table], expected[table], records), pytrace=False)
        assert any(v and len(v) > 2000 for _, v, _ in expected["docs"])  # TOAST was there
        assert any(int(i) < 0 for i, _, _ in expected["docs"])  # and moved keys
    finally:
        for daemon in daemons:
            if daemon.process.poll() is None:
                daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

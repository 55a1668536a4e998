"""IBM delimited, PostgreSQL → ``walcast run`` → Kafka → Spark normalize + materialize.

The two cases the differential soak (``bench/soak.py``) found, through the real chain:

* ``docs`` (REPLICA IDENTITY DEFAULT) has two TOASTed columns that an UPDATE does not
  change: PostgreSQL sends neither; the record names both in its identifier, and the
  materialized row keeps both values (none becomes NULL).
* ``layouts`` goes through ADD COLUMN then DROP COLUMN, which brings the field count
  back; one transaction holds records of two layouts, and one row written under the
  first layout is never touched again. Every record is read with the layout it names.

Both materialized tables must equal ``SELECT *`` of the source, value for value.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from psycopg import sql

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from capture.replication.slots import source_identity
from pipeline.lineage import LINEAGE_NAMES
from pipeline.materialize import MaterializeJob, read_table
from pipeline.normalize import NormalizeJob
from tests.support import scenario as sc

pytestmark = pytest.mark.integration

TABLES = ("docs", "layouts")
BIG = 6000
"""Bytes of a TOASTed value (stored out of line: the columns have STORAGE EXTERNAL)."""

SCHEMA_SQL = """
CREATE TABLE {s}.docs (id int PRIMARY KEY, title text, body text, summary text);
ALTER TABLE {s}.docs ALTER COLUMN title SET STORAGE EXTERNAL,
                     ALTER COLUMN summary SET STORAGE EXTERNAL;
CREATE TABLE {s}.layouts (id int PRIMARY KEY, a text, b text);
"""

CHANGES = [
    # two TOASTed columns, then updates that send neither (or only one) of them
    (
        "INSERT INTO {s}.docs SELECT i, repeat('t' || i, {big}), 'body', "
        "repeat('s' || i, {big}) FROM generate_series(1, 3) i"
    ),
    "UPDATE {s}.docs SET body = 'new body' WHERE id = 1",
    "UPDATE {s}.docs SET body = NULL WHERE id = 2",
    "UPDATE {s}.docs SET body = 'b3', summary = 'short' WHERE id = 3",
    # layout 1: (id, a, b)
    "INSERT INTO {s}.layouts VALUES (1, 'a1', 'b1'), (2, 'a2', 'b2'), (5, 'a5', 'b5')",
    # layout 2: (id, a, b, c)
    "ALTER TABLE {s}.layouts ADD COLUMN c int",
    "INSERT INTO {s}.layouts VALUES (3, 'a3', 'b3', 3)",
    "UPDATE {s}.layouts SET b = 'B1' WHERE id = 1",
    # layout 3: (id, b, c), the field count of layout 1; one transaction, two layouts
    (
        "BEGIN; UPDATE {s}.layouts SET c = 22 WHERE id = 2; "
        "ALTER TABLE {s}.layouts DROP COLUMN a; "
        "INSERT INTO {s}.layouts VALUES (4, 'b4', 4); COMMIT"
    ),
    "UPDATE {s}.layouts SET b = 'B3' WHERE id = 3",
    "DELETE FROM {s}.layouts WHERE id = 1",
]


@dataclass(frozen=True)
class Published:
    prefix: str
    schema: str
    source: str


@pytest.fixture(scope="module")
def published(
    pg_dsn: str, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Published]:
    tag = uuid.uuid4().hex[:8]
    schema, pub, slot, prefix = f"ibm_e2e_{tag}", f"ibm_pub_{tag}", f"ibm_slot_{tag}", f"ibm_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for statement in SCHEMA_SQL.format(s=schema).split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(pub), sql.Identifier(schema)
            )
        )
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--create-slot",
        "--bootstrap-servers", kafka_bootstrap, "--metrics-port", "0",
        "--topic", prefix + ".{format}.{schema}.{table}",
        "--transaction-topic", prefix + ".{format}",
        "--schema-topic", prefix + ".schemas", "--heartbeat-interval", "1",
        "--format", "ibm",
        log_path=tmp_path_factory.mktemp("ibm-e2e") / "run.log",
    )  # fmt: skip
    try:
        _wait_for_loads(daemon)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for statement in CHANGES:
                conn.execute(statement.format(s=schema, big=BIG // 2))
        wait_caught_up(pg_dsn, slot, current_lsn(pg_dsn), daemon)
        assert daemon.stop() == 0, daemon.log()[-3000:]
        key = source_identity(pg_dsn, slot).key
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(pub)))
    yield Published(prefix, schema, key)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    names = k.topics(kafka_bootstrap, prefix + ".")
    if names:
        for future in admin.delete_topics(names).values():
            future.result(timeout=30)


def _wait_for_loads(daemon: RunningDaemon, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while daemon.log().count('"event": "snapshot_table_done"') < len(TABLES):
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        assert time.monotonic() < deadline, daemon.log()[-3000:]
        time.sleep(0.2)


def source_rows(dsn: str, schema: str, table: str) -> tuple[list[str], Counter]:
    """The table as PostgreSQL's output functions print it (libpq text results)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(sc.SESSION)
        query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        result = conn.pgconn.exec_(query.as_bytes(conn))
        columns = [result.fname(i).decode() for i in range(result.nfields)]
        rows = Counter(
            tuple(
                None if (v := result.get_value(r, c)) is None else v.decode()
                for c in range(result.nfields)
            )
            for r in range(result.ntuples)
        )
    return columns, rows


def test_materialized_tables_equal_the_source(
    published: Published, spark, pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = published.prefix
    topics = [t for t in k.topics(kafka_bootstrap, prefix + ".ibm") if t != prefix + ".schemas"]
    assert topics, "no ibm topics"
    changes = str(tmp_path / "changes")
    normalize = NormalizeJob(
        bootstrap=kafka_bootstrap, topics=topics, format="ibm", output=changes,
        checkpoint=str(tmp_path / "normalize-ckpt"), layout_topic=prefix + ".schemas",
        available_now=True,
    )  # fmt: skip
    normalize.run(spark)
    assert normalize.totals.reasons == {}, "every record has its layout"
    assert normalize.totals.written == 15
    state = str(tmp_path / "state")
    MaterializeJob(
        normalized=changes, state=state, checkpoint=str(tmp_path / "materialize-ckpt"),
        bootstrap=kafka_bootstrap, layout_topic=prefix + ".schemas", typed=False,
        available_now=True,
    ).run(spark)  # fmt: skip
    wrong = {}
    for table in TABLES:
        columns, expected = source_rows(pg_dsn, published.schema, table)
        frame = read_table(spark, state, published.schema, table, source=published.source)
        assert sorted(frame.columns) == sorted([*columns, *LINEAGE_NAMES]), table
        got = Counter(tuple(row[c] for c in columns) for row in frame.collect())
        if got != expected:
            wrong[table] = (_short(expected - got), _short(got - expected))
    assert wrong == {}, "(missing rows, unexpected rows) per table"


def _short(rows: Counter) -> list[tuple]:
    """Rows with long values cut, for a readable assertion message."""
    return [
        tuple(v if v is None or len(v) <= 12 else f"{v[:8]}…({len(v)})" for v in row)
        for row in sorted(rows, key=str)
    ]

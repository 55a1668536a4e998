"""A real Debezium PostgreSQL connector's topics → ``spark normalize --format debezium`` →
``materialize``: the tables equal ``SELECT *``.

The real connector (3.6.1.Final, :mod:`tests.support.debezium_reference`) reads two slots
created before the workload, once with ``schemas.enable=false`` and once with ``true``
(``skipped.operations=none``, so truncates come through). Its records are written to Kafka
topics of this module's own as Kafka Connect writes them (key, value, a null value for a
tombstone). The schema-less topic is read with layout records this module publishes from
the catalog (a Debezium value without schema does not say a column's type); the
schema form needs none.

Tables: ``typed`` (the types Debezium round-trips), ``docs`` (unchanged TOAST),
``events_full`` (no key, REPLICA IDENTITY FULL), ``scratch`` (truncated). ``lossy``
holds what Debezium changes or drops (module docstring of
``pipeline.formats.debezium.decode_values``): its materialized rows are checked against those
documented differences, not against ``SELECT *``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pipeline.lineage import LINEAGE_NAMES
from pipeline.materialize import MaterializeJob, read_table
from pipeline.normalize import NormalizeJob
from tests.support import scenario as sc
from tests.support.debezium_reference import run_reference

pytestmark = pytest.mark.integration

SCHEMA = "dbz_spark"
TABLES = ("typed", "docs", "events_full", "scratch")
DDL = """
CREATE TABLE typed (
    id bigint PRIMARY KEY, c_int2 smallint, c_int4 integer, c_numeric numeric,
    c_num12 numeric(12, 2), c_num38 numeric(38, 10), c_float4 real, c_float8 double precision,
    c_bool boolean, c_text text, c_varchar varchar(20), c_char char(5), c_bytea bytea,
    c_date date, c_time time, c_time3 time(3), c_ts timestamp, c_ts3 timestamp(3),
    c_tstz timestamptz, c_interval interval, c_uuid uuid, c_json json, c_jsonb jsonb,
    c_inet inet, c_int_arr integer[], c_text_arr text[], c_bool_arr boolean[],
    c_tstz_arr timestamptz[], c_point point, c_bit bit(4)
);
CREATE TABLE docs (id integer PRIMARY KEY, title text, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE events_full (at timestamptz NOT NULL, kind text, n integer);
ALTER TABLE events_full REPLICA IDENTITY FULL;
CREATE TABLE scratch (id integer PRIMARY KEY, v text);
CREATE TABLE lossy (
    id integer PRIMARY KEY, c_money money, c_line line, c_tsq tsquery, c_timetz timetz,
    c_months interval, c_nan numeric, c_name name, c_varbit bit varying(8)
);
"""
WORKLOAD = [
    """INSERT INTO typed VALUES
    (1, -32768, 2147483647, 12345678901234567890.123456789, 1234567890.12,
     1234567890123456789012345678.0123456789, 1.5, -2.25e-5, true, 'a "quoted"\\ text',
     'varchar', 'ab', '\\x00ff00deadbeef', '2024-02-29', '23:59:59.999999', '12:34:56.789',
     '2024-02-29 13:45:01.123456', '2024-02-29 13:45:01.5', '2024-02-29 13:45:01.1234+02',
     '3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"b": 2, "a": 1}',
     '{"a": [1, null]}', '192.168.0.1/24', '{1,NULL,-3}', '{"a b","c,d","e\\"f",NULL,"NULL",""}',
     '{t,f}', '{"2024-01-01 00:00:00+00",infinity}', '(1.5,-2)', B'1010')""",
    """INSERT INTO typed VALUES
    (2, 0, 0, -0.000001, -0.01, -0.0000000001, 'NaN', 'Infinity', false, '', NULL, 'x',
     '\\x', '1970-01-01', '24:00:00', '00:00:00', '1970-01-01 00:00:00', '1999-12-31 23:59:59',
     '1970-01-01 00:00:00.5+00', '-1 days -02:00:00', NULL, 'null', '[]', '::1', '{}', '{}',
     '{}', '{}', '(0,0)', B'0000')""",
    "INSERT INTO typed (id, c_numeric, c_text) VALUES (3, 100, 'three'), (4, 5, 'four')",
    "UPDATE typed SET c_text = 'updated', c_num12 = 99.99 WHERE id = 3",
    "DELETE FROM typed WHERE id = 4",
    "UPDATE typed SET id = 5 WHERE id = 3",
    (
        "INSERT INTO docs SELECT g, 'title ' || g, repeat('body' || g, 3000) "
        "FROM generate_series(1, 3) g"
    ),
    "UPDATE docs SET title = 'changed' WHERE id = 1",
    "UPDATE docs SET body = 'short now' WHERE id = 2",
    "DELETE FROM docs WHERE id = 3",
    (
        "INSERT INTO events_full VALUES ('2024-01-01 00:00:00+00', 'a', 1), "
        "('2024-01-01 00:00:00+00', 'a', 1), ('2024-01-02 00:00:00+00', 'b', 2)"
    ),
    "DELETE FROM events_full WHERE kind = 'b'",
    "UPDATE events_full SET n = 7 WHERE ctid = (SELECT min(ctid) FROM events_full)",
    "INSERT INTO scratch VALUES (1, 'gone'), (2, 'gone')",
    "TRUNCATE scratch",
    "INSERT INTO scratch VALUES (3, 'kept')",
    """INSERT INTO lossy VALUES (1, 12.34, '{1,-1,0}', 'fat & rat', '10:15:01.5+02',
       '1 mon 2 days', 'NaN', 'a name', B'0101')""",
]
"""Each statement its own transaction."""


@dataclass(frozen=True)
class Produced:
    dsn: str
    prefix: str
    plain_topics: list[str]
    schema_topics: list[str]
    layout_topic: str


def _layout_records(conn: psycopg.Connection, table: str) -> dict[str, object]:
    """A walcast layout record of ``table`` from the catalog (what ``walcast run`` publishes)."""
    rows = conn.execute(
        """SELECT a.attnum, a.attname, t.typname, format_type(a.atttypid, a.atttypmod),
                  coalesce(a.attnum = ANY(i.indkey), false)
           FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
           LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY a.attnum""",
        (f"{SCHEMA}.{table}",),
    ).fetchall()
    columns = [
        {"position": n, "name": name, "type": typ, "declared_type": declared, "key": pk,
         "primary_key": pk}
        for n, name, typ, declared, pk in rows
    ]  # fmt: skip
    return {
        "format": "ibm", "schema": SCHEMA, "table": table, "columns": columns,
        "primary_key": [c["name"] for c in columns if c["primary_key"]],
    }  # fmt: skip


def _produce(bootstrap: str, records: list[tuple[str, str | None, str | None]]) -> list[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, key, value in records:
        producer.produce(
            topic,
            key=None if key is None else key.encode(),
            value=None if value is None else value.encode(),
        )
    assert producer.flush(60) == 0
    return sorted({t for t, _, _ in records})


@pytest.fixture(scope="module")
def produced(pg_dsn: str, kafka_bootstrap: str, tmp_path_factory) -> Iterator[Produced]:
    tag = uuid.uuid4().hex[:8]
    database = f"walcast_dbzs_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = make_conninfo(pg_dsn, dbname=database)
    publication, slots = f"dbzs_pub_{tag}", (f"dbzs_plain_{tag}", f"dbzs_schema_{tag}")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(SCHEMA)))
            conn.execute(DDL)
            conn.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                    sql.Identifier(publication), sql.Identifier(SCHEMA)
                )
            )
            for slot in slots:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            conn.execute("SET synchronous_commit = on")
            for statement in WORKLOAD:
                conn.execute(statement)
            layouts = [_layout_records(conn, t) for t in (*TABLES, "lossy")]
        prefix = f"dbzs{tag}"
        topics: dict[bool, list[str]] = {}
        for schemas, slot in zip((False, True), slots, strict=True):
            output = run_reference(
                dsn, slot, publication, topic_prefix=prefix, schemas=schemas,
                idle_timeout=15, properties={"skipped.operations": "none"},
                workdir=tmp_path_factory.mktemp(slot),
            )  # fmt: skip
            form = "schema" if schemas else "plain"
            topics[schemas] = _produce(
                kafka_bootstrap,
                [(f"{r.topic}.{form}", r.key_text, r.value_text) for r in output],
            )
        layout_topic = f"{prefix}.layouts"
        _produce(
            kafka_bootstrap,
            [(layout_topic, f"{SCHEMA}.{lay['table']}", json.dumps(lay)) for lay in layouts],
        )
        yield Produced(dsn, prefix, topics[False], topics[True], layout_topic)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for slot in slots:
                sc.drop_slot(conn, slot)
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )


FLOAT_OIDS = {700, 701}


def _number(text: str) -> float | str:
    value = float(text)
    return "NaN" if math.isnan(value) else value


def source_rows(dsn: str, table: str) -> tuple[list[str], Counter]:
    """``SELECT *`` as PostgreSQL's output functions print it (TimeZone UTC, ISO);
    floats as numbers (Java's ``1.0E10`` is PostgreSQL's ``10000000000``)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(sc.SESSION)
        result = conn.pgconn.exec_(f"SELECT * FROM {SCHEMA}.{table}".encode())
        columns = [result.fname(i).decode() for i in range(result.nfields)]
        floats = {i for i in range(result.nfields) if result.ftype(i) in FLOAT_OIDS}
        rows = []
        for r in range(result.ntuples):
            row = []
            for c in range(result.nfields):
                raw = result.get_value(r, c)
                text = None if raw is None else raw.decode()
                row.append(_number(text) if c in floats and text is not None else text)
            rows.append(tuple(row))
    return columns, Counter(rows)


def materialized(spark, state: str, table: str, columns: list[str], floats: set[str]) -> Counter:
    frame = read_table(spark, state, SCHEMA, table).drop("_walcast_row_key", *LINEAGE_NAMES)
    assert sorted(frame.columns) == sorted(columns), table
    return Counter(
        tuple(_number(row[c]) if c in floats and row[c] is not None else row[c] for c in columns)
        for row in frame.collect()
    )


def _run_jobs(spark, bootstrap: str, topics: list[str], layout_topic: str, tmp: Path) -> str:
    changes, state = str(tmp / "changes"), str(tmp / "state")
    NormalizeJob(
        bootstrap=bootstrap, topics=topics, format="debezium", output=changes,
        checkpoint=str(tmp / "n-ckpt"), layout_topic=layout_topic, available_now=True,
        report=lambda _line: None,
    ).run(spark)  # fmt: skip
    MaterializeJob(
        normalized=changes, state=state, checkpoint=str(tmp / "m-ckpt"), bootstrap=bootstrap,
        layout_topic=layout_topic, typed=False, available_now=True, report=lambda _line: None,
    ).run(spark)  # fmt: skip
    return state


FLOAT_COLUMNS = {"c_float4", "c_float8"}


@pytest.mark.parametrize("form", ["plain", "schema"])
def test_real_debezium_topics_materialize_to_select_star(
    form: str, produced: Produced, spark, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """schemas.enable=false (types from layout records) and true (types from the events'
    Connect schemas, no layout topic): every table equals ``SELECT *``."""
    topics = produced.plain_topics if form == "plain" else produced.schema_topics
    layout_topic = produced.layout_topic if form == "plain" else ""
    state = _run_jobs(spark, kafka_bootstrap, topics, layout_topic, tmp_path)
    for table in TABLES:
        columns, expected = source_rows(produced.dsn, table)
        got = materialized(spark, state, table, columns, FLOAT_COLUMNS)
        assert got == expected, (
            f"{form} {table}: missing {list((expected - got).items())[:3]}, "
            f"unexpected {list((got - expected).items())[:3]}"
        )
    lossy = read_table(spark, state, SCHEMA, "lossy").collect()
    assert len(lossy) == 1
    row = lossy[0].asDict()
    # Debezium drops line and tsquery; name arrives null; NaN numeric is null; timetz
    # keeps only the UTC time; a month is 30.4375 days; money is its number.
    assert row.get("c_line") is None  # absent (schema form) or all null (layout's column)
    assert row.get("c_tsq") is None
    assert (row["c_name"], row["c_nan"]) == (None, None)
    assert row["c_timetz"] == "08:15:01.5+00"
    assert row["c_months"] == "32 days 10:30:00"
    assert row["c_money"] == "12.34"
    # varbit: Debezium's bytes lose leading zeros, and its schema gives varbit(8) the
    # length 8 as to a bit(8): told apart by the layout only
    assert row["c_varbit"] == ("101" if form == "plain" else "00000101")

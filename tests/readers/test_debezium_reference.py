"""The Debezium reference harness (:mod:`tests.support.debezium_reference`) on the real server.

The real Debezium PostgreSQL connector 3.6.1.Final (embedded engine, pgoutput, JsonConverter)
reads slots created before each workload, in a database of this module's own; the tests pin
what it emits: ops ``c``/``u``/``d``/``r``/``t``, keys, tombstones, before images under
REPLICA IDENTITY DEFAULT and FULL, the ``source`` block, Connect schemas, load rows,
transaction metadata and heartbeats, and, over the whole capture scenario
(``tests/data/scenario_*.sql``), one record per change in test_decoding's order with every
column of every type present. These are the facts walcast's ``debezium`` format is held to.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from decimal import Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.readers import reference
from tests.support import scenario as sc
from tests.support import test_decoding
from tests.support.debezium_reference import (
    VERSION,
    DebeziumRecord,
    parse_line,
    run_reference,
)

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]

PREFIX = "wdbz"
SCHEMA = "dbz_ref"
PLACEHOLDER = "__debezium_unavailable_value"
EPOCH_DATE = dt.date(1970, 1, 1)


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture(scope="module")
def dbz_dsn(pg_dsn: str) -> Iterator[str]:
    """A database of this module's own (dropped afterwards, with its slots)."""
    name = f"walcast_dbz_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(pg_dsn, dbname=name)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
            ).fetchall():
                sc.drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _fresh_schema(dsn: str, schema: str, ddl: str) -> str:
    """Create ``schema`` with ``ddl``, its publication and one pgoutput slot; the slot's name."""
    tag = uuid.uuid4().hex[:8]
    slot = f"dbz_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(f"SET search_path = {schema}")
        conn.execute(ddl)
        conn.execute(
            sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(f"{schema}_pub"))
        )
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(f"{schema}_pub"), sql.Identifier(schema)
            )
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    return slot


def _run(dsn: str, schema: str, statements: list[str]) -> None:
    """Each statement (or ``BEGIN; ...; COMMIT`` block) in its own transaction, flushed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(f"SET search_path = {schema}")
        for statement in statements:
            conn.execute(statement)


def _decimal(value: str, scale: int) -> str:
    """Kafka Connect's Decimal: the unscaled value as BigInteger.toByteArray, base64."""
    with localcontext(Context(prec=200)):
        unscaled = int(Decimal(value).scaleb(scale))
    magnitude = unscaled if unscaled >= 0 else -unscaled - 1
    raw = unscaled.to_bytes((magnitude.bit_length() + 8) // 8, "big", signed=True)
    return base64.b64encode(raw).decode()


def _changes(records: list[DebeziumRecord]) -> list[tuple[str, str | None, Any, Any, Any]]:
    """(table, op or None for a tombstone, key, before, after) of each record."""
    out = []
    for r in records:
        table = r.topic.rsplit(".", 1)[1]
        if r.value is None:
            out.append((table, None, r.key, None, None))
        else:
            out.append((table, r.value["op"], r.key, r.value["before"], r.value["after"]))
    return out


# ------------------------------------------------------------------ streaming

ITEMS_DDL = """
CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10, 2));
CREATE TABLE items_full (id int PRIMARY KEY, name text, price numeric(10, 2));
ALTER TABLE items_full REPLICA IDENTITY FULL;
CREATE TABLE log_full (at timestamptz, msg text);
ALTER TABLE log_full REPLICA IDENTITY FULL;
"""
ITEMS_WORK = [
    (
        "BEGIN; INSERT INTO items VALUES (1, 'a', 1.50), (2, 'b', NULL); "
        "INSERT INTO items_full VALUES (1, 'a', -2.25); COMMIT"
    ),
    "UPDATE items SET name = 'a2' WHERE id = 1",
    "UPDATE items_full SET name = 'a2', price = 3 WHERE id = 1",
    "UPDATE items SET id = 20 WHERE id = 2",
    "DELETE FROM items WHERE id = 1",
    "DELETE FROM items_full WHERE id = 1",
    "INSERT INTO log_full VALUES ('2024-01-01 00:00:00+00', 'hi')",
    "DELETE FROM log_full",
]


def _items_expected() -> list[tuple[str, str | None, Any, Any, Any]]:
    one, neg, three = _decimal("1.50", 2), _decimal("-2.25", 2), _decimal("3", 2)
    k1, k2, k20 = {"id": 1}, {"id": 2}, {"id": 20}
    log_row = {"at": "2024-01-01T00:00:00.000000Z", "msg": "hi"}
    return [
        ("items", "c", k1, None, {"id": 1, "name": "a", "price": one}),
        ("items", "c", k2, None, {"id": 2, "name": "b", "price": None}),
        ("items_full", "c", k1, None, {"id": 1, "name": "a", "price": neg}),
        # DEFAULT: no old image on update
        ("items", "u", k1, None, {"id": 1, "name": "a2", "price": one}),
        # FULL: the whole old row
        (
            "items_full", "u", k1,
            {"id": 1, "name": "a", "price": neg}, {"id": 1, "name": "a2", "price": three},
        ),
        # key change: delete of the old key (key columns only), its tombstone, create
        ("items", "d", k2, {"id": 2, "name": None, "price": None}, None),
        ("items", None, k2, None, None),
        ("items", "c", k20, None, {"id": 20, "name": "b", "price": None}),
        ("items", "d", k1, {"id": 1, "name": None, "price": None}, None),
        ("items", None, k1, None, None),
        ("items_full", "d", k1, {"id": 1, "name": "a2", "price": three}, None),
        ("items_full", None, k1, None, None),
        # no primary key: null key, and a tombstone all the same
        ("log_full", "c", None, None, log_row),
        ("log_full", "d", None, log_row, None),
        ("log_full", None, None, None, None),
    ]  # fmt: skip


def test_streaming_ops_keys_tombstones_and_images(dbz_dsn: str, tmp_path: Path) -> None:
    schema = f"{SCHEMA}_stream"
    slot = _fresh_schema(dbz_dsn, schema, ITEMS_DDL)
    _run(dbz_dsn, schema, ITEMS_WORK)
    expected = _items_expected()
    output = run_reference(
        dbz_dsn, slot, f"{schema}_pub", topic_prefix=PREFIX, max_records=len(expected),
        properties={"schema.include.list": schema}, workdir=tmp_path,
    )  # fmt: skip
    records = list(output)
    assert [r.topic for r in records] == [f"{PREFIX}.{schema}.{e[0]}" for e in expected]
    assert _changes(records) == expected

    events = [r for r in records if r.value is not None]
    database = conninfo_to_dict(dbz_dsn)["dbname"]
    for r in events:
        value = r.value
        assert list(value) == [
            "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns",
        ]  # fmt: skip
        assert value["transaction"] is None
        source = value["source"]
        assert list(source) == [
            "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us",
            "ts_ns", "schema", "table", "txId", "lsn", "xmin", "origin", "origin_lsn",
        ]  # fmt: skip
        assert (source["version"], source["connector"], source["name"]) == (
            VERSION, "postgresql", PREFIX,
        )  # fmt: skip
        assert (source["snapshot"], source["db"], source["schema"]) == ("false", database, schema)
        assert source["table"] == r.topic.rsplit(".", 1)[1]
        assert (source["xmin"], source["origin"], source["origin_lsn"]) == (None, None, None)
        # commit time in ms/us/ns; the envelope's own ts_* is the connector's clock
        assert source["ts_ms"] == source["ts_us"] // 1000
        assert source["ts_ns"] == source["ts_us"] * 1000
        assert value["ts_ms"] == value["ts_us"] // 1000
        assert value["ts_ms"] >= source["ts_ms"]
        last_commit, lsn = json.loads(source["sequence"])
        assert lsn == str(source["lsn"])
        assert last_commit is None or int(last_commit) <= source["lsn"]
    # one transaction: one txId and commit time; the first one seen has no last commit LSN
    first_tx = events[:3]
    assert len({e.value["source"]["txId"] for e in first_tx}) == 1
    assert len({e.value["source"]["ts_us"] for e in first_tx}) == 1
    assert all(json.loads(e.value["source"]["sequence"])[0] is None for e in first_tx)
    lsns = [e.value["source"]["lsn"] for e in events]
    assert lsns == sorted(lsns)
    # the key change's delete and create are one change: same LSN
    key_change = [e for e in events if e.key in ({"id": 2}, {"id": 20}) and e.value["op"] != "c"]
    create_20 = next(e for e in events if e.key == {"id": 20})
    assert key_change[0].value["source"]["lsn"] == create_20.value["source"]["lsn"]
    # JsonConverter's bytes are kept verbatim
    assert records[0].key_text == '{"id":1}'
    assert records[0].value_text is not None
    assert records[0].value_text.startswith('{"before":null,"after":{"id":1,"name":"a","price":')


def test_schemas_enabled_envelope(dbz_dsn: str, tmp_path: Path) -> None:
    schema = f"{SCHEMA}_schemas"
    slot = _fresh_schema(dbz_dsn, schema, ITEMS_DDL)
    _run(dbz_dsn, schema, ["INSERT INTO items VALUES (1, 'a', 1.50)", "DELETE FROM items"])
    output = run_reference(
        dbz_dsn, slot, f"{schema}_pub", topic_prefix=PREFIX, schemas=True, max_records=3,
        properties={"schema.include.list": schema}, workdir=tmp_path,
    )  # fmt: skip
    create, delete, tombstone = list(output)
    base = f"{PREFIX}.{schema}.items"
    assert create.key == {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
            "optional": False,
            "name": f"{base}.Key",
        },
        "payload": {"id": 1},
    }
    envelope = create.value["schema"]
    assert (envelope["name"], envelope["version"], envelope["optional"]) == (
        f"{base}.Envelope", 2, False,
    )  # fmt: skip
    fields = {f["field"]: f for f in envelope["fields"]}
    assert list(fields) == [
        "before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns",
    ]  # fmt: skip
    assert fields["before"]["name"] == fields["after"]["name"] == f"{base}.Value"
    assert fields["source"]["name"] == "io.debezium.connector.postgresql.Source"
    assert fields["transaction"]["name"] == "event.block"
    price = next(f for f in fields["after"]["fields"] if f["field"] == "price")
    assert price == {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "price",
    }
    assert create.payload["after"] == {"id": 1, "name": "a", "price": _decimal("1.50", 2)}
    assert delete.payload["op"] == "d"
    # a tombstone keeps its key's schema; its value is a plain null
    assert tombstone.key == delete.key
    assert tombstone.value is None
    assert tombstone.value_text is None


# ------------------------------------------------------------------ load rows


def test_initial_load_rows(dbz_dsn: str, tmp_path: Path) -> None:
    schema = f"{SCHEMA}_load"
    ddl = (
        "CREATE TABLE a (id int PRIMARY KEY, v text); "
        "INSERT INTO a VALUES (1, 'x'), (2, 'y'), (3, 'z'); "
        "CREATE TABLE b (id int PRIMARY KEY, v numeric(5, 2)); "
        "INSERT INTO b VALUES (1, 1.5), (2, -2.5); "
        "CREATE TABLE empty (id int PRIMARY KEY)"
    )
    slot = _fresh_schema(dbz_dsn, schema, ddl)
    output = run_reference(
        dbz_dsn, slot, f"{schema}_pub", topic_prefix=PREFIX, snapshot_mode="initial",
        max_records=5, properties={"schema.include.list": schema}, workdir=tmp_path,
    )  # fmt: skip
    records = list(output)
    rows = {(r.topic.rsplit(".", 1)[1], r.key["id"]): r.value["after"]["v"] for r in records}
    assert rows == {
        ("a", 1): "x", ("a", 2): "y", ("a", 3): "z",
        ("b", 1): _decimal("1.5", 2), ("b", 2): _decimal("-2.5", 2),
    }  # fmt: skip
    assert {r.value["op"] for r in records} == {"r"}
    assert all(r.value["before"] is None and r.value["transaction"] is None for r in records)
    # each table's rows together; markers: first / true / last_in_data_collection /
    # first_in_data_collection / last
    tables = [r.value["source"]["table"] for r in records]
    order = list(dict.fromkeys(tables))
    assert sorted(order) == ["a", "b"]
    sizes = {"a": 3, "b": 2}
    assert tables == [t for t in order for _ in range(sizes[t])]
    want = []
    for i, table in enumerate(order):
        for j in range(sizes[table]):
            if i == 0 and j == 0:
                want.append("first")
            elif i == len(order) - 1 and j == sizes[table] - 1:
                want.append("last")
            elif j == 0:
                want.append("first_in_data_collection")
            elif j == sizes[table] - 1:
                want.append("last_in_data_collection")
            else:
                want.append("true")
    assert [r.value["source"]["snapshot"] for r in records] == want
    # one snapshot transaction, one LSN, no last commit
    sources = [r.value["source"] for r in records]
    assert len({(s["txId"], s["lsn"], s["ts_us"]) for s in sources}) == 1
    assert json.loads(sources[0]["sequence"]) == [None, str(sources[0]["lsn"])]


# ------------------------------------------------------------------ metadata


def test_transaction_metadata_truncate_and_heartbeats(dbz_dsn: str, tmp_path: Path) -> None:
    schema = f"{SCHEMA}_tx"
    slot = _fresh_schema(dbz_dsn, schema, ITEMS_DDL)
    _run(dbz_dsn, schema, [
        (
            "BEGIN; INSERT INTO items VALUES (1, 'a', 1); "
            "INSERT INTO items_full VALUES (1, 'a', 1); "
            "INSERT INTO items VALUES (2, 'b', 2); COMMIT"
        ),
        "TRUNCATE items, items_full",
    ])  # fmt: skip
    output = run_reference(
        dbz_dsn, slot, f"{schema}_pub", topic_prefix=PREFIX, idle_timeout=4,
        properties={
            "schema.include.list": schema,
            "provide.transaction.metadata": "true",
            "skipped.operations": "none",
            "heartbeat.interval.ms": "200",
        },
        workdir=tmp_path,
    )  # fmt: skip
    records = list(output)
    heartbeats = [r for r in records if r.topic == f"__debezium-heartbeat.{PREFIX}"]
    assert heartbeats, "no heartbeat in 4 s at heartbeat.interval.ms=200"
    for beat in heartbeats:
        assert beat.key == {"serverName": PREFIX}
        assert list(beat.value) == ["ts_ms"]
        assert isinstance(beat.value["ts_ms"], int)
    rest = [r for r in records if not r.topic.startswith("__debezium-heartbeat")]
    kinds = [
        r.value["status"] if r.topic == f"{PREFIX}.transaction" else r.value["op"] for r in rest
    ]
    assert kinds == ["BEGIN", "c", "c", "c", "END", "BEGIN", "t", "t", "END"]

    begin, c1, c2, c3, end = rest[:5]
    xid = c1.value["source"]["txId"]
    lsn = c1.value["source"]["lsn"]
    assert begin.key == {"id": f"{xid}:{lsn}"}
    assert begin.value == {
        "status": "BEGIN",
        "id": f"{xid}:{lsn}",
        "event_count": None,
        "data_collections": None,
        "ts_ms": c1.value["source"]["ts_ms"],
    }
    # each event's transaction id carries its own LSN
    blocks = [e.value["transaction"] for e in (c1, c2, c3)]
    assert blocks == [
        {"id": f"{xid}:{e.value['source']['lsn']}", "total_order": n, "data_collection_order": d}
        for e, n, d in ((c1, 1, 1), (c2, 2, 1), (c3, 3, 2))
    ]
    end_id = end.value["id"]
    assert end.key == {"id": end_id}
    end_xid, end_lsn = end_id.split(":")
    assert int(end_xid) == xid
    assert int(end_lsn) > c3.value["source"]["lsn"]
    assert (end.value["status"], end.value["event_count"]) == ("END", 3)
    assert sorted(end.value["data_collections"], key=lambda d: d["data_collection"]) == [
        {"data_collection": f"{schema}.items", "event_count": 2},
        {"data_collection": f"{schema}.items_full", "event_count": 1},
    ]
    # the next transaction's last commit LSN is this END's LSN
    t1, t2 = rest[6:8]
    assert json.loads(t1.value["source"]["sequence"])[0] == end_lsn
    # truncate: one event per table, same LSN, null key and images
    assert {t.topic.rsplit(".", 1)[1] for t in (t1, t2)} == {"items", "items_full"}
    for t in (t1, t2):
        assert (t.key, t.value["before"], t.value["after"]) == (None, None, None)
    assert t1.value["source"]["lsn"] == t2.value["source"]["lsn"]


def test_missing_publication_fails_loudly(dbz_dsn: str, tmp_path: Path) -> None:
    schema = f"{SCHEMA}_nopub"
    slot = _fresh_schema(dbz_dsn, schema, "CREATE TABLE t (id int PRIMARY KEY)")
    with pytest.raises(pytest.fail.Exception, match="exited 1") as failed:
        run_reference(
            dbz_dsn, slot, "walcast_no_such_publication", max_records=1, timeout=120,
            properties={"schema.include.list": schema}, workdir=tmp_path,
        )  # fmt: skip
    assert "connector failed" in str(failed.value)
    assert "Publication autocreation is disabled" in str(failed.value)


def test_parse_line_keeps_converter_text() -> None:
    line = '{"topic":"p.s.t","key":{"id":1},"value":{"after":{"f":1.0E-5,"g":"NaN"}}}'
    record = parse_line(line)
    assert (record.topic, record.key, record.key_text) == ("p.s.t", {"id": 1}, '{"id":1}')
    assert record.value_text == '{"after":{"f":1.0E-5,"g":"NaN"}}'
    assert record.value == {"after": {"f": 1e-5, "g": "NaN"}}
    tombstone = parse_line('{"topic":"p.s.t","key":null,"value":null}')
    assert (tombstone.key, tombstone.value, tombstone.value_text) == (None, None, None)
    with pytest.raises(ValueError, match="trailing"):
        parse_line('{"topic":"p","key":null,"value":null}x')


# ------------------------------------------------------------------ the capture scenario


def _scenario_sql(dsn: str, name: str, schema: str) -> None:
    script = (sc.DATA / name).read_text().replace(sc.SCHEMA, schema)
    done = subprocess.run(
        [sc.psql_path(), dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"],
        input=script,
        text=True,
        capture_output=True,
        check=False,
        timeout=600,
        env={**os.environ, "PGOPTIONS": "-c synchronous_commit=on"},
    )
    assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"


def _expected_records(
    changes: list[test_decoding.Change], tables: dict[str, reference.RefTable]
) -> Iterator[tuple[str, str | None, dict[str, Any] | None]]:
    """(table, op or None for a tombstone, key) Debezium emits for each decoded change,
    with its defaults (tombstones on delete, truncates skipped)."""
    for change in changes:
        key_columns = tables[change.table].primary_key
        if change.op == "truncate":
            continue
        if change.op == "insert":
            assert change.after is not None
            yield change.table, "c", _key(key_columns, change.after)
            continue
        if change.op == "delete":
            assert change.before is not None
            key = _key(key_columns, change.before)
            yield change.table, "d", key
            yield change.table, None, key
            continue
        assert change.after is not None
        new_key = _key(key_columns, change.after)
        old_key = _key(key_columns, change.before) if change.before else new_key
        if key_columns and old_key != new_key:
            yield change.table, "d", old_key
            yield change.table, None, old_key
            yield change.table, "c", new_key
        else:
            yield change.table, "u", new_key


def scenario_workload(
    dsn: str, schema: str, td_slot: str
) -> tuple[
    dict[str, reference.RefTable],
    list[test_decoding.Change],
    list[tuple[str, str | None, dict[str, Any] | None]],
]:
    """Run the capture scenario's changes in ``schema``: its tables, the changes PostgreSQL
    decoded and the records Debezium is expected to write for them.

    The expectation comes from ``td_slot`` (test_decoding, created before the workload), as
    PostgreSQL itself decoded the same WAL.
    """
    _scenario_sql(dsn, "scenario_changes.sql", schema)
    _scenario_sql(dsn, "scenario_stream.sql", schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sc.SESSION)
        lines = [
            row[0]
            for row in conn.execute(
                "SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, 'include-xids', "
                "'1', 'include-timestamp', '1', 'skip-empty-xacts', '1')",
                (td_slot,),
            )
        ]
        tables = reference.catalog_tables(conn, schema)
    changes = test_decoding.parse(lines, schema=schema)
    return tables, changes, list(_expected_records(changes, tables))


def _key(columns: tuple[str, ...], image: dict[str, Any]) -> dict[str, Any] | None:
    return {c: int(image[c]) for c in columns} if columns else None


def test_capture_scenario_every_type(dbz_dsn: str, tmp_path: Path) -> None:
    schema = "dbz_scenario"
    _scenario_sql(dbz_dsn, "scenario_schema.sql", schema)
    tag = uuid.uuid4().hex[:8]
    publication, slot, td_slot = f"dbz_scn_pub_{tag}", f"dbz_scn_{tag}", f"dbz_scn_td_{tag}"
    with psycopg.connect(dbz_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(publication), sql.Identifier(schema)
            )
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (td_slot,))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    tables, changes, expected = scenario_workload(dbz_dsn, schema, td_slot)

    output = run_reference(
        dbz_dsn, slot, publication, topic_prefix=PREFIX, max_records=len(expected),
        idle_timeout=60, properties={"schema.include.list": schema}, workdir=tmp_path,
    )  # fmt: skip
    assert output.count == len(expected)
    columns = {name: [c.name for c in table.columns] for name, table in tables.items()}
    all_types: dict[int, dict[str, Any]] = {}
    toast_updates = [c for c in changes if c.op == "update" and c.unchanged_toast]
    placeholders: list[list[str]] = []
    for index, (record, (table, op, key)) in enumerate(zip(output, expected, strict=True)):
        got = (record.topic, record.value["op"] if record.value else None, record.key)
        assert got == (f"{PREFIX}.{schema}.{table}", op, key), index
        if record.value is None:
            continue
        value = record.value
        image = value["after"] if value["after"] is not None else value["before"]
        # every column of every type is in the event, in the table's order
        assert list(image) == columns[table], (index, table)
        source = value["source"]
        assert (source["schema"], source["table"], source["snapshot"]) == (schema, table, "false")
        # old images: FULL carries the whole row; DEFAULT none on update, the key on delete
        before, key_columns = value["before"], tables[table].primary_key
        if op == "u":
            assert (before is not None) == tables[table].full, index
        if op == "d" and not tables[table].full:
            assert [k for k, v in before.items() if v is not None] == list(key_columns), index
        if table == "all_types" and op == "c":
            all_types[value["after"]["id"]] = value["after"]
        if op == "u":
            placeholders.append([k for k, v in value["after"].items() if v == PLACEHOLDER])
    # an unchanged TOAST value is the placeholder
    assert [p for p in placeholders if p] == [c.unchanged_toast for c in toast_updates]
    _check_type_renderings(all_types)


def _check_type_renderings(rows: dict[int, dict[str, Any]]) -> None:
    """How Debezium 3.6.1 renders the scenario's types with its default modes."""
    one, two, three = rows[1], rows[2], rows[3]
    # numeric(38,10) precise: Connect Decimal (unscaled two's complement, base64)
    assert one["c_num38"] == _decimal("1234567890123456789012345678.0123456789", 10)
    assert two["c_num38"] == _decimal("-0.0000000001", 10)
    # numeric without typmod: VariableScaleDecimal {scale, value}; NaN and ±Infinity → null
    assert one["c_numeric"] == {
        "scale": 9, "value": _decimal("12345678901234567890.123456789", 9),
    }  # fmt: skip
    assert rows[4]["c_numeric"] == {"scale": 6, "value": _decimal("0.000001", 6)}
    assert rows[5]["c_numeric"] == {"scale": 0, "value": _decimal("100", 0)}
    assert (two["c_numeric"], three["c_numeric"]) == (None, None)
    # money: Decimal with scale 2
    assert (one["c_money"], two["c_money"]) == (_decimal("12.34", 2), _decimal("-0.01", 2))
    # floats: NaN and infinities as strings
    assert (two["c_float4"], two["c_float8"], three["c_float4"]) == ("NaN", "-Infinity", "Infinity")
    # bytea as base64
    assert one["c_bytea"] == base64.b64encode(bytes.fromhex("00ff00deadbeef")).decode()
    # date: days since the epoch; time: microseconds of the day (24:00:00 included)
    assert one["c_date"] == (dt.date(2024, 2, 29) - EPOCH_DATE).days
    assert (one["c_time"], three["c_time"]) == (86_399_999_999, 86_400_000_000)
    # timetz: normalized to UTC, ISO text with the fraction trimmed
    assert (one["c_timetz"], two["c_timetz"], three["c_timetz"]) == (
        "08:15:01.5Z", "03:30:00Z", "00:00:00Z",
    )  # fmt: skip
    # timestamp: microseconds since the epoch; timestamptz: ISO text, always 6 digits, Z
    utc = dt.UTC
    micros = dt.datetime(2024, 2, 29, 13, 45, 1, 123456, tzinfo=utc) - dt.datetime(
        1970, 1, 1, tzinfo=utc
    )
    assert one["c_ts"] == micros // dt.timedelta(microseconds=1)
    assert one["c_tstz"] == "2024-02-29T11:45:01.123456Z"
    assert rows[5]["c_tstz"] == "1970-01-01T00:00:00.500000Z"
    assert two["c_tstz"] == "-infinity"
    # interval numeric: microseconds, a month counted as 30.4375 days
    day_us = 86_400_000_000
    assert one["c_interval"] == int(14 * 30.4375 * day_us) + 3 * day_us + 14_706_789_000
    assert rows[5]["c_interval"] == int(29.4375 * day_us)
    # uuid, json, jsonb, inet/cidr/macaddr, enums, domains, tsvector: PostgreSQL's text
    assert one["c_uuid"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert one["c_json"] == '{"b": 2, "a": [1, "x"], "a": 3}'
    assert one["c_jsonb"] == '{"a": [1, "x", null, true], "b": 2}'
    assert (one["c_inet"], one["c_cidr"], one["c_macaddr"]) == (
        "192.168.0.1/24", "10.1.0.0/16", "08:00:2b:01:02:03",
    )  # fmt: skip
    assert (one["c_mood"], one["c_mood_arr"]) == ("happy", ["sad", 'it\'s "fine"'])
    assert (one["c_posint"], one["c_short"]) == (42, "short")
    assert one["c_tsvector"] == "'a' 'cat' 'fat'"
    # char(n) keeps its padding
    assert one["c_char"] == "ab   "
    # arrays: JSON arrays of the element's rendering
    assert one["c_int_arr"] == [1, None, -3]
    assert one["c_text_arr"] == ["a b", "c,d", 'e"f', None, "NULL", ""]
    assert one["c_ts_arr"] == ["2024-01-01T00:00:00.000000Z", "infinity"]
    # ... a numeric[] holding NaN or ±Infinity is null as a whole; a 2-D array's elements
    # are null (Debezium logs a warning for both)
    assert (one["c_num_arr"], two["c_num_arr"], three["c_num_arr"]) == (None, [], None)
    assert (one["c_2d_arr"], three["c_2d_arr"]) == ([None, None], [7, 8])
    # point: io.debezium.data.geometry.Point {x, y, wkb, srid}
    assert one["c_point"] == {
        "x": 1.5, "y": -2.0, "wkb": "AQEAAAAAAAAAAAD4PwAAAAAAAADA", "srid": None,
    }  # fmt: skip
    # bit varying: the bits as a little-endian number's bytes, base64
    assert (one["c_bit"], two["c_bit"]) == (base64.b64encode(bytes([0b10110])).decode(), "")

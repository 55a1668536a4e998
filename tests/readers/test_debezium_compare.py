"""walcast's ``debezium`` format next to the real Debezium connector, event by event.

Both read the same WAL, the capture scenario (:mod:`tests.readers.debezium_outputs`,
fixture ``debezium_outputs``). Record i of one must equal record i of the other in: topic,
key, op, before, after, and the ``source`` fields that depend neither on the wall clock nor
on the connector's name. Each known difference is a documented decision of
:mod:`capture.formats.debezium.encode` with its own assertion here:

* ``source.lsn`` and ``sequence`` are compared like the rest: both carry the change's own
  WAL position (pgoutput's XLogData start, :attr:`capture.events.ChangeEvent.lsn`), and
  ``sequence`` is ``[previous commit's end, lsn]`` in both.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from capture.formats.base import EncodedMessage
from tests.readers.debezium_outputs import PREFIX, Outputs, walcast_messages
from tests.support import scenario as sc
from tests.support.debezium_reference import DebeziumRecord, run_reference

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]

SAME_SOURCE_FIELDS = (
    "version", "connector", "ts_ms", "snapshot", "db", "ts_us", "ts_ns", "schema", "table",
    "txId", "xmin", "origin", "origin_lsn",
)  # fmt: skip
"""``source`` fields that must be equal (``name`` is the prefix, equal by construction)."""


def _parse(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


def _compare(index: int, ours: EncodedMessage, theirs: DebeziumRecord, found: list[str]) -> None:
    def check(what: str, got: Any, want: Any) -> None:
        if got != want:
            found.append(f"#{index} {theirs.topic} {what}: walcast {got!r}, Debezium {want!r}")

    check("topic", f"{PREFIX}.{ours.schema}.{ours.table}", theirs.topic)
    check("key", _parse(ours.key), theirs.key)
    value = _parse(ours.value)
    if value is None or theirs.value is None:
        check("tombstone", value is None, theirs.value is None)
        return
    check("fields", list(value), list(theirs.value))
    for field in ("op", "before", "after", "transaction"):
        if field in ("before", "after") and value[field] and theirs.value[field]:
            for column in sorted(set(value[field]) | set(theirs.value[field])):
                check(
                    f"{field}.{column}",
                    value[field].get(column, "<absent>"),
                    theirs.value[field].get(column, "<absent>"),
                )
            check(f"{field} columns", list(value[field]), list(theirs.value[field]))
        else:
            check(field, value[field], theirs.value[field])
    source, their_source = value["source"], theirs.value["source"]
    check("source fields", list(source), list(their_source))
    for field in SAME_SOURCE_FIELDS:
        check(f"source.{field}", source[field], their_source[field])
    check("source.name", source["name"], PREFIX)
    check("source.lsn (the change's own position)", source["lsn"], their_source["lsn"])
    if ours.commit_lsn is not None and not source["lsn"] <= ours.commit_lsn:
        found.append(f"#{index}: walcast's lsn {source['lsn']} after its commit's")
    check("source.sequence", json.loads(source["sequence"]), json.loads(their_source["sequence"]))


def test_walcast_writes_what_debezium_writes(debezium_outputs: Outputs) -> None:
    outputs = debezium_outputs
    ours, theirs, expected = outputs.ours, outputs.theirs, outputs.expected
    assert len(ours) == len(theirs) == len(expected)
    # the scenario has every kind of record: creates, updates, deletes and their tombstones
    assert {op for _, op, _ in expected} == {"c", "u", "d", None}
    found: list[str] = []
    equal_keys = 0
    for index, (mine, record) in enumerate(zip(ours, theirs, strict=True)):
        _compare(index, mine, record, found)
        equal_keys += mine.key is not None and mine.key.decode() == record.key_text
    assert not found, f"{len(found)} differences:\n" + "\n".join(found[:80])
    # keys are JsonConverter's bytes exactly
    assert equal_keys == sum(1 for r in theirs if r.key_text is not None)


# ------------------------------------------------------------------ schemas, metadata, truncate

OPTIONS_DDL = """
CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10, 2), at timestamptz);
CREATE TABLE items_full (id int PRIMARY KEY, name text, price numeric(10, 2));
ALTER TABLE items_full REPLICA IDENTITY FULL;
"""
OPTIONS_WORK = [
    (
        "BEGIN; INSERT INTO items VALUES (1, 'a', 1.50, '2024-01-01 00:00:00+00'); "
        "INSERT INTO items_full VALUES (1, 'a', -2.25); "
        "INSERT INTO items VALUES (2, 'b', NULL, NULL); COMMIT"
    ),
    "UPDATE items_full SET name = 'a2' WHERE id = 1",
    "UPDATE items SET id = 20 WHERE id = 2",
    "DELETE FROM items_full WHERE id = 1",
    "TRUNCATE items, items_full",
]
OPTIONS = {
    "debezium.schemas": "true",
    "debezium.provide_transaction_metadata": "true",
    "debezium.skipped_operations": "none",
}
CONNECTOR_OPTIONS = {"provide.transaction.metadata": "true", "skipped.operations": "none"}


def _without_lsns(value: Any) -> Any:
    """``value`` with the LSNs that differ by decision (commit LSN) taken out."""
    if isinstance(value, dict):
        out = {k: _without_lsns(v) for k, v in value.items() if k not in ("lsn", "sequence")}
        if isinstance(out.get("id"), str) and ":" in out["id"]:
            out["id"] = out["id"].split(":")[0]  # "<xid>:<lsn>" → the xid
        for clock in ("ts_ms", "ts_us", "ts_ns"):
            if "op" in out and clock in out:
                del out[clock]  # the envelope's build time
        return out
    if isinstance(value, list):
        return [_without_lsns(v) for v in value]
    return value


def test_schemas_transaction_metadata_and_truncates_as_debezium_writes_them(
    pg_dsn: str, tmp_path: Path
) -> None:
    schema = f"dbz_opts_{uuid.uuid4().hex[:8]}"
    publication = f"{schema}_pub"
    slots = [f"{schema}_debezium", f"{schema}_walcast"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute(OPTIONS_DDL)
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(publication), sql.Identifier(schema)
            )
        )
        for slot in slots:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            for statement in OPTIONS_WORK:
                conn.execute(statement)
        # BEGIN c c c END, BEGIN u END, BEGIN d tombstone c END, BEGIN d tombstone END,
        # BEGIN t t END
        count = 5 + 3 + 5 + 4 + 4
        theirs = list(
            run_reference(
                pg_dsn, slots[0], publication, topic_prefix=PREFIX, schemas=True,
                max_records=count, properties={"schema.include.list": schema, **CONNECTOR_OPTIONS},
                workdir=tmp_path,
            )
        )  # fmt: skip
        ours = walcast_messages(pg_dsn, slots[1], publication, count, settings=OPTIONS)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for slot in slots:
                sc.drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert len(ours) == len(theirs) == count
    found: list[str] = []
    for index, (mine, record) in enumerate(zip(ours, theirs, strict=True)):
        topic = f"{PREFIX}.{mine.schema}.{mine.table}" if mine.table else f"{PREFIX}.transaction"
        pairs = [
            ("topic", topic, record.topic),
            ("key", _without_lsns(_parse(mine.key)), _without_lsns(record.key)),
            ("value", _without_lsns(_parse(mine.value)), _without_lsns(record.value)),
        ]
        found += [
            f"#{index} {what}: walcast {got!r}\n     Debezium {want!r}"
            for what, got, want in pairs
            if got != want
        ]
    assert not found, "\n".join(found[:20])
    # the ids' LSNs: the commit LSN's in walcast's (a documented difference)
    begin = _parse(ours[0].value)["payload"]
    assert begin["id"] == f"{ours[0].xid}:{ours[0].commit_lsn}"


# ------------------------------------------------------------------ load rows

LOAD_DDL = (
    "CREATE TABLE a (id int PRIMARY KEY, v text); "
    "INSERT INTO a VALUES (1, 'x'), (2, 'y'), (3, 'z'); "
    "CREATE TABLE b (id int PRIMARY KEY, v numeric(5, 2), at timestamp); "
    "INSERT INTO b VALUES (1, 1.5, '2024-02-29 13:45:01.5'), (2, -2.5, NULL); "
    "CREATE TABLE empty (id int PRIMARY KEY)"
)


def test_load_rows_are_the_connector_s_snapshot_rows(pg_dsn: str, tmp_path: Path) -> None:
    """walcast's initial load and the connector's initial snapshot: the same rows (op "r",
    keys, after); ``source.snapshot`` is "incremental" in walcast's (a documented decision:
    its loads are chunked and interleaved like Debezium's incremental snapshots)."""
    schema = f"dbz_load_{uuid.uuid4().hex[:8]}"
    publication = f"{schema}_pub"
    slots = [f"{schema}_debezium", f"{schema}_walcast"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute(LOAD_DDL)
        database = conn.info.dbname
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(publication), sql.Identifier(schema)
            )
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slots[0],))
    try:
        theirs = list(
            run_reference(
                pg_dsn, slots[0], publication, topic_prefix=PREFIX, snapshot_mode="initial",
                max_records=5, properties={"schema.include.list": schema}, workdir=tmp_path,
            )
        )  # fmt: skip
        done = sc.walcast(
            "tail", "--dsn", pg_dsn, "--slot", slots[1], "--publication", publication,
            "--create-slot", "--snapshot", "initial-only", "--format", "debezium",
            "--format-option", f"debezium.topic_prefix={PREFIX}",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for slot in slots:
                sc.drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    ours = [json.loads(line) for line in done.stdout.splitlines()]

    def rows(values: list[Any]) -> list[tuple[str, str, Any, Any]]:
        return sorted(
            (v["source"]["table"], v["op"], json.dumps(v["before"]), json.dumps(v["after"]))
            for v in values
        )

    assert rows(ours) == rows([r.value for r in theirs])
    assert {v["source"]["snapshot"] for v in ours} == {"incremental"}
    assert {r.value["source"]["snapshot"] for r in theirs} >= {"first", "last"}
    for value in ours:
        source = value["source"]
        assert (source["schema"], source["db"], source["txId"], source["lsn"]) == (
            schema, database, None, None,
        )  # fmt: skip

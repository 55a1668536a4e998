"""The ``debezium`` parser on messages shaped as Debezium 3.6.1 writes them.

Envelopes, ops, tombstones and control records, the schema form's detection, the
unchanged-TOAST placeholder, and the changes that cannot be decoded (no types, a value
past 38 digits, a create carrying the placeholder).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.pipeline.conftest import records

pytestmark = pytest.mark.integration

PLACEHOLDER = "__debezium_unavailable_value"
COLUMNS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "body"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1,
     "field": "day"},
    {"type": "bytes", "optional": True, "field": "raw"},
]  # fmt: skip


def source(table: str = "docs", lsn: int = 100) -> dict[str, Any]:
    return {
        "version": "3.6.1.Final", "connector": "postgresql", "name": "p", "ts_ms": 1700000000123,
        "snapshot": "false", "db": "shop", "sequence": f'[null,"{lsn}"]',
        "ts_us": 1700000000123456, "ts_ns": 1700000000123456000, "schema": "public",
        "table": table, "txId": 42, "lsn": lsn, "xmin": None,
    }  # fmt: skip


def event(op: str, before: Any = None, after: Any = None, **extra: Any) -> dict[str, Any]:
    return {"before": before, "after": after, "source": source(), "transaction": None,
            "op": op, "ts_ms": 1700000000200, **extra}  # fmt: skip


def with_schema(value: dict[str, Any]) -> dict[str, Any]:
    row = {"type": "struct", "fields": COLUMNS, "optional": True, "name": "p.public.docs.Value"}
    schema = {
        "type": "struct", "name": "p.public.docs.Envelope",
        "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                   {"type": "struct", "fields": [], "field": "source"},
                   {"type": "string", "field": "op"}],
    }  # fmt: skip
    return {"schema": schema, "payload": value}


def key(id_: int, *, schema: bool = False) -> bytes:
    payload = {"id": id_}
    if schema:
        return json.dumps({"schema": {"type": "struct", "fields": [COLUMNS[0]]},
                           "payload": payload}).encode()  # fmt: skip
    return json.dumps(payload).encode()


def _parse(spark, values: list[tuple[bytes | None, Any]], **options: str) -> list[Any]:
    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.kafka import with_walcast_headers  # noqa: PLC0415

    encoded = [(k, None if v is None else json.dumps(v).encode()) for k, v in values]
    parser = parser_for("debezium", options)
    return (
        parser.parse(with_walcast_headers(records(spark, encoded)), _empty_layouts(spark))
        .orderBy("kafka_offset")
        .collect()
    )


def test_schema_form_ops_tombstones_and_control_records(spark) -> None:
    day = 19782
    raw = base64.b64encode(b"\x00\xff").decode()
    row = {"id": 1, "body": "x", "day": day, "raw": raw}
    changed = {"id": 1, "body": PLACEHOLDER, "day": day + 1, "raw": raw}
    rows = _parse(
        spark,
        [
            (key(1, schema=True), with_schema(event("c", after=row))),
            (key(1, schema=True), with_schema(event("u", before=None, after=changed))),
            (key(1, schema=True), with_schema(event("d", before=row))),
            (key(1, schema=True), None),  # tombstone
            (b'{"id":"42:100"}', {"status": "BEGIN", "id": "42:100", "ts_ms": 1}),
            (b'{"serverName":"p"}', {"ts_ms": 1700000000000}),  # heartbeat
            (None, with_schema(event("t"))),
            (None, with_schema(event("r", after=row))),
        ],
    )
    assert [r["error"] for r in rows] == [None] * 8
    assert [len(r["changes"]) for r in rows] == [1, 1, 1, 0, 0, 0, 1, 1]
    insert, update, delete = (rows[i]["changes"][0] for i in range(3))
    assert insert["op"] == "insert"
    assert insert["error"] is None
    assert insert["after"] == {"id": "1", "body": "x", "day": "2024-02-29", "raw": "\\x00ff"}
    assert insert["primary_key"] == ["id"]
    assert (insert["schema"], insert["table"], insert["database"], insert["xid"]) == (
        "public", "docs", "shop", 42,
    )  # fmt: skip
    assert insert["column_types"] == {"id": "int8", "body": "text", "day": "date", "raw": "bytea"}
    # the placeholder is never a value: the column is left out and named unchanged
    assert update["op"] == "update"
    assert "body" not in update["after"]
    assert update["after"]["day"] == "2024-03-01"
    assert update["unchanged_toast"] == ["body"]
    assert update["before"] is None
    assert delete["op"] == "delete"
    assert delete["before"]["id"] == "1"
    assert rows[6]["changes"][0]["op"] == "truncate"
    assert rows[7]["changes"][0]["op"] == "insert"


def test_the_form_is_detected_and_an_insisted_form_names_the_option(spark) -> None:
    plain = event("c", after={"id": 1, "body": "x", "day": 1, "raw": None})
    wrapped = with_schema(plain)
    rows = _parse(spark, [(key(1), wrapped)], schemas="false")
    assert rows[0]["error"] == "malformed"
    assert "schemas.enable is true" in rows[0]["error_detail"]
    assert "schemas=auto" in rows[0]["error_detail"]
    rows = _parse(spark, [(key(1), plain)], schemas="true")
    assert rows[0]["error"] == "malformed"
    assert "schemas.enable is false" in rows[0]["error_detail"]
    with pytest.raises(ValueError, match=r"schemas 'yes' is not auto\|true\|false"):
        _parse(spark, [], schemas="yes")


def test_without_types_a_change_is_quarantined_not_stored_encoded(spark) -> None:
    plain = event("c", after={"id": 1, "body": "x", "day": 19782, "raw": "AP8="})
    (row,) = _parse(spark, [(key(1), plain)])
    (only,) = row["changes"]
    assert only["error"] == "unknown_table"
    assert "no column types for public.docs" in only["error_detail"]
    truncate = event("t")
    (row,) = _parse(spark, [(None, truncate)])
    assert row["changes"][0]["error"] is None  # a truncate has no values to decode


def test_undecodable_values_and_placeholder_creates_are_quarantined(spark) -> None:
    too_long = base64.b64encode((10**40).to_bytes(17, "big", signed=True)).decode()
    columns = [*COLUMNS[:1], {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                              "parameters": {"scale": "0"}, "field": "amount"}]  # fmt: skip
    value = with_schema(event("c", after={"id": 1, "amount": too_long}))
    for field in value["schema"]["fields"][:2]:
        field["fields"] = columns
    created = with_schema(event("c", after={"id": 2, "body": PLACEHOLDER, "day": 1, "raw": None}))
    first, second = _parse(spark, [(key(1, schema=True), value), (key(2, schema=True), created)])
    assert first["changes"][0]["error"] == "unsupported"
    assert first["changes"][0]["error_detail"].endswith(": amount")
    assert second["changes"][0]["error"] == "unsupported"
    assert "unchanged-TOAST placeholders" in second["changes"][0]["error_detail"]


def _parse_with_headers(spark, values: list[tuple[bytes | None, Any, str | None, str | None]]):
    """``_parse`` of records carrying ``__debezium.oldkey``/``newkey`` (text or None)."""
    import datetime as dt  # noqa: PLC0415

    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.kafka import with_walcast_headers  # noqa: PLC0415
    from pipeline.local_frames import local_rows  # noqa: PLC0415
    from tests.pipeline.conftest import RECORD_SCHEMA  # noqa: PLC0415

    when = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    rows = [
        (k, None if v is None else json.dumps(v).encode(), "t", 0, i, when, old, new)
        for i, (k, v, old, new) in enumerate(values)
    ]
    frame = local_rows(spark, rows, f"{RECORD_SCHEMA}, header_oldkey string, header_newkey string")
    parsed = parser_for("debezium").parse(with_walcast_headers(frame), _empty_layouts(spark))
    return parsed.orderBy("kafka_offset").collect()


def test_the_halves_of_a_key_change_pair_by_the_connector_s_headers(spark) -> None:
    """The create with ``__debezium.oldkey`` is one update from the old key, placeholder
    columns unchanged; the delete with ``__debezium.newkey`` and its tombstone carry none.

    The header in SimpleHeaderConverter's text and in JsonConverter's (schema, payload);
    a header without the key column sends the change to the quarantine, naming it.
    """
    moved = {"id": 6, "body": PLACEHOLDER, "day": 3, "raw": None}
    before = {"id": 5, "body": None, "day": None, "raw": None}
    json_header = json.dumps({"schema": {"type": "struct"}, "payload": {"id": 7}})
    rows = _parse_with_headers(
        spark,
        [
            (key(5, schema=True), with_schema(event("d", before=before)), None, '{"id":6}'),
            (key(5, schema=True), None, None, '{"id":6}'),
            (key(6, schema=True), with_schema(event("c", after=moved)), '{"id":5}', None),
            (key(8, schema=True), with_schema(event("c", after=moved)), json_header, None),
            (key(9, schema=True), with_schema(event("c", after=moved)), '{"x":1}', None),
            (key(5, schema=True), with_schema(event("d", before=before)), None, None),
        ],
    )
    assert [(r["error"], r["change_count"]) for r in rows] == [
        (None, 0), (None, 0), (None, 1), (None, 1), (None, 1), (None, 1),
    ]  # fmt: skip
    change = rows[2]["changes"][0]
    assert (change["op"], change["error"]) == ("update", None)
    assert change["before"] == {"id": "5"}
    assert change["after"] == {"id": "6", "day": "1970-01-04", "raw": None}
    assert change["unchanged_toast"] == ["body"]
    assert rows[3]["changes"][0]["before"] == {"id": "7"}
    bad = rows[4]["changes"][0]
    assert bad["error"] == "unsupported"
    assert bad["error_detail"] == (
        "key change of public.docs: the create's __debezium.oldkey header does not hold "
        'the old key (id): {"x":1}'
    )
    # a delete without the header is an ordinary delete
    assert (rows[5]["changes"][0]["op"], rows[5]["changes"][0]["before"]["id"]) == ("delete", "5")


def test_malformed_and_unknown_ops(spark) -> None:
    rows = _parse(
        spark,
        [
            (None, {"before": None, "after": None, "source": source()}),
            (None, event("x", after={"id": 1})),
            (None, event("c", after=None)),
        ],
    )
    assert [r["error"] for r in rows] == ["malformed", "unsupported", "malformed"]
    assert rows[1]["error_detail"] == "Debezium op x"
    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.kafka import with_walcast_headers  # noqa: PLC0415
    from tests.pipeline.conftest import records as make  # noqa: PLC0415

    not_json = with_walcast_headers(make(spark, [(None, b"{not json")]))
    (row,) = parser_for("debezium").parse(not_json, _empty_layouts(spark)).collect()
    assert row["error"] == "malformed"


def _empty_layouts(spark):
    from pipeline.layouts import parse_layouts  # noqa: PLC0415

    return parse_layouts(records(spark, []))

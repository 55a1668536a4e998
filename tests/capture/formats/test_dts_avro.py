"""``dts-avro``: raw Avro datums of DTS's ``Record``, checked with fastavro and the unchanged
published schema."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from capture.events import (
    PG_EPOCH_US,
    ChangeEvent,
    Column,
    Op,
    TransactionBegin,
    TransactionCommit,
)
from capture.formats import FormatOptions, encoder_for, parse_settings
from capture.formats._common import row_key, truncate_sql
from capture.formats.avro import zigzag
from capture.formats.dts_avro.encode import DtsAvroEncoder
from capture.formats.dts_avro.values import object_type, value_precision_scale
from capture.lsn import format_lsn, parse_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST
from capture.synthetic import format_options, generate
from capture.teststream import produce
from capture.types import PgTimestamp
from capture.types.datetimes import timestamptz_to_text
from tests.support.events import TYPE_OIDS, commit_ts, event, keyed_table

REPO = Path(__file__).resolve().parents[3]
SPEC = Path("/work/shared/specs/dts-avro-Record.avsc")
SCHEMA_COPY = REPO / "schemas" / "dts-avro-Record.avsc"
GOLDEN = REPO / "tests" / "data" / "formats" / "dts-avro"
NS = "com.alibaba.dts.formats.avro."
WHEN = dt.datetime(2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC)
TS = commit_ts(WHEN)
LSN = parse_lsn("0/16B3748")


def _record_schema() -> dict:
    """The ``Record`` type of the published schema (a union list), parsed unchanged."""
    source = SPEC if SPEC.exists() else SCHEMA_COPY
    parsed = parse_schema(json.loads(source.read_text()))
    [record] = [s for s in parsed if s["name"] == NS + "Record"]
    return record


RECORD = _record_schema()


def decode(datum: bytes) -> dict[str, Any]:
    buf = io.BytesIO(datum)
    record = schemaless_reader(buf, RECORD, return_record_name=True)
    assert buf.tell() == len(datum), "trailing bytes"
    return record


def check(datum: bytes) -> dict[str, Any]:
    """Decode ``datum`` and check fastavro writes the same record to the same bytes."""
    record = decode(datum)
    out = io.BytesIO()
    schemaless_writer(out, RECORD, record)
    assert out.getvalue() == datum
    return record


def one(encoder: DtsAvroEncoder, change: ChangeEvent) -> dict[str, Any]:
    [message] = encoder.change(change)
    return check(message.value)


# --------------------------------------------------------------------------- values back


SDK_OBJECT_TYPES = {
    "BINARY", "BOOL", "BLOB", "XML", "JSON", "TEXT", "BFILE", "RAW", "LONG_RAW", "ROWID",
    "UROWID", "ENUM", "SET", "BYTEA", "GEOMETRY", "XTYPE", "UUID",
}  # fmt: skip
"""``com.aliyun.dts.subscribe.clients.record.value.ObjectType`` (dts-new-subscribe-sdk 2.0.0):
``DefaultValueDeserializer`` calls ``ObjectType.valueOf(type.toUpperCase())``."""
OBJECT_TYPE = {
    "json": "JSON", "jsonb": "JSON", "xml": "XML", "uuid": "UUID", "point": "GEOMETRY",
    "polygon": "GEOMETRY",
}  # fmt: skip

NONE = object()
"""EmptyObject.NONE (value not available)."""


def _date_text(year: int, month: int, day: int) -> str:
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d} BC"
    return f"{year:04d}-{month:02d}-{day:02d}"


def _clock_text(v: dict) -> str:
    text = f"{v['hour']:02d}:{v['minute']:02d}:{v['second']:02d}"
    if v["millis"]:
        text += f".{v['millis']:06d}".rstrip("0")
    return text


def to_pg_text(item: Any, type_name: str) -> Any:
    """PostgreSQL's text form of a decoded image item (independent of the encoder)."""
    if item is None:
        return None
    name, value = item
    name = name.removeprefix(NS)
    if name == "EmptyObject":
        assert value in ("NONE", "NULL")
        return NONE
    if name == "Integer":
        if type_name == "bool":
            assert value["precision"] == 1
            return {"1": "t", "0": "f"}[value["value"]]
        return value["value"]
    if name == "Character":
        assert value["charset"] == "UTF8"
        return value["value"].decode()
    if name == "Decimal":
        return value["value"]
    if name == "Float":
        return value["value"]
    if name == "Timestamp":
        us = value["timestamp"] * 1_000_000 + value["millis"] - PG_EPOCH_US
        assert 0 <= value["millis"] < 1_000_000
        return timestamptz_to_text(PgTimestamp(us, tz=True))
    if name == "DateTime":
        if value["year"] is None:
            return _clock_text(value)
        date = _date_text(value["year"], value["month"], value["day"])
        if value["hour"] is None:
            return date
        bc = date.endswith(" BC")
        text = date.removesuffix(" BC") + " " + _clock_text(value)
        return text + " BC" if bc else text
    if name == "TimestampWithTimeZone":
        return _clock_text(value["value"]) + value["timezone"]
    if name == "BinaryObject":
        assert value["type"] == "BYTEA"
        return "\\x" + value["value"].hex()
    if name == "TextObject":
        assert value["type"] in SDK_OBJECT_TYPES
        assert value["type"] == OBJECT_TYPE.get(type_name, "TEXT"), (type_name, value["type"])
        return value["value"]
    raise AssertionError(name)


def same(decoded: Any, original: str | None) -> bool:
    if isinstance(decoded, float):
        expected = float(original)  # type: ignore[arg-type]
        return (math.isnan(decoded) and math.isnan(expected)) or decoded == expected
    return decoded == original


# --------------------------------------------------------------------------- schema


def test_schema_copy_is_the_published_schema() -> None:
    if SPEC.exists():
        assert SCHEMA_COPY.read_bytes() == SPEC.read_bytes()
    assert RECORD["name"] == NS + "Record"


def test_insert_record_fields() -> None:
    table = keyed_table([("id", "int8", True), ("note", "text", False)])
    enc = DtsAvroEncoder(FormatOptions(database="shop", source_version="16.4"))
    [message] = enc.change(event(Op.INSERT, table, after={"id": "1", "note": "hi"}))
    record = check(message.value)
    assert message.key == b'public.orders:["1"]'
    assert (message.kind, message.schema, message.table) == ("change", "public", "orders")
    assert (message.commit_lsn, message.xid, message.ordinal) == (LSN, 700, 1)
    assert record == {
        "version": 1,
        "id": LSN,
        "sourceTimestamp": int(WHEN.timestamp()),
        "sourcePosition": "0/16B3748@1",
        "safeSourcePosition": "0/16B3748",
        "sourceTxid": "700",
        "source": {"sourceType": "PostgreSQL", "version": "16.4"},
        "operation": "INSERT",
        "objectName": "shop.public.orders",
        "processTimestamps": None,
        "tags": {
            "walcast.commit_lsn": "0/16B3748",
            "walcast.commit_time": "2024-05-02T18:17:29.123456+00:00",
            "walcast.ordinal": "1",
            "pk_uk_info": '{"PRIMARY":["id"]}',
        },
        "fields": [{"name": "id", "dataTypeNumber": 20}, {"name": "note", "dataTypeNumber": 25}],
        "beforeImages": None,
        "afterImages": [
            (NS + "Integer", {"precision": 8, "value": "1"}),
            (NS + "Character", {"charset": "UTF8", "value": b"hi"}),
        ],
        "bornTimestamp": int(WHEN.timestamp() * 1000),
    }


# --------------------------------------------------------------------------- values

ALL = [
    ("id", "int8", True),
    ("i2", "int2", False),
    ("i4", "int4", False),
    ("big", "int8", False),
    ("n38", "numeric", False),
    ("n", "numeric", False),
    ("f4", "float4", False),
    ("f8", "float8", False),
    ("flag", "bool", False),
    ("txt", "text", False),
    ("vc", "varchar", False),
    ("ch", "bpchar", False),
    ("blob", "bytea", False),
    ("d", "date", False),
    ("t", "time", False),
    ("ttz", "timetz", False),
    ("ts", "timestamp", False),
    ("tstz", "timestamptz", False),
    ("iv", "interval", False),
    ("u", "uuid", False),
    ("j", "json", False),
    ("jb", "jsonb", False),
    ("ip", "inet", False),
    ("arr", "_int4", False),
    ("m", "money", False),
]
TYPES = {c: t for c, t, _ in ALL}
NUMERIC_38_10 = ((38 << 16) | 10) + 4

ROWS = [
    {
        "id": "1",
        "i2": "-32768",
        "i4": "2147483647",
        "big": "-9223372036854775808",
        "n38": "9999999999999999999999999999.9999999999",
        "n": "-0.000000000000000000001",
        "f4": "3.4028235e+38",
        "f8": "-1.7976931348623157e+308",
        "flag": "t",
        "txt": "every delimiter: , ; | \t \n \r \" ' \\ {} [] \x1e and 東京 🚀",
        "vc": "",
        "ch": "ab   ",
        "blob": "\\x00000100ff00",
        "d": "0044-03-15 BC",
        "t": "24:00:00",
        "ttz": "12:00:01.5+05:30",
        "ts": "2024-02-29 23:59:59.999999",
        "tstz": "2024-05-02 18:17:29.000001+00",
        "iv": "-1 years -2 mons +3 days -04:05:06.789",
        "u": "cc22af58-be65-41cc-be24-34e37af027bc",
        "j": '{"a": [1, 2.5e10], "b": null}',
        "jb": '{"k": "v", "nested": {"x": [true, false]}}',
        "ip": "2001:db8::1/64",
        "arr": "{{1,2},{3,NULL}}",
        "m": "-$1,234.56",
    },
    {
        "id": "9223372036854775807",
        "big": "9223372036854775807",
        "n38": "-0.0000000001",
        "n": "NaN",
        "f4": "NaN",
        "f8": "Infinity",
        "flag": "f",
        "txt": "",
        "blob": "\\x",
        "d": "infinity",
        "t": "00:00:00",
        "ttz": "23:59:59.999999-03:30:15",
        "ts": "0001-01-01 00:00:00 BC",
        "tstz": "1969-12-31 23:59:59.5+00",
        "iv": "00:00:00",
    },
    {
        "id": "0",
        "n": "100",
        "f8": "-0",
        "d": "5874897-12-31",
        "ts": "-infinity",
        "tstz": "0001-01-01 00:00:00+00 BC",
        "ttz": "00:00:00+00",
    },
    {"id": "2", "tstz": "294276-12-31 23:59:59.999999+00", "ts": "10000-01-01 00:00:00"},
    {"id": "3", "tstz": "infinity", "d": "2000-02-29", "n": "0.00"},
    {"id": "4", "tstz": "-infinity", "d": "-infinity"},
]


@pytest.mark.parametrize("row", ROWS, ids=range(len(ROWS)))
def test_values_are_recovered_exactly(row: dict[str, str]) -> None:
    table = keyed_table(ALL, typmods={"n38": NUMERIC_38_10})
    record = one(DtsAvroEncoder(), event(Op.INSERT, table, after=row))
    items = dict(zip([c for c, _, _ in ALL], record["afterImages"], strict=True))
    for name, type_name in TYPES.items():
        decoded = to_pg_text(items[name], type_name)
        assert same(decoded, row.get(name)), (name, decoded, row.get(name))


def test_value_types_follow_the_documented_mapping() -> None:
    table = keyed_table(ALL, typmods={"n38": NUMERIC_38_10})
    record = one(DtsAvroEncoder(), event(Op.INSERT, table, after=ROWS[0]))
    branches = {
        c: item[0].removeprefix(NS)
        for (c, _, _), item in zip(ALL, record["afterImages"], strict=True)
    }
    assert branches == {
        "id": "Integer", "i2": "Integer", "i4": "Integer", "big": "Integer",
        "n38": "Decimal", "n": "Decimal", "f4": "Float", "f8": "Float", "flag": "Integer",
        "txt": "Character", "vc": "Character", "ch": "Character", "blob": "BinaryObject",
        "d": "DateTime", "t": "DateTime", "ttz": "TimestampWithTimeZone", "ts": "DateTime",
        "tstz": "Timestamp", "iv": "TextObject", "u": "TextObject", "j": "TextObject",
        "jb": "TextObject", "ip": "TextObject", "arr": "TextObject", "m": "TextObject",
    }  # fmt: skip
    items = dict(zip([c for c, _, _ in ALL], record["afterImages"], strict=True))
    assert [items[c][1]["precision"] for c in ("i2", "i4", "big", "flag")] == [2, 4, 8, 1]
    assert items["n38"][1] == {"value": ROWS[0]["n38"], "precision": 38, "scale": 10}
    assert items["n"][1] == {"value": ROWS[0]["n"], "precision": 1, "scale": 21}
    assert (items["f4"][1]["precision"], items["f8"][1]["precision"]) == (24, 53)
    assert items["f4"][1]["scale"] == -1
    assert items["d"][1] == {
        "year": -43, "month": 3, "day": 15,
        "hour": None, "minute": None, "second": None, "millis": None,
    }  # fmt: skip
    assert items["tstz"][1] == {"timestamp": 1714673849, "millis": 1}
    assert [f["dataTypeNumber"] for f in record["fields"]][:5] == [20, 21, 23, 20, 1700]


def test_null_is_avro_null_and_differs_from_empty() -> None:
    table = keyed_table([("id", "int8", True), ("a", "text", False), ("b", "bytea", False)])
    record = one(DtsAvroEncoder(), event(Op.INSERT, table, after={"id": "1", "a": "", "b": None}))
    assert record["afterImages"][1] == (NS + "Character", {"charset": "UTF8", "value": b""})
    assert record["afterImages"][2] is None


@given(st.text(min_size=0, max_size=40).filter(lambda s: "\x00" not in s))
def test_any_text_round_trips(text: str) -> None:
    table = keyed_table([("id", "int8", True), ("s", "text", False)])
    record = one(DtsAvroEncoder(), event(Op.INSERT, table, after={"id": "1", "s": text}))
    assert record["afterImages"][1][1]["value"].decode() == text


@given(st.binary(max_size=64))
def test_any_bytea_round_trips(data: bytes) -> None:
    table = keyed_table([("id", "int8", True), ("b", "bytea", False)])
    record = one(
        DtsAvroEncoder(), event(Op.INSERT, table, after={"id": "1", "b": "\\x" + data.hex()})
    )
    assert record["afterImages"][1][1]["value"] == data


def test_escape_format_bytea_is_decoded() -> None:
    table = keyed_table([("id", "int8", True), ("b", "bytea", False)])
    record = one(DtsAvroEncoder(), event(Op.INSERT, table, after={"id": "1", "b": "a\\000\\\\b"}))
    assert record["afterImages"][1][1]["value"] == b"a\x00\\b"


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_matches_fastavro(n: int) -> None:
    out = io.BytesIO()
    schemaless_writer(out, "long", n)
    assert zigzag(n) == out.getvalue()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.001", (1, 3)), ("100", (3, 0)), ("-12.50", (4, 2)), ("0.00", (1, 2)), ("NaN", (0, 0)),
     ("Infinity", (0, 0)), ("-Infinity", (0, 0)), ("0", (1, 0))],
)  # fmt: skip
def test_unconstrained_numeric_precision_and_scale_are_java_bigdecimals(
    text: str, expected: tuple[int, int]
) -> None:
    assert value_precision_scale(text) == expected


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_numeric_nan_and_infinities_are_float_items(text: str) -> None:
    # the DTS SDK reads a Decimal with new BigDecimal(value), which has no NaN/Infinity
    table = keyed_table(ALL, typmods={"n38": NUMERIC_38_10})
    record = one(
        DtsAvroEncoder(), event(Op.INSERT, table, after={"id": "1", "n38": text, "n": text})
    )
    items = dict(zip([c for c, _, _ in ALL], record["afterImages"], strict=True))
    for name in ("n38", "n"):
        branch, value = items[name]
        assert branch.removeprefix(NS) == "Float"
        assert (value["precision"], value["scale"]) == (0, -1)
        assert same(value["value"], text)
        assert to_pg_text(items[name], "numeric") is not None


def test_timestamptz_with_offsets_keeps_the_instant() -> None:
    table = keyed_table([("id", "int8", True), ("at", "timestamptz", False)])
    record = one(
        DtsAvroEncoder(),
        event(Op.INSERT, table, after={"id": "1", "at": "2024-05-02 23:47:29.25+05:30"}),
    )
    value = record["afterImages"][1][1]
    assert value == {
        "timestamp": int(dt.datetime(2024, 5, 2, 18, 17, 29, tzinfo=dt.UTC).timestamp()),
        "millis": 250000,
    }


def test_binary_mode_values_encode_like_text_mode() -> None:
    table = keyed_table(
        [
            ("id", "int4", True),
            ("flag", "bool", False),
            ("note", "text", False),
            ("b", "bytea", False),
        ]
    )
    text = event(Op.INSERT, table, after={"id": "7", "flag": "t", "note": "x", "b": "\\x0001"})
    binary = event(
        Op.INSERT,
        table,
        after={"id": struct.pack(">i", 7), "flag": b"\x01", "note": b"x", "b": b"\x00\x01"},
        binary=frozenset({"id", "flag", "note", "b"}),
    )
    [a] = DtsAvroEncoder().change(text)
    [b] = DtsAvroEncoder().change(binary)
    assert a.value == b.value
    assert a.key == b.key


# --------------------------------------------------------------------------- images

ORDERS = [("id", "int8", True), ("note", "text", False), ("amount", "numeric", False)]


def test_insert_update_delete_images() -> None:
    table = keyed_table(ORDERS, identity="f")
    enc = DtsAvroEncoder()
    row = {"id": "1", "note": "a", "amount": "1.5"}
    new = {"id": "1", "note": "b", "amount": "2.5"}
    ins = one(enc, event(Op.INSERT, table, after=row))
    upd = one(enc, event(Op.UPDATE, table, row, new, ordinal=2))
    dele = one(enc, event(Op.DELETE, table, new, ordinal=3))
    assert (ins["operation"], ins["beforeImages"]) == ("INSERT", None)
    assert upd["operation"] == "UPDATE"
    assert [to_pg_text(i, "x") for i in upd["beforeImages"]] == ["1", "a", "1.5"]
    assert [to_pg_text(i, "x") for i in upd["afterImages"]] == ["1", "b", "2.5"]
    assert (dele["operation"], dele["afterImages"]) == ("DELETE", None)
    assert [to_pg_text(i, "x") for i in dele["beforeImages"]] == ["1", "b", "2.5"]
    assert [r["tags"]["walcast.ordinal"] for r in (ins, upd, dele)] == ["1", "2", "3"]
    assert [r["sourcePosition"] for r in (ins, upd, dele)] == [f"0/16B3748@{i}" for i in (1, 2, 3)]


def test_default_identity_update_has_key_then_none() -> None:
    table = keyed_table(ORDERS)
    record = one(
        DtsAvroEncoder(), event(Op.UPDATE, table, after={"id": "5", "note": "x", "amount": "1"})
    )
    assert [to_pg_text(i, "x") for i in record["beforeImages"]] == ["5", NONE, NONE]
    assert record["beforeImages"][1] == (NS + "EmptyObject", "NONE")


def test_key_only_old_images() -> None:
    table = keyed_table(ORDERS)
    enc = DtsAvroEncoder()
    upd = one(
        enc, event(Op.UPDATE, table, {"id": "5"}, {"id": "6", "note": "x"}, before_key_only=True)
    )
    dele = one(enc, event(Op.DELETE, table, {"id": "6"}, before_key_only=True, ordinal=2))
    assert [to_pg_text(i, "x") for i in upd["beforeImages"]] == ["5", NONE, NONE]
    assert [to_pg_text(i, "x") for i in upd["afterImages"]] == ["6", "x", None]
    assert [to_pg_text(i, "x") for i in dele["beforeImages"]] == ["6", NONE, NONE]


def test_unchanged_toast_copied_from_full_old_row_or_none_and_tagged() -> None:
    big = "y" * 5000
    full = keyed_table(ORDERS, identity="f")
    record = one(
        DtsAvroEncoder(),
        event(
            Op.UPDATE,
            full,
            {"id": "1", "note": big, "amount": "1"},
            {"id": "1", "note": UNCHANGED_TOAST, "amount": "2"},
        ),
    )
    assert to_pg_text(record["afterImages"][1], "text") == big
    assert "walcast.unchanged_toast" not in record["tags"]
    default = keyed_table(ORDERS)
    record = one(
        DtsAvroEncoder(),
        event(Op.UPDATE, default, after={"id": "1", "note": UNCHANGED_TOAST, "amount": "2"}),
    )
    assert record["afterImages"][1] == (NS + "EmptyObject", "NONE")
    assert record["tags"]["walcast.unchanged_toast"] == '["note"]'


def test_truncate_is_a_ddl_record_with_the_statement() -> None:
    table = keyed_table(ORDERS, name='we"ird')
    enc = DtsAvroEncoder(FormatOptions(database="db"))
    [message] = enc.change(
        ChangeEvent(Op.TRUNCATE, table, None, None, 700, LSN, TS, 1, truncate_options=3)
    )
    record = check(message.value)
    assert record["operation"] == "DDL"
    assert record["objectName"] == 'db.public.we"ird'
    assert record["afterImages"] == 'TRUNCATE TABLE "public"."we""ird" RESTART IDENTITY CASCADE'
    assert (record["beforeImages"], record["fields"]) == (None, None)
    assert message.key == b'public.we"ird'
    assert truncate_sql(table, 0) == 'TRUNCATE TABLE "public"."we""ird"'


# --------------------------------------------------------------------------- ids, control


def test_ids_follow_the_commit_lsn_and_never_go_back() -> None:
    table = keyed_table(ORDERS)
    enc = DtsAvroEncoder()
    ids = []
    for lsn, n in ((1000, 3), (1002, 4), (5000, 1)):
        enc.begin(TransactionBegin(700, lsn, TS, n))
        ids += [
            one(enc, event(Op.INSERT, table, after={"id": str(o)}, ordinal=o, commit_lsn=lsn))["id"]
            for o in range(1, n + 1)
        ]
        enc.commit(TransactionCommit(700, lsn, lsn + 50, TS, n))
    assert ids == [1000, 1001, 1002, 1003, 1004, 1005, 1006, 5000]


def test_transaction_records_are_off_by_default_and_can_be_enabled() -> None:
    table = keyed_table(ORDERS)
    assert DtsAvroEncoder().begin(TransactionBegin(700, LSN, TS, 1)) == []
    enc = DtsAvroEncoder(
        FormatOptions(settings=parse_settings("dts-avro", {"dts-avro.transaction_records": "true"}))
    )
    [begin] = enc.begin(TransactionBegin(700, LSN, TS, 1))
    change = one(enc, event(Op.INSERT, table, after={"id": "1"}))
    [commit] = enc.commit(TransactionCommit(700, LSN, LSN + 56, TS, 1))
    b, c = check(begin.value), check(commit.value)
    assert (b["operation"], c["operation"]) == ("BEGIN", "COMMIT")
    assert b["id"] < change["id"] < c["id"]
    assert b["objectName"] is None
    assert b["tags"]["walcast.change_count"] == "1"
    assert c["tags"]["walcast.end_lsn"] == format_lsn(LSN + 56)
    assert (begin.kind, commit.kind, begin.key) == ("begin", "commit", b"postgres")


def test_heartbeat_records() -> None:
    enc = DtsAvroEncoder()
    now_us = int(WHEN.timestamp() * 1_000_000)
    [message] = enc.heartbeat(LSN, now_us)
    record = check(message.value)
    assert record["operation"] == "HEARTBEAT"
    assert record["sourcePosition"] == "0/16B3748"
    assert record["sourceTimestamp"] == now_us // 1_000_000
    assert record["tags"] == {}
    assert message.kind == "heartbeat"
    off = DtsAvroEncoder(
        FormatOptions(settings=parse_settings("dts-avro", {"dts-avro.heartbeats": "off"}))
    )
    assert off.heartbeat(LSN, now_us) == []


def test_registry_and_tail_framing() -> None:
    enc = encoder_for("dts-avro")
    assert isinstance(enc, DtsAvroEncoder)
    assert enc.binary_output
    table = keyed_table(ORDERS)
    change = event(Op.INSERT, table, after={"id": "1"})
    [message] = DtsAvroEncoder().change(change)
    line = enc.frame_for_tail(message)
    assert line == enc.tail_lines(change)
    assert base64.b64decode(line.strip()) == message.value


# --------------------------------------------------------------------------- streams


def test_synthetic_stream_decodes_and_round_trips() -> None:
    encoder = DtsAvroEncoder(format_options())
    messages: list = []
    items = list(generate(2500, seed=5, tables=8))
    events = [i for i in items if isinstance(i, ChangeEvent)]
    produce(encoder, iter(items), messages.append)
    assert len(messages) == len(events)
    last_id = -1
    for message, change in zip(messages, events, strict=True):
        record = check(message.value)
        assert record["id"] > last_id
        last_id = record["id"]
        assert message.key == row_key(
            change.table, change.before if change.op is Op.DELETE else change.after
        )
        assert record["tags"]["walcast.commit_lsn"] == format_lsn(change.commit_lsn)
        assert record["tags"]["walcast.ordinal"] == str(change.ordinal)
        assert record["sourceTxid"] == str(change.xid)
        table = change.table
        types = [c.type_name for c in table.columns]
        for image, items_ in (
            (change.before, record["beforeImages"]),
            (change.after, record["afterImages"]),
        ):
            if image is None:
                if change.op is Op.UPDATE:  # no old image: key, then NONE
                    got = [to_pg_text(i, t) for i, t in zip(items_, types, strict=True)]
                    for i, value in enumerate(got):
                        if i in table.key_indexes:
                            assert value == change.after.text(i)
                        else:
                            assert value is NONE
                else:
                    assert items_ is None
                continue
            for i, (item, type_name) in enumerate(zip(items_, types, strict=True)):
                decoded = to_pg_text(item, type_name)
                original = image.text(i)
                if image.key_only and i not in table.key_indexes:
                    assert decoded is NONE
                elif original is UNCHANGED_TOAST:
                    before = change.before
                    if before is not None and not before.key_only:
                        assert decoded == before.text(i)
                    else:
                        assert decoded is NONE
                else:
                    assert same(decoded, original), (table.name, i, decoded, original)


@pytest.mark.parametrize(
    "type_name",
    sorted({*TYPE_OIDS, "xml", "point", "polygon", "tsvector", "bit", "_jsonb", "mytype"}),
)
def test_object_type_names_are_the_sdk_enum(type_name: str) -> None:
    column = Column("c", 0, type_name, -1, False)
    assert object_type(column) in SDK_OBJECT_TYPES
    assert object_type(column) == OBJECT_TYPE.get(type_name, "TEXT")

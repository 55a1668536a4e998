"""canal FlatMessage JSON: DTS's examples rebuilt, canal's rules, exact values, schema."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from bench.kit import wire
from capture.events import ChangeEvent, Image, Op
from capture.formats import parse_settings
from capture.formats._common import row_key
from capture.formats.base import FormatOptions
from capture.formats.canal.encode import CanalEncoder, declared_type, utc_wall_clock
from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import UNCHANGED_TOAST, TupleData
from capture.relcache import RelationCache
from tests.support.events import event, make_table, table_with
from tests.support.formats import encode_transaction, orders_tables

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "formats" / "canal"
SCHEMA = json.loads((REPO / "schemas" / "canal.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
encode = partial(encode_transaction, validator=VALIDATOR)
WHEN = dt.datetime(2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC)
ALPHABETICAL = [
    "data", "database", "es", "gtid", "id", "isDdl", "mysqlType",
    "old", "pkNames", "sql", "sqlType", "table", "ts", "type",
]  # fmt: skip


def docs(events: list[ChangeEvent], **settings: Any) -> list[dict[str, Any]]:
    encoder = CanalEncoder(
        FormatOptions(database="shop", settings=parse_settings("canal", settings))
    )
    return [orjson.loads(m.value) for m in encode(encoder, events)]


def one(ev: ChangeEvent, **settings: Any) -> dict[str, Any]:
    (doc,) = docs([ev], **settings)
    return doc


ORDERS, ORDERS_FULL = orders_tables()


# ------------------------------------------------------------------ registry, schema


@pytest.mark.parametrize(
    "name", ["dts_delete_2022.json", "dts_delete_pre2022.json", "dts_ddl.json"]
)
def test_vendor_examples_validate(name: str) -> None:
    VALIDATOR.validate(json.loads((DATA / name).read_text()))


def test_schema_rejects_non_string_values() -> None:
    doc = one(event(Op.INSERT, ORDERS, after={"id": "1", "note": "x", "qty": "2"}))
    doc["data"][0]["id"] = 1
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(doc)


# ------------------------------------------------------------------ golden: DTS's example


def test_golden_dts_delete_2022() -> None:
    """Rebuild DTS's DELETE example (instances from 2022-03-20 on) field by field."""
    expected = json.loads((DATA / "dts_delete_2022.json").read_text())
    table = table_with(
        "dbname",
        "tablename",
        [("id", "int8", True, -1), ("shipping_type", "varchar", True, -1)],
        identity="f",
        pk=("id",),
    )
    ev = event(
        Op.DELETE,
        table,
        before={"id": "500000287", "shipping_type": None},
        commit_lsn=58,  # DTS's id 58 is its offset; walcast's id is the commit LSN
        when=dt.datetime.fromtimestamp(1600161894, dt.UTC),
    )
    got = one(ev)
    for field in ("data", "database", "es", "id", "isDdl", "mysqlType", "pkNames", "sql"):
        assert got[field] == expected[field], field
    for field in ("sqlType", "table", "type"):
        assert got[field] == expected[field], field
    # ts is the build time: a 13-digit ms timestamp, not DTS's.
    assert isinstance(got["ts"], int)
    assert len(str(got["ts"])) == 13
    # canal writes null fields as null (DTS leaves "old" out); gtid is newer canal's field.
    assert got["old"] is None
    assert got["gtid"] == "700:0/3A"
    assert set(got) == set(expected) | {"old", "gtid"}
    # canal's serializer writes keys in alphabetical order.
    assert list(got) == ALPHABETICAL == sorted(ALPHABETICAL)


# ------------------------------------------------------------------ canal's rules


def test_insert() -> None:
    got = one(event(Op.INSERT, ORDERS, after={"id": "1", "note": "hi", "qty": "3"}, when=WHEN))
    assert got["type"] == "INSERT"
    assert got["data"] == [{"id": "1", "note": "hi", "qty": "3"}]
    assert got["old"] is None
    assert got["isDdl"] is False
    assert got["sql"] == ""
    assert got["database"] == "public"
    assert got["table"] == "orders"
    assert got["pkNames"] == ["id"]
    assert got["es"] == int(WHEN.timestamp() * 1000)
    assert got["id"] == 0x16B3748
    assert got["gtid"] == "700:0/16B3748"
    assert got["mysqlType"] == {"id": "integer", "note": "text", "qty": "bigint"}
    assert got["sqlType"] == {"id": 4, "note": 2005, "qty": -5}
    assert list(got) == ALPHABETICAL


def test_update_full_identity_old_holds_only_changed_columns() -> None:
    before = {"id": "1", "note": "old note", "qty": "3"}
    after = {"id": "1", "note": "new note", "qty": "3"}
    got = one(event(Op.UPDATE, ORDERS_FULL, before=before, after=after))
    assert got["type"] == "UPDATE"
    assert got["data"] == [after]
    assert got["old"] == [{"note": "old note"}]
    # Flink's canal-json: before = data with the columns of old replaced.
    assert {**got["data"][0], **got["old"][0]} == before


def test_update_full_identity_changed_to_and_from_null() -> None:
    got = one(
        event(
            Op.UPDATE,
            ORDERS_FULL,
            before={"id": "1", "note": None, "qty": "3"},
            after={"id": "1", "note": "set", "qty": None},
        )
    )
    assert got["old"] == [{"note": None, "qty": "3"}]
    assert got["data"] == [{"id": "1", "note": "set", "qty": None}]


def test_update_without_before_image_reports_no_old_values() -> None:
    """REPLICA IDENTITY DEFAULT, key unchanged: no old image; old = [{}] (Flink-safe)."""
    got = one(event(Op.UPDATE, ORDERS, after={"id": "1", "note": "n", "qty": "4"}))
    assert got["old"] == [{}]
    assert got["data"] == [{"id": "1", "note": "n", "qty": "4"}]


def test_update_with_key_only_before_image_reports_the_old_key() -> None:
    got = one(
        event(
            Op.UPDATE,
            ORDERS,
            before={"id": "1"},
            before_key_only=True,
            after={"id": "2", "note": "n", "qty": "4"},
        )
    )
    assert got["old"] == [{"id": "1"}]
    assert got["data"] == [{"id": "2", "note": "n", "qty": "4"}]


def test_delete_key_only_carries_the_key_columns() -> None:
    got = one(event(Op.DELETE, ORDERS, before={"id": "9"}, before_key_only=True))
    assert got["type"] == "DELETE"
    assert got["data"] == [{"id": "9"}]
    assert got["old"] is None


def test_delete_full_identity_carries_the_old_row() -> None:
    row = {"id": "9", "note": None, "qty": "1"}
    got = one(event(Op.DELETE, ORDERS_FULL, before=row))
    assert got["data"] == [row]


def test_unchanged_toast_absent_without_full_identity() -> None:
    got = one(event(Op.UPDATE, ORDERS, after={"id": "1", "note": UNCHANGED_TOAST, "qty": "5"}))
    assert got["data"] == [{"id": "1", "qty": "5"}]
    assert got["old"] == [{}]


def test_unchanged_toast_taken_from_full_old_image() -> None:
    got = one(
        event(
            Op.UPDATE,
            ORDERS_FULL,
            before={"id": "1", "note": "long text", "qty": "5"},
            after={"id": "1", "note": UNCHANGED_TOAST, "qty": "6"},
        )
    )
    assert got["data"] == [{"id": "1", "note": "long text", "qty": "6"}]
    assert got["old"] == [{"qty": "5"}]


def test_exact_values_survive() -> None:
    """Values are text a consumer parses back exactly (Flink's forms by default)."""
    table = table_with(
        "public",
        "exact",
        [
            ("id", "int8", True, -1),
            ("amount", "numeric", False, ((38 << 16) | 10) + 4),
            ("low", "int8", False, -1),
            ("at", "timestamptz", False, -1),
            ("blob", "bytea", False, -1),
            ("f", "float8", False, -1),
            ("ok", "bool", False, -1),
        ],
    )
    after = {
        "id": "9223372036854775807",
        "amount": "1234567890123456789012345678.0123456789",
        "low": "-9223372036854775808",
        "at": "2024-05-02 18:17:29.123456+00",
        "blob": "\\x00ff0000",
        "f": "0.1",
        "ok": "t",
    }
    got = one(event(Op.INSERT, table, after=after))
    (row,) = got["data"]
    assert row == {
        **after,
        "at": "2024-05-02 18:17:29.123456",
        "blob": "AP8AAA==",
        "ok": "true",
    }
    assert int(row["id"]) == 2**63 - 1
    assert int(row["low"]) == -(2**63)
    assert Decimal(row["amount"]) == Decimal("1234567890123456789012345678.0123456789")
    at_utc = dt.datetime.fromisoformat(row["at"]).replace(tzinfo=dt.UTC)
    assert at_utc == dt.datetime(2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC)
    assert base64.b64decode(row["blob"]) == b"\x00\xff\x00\x00"
    assert float(row["f"]) == 0.1
    assert got["mysqlType"]["amount"] == "numeric(38,10)"
    assert got["sqlType"] == {
        "id": -5, "amount": 2, "low": -5, "at": 2014, "blob": 2004, "f": 8, "ok": 16
    }  # fmt: skip


FIDELITY = table_with(
    "public",
    "fidelity",
    [
        ("id", "int4", True, -1),
        ("ok", "bool", False, -1),
        ("at", "timestamptz", False, -1),
        ("blob", "bytea", False, -1),
    ],
)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, {"ok": "true", "at": "2024-02-09 07:45:59.10355", "blob": "AP9h"}),
        ({"canal.boolean": "1-0"}, {"ok": "1"}),
        ({"canal.boolean": "t-f"}, {"ok": "t"}),
        ({"canal.timestamptz": "offset"}, {"at": "2024-02-09 07:45:59.10355+00"}),
        ({"canal.bytea": "latin1"}, {"blob": "\x00\xffa"}),
        ({"canal.bytea": "hex"}, {"blob": "\\x00ff61"}),
    ],
)
def test_value_settings(settings: dict[str, str], expected: dict[str, str]) -> None:
    after = {"id": "1", "ok": "t", "at": "2024-02-09 07:45:59.10355+00", "blob": "\\x00ff61"}
    (row,) = one(event(Op.INSERT, FIDELITY, after=after), **settings)["data"]
    assert {k: row[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("2024-02-09 07:45:59+00", "2024-02-09 07:45:59"),
        ("0044-03-15 12:00:00+00 BC", "0044-03-15 12:00:00 BC"),
        ("2024-06-01 12:34:56.5-07:30", "2024-06-01 20:04:56.5"),
        ("infinity", "infinity"),
        ("-infinity", "-infinity"),
        ("10000-01-01 00:00:00+00", "10000-01-01 00:00:00"),
    ],
)
def test_timestamptz_as_utc_wall_clock(text: str, utc: str) -> None:
    assert utc_wall_clock(text) == utc


def test_converted_old_values_and_deletes() -> None:
    """old[i] and DELETE rows use the same value forms as data[i]."""
    full = table_with(
        "public",
        "fidelity_full",
        [("id", "int4", True, -1), ("ok", "bool", True, -1), ("blob", "bytea", True, -1)],
        identity="f",
        pk=("id",),
    )
    old_row = {"id": "1", "ok": "f", "blob": "\\x00"}
    update = one(event(Op.UPDATE, full, before=old_row, after={**old_row, "ok": "t"}))
    assert update["old"] == [{"ok": "false"}]
    assert update["data"] == [{"id": "1", "ok": "true", "blob": "AA=="}]
    delete = one(event(Op.DELETE, full, before=old_row))
    assert delete["data"] == [{"id": "1", "ok": "false", "blob": "AA=="}]


def test_binary_mode_values_are_rendered_as_text() -> None:
    image = Image(ORDERS, TupleData(b"bnb", (b"\x00\x00\x00\x2a", None, b"\x00" * 7 + b"\x05")))
    ev = ChangeEvent(Op.INSERT, ORDERS, None, image, 700, 0x16B3748, 0, 1)
    assert one(ev)["data"] == [{"id": "42", "note": None, "qty": "5"}]


def test_truncate_is_a_ddl_message() -> None:
    ev = ChangeEvent(Op.TRUNCATE, ORDERS, None, None, 700, 0x16B3748, 0, 1, truncate_options=3)
    got = one(ev)
    assert got["type"] == "TRUNCATE"
    assert got["isDdl"] is True
    assert got["sql"] == 'TRUNCATE TABLE "public"."orders" RESTART IDENTITY CASCADE'
    assert got["data"] is None
    assert got["old"] is None
    assert got["mysqlType"] is None
    assert list(got) == ALPHABETICAL


def test_truncate_skip_setting() -> None:
    ev = ChangeEvent(Op.TRUNCATE, ORDERS, None, None, 700, 0x16B3748, 0, 1)
    assert (
        CanalEncoder(
            FormatOptions(settings=parse_settings("canal", {"canal.truncate": "skip"}))
        ).change(ev)
        == []
    )


@pytest.mark.parametrize(
    ("settings", "expected"), [({}, "INIT"), ({"canal.load_type": "INSERT"}, "INSERT")]
)
def test_load_rows_type_setting(settings: dict[str, str], expected: str) -> None:
    row = {"id": "7", "note": "loaded", "qty": "2"}
    ev = event(Op.SNAPSHOT, ORDERS, after=row, xid=0)
    got = CanalEncoder(FormatOptions(settings=parse_settings("canal", settings))).document(ev)
    assert got is not None
    assert (got["type"], got["old"], got["data"][0]["id"]) == (expected, None, "7")


# ------------------------------------------------------------------ positions, keys


def test_one_row_per_message_and_batch_id_is_the_commit_lsn() -> None:
    events = [
        event(Op.INSERT, ORDERS, after={"id": str(i)}, ordinal=i, commit_lsn=0x2000)
        for i in range(1, 4)
    ]
    encoder = CanalEncoder()
    messages = encode(encoder, events)
    assert len(messages) == 3
    for i, message in enumerate(messages, start=1):
        doc = orjson.loads(message.value)
        assert len(doc["data"]) == 1
        assert doc["id"] == 0x2000
        assert message.commit_lsn == 0x2000
        assert message.ordinal == i
        assert message.kind == "change"
        assert (message.schema, message.table) == ("public", "orders")


def test_walcast_keys_setting_adds_the_position() -> None:
    ev = event(Op.INSERT, ORDERS, after={"id": "1"}, ordinal=7)
    got = one(ev, **{"canal.walcast_keys": "true"})
    assert got["walcast"] == {"commitLsn": "0/16B3748", "ordinal": 7, "xid": 700}
    assert list(got) == [*ALPHABETICAL, "walcast"]
    assert "walcast" not in one(ev)


@pytest.mark.parametrize(
    "image_of",
    [
        lambda: event(Op.INSERT, ORDERS, after={"id": "5", "note": "x"}),
        lambda: event(Op.DELETE, ORDERS, before={"id": "5"}, before_key_only=True),
        lambda: event(Op.UPDATE, ORDERS_FULL, before={"id": "5"}, after={"id": "5", "qty": "1"}),
    ],
)
def test_kafka_key_is_the_row_key(image_of: Any) -> None:
    ev = image_of()
    (message,) = CanalEncoder().change(ev)
    image = ev.before if ev.op is Op.DELETE else ev.after
    assert message.key == row_key(ev.table, image)


def test_kafka_key_of_a_table_without_primary_key() -> None:
    table = make_table("public", "log", [("a", "text", False), ("b", "int4", False)])
    ev = event(Op.INSERT, table, after={"a": "x", "b": "1"})
    (message,) = CanalEncoder().change(ev)
    assert message.key == row_key(table, ev.after) == b"public.log"
    assert orjson.loads(message.value)["pkNames"] is None


# ------------------------------------------------------------------ settings, types


@pytest.mark.parametrize(
    ("mode", "database"),
    [("schema", "public"), ("database", "shop"), ("database.schema", "shop.public")],
)
def test_database_name_setting(mode: str, database: str) -> None:
    got = one(event(Op.INSERT, ORDERS, after={"id": "1"}), **{"canal.database_name": mode})
    assert got["database"] == database
    assert got["table"] == "orders"


@pytest.mark.parametrize(
    ("type_name", "typmod", "text"),
    [
        ("varchar", 24, "varchar(20)"),
        ("varchar", -1, "varchar"),
        ("bpchar", 7, "char(3)"),
        ("numeric", ((38 << 16) | 10) + 4, "numeric(38,10)"),
        ("numeric", -1, "numeric"),
        ("timestamptz", 3, "timestamptz(3)"),
        ("timestamp", -1, "timestamp"),
        ("time", 0, "time(0)"),
        ("interval", (((1 << 3) | (1 << 10) | (1 << 11) | (1 << 12)) << 16) | 3,
         "interval day to second(3)"),
        ("interval", ((1 << 2) << 16) | 0xFFFF, "interval year"),
        ("_int4", -1, "integer[]"),
        ("_varchar", 14, "varchar(10)[]"),
        ("float8", -1, "double precision"),
        ("bool", -1, "boolean"),
        ("bytea", -1, "bytea"),
        ("uuid", -1, "uuid"),
    ],
)  # fmt: skip
def test_declared_type(type_name: str, typmod: int, text: str) -> None:
    assert declared_type(type_name, typmod) == text


def test_sql_types_of_every_family() -> None:
    names = [
        "bool", "int2", "int4", "int8", "numeric", "float4", "float8", "bpchar", "varchar",
        "text", "bytea", "date", "time", "timetz", "timestamp", "timestamptz", "interval",
        "uuid", "json", "jsonb", "inet", "_int4", "money",
    ]  # fmt: skip
    table = make_table("public", "types", [(n, n, n == "int4") for n in names])
    got = one(event(Op.INSERT, table, after={"int4": "1"}))
    assert got["sqlType"] == {
        "bool": 16, "int2": 5, "int4": 4, "int8": -5, "numeric": 2, "float4": 7, "float8": 8,
        "bpchar": 1, "varchar": 12, "text": 2005, "bytea": 2004, "date": 91, "time": 92,
        "timetz": 2013, "timestamp": 93, "timestamptz": 2014, "interval": 1111, "uuid": 1111,
        "json": 2005, "jsonb": 2005, "inet": 1111, "_int4": 2003, "money": 1111,
    }  # fmt: skip
    assert got["mysqlType"]["_int4"] == "integer[]"
    assert got["mysqlType"]["timestamptz"] == "timestamptz"


def test_a_new_relation_message_rebuilds_the_table_metadata() -> None:
    encoder = CanalEncoder()
    old = table_with("public", "t", [("id", "int4", True, -1), ("v", "varchar", False, 14)])
    new = RelationCache().apply_relation(
        PgOutputDecoder(1).decode(
            wire.relation(
                old.relation_id,
                "public",
                "t",
                [(1, "id", 23, -1), (0, "v", 1043, 24), (0, "w", 25, -1)],
            )
        )  # type: ignore[arg-type]
    )
    first = orjson.loads(encoder.change(event(Op.INSERT, old, after={"id": "1"}))[0].value)
    second = orjson.loads(encoder.change(event(Op.INSERT, new, after={"id": "1"}))[0].value)
    assert first["mysqlType"] == {"id": "integer", "v": "varchar(10)"}
    assert second["mysqlType"] == {"id": "integer", "v": "varchar(20)", "w": "text"}


def test_rewritten_values_are_the_same_from_binary_mode() -> None:
    """bool, timestamptz and bytea sent in binary give canal's forms like their text."""
    when = dt.datetime(2024, 2, 9, 7, 45, 59, 103550, tzinfo=dt.UTC)
    us = (when - dt.datetime(2000, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    binary = {
        "id": b"\x00\x00\x00\x01",
        "ok": b"\x01",
        "at": us.to_bytes(8, "big"),
        "blob": b"\x00\xffa",
    }
    text = {"id": "1", "ok": "t", "at": "2024-02-09 07:45:59.10355+00", "blob": "\\x00ff61"}
    for settings in ({}, {"canal.boolean": "1-0", "canal.bytea": "latin1"}):
        from_text = one(event(Op.INSERT, FIDELITY, after=text), **settings)["data"]
        from_binary = one(event(Op.INSERT, FIDELITY, after=binary, binary=set(binary)), **settings)[
            "data"
        ]
        assert from_binary == from_text

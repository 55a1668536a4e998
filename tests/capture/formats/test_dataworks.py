"""DataWorks JSON: the seed document's records rebuilt, types, update pairs, exact values."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from capture.events import ChangeEvent, Op
from capture.formats import parse_settings
from capture.formats._common import row_key
from capture.formats.base import FormatOptions
from capture.formats.dataworks.encode import (
    DataWorksEncoder,
    bytea_bytes,
    date_ms,
    timestamp_ms,
)
from capture.pgoutput.messages import UNCHANGED_TOAST
from capture.synthetic import format_options, generate
from capture.types.datetimes import date2j
from tests.support.events import event, make_table, table_with
from tests.support.formats import (
    DELIMITERS,
    dataworks_type_errors,
    encode_transaction,
    orders_tables,
)

REPO = Path(__file__).resolve().parents[3]


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of an astronomical-year date (PostgreSQL's date2j)."""
    return date2j(year, month, day) - date2j(1970, 1, 1)


DATA = REPO / "tests" / "data" / "formats" / "dataworks"
SCHEMA = json.loads((REPO / "schemas" / "dataworks.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
encode = partial(encode_transaction, validator=VALIDATOR)
SEQUENCE = re.compile(r"^\d{30}$")


def options(database: str = "shop", **settings: Any) -> FormatOptions:
    return FormatOptions(
        source_version="16.4", database=database, settings=parse_settings("dataworks", settings)
    )


def docs(events: list[ChangeEvent], database: str = "shop", **settings: Any) -> list[dict]:
    encoder = DataWorksEncoder(options(database, **settings))
    return [orjson.loads(m.value) for m in encode(encoder, events)]


def one(ev: ChangeEvent, database: str = "shop", **settings: Any) -> dict[str, Any]:
    (doc,) = docs([ev], database, **settings)
    return doc


def after_columns(ev: ChangeEvent, **settings: Any) -> dict[str, Any]:
    return one(ev, **settings)["payload"]["after"]["dataColumn"]


ORDERS, ORDERS_FULL = orders_tables()
# The seed document's table: MySQL pkset_test.pkset_test_no_pk, no primary key.
NO_PK_COLUMNS = [
    ("name", "varchar", -1),
    ("job", "varchar", -1),
    ("sex", "varchar", -1),
    ("#alibaba_rds_row_id#", "int8", -1),
]
NO_PK = table_with(
    "pkset_test", "pkset_test_no_pk", [(c, t, False, m) for c, t, m in NO_PK_COLUMNS]
)
NO_PK_FULL = table_with(
    "pkset_test", "pkset_test_no_pk", [(c, t, True, m) for c, t, m in NO_PK_COLUMNS], identity="f"
)
MAN = {"name": "name11", "job": "job11", "sex": "man", "#alibaba_rds_row_id#": "15"}
WOMAN = {**MAN, "sex": "woman"}


def at_ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def golden(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def assert_like_example(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Compare a record to the document's, field by field; the exceptions are commented."""
    assert list(got) == list(expected) == ["schema", "payload", "version"]
    assert got["version"] == expected["version"]
    schema, want = got["schema"], expected["schema"]
    assert schema["dataColumn"] == want["dataColumn"]
    assert schema["primaryKey"] == want["primaryKey"]
    source = dict(schema["source"])
    # PostgreSQL instead of MySQL; walcast also fills dbVersion and schemaName.
    assert source.pop("dbType") == "PostgreSQL"
    assert source.pop("dbVersion") == "16.4"
    assert source.pop("schemaName") == "pkset_test"
    assert source == {k: v for k, v in want["source"].items() if k != "dbType"}
    payload, want_payload = got["payload"], expected["payload"]
    for field in ("before", "after", "op", "ddl"):
        assert payload[field] == want_payload[field], field
    # sequenceId: walcast's is commit LSN + ordinal (30 digits), DataWorks' an internal id.
    assert SEQUENCE.match(payload["sequenceId"])
    # scn is the overall format's Oracle-only field: null for PostgreSQL.
    assert payload.pop("scn") is None
    assert list(payload) == list(want_payload)
    stamps, want_stamps = payload["timestamp"], want_payload["timestamp"]
    assert stamps["eventTime"] == want_stamps["eventTime"]
    assert stamps["checkpointTime"] == want_stamps["checkpointTime"]
    # systemTime is when walcast built the record.
    assert isinstance(stamps["systemTime"], int)
    assert list(stamps) == list(want_stamps)


# ------------------------------------------------------------------ registry, schema


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
def test_vendor_examples_validate(path: Path) -> None:
    VALIDATOR.validate(json.loads(path.read_text()))


# ------------------------------------------------------------------ golden: the document's records


def test_golden_insert() -> None:
    expected = golden("insert.json")
    ev = event(Op.INSERT, NO_PK, after=MAN, when=at_ms(1620457896000))
    assert_like_example(one(ev, "pkset_test"), expected)


def test_golden_update_before_and_after() -> None:
    ev = event(Op.UPDATE, NO_PK_FULL, before=MAN, after=WOMAN, when=at_ms(1620458077000))
    before, after = docs([ev], "pkset_test")
    assert_like_example(before, golden("update_before.json"))
    assert_like_example(after, golden("update_after.json"))
    assert before["payload"]["sequenceId"] == after["payload"]["sequenceId"]


def test_golden_update_single_record() -> None:
    ev = event(Op.UPDATE, NO_PK_FULL, before=MAN, after=WOMAN, when=at_ms(1620458077000))
    got = one(ev, "pkset_test", **{"dataworks.update_records": "single"})
    assert_like_example(got, golden("update_single.json"))


def test_golden_delete() -> None:
    ev = event(Op.DELETE, NO_PK_FULL, before=WOMAN, when=at_ms(1620458266000))
    assert_like_example(one(ev, "pkset_test"), golden("delete.json"))


def test_golden_heartbeat() -> None:
    expected = golden("heartbeat.json")
    (message,) = DataWorksEncoder(options()).heartbeat(0x16B3748, 1620457659000 * 1000)
    got = orjson.loads(message.value)
    VALIDATOR.validate(got)
    # scn is the overall format's Oracle-only field: null for PostgreSQL.
    assert got["payload"].pop("scn") is None
    assert got == expected
    assert message.kind == "heartbeat"
    assert message.key is None
    assert message.commit_lsn == 0x16B3748


# ------------------------------------------------------------------ update pairs, images


def test_update_is_two_records_sharing_a_sequence_id() -> None:
    one_row, two_rows = {"id": "1", "qty": "1"}, {"id": "1", "qty": "2"}
    events = [
        event(Op.INSERT, ORDERS_FULL, after=one_row, ordinal=1),
        event(Op.UPDATE, ORDERS_FULL, before=one_row, after=two_rows, ordinal=2),
        event(Op.DELETE, ORDERS_FULL, before=two_rows, ordinal=3),
    ]
    messages = encode(DataWorksEncoder(), events)
    got = [orjson.loads(m.value)["payload"] for m in messages]
    assert [p["op"] for p in got] == ["INSERT", "UPDATE_BEFOR", "UPDATE_AFTER", "DELETE"]
    seqs = [p["sequenceId"] for p in got]
    assert seqs[1] == seqs[2]
    assert len(set(seqs)) == 3
    assert seqs == sorted(seqs)
    assert seqs[1] == f"{0x16B3748:020d}{2:010d}"
    assert got[1]["before"] == {"dataColumn": {"id": 1, "note": None, "qty": 1}}
    assert got[1]["after"] is None
    assert got[2]["before"] is None
    assert got[2]["after"] == {"dataColumn": {"id": 1, "note": None, "qty": 2}}
    assert [m.ordinal for m in messages] == [1, 2, 2, 3]
    assert messages[1].key == messages[2].key == row_key(ORDERS_FULL, events[1].after)


def test_update_without_before_image_carries_the_key_as_before() -> None:
    """REPLICA IDENTITY DEFAULT, key unchanged: the key (from the new row) is all that is known."""
    ev = event(Op.UPDATE, ORDERS, after={"id": "1", "note": "n", "qty": "4"})
    before, after = docs([ev])
    assert before["payload"]["before"] == {"dataColumn": {"id": 1}}
    assert after["payload"]["after"] == {"dataColumn": {"id": 1, "note": "n", "qty": 4}}


def test_update_with_key_only_before_image() -> None:
    ev = event(
        Op.UPDATE, ORDERS, before={"id": "1"}, before_key_only=True, after={"id": "2", "qty": "4"}
    )
    before, after = docs([ev])
    assert before["payload"]["before"] == {"dataColumn": {"id": 1}}
    assert after["payload"]["after"]["dataColumn"]["id"] == 2


def test_delete_key_only() -> None:
    got = one(event(Op.DELETE, ORDERS, before={"id": "7"}, before_key_only=True))
    assert got["payload"]["before"] == {"dataColumn": {"id": 7}}
    assert got["payload"]["after"] is None
    assert [c["name"] for c in got["schema"]["dataColumn"]] == ["id", "note", "qty"]


def test_unchanged_toast() -> None:
    ev = event(Op.UPDATE, ORDERS, after={"id": "1", "note": UNCHANGED_TOAST, "qty": "4"})
    assert docs([ev])[1]["payload"]["after"] == {"dataColumn": {"id": 1, "qty": 4}}
    full = event(
        Op.UPDATE,
        ORDERS_FULL,
        before={"id": "1", "note": "long", "qty": "3"},
        after={"id": "1", "note": UNCHANGED_TOAST, "qty": "4"},
    )
    assert docs([full])[1]["payload"]["after"] == {
        "dataColumn": {"id": 1, "note": "long", "qty": 4}
    }


def test_schema_part_describes_the_table() -> None:
    got = one(event(Op.INSERT, ORDERS, after={"id": "1"}))
    assert got["schema"] == {
        "dataColumn": [
            {"name": "id", "type": "LONG"},
            {"name": "note", "type": "STRING"},
            {"name": "qty", "type": "LONG"},
        ],
        "primaryKey": ["id"],
        "source": {
            "dbType": "PostgreSQL",
            "dbVersion": "16.4",
            "dbName": "shop",
            "schemaName": "public",
            "tableName": "orders",
        },
    }
    assert got["payload"]["timestamp"]["eventTime"] == 1714673849123


def test_truncate_record() -> None:
    ev = ChangeEvent(Op.TRUNCATE, ORDERS, None, None, 700, 0x16B3748, 0, 1, truncate_options=1)
    got = one(ev)["payload"]
    assert got["op"] == "TRUNCATE"
    assert got["before"] is None
    assert got["after"] is None
    assert got["ddl"] == {"text": 'TRUNCATE TABLE "public"."orders" CASCADE', "ddlMeta": None}


def test_transaction_records_are_off_by_default_and_can_be_turned_on() -> None:
    events = [event(Op.INSERT, ORDERS, after={"id": str(i)}, ordinal=i) for i in (1, 2)]
    assert [orjson.loads(m.value)["payload"]["op"] for m in encode(DataWorksEncoder(), events)] == [
        "INSERT",
        "INSERT",
    ]
    encoder = DataWorksEncoder(options(**{"dataworks.transaction_records": "true"}))
    messages = encode(encoder, events)
    payloads = [orjson.loads(m.value)["payload"] for m in messages]
    assert [p["op"] for p in payloads] == [
        "TRANSACTION_BEGIN", "INSERT", "INSERT", "TRANSACTION_END",
    ]  # fmt: skip
    seqs = [p["sequenceId"] for p in payloads]
    assert seqs == sorted(seqs)
    assert seqs[0].endswith("0000000000")
    assert seqs[-1].endswith("0000000003")
    assert [m.kind for m in messages] == ["begin", "change", "change", "commit"]
    assert messages[0].key is None


# ------------------------------------------------------------------ types and exact values


@pytest.mark.parametrize("timestamp_type", ["auto", "date", "string"])
def test_values_have_the_json_types_the_dataworks_spec_lists(timestamp_type: str) -> None:
    """Every value of a synthetic stream (all of walcast's types) has its declared type."""
    settings = {"dataworks.timestamp_type": timestamp_type, "dataworks.update_records": "single"}
    encoder = DataWorksEncoder(format_options(parse_settings("dataworks", settings)))
    seen: set[str] = set()
    for item in generate(600, seed=9, tables=8):
        for message in encoder.encode(item):
            doc = orjson.loads(message.value)
            VALIDATOR.validate(doc)
            assert dataworks_type_errors(doc) == []
            seen.update(c["type"] for c in doc["schema"]["dataColumn"] or [])
    expected = {"BOOLEAN", "LONG", "DOUBLE", "BYTES", "STRING"}
    assert seen >= (expected if timestamp_type == "string" else expected | {"DATE"})


def test_type_check_catches_a_wrong_type() -> None:
    doc = one(event(Op.INSERT, ORDERS, after={"id": "1", "note": "x", "qty": "2"}))
    assert dataworks_type_errors(doc) == []
    doc["payload"]["after"]["dataColumn"]["id"] = "1"
    assert dataworks_type_errors(doc) == ["id: LONG holds '1'"]


def test_value_types() -> None:
    table = table_with(
        "public",
        "types",
        [
            ("b", "bool", True, -1),
            ("s", "int2", False, -1),
            ("r", "float4", False, -1),
            ("d", "float8", False, -1),
            ("n", "numeric", False, -1),
            ("c", "bpchar", False, 7),
            ("day", "date", False, -1),
            ("t", "time", False, -1),
            ("i", "interval", False, -1),
            ("u", "uuid", False, -1),
            ("j", "jsonb", False, -1),
            ("a", "_int4", False, -1),
            ("ip", "inet", False, -1),
        ],
    )
    after = {
        "b": "t",
        "s": "-32768",
        "r": "3.4028235e+38",
        "d": "-1.7976931348623157e+308",
        "n": "NaN",
        "c": "ab ",
        "day": "2024-05-02",
        "t": "24:00:00",
        "i": "1 year 2 mons -3 days +04:05:06.789",
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "j": '{"k": [1, "x"]}',
        "a": "{1,NULL,3}",
        "ip": "192.168.0.1/24",
    }
    got = one(event(Op.INSERT, table, after=after))
    types = {c["name"]: c["type"] for c in got["schema"]["dataColumn"]}
    assert types == {
        "b": "BOOLEAN", "s": "LONG", "r": "DOUBLE", "d": "DOUBLE", "n": "STRING", "c": "STRING",
        "day": "DATE", "t": "STRING", "i": "STRING", "u": "STRING", "j": "STRING", "a": "STRING",
        "ip": "STRING",
    }  # fmt: skip
    values = got["payload"]["after"]["dataColumn"]
    assert values["b"] is True
    assert values["s"] == -32768
    assert values["r"] == float("3.4028235e+38")
    assert values["d"] == -1.7976931348623157e308
    assert values["day"] == 1714608000000
    for name in ("n", "c", "t", "i", "u", "j", "a", "ip"):
        assert values[name] == after[name], name


@pytest.mark.parametrize("special", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_doubles_are_strings(special: str) -> None:
    table = make_table("public", "f", [("id", "int4", True), ("x", "float8", False)])
    assert after_columns(event(Op.INSERT, table, after={"id": "1", "x": special}))["x"] == special


def test_exact_values_survive() -> None:
    table = table_with(
        "public",
        "exact",
        [
            ("id", "int8", True, -1),
            ("amount", "numeric", False, ((38 << 16) | 10) + 4),
            ("low", "int8", False, -1),
            ("at", "timestamptz", False, -1),
            ("at_ms", "timestamptz", False, 3),
            ("blob", "bytea", False, -1),
            ("f", "float8", False, -1),
            ("text", "text", False, -1),
        ],
    )
    after = {
        "id": "9223372036854775807",
        "amount": "1234567890123456789012345678.0123456789",
        "low": "-9223372036854775808",
        "at": "2024-05-02 18:17:29.123456+00",
        "at_ms": "2024-05-02 18:17:29.123+00",
        "blob": "\\x0000ff00",
        "f": "0.30000000000000004",
        "text": DELIMITERS,
    }
    got = one(event(Op.INSERT, table, after=after))
    types = {c["name"]: c["type"] for c in got["schema"]["dataColumn"]}
    assert types["at"] == "STRING"  # µs: a DATE would lose them
    assert types["at_ms"] == "DATE"  # declared precision 3: a DATE is exact
    values = orjson.loads(orjson.dumps(got))["payload"]["after"]["dataColumn"]
    assert values["id"] == 2**63 - 1
    assert values["low"] == -(2**63)
    assert Decimal(values["amount"]) == Decimal("1234567890123456789012345678.0123456789")
    assert dt.datetime.fromisoformat(values["at"]) == dt.datetime(
        2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC
    )
    assert values["at_ms"] == 1714673849123
    assert base64.b64decode(values["blob"]) == b"\x00\x00\xff\x00"
    assert values["f"] == 0.30000000000000004
    assert values["text"] == DELIMITERS


@pytest.mark.parametrize(
    ("mode", "ts_type", "value"),
    [
        ("auto", "STRING", "1969-12-31 23:59:59.9995"),
        ("string", "STRING", "1969-12-31 23:59:59.9995"),
        ("date", "DATE", -1),  # floor: µs truncated towards the past
    ],
)
def test_timestamp_type_setting(mode: str, ts_type: str, value: Any) -> None:
    table = make_table(
        "public", "ts", [("id", "int4", True), ("at", "timestamp", False), ("d", "date", False)]
    )
    ev = event(
        Op.INSERT, table, after={"id": "1", "at": "1969-12-31 23:59:59.9995", "d": "1970-01-02"}
    )
    got = one(ev, **{"dataworks.timestamp_type": mode})
    types = {c["name"]: c["type"] for c in got["schema"]["dataColumn"]}
    assert types["at"] == ts_type
    assert got["payload"]["after"]["dataColumn"]["at"] == value
    assert types["d"] == ("STRING" if mode == "string" else "DATE")
    assert got["payload"]["after"]["dataColumn"]["d"] == (
        "1970-01-02" if mode == "string" else 86_400_000
    )


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1970-01-01 00:00:00+00", 0),
        ("2024-05-02 18:17:29.123456+00", 1714673849123),
        ("2024-05-02 20:17:29.123+02", 1714673849123),
        ("2024-05-02 12:47:29.123-05:30", 1714673849123),
        ("1969-12-31 23:59:59.999999+00", -1),
        # 44 BC is astronomical year -43 (proleptic Gregorian).
        ("0044-03-15 12:00:00+00 BC", (days_from_civil(-43, 3, 15) * 86_400 + 12 * 3600) * 1000),
        ("10000-01-01 00:00:00", 253_402_300_800_000),
        ("infinity", "infinity"),
        ("-infinity", "-infinity"),
    ],
)
def test_timestamp_ms(text: str, ms: int | str) -> None:
    assert timestamp_ms(text) == ms


def test_date_ms() -> None:
    assert date_ms("1970-01-01") == 0
    assert date_ms("2000-03-01") == days_from_civil(2000, 3, 1) * 86_400_000 == 951_868_800_000
    assert date_ms("0001-01-01 BC") == days_from_civil(0, 1, 1) * 86_400_000
    assert date_ms("infinity") == "infinity"
    for year in (1, 1600, 1900, 1970, 2000, 2024, 9999):
        when = dt.date(year, 12, 31)
        assert date_ms(when.isoformat()) == (when - dt.date(1970, 1, 1)).days * 86_400_000


def test_bytea_escape_format() -> None:
    assert bytea_bytes("\\x00ff") == b"\x00\xff"
    assert bytea_bytes("a\\000\\\\b\\377") == b"a\x00\\b\xff"

"""``ibm``: IBM Q Replication Event Publishing delimited messages."""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
import uuid
from pathlib import Path

import jsonschema
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st

from bench.kit.kafka import read_all
from capture.errors import ConfigError
from capture.events import (
    ChangeEvent,
    Op,
    Table,
    TransactionBegin,
    TransactionCommit,
    pg_ts_to_datetime,
)
from capture.formats import EncodedMessage, FormatOptions, parse_settings
from capture.formats.ibm.encode import (
    HEADER_FIELDS,
    IbmDelimitedEncoder,
    format_commit_lsn,
    format_transaction_id,
    parse_commit_lsn,
    parse_transaction_id,
)
from capture.formats.ibm.records import split_records
from capture.formats.ibm.settings import HEADER_BYTES, RECORD_OVERHEAD
from capture.formats.layout import layout_record
from capture.lsn import parse_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST
from capture.synthetic import generate
from capture.teststream import produce
from tests.support.events import commit_ts, event, keyed_table

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "formats" / "ibm"
WHEN = dt.datetime(2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC)
TS = commit_ts(WHEN)
LSN = parse_lsn("0/16B3748")


def encode_txn(encoder, events, *, xid=700, lsn=LSN, ts=TS):
    out = encoder.begin(TransactionBegin(xid, lsn, ts, len(events)))
    for e in events:
        out += encoder.change(e)
    out += encoder.commit(TransactionCommit(xid, lsn, lsn + 56, ts, len(events)))
    return out


def records(message_value: bytes, **delims) -> list[list[str | None]]:
    return list(split_records(message_value, **delims))


ORDERS = [("id", "int8", True), ("note", "text", False), ("amount", "numeric", False)]


# --------------------------------------------------------------------------- header


def test_insert_record_matches_the_documented_layout() -> None:
    table = keyed_table(ORDERS)
    [message] = encode_txn(
        IbmDelimitedEncoder(),
        [event(Op.INSERT, table, after={"id": "1", "note": "hi", "amount": "9.50"})],
    )
    version = layout_record(table)["version"].encode()
    assert message.value == (
        b'10,"IBM","2024123","181729123456","public","orders","ISRT",'
        b'"0000:0000:0000:0000:0000:02bc","0000:0000:0000:0000:0000:0000:016b:3748",'
        b'"2024-05-02-18.17.29","' + version + b'",0000,,,,1,"hi",9.50\n'
    )
    assert message.key == b"postgres"
    assert message.kind == "transaction"
    assert (message.commit_lsn, message.xid, message.ordinal) == (LSN, 700, 1)
    assert (message.schema, message.table) == (None, None)


def test_header_has_twelve_fields_then_before_and_after_values() -> None:
    table = keyed_table(ORDERS)
    [message] = encode_txn(
        IbmDelimitedEncoder(),
        [
            event(
                Op.UPDATE,
                table,
                {"id": "1", "note": "a", "amount": "1"},
                {"id": "1", "note": "b", "amount": "2"},
            )
        ],
    )
    [fields] = records(message.value)
    assert len(fields) == len(HEADER_FIELDS) + 2 * 3 == layout_record(table)["field_count"]
    header = dict(zip(HEADER_FIELDS, fields[:12], strict=True))
    assert header == {
        "type": "10",
        "identifier": "IBM",
        "date": "2024123",
        "time": "181729123456",
        "table_owner": "public",
        "table_name": "orders",
        "operation": "REPL",
        "transaction_identifier": "0000:0000:0000:0000:0000:02bc",
        "commit_lsn": "0000:0000:0000:0000:0000:0000:016b:3748",
        "commit_time": "2024-05-02-18.17.29",
        "plan_name": layout_record(table)["version"],
        "segment_number": "0000",
    }
    assert fields[12:] == ["1", "a", "1", "1", "b", "2"]


@pytest.mark.parametrize(
    ("when", "date", "time"),
    [
        (dt.datetime(2007, 8, 6, 0, 0, 0, tzinfo=dt.UTC), "2007218", "000000000000"),
        (dt.datetime(2024, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), "2024366", "235959999999"),
        (dt.datetime(2000, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC), "2000001", "000001000005"),
    ],
)
def test_date_and_time_are_the_commit_time(when: dt.datetime, date: str, time: str) -> None:
    table = keyed_table(ORDERS)
    ts = commit_ts(when)
    [message] = encode_txn(
        IbmDelimitedEncoder(), [event(Op.INSERT, table, after={"id": "1"}, when=when)], ts=ts
    )
    fields = records(message.value)[0]
    assert fields[2:4] == [date, time]
    assert fields[9] == when.strftime("%Y-%m-%d-%H.%M.%S")


@given(st.integers(0, 2**32 - 1))
def test_transaction_identifier_round_trips(xid: int) -> None:
    text = format_transaction_id(xid)
    assert len(text) == 29
    assert text.count(":") == 5
    assert parse_transaction_id(text) == xid


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_commit_lsn_round_trips_and_sorts_like_the_lsn(a: int, b: int) -> None:
    ta, tb = format_commit_lsn(a), format_commit_lsn(b)
    assert len(ta) == 39
    assert ta.count(":") == 7
    assert parse_commit_lsn(ta) == a
    assert (ta < tb) == (a < b)


def test_commit_lsn_groups_are_the_lsn_halves() -> None:
    assert format_commit_lsn(parse_lsn("1A/2B")) == "0000:0000:0000:0000:0000:001a:0000:002b"
    assert format_transaction_id(700) == "0000:0000:0000:0000:0000:02bc"


def test_identifier_and_plan_name_settings() -> None:
    table = keyed_table(ORDERS)
    enc = IbmDelimitedEncoder(
        FormatOptions(
            settings=parse_settings(
                "ibm", {"ibm.identifier": 'WAL"CAST', "ibm.plan_name": "ASNQCAP"}
            )
        )
    )
    [message] = encode_txn(enc, [event(Op.INSERT, table, after={"id": "1"})])
    assert b'"WAL""CAST"' in message.value
    assert records(message.value)[0][1] == 'WAL"CAST'
    assert records(message.value)[0][10] == "ASNQCAP"


def test_owner_and_table_names_are_quoted_and_escaped() -> None:
    table = keyed_table(ORDERS, schema='we"ird', name="a,b")
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.INSERT, table, after={"id": "1"})])
    assert records(message.value)[0][4:6] == ['we"ird', "a,b"]


# --------------------------------------------------------------------------- values

ALL = [
    ("id", "int8", True),
    ("i2", "int2", False),
    ("i4", "int4", False),
    ("num", "numeric", False),
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
    ("arr", "_text", False),
    ("m", "money", False),
]
VALUES = {
    "id": "-9223372036854775808",
    "i2": "-32768",
    "i4": "2147483647",
    "num": "-12345678901234567890.0000000001",
    "f4": "1.5e+20",
    "f8": "-Infinity",
    "flag": "t",
    "txt": 'quote " comma , newline \n semicolon ; pipe | tab \t backslash \\ done',
    "vc": "",
    "ch": "ab   ",
    "blob": "\\x00ff0010",
    "d": "0044-03-15 BC",
    "t": "24:00:00",
    "ttz": "12:00:01.5+05:30",
    "ts": "infinity",
    "tstz": "2024-05-02 18:17:29.123456+00",
    "iv": "1 year 2 mons 3 days 04:05:06.789",
    "u": "cc22af58-be65-41cc-be24-34e37af027bc",
    "j": '{"a": [1, "x,y"], "b": "say \\"hi\\""}',
    "jb": '{"k": "v"}',
    "ip": "10.0.0.1/8",
    "arr": '{"a b",NULL,"c,d","e\\"f"}',
    "m": "$1,234.50",
}
EXPECTED = {
    "id": "-9223372036854775808",
    "i2": "-32768",
    "i4": "2147483647",
    "num": "-12345678901234567890.0000000001",
    "f4": "1.5e+20",
    "f8": "-Infinity",
    "flag": "1",
    "blob": "00FF0010",
}


def test_every_family_renders_as_documented_and_round_trips() -> None:
    table = keyed_table(ALL)
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.INSERT, table, after=VALUES)])
    [fields] = records(message.value)
    after = dict(zip([c for c, _, _ in ALL], fields[12 + len(ALL) :], strict=True))
    assert fields[12 : 12 + len(ALL)] == [None] * len(ALL)
    for name, value in VALUES.items():
        assert after[name] == EXPECTED.get(name, value), name
    text = message.value.decode()
    assert ",-9223372036854775808," in text  # numerics bare
    assert ',-Infinity,1,"quote "" comma' in text  # bool bare, quotes doubled
    assert ',"","ab   ","00FF0010","0044-03-15 BC","24:00:00",' in text


def test_null_is_an_empty_field_and_empty_string_is_two_delimiters() -> None:
    table = keyed_table(
        [("id", "int8", True), ("a", "text", False), ("b", "bytea", False), ("n", "int4", False)]
    )
    [message] = encode_txn(
        IbmDelimitedEncoder(), [event(Op.INSERT, table, after={"id": "1", "a": "", "b": "\\x"})]
    )
    assert message.value.endswith(b',0000,,,,,1,"","",\n')
    assert records(message.value)[0][-4:] == ["1", "", "", None]


def test_decimal_character_and_custom_delimiters() -> None:
    table = keyed_table(ALL)
    settings = {
        "ibm.column_delimiter": "|",
        "ibm.record_delimiter": "\\x1e",
        "ibm.string_delimiter": "'",
        "ibm.decimal_character": ",",
    }
    enc = IbmDelimitedEncoder(FormatOptions(settings=parse_settings("ibm", settings)))
    values = dict(VALUES, txt="it's | a ' test,\x1e", f8="0.5")
    [message] = encode_txn(enc, [event(Op.INSERT, table, after=values)])
    assert message.value.endswith(b"\x1e")
    parsed = records(
        message.value, column_delimiter="|", record_delimiter="\x1e", string_delimiter="'"
    )
    assert len(parsed) == 1
    after = dict(zip([c for c, _, _ in ALL], parsed[0][12 + len(ALL) :], strict=True))
    assert after["txt"] == "it's | a ' test,\x1e"
    assert after["num"] == "-12345678901234567890,0000000001"
    assert after["f8"] == "0,5"
    assert after["f4"] == "1,5e+20"
    assert after["id"] == "-9223372036854775808"  # integers have no decimal point
    assert parsed[0][0:2] == ["10", "IBM"]


def test_binary_mode_values_render_like_text_mode() -> None:
    table = keyed_table(
        [
            ("id", "int4", True),
            ("flag", "bool", False),
            ("note", "text", False),
            ("b", "bytea", False),
        ]
    )
    text = event(Op.INSERT, table, after={"id": "7", "flag": "f", "note": "x", "b": "\\x0001"})
    binary = event(
        Op.INSERT,
        table,
        after={"id": struct.pack(">i", 7), "flag": b"\x00", "note": b"x", "b": b"\x00\x01"},
        binary={"id", "flag", "note", "b"},
    )
    [a] = encode_txn(IbmDelimitedEncoder(), [text])
    [b] = encode_txn(IbmDelimitedEncoder(), [binary])
    assert a.value == b.value


# --------------------------------------------------------------------------- images


def test_insert_and_delete_leave_the_other_image_empty() -> None:
    table = keyed_table(ORDERS, identity="f")
    row = {"id": "1", "note": "n", "amount": "2.00"}
    [message] = encode_txn(
        IbmDelimitedEncoder(),
        [event(Op.INSERT, table, after=row), event(Op.DELETE, table, before=row, ordinal=2)],
    )
    ins, dele = records(message.value)
    assert ins[6] == "ISRT"
    assert ins[12:] == [None, None, None, "1", "n", "2.00"]
    assert dele[6] == "DLET"
    assert dele[12:] == ["1", "n", "2.00", None, None, None]


def test_default_identity_update_without_old_image_repeats_the_key_only() -> None:
    table = keyed_table(ORDERS)
    [message] = encode_txn(
        IbmDelimitedEncoder(),
        [event(Op.UPDATE, table, after={"id": "5", "note": "new", "amount": "1.00"})],
    )
    assert records(message.value)[0][12:] == ["5", None, None, "5", "new", "1.00"]


def test_key_only_old_image_gives_key_values_only() -> None:
    table = keyed_table(ORDERS)
    upd = event(
        Op.UPDATE, table, {"id": "5"}, {"id": "6", "note": "x", "amount": "1"}, before_key_only=True
    )
    dele = event(Op.DELETE, table, {"id": "6"}, before_key_only=True, ordinal=2)
    [message] = encode_txn(IbmDelimitedEncoder(), [upd, dele])
    first, second = records(message.value)
    assert first[12:] == ["5", None, None, "6", "x", "1"]
    assert second[12:] == ["6", None, None, None, None, None]


def test_full_identity_update_carries_the_whole_old_row() -> None:
    table = keyed_table(ORDERS, identity="f")
    [message] = encode_txn(
        IbmDelimitedEncoder(),
        [
            event(
                Op.UPDATE,
                table,
                {"id": "1", "note": None, "amount": "1"},
                {"id": "1", "note": "x", "amount": "2"},
            )
        ],
    )
    assert records(message.value)[0][12:] == ["1", None, "1", "1", "x", "2"]


def test_unchanged_toast_is_copied_from_a_full_old_row() -> None:
    table = keyed_table(ORDERS, identity="f")
    big = "x" * 3000
    before = {"id": "1", "note": big, "amount": "1"}
    after = {"id": "1", "note": UNCHANGED_TOAST, "amount": "2"}
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.UPDATE, table, before, after)])
    fields = records(message.value)[0]
    assert fields[1] == "IBM"
    assert fields[12:] == ["1", big, "1", "1", big, "2"]


def test_unchanged_toast_without_old_value_is_empty_and_flagged() -> None:
    table = keyed_table(ORDERS)
    after = {"id": "1", "note": UNCHANGED_TOAST, "amount": "2"}
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.UPDATE, table, after=after)])
    fields = records(message.value)[0]
    assert fields[1] == "IBM-INVALID-COLUMN-002A-NULL"
    assert fields[12:] == ["1", None, None, "1", None, "2"]
    custom = IbmDelimitedEncoder(
        FormatOptions(settings=parse_settings("ibm", {"ibm.identifier": "PG"}))
    )
    [message] = encode_txn(custom, [event(Op.UPDATE, table, after=after)])
    assert records(message.value)[0][1] == "PG-INVALID-COLUMN-002A-NULL"


def test_truncate_is_skipped_and_counted() -> None:
    table = keyed_table(ORDERS)
    enc = IbmDelimitedEncoder()
    truncate = ChangeEvent(Op.TRUNCATE, table, None, None, 700, LSN, TS, 1)
    assert encode_txn(enc, [truncate]) == []
    assert enc.skipped_truncates == 1
    [message] = encode_txn(enc, [truncate, event(Op.INSERT, table, after={"id": "1"}, ordinal=2)])
    assert len(records(message.value)) == 1
    assert message.ordinal == 2


# --------------------------------------------------------------------------- segments


def _big_txn(table: Table, n: int) -> list[ChangeEvent]:
    return [
        event(
            Op.INSERT,
            table,
            after={"id": str(i), "note": "n" * (i % 50), "amount": "1.00"},
            ordinal=i,
        )
        for i in range(1, n + 1)
    ]


def test_a_transaction_that_fits_is_one_message_numbered_0000() -> None:
    table = keyed_table(ORDERS)
    messages = encode_txn(IbmDelimitedEncoder(), _big_txn(table, 20))
    assert len(messages) == 1
    assert {r[11] for r in records(messages[0].value)} == {"0000"}


@pytest.mark.parametrize("limit", [256, 1000, 4096])
def test_large_transactions_are_segmented_at_record_boundaries(limit: int) -> None:
    table = keyed_table(ORDERS)
    events = _big_txn(table, 200)
    whole = b"".join(m.value for m in encode_txn(IbmDelimitedEncoder(), events))
    enc = IbmDelimitedEncoder(
        FormatOptions(settings=parse_settings("ibm", {"ibm.max_message_size": str(limit)}))
    )
    messages = []
    for e in events:
        got = enc.change(e)
        messages += got
        assert len(enc._buf) <= limit  # at most one pending segment, below the limit
    messages += enc.commit(TransactionCommit(700, LSN, LSN + 56, TS, len(events)))
    assert len(messages) > 1
    numbers = []
    for message in messages:
        assert len(message.value) <= limit
        segs = {r[11] for r in records(message.value)}
        assert len(segs) == 1
        numbers.append(segs.pop())
    assert numbers == [f"{i:04d}" for i in range(1, len(messages))] + ["0000"]
    # Same records, in order; only the segment numbers differ.
    rebuilt = [r[:11] + r[12:] for m in messages for r in records(m.value)]
    assert rebuilt == [r[:11] + r[12:] for r in records(whole)]
    ordinals = [m.ordinal for m in messages]
    assert ordinals[0] == 1
    assert ordinals == sorted(ordinals)


def test_a_record_larger_than_the_limit_travels_alone() -> None:
    table = keyed_table(ORDERS)
    enc = IbmDelimitedEncoder(
        FormatOptions(settings=parse_settings("ibm", {"ibm.max_message_size": "256"}))
    )
    events = [
        event(Op.INSERT, table, after={"id": "1"}, ordinal=1),
        event(Op.INSERT, table, after={"id": "2", "note": "x" * 1000}, ordinal=2),
        event(Op.INSERT, table, after={"id": "3"}, ordinal=3),
    ]
    messages = encode_txn(enc, events)
    assert [len(records(m.value)) for m in messages] == [1, 1, 1]
    assert len(messages[1].value) > 256
    assert [records(m.value)[0][11] for m in messages] == ["0001", "0002", "0000"]


def test_segment_numbers_wrap_after_9999_and_never_reuse_0000() -> None:
    enc = IbmDelimitedEncoder()
    enc._segment = 9998
    assert enc._next_segment() == b"9999"
    assert enc._next_segment() == b"0001"


def test_flush_sends_pending_records_as_a_non_final_segment() -> None:
    table = keyed_table(ORDERS)
    enc = IbmDelimitedEncoder()
    enc.begin(TransactionBegin(700, LSN, TS, 3))
    assert enc.change(event(Op.INSERT, table, after={"id": "1"})) == []
    [message] = enc.flush()
    assert records(message.value)[0][11] == "0001"
    assert enc.flush() == []


def test_empty_transaction_sends_nothing() -> None:
    assert encode_txn(IbmDelimitedEncoder(), []) == []


def test_changes_without_begin_and_commit_are_grouped_per_transaction() -> None:
    table = keyed_table(ORDERS)
    enc = IbmDelimitedEncoder()
    assert enc.change(event(Op.INSERT, table, after={"id": "1"}, xid=1, commit_lsn=100)) == []
    [first] = enc.change(event(Op.INSERT, table, after={"id": "2"}, xid=2, commit_lsn=200))
    assert first.xid == 1
    assert records(first.value)[0][11] == "0000"


def test_frame_for_tail_prints_one_line_per_record() -> None:
    table = keyed_table(ORDERS)
    enc = IbmDelimitedEncoder()
    [message] = encode_txn(enc, _big_txn(table, 5))
    framed = enc.frame_for_tail(message)
    assert framed == message.value
    assert len(framed.decode().splitlines()) == 5


# --------------------------------------------------------------------------- settings


def test_escapes_accepted_and_settings_of_other_formats_rejected() -> None:
    enc = IbmDelimitedEncoder(
        FormatOptions(
            settings=parse_settings(
                "ibm", {"ibm.column_delimiter": "\\t", "ibm.max_message_size": 4096}
            )
        )
    )
    assert enc.settings.column_delimiter == "\t"
    assert enc.settings.max_message_size == enc.max_message_size == 4096
    with pytest.raises(ConfigError, match=r"canal\.x: not a setting of format ibm"):
        IbmDelimitedEncoder(FormatOptions(settings=parse_settings("ibm", {"canal.x": "1"})))


# --------------------------------------------------------------------------- streams


def _expected_field(kind: str, text: str | None) -> str | None:
    if text is None:
        return None
    if kind == "bool":
        return "1" if text == "t" else "0"
    if kind == "bytea":
        return text[2:].upper()
    return text


def test_synthetic_stream_round_trips_record_by_record() -> None:
    encoder = IbmDelimitedEncoder()
    events: dict[tuple[int, int], ChangeEvent] = {}
    messages = []

    items = list(generate(3000, seed=11, tables=8))
    for item in items:
        if isinstance(item, ChangeEvent):
            events[(item.commit_lsn, item.ordinal)] = item
    produce(encoder, iter(items), messages.append)
    seen = 0
    position: dict[int, int] = {}
    for message in messages:
        for fields in records(message.value):
            lsn = parse_commit_lsn(fields[8])
            position[lsn] = position.get(lsn, 0) + 1
            event = events[(lsn, position[lsn])]
            seen += 1
            table = event.table
            n = len(table.columns)
            assert fields[4:7] == [
                table.schema,
                table.name,
                {"insert": "ISRT", "update": "REPL", "delete": "DLET"}[event.op],
            ]
            assert parse_transaction_id(fields[7]) == event.xid
            assert fields[9] == pg_ts_to_datetime(event.commit_ts).strftime("%Y-%m-%d-%H.%M.%S")
            after = event.after
            before = event.before
            for i, col in enumerate(table.columns):
                kind = col.type_name
                got_after = fields[12 + n + i]
                got_before = fields[12 + i]
                if after is None:
                    assert got_after is None
                else:
                    value = after.text(i)
                    if value is UNCHANGED_TOAST:
                        value = (
                            before.text(i) if before is not None and not before.key_only else None
                        )
                    assert got_after == _expected_field(kind, value), (col.name, event)
                if before is None:
                    expected = (
                        after.text(i) if event.op is Op.UPDATE and i in table.key_indexes else None
                    )
                    assert got_before == _expected_field(kind, expected)
                elif before.key_only and i not in table.key_indexes:
                    assert got_before is None
                else:
                    assert got_before == _expected_field(kind, before.text(i))
    assert seen == len(events)


# --------------------------------------------------------------------------- documentation

LAYOUT_JSON = Path(__file__).resolve().parents[3] / "schemas" / "ibm-delimited.layout.json"


def test_machine_readable_layout_matches_the_encoder() -> None:
    doc = json.loads(LAYOUT_JSON.read_text())
    assert [h["name"] for h in doc["header"]] == list(HEADER_FIELDS)
    table = keyed_table(ALL)
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.UPDATE, table, after=VALUES)])
    [fields] = records(message.value)
    for spec, value in zip(doc["header"], fields[:12], strict=True):
        if value is not None:
            assert re.fullmatch(spec["pattern"], value), (spec["name"], value)
    text = message.value.decode()
    assert text.startswith('10,"IBM",')  # type bare, identifier quoted
    layout = layout_record(table)
    jsonschema.Draft202012Validator(doc["layout_record"]).validate(layout)
    renderings = doc["type_renderings"]
    for column in layout["columns"]:
        expected = (
            renderings.get(column["type"])
            or renderings["_*" if column["type"].startswith("_") else "*"]
        )
        assert column["rendering"] == expected, column
    settings = {
        d["setting"]: d["default"]
        for k, d in doc["delimiters"].items()
        if k != "rules" and isinstance(d, dict) and "setting" in d
    }
    enc = IbmDelimitedEncoder()
    for setting, default in settings.items():
        assert getattr(enc.settings, setting.removeprefix("ibm.")) == default
    assert doc["message"]["segmentation"]["default_bytes"] == enc.max_message_size


def test_zero_column_tables_and_escape_format_bytea() -> None:
    empty = keyed_table([])
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.INSERT, empty, after={})])
    assert message.value.endswith(b',"' + layout_record(empty)["version"].encode() + b'",0000\n')
    assert len(records(message.value)[0]) == 12 == layout_record(empty)["field_count"]
    table = keyed_table([("id", "int8", True), ("b", "bytea", False)])
    [message] = encode_txn(
        IbmDelimitedEncoder(), [event(Op.INSERT, table, after={"id": "1", "b": "a\\000\\\\"})]
    )
    assert records(message.value)[0][-1] == "61005C"


# --------------------------------------------------------------------------- segment size

PRODUCER_MAX = 1_000_000
"""librdkafka's default ``message.max.bytes``."""
DAEMON_ENVELOPE = 1024
"""What ``walcast run`` reserves below it (``max_message_bytes`` = the difference)."""
WIDE = keyed_table([("id", "int8", True), ("payload", "text", False)], name="wide")


def _big_transaction(rows: int = 2000, width: int = 1016) -> list[ChangeEvent]:
    """2,000 rows of about 1 kB. At this width a segment limited to 1,000,000 bytes fills to
    999,985, which with key, headers and overhead exceeds librdkafka's message.max.bytes."""
    return [
        event(Op.INSERT, WIDE, after={"id": str(i), "payload": "x" * width}, ordinal=i)
        for i in range(1, rows + 1)
    ]


def _wire_size(message: EncodedMessage) -> int:
    """What the producer counts against ``message.max.bytes``, without Kafka's overhead."""
    headers = sum(len(k) + len(v or b"") for k, v in message.kafka_headers())
    return len(message.value) + len(message.key or b"") + headers


def test_segment_size_without_a_sink_limit_is_one_million() -> None:
    assert IbmDelimitedEncoder().max_message_size == 1_000_000


@pytest.mark.parametrize("sink", [PRODUCER_MAX - DAEMON_ENVELOPE, PRODUCER_MAX])
def test_segment_size_leaves_room_for_key_headers_and_kafka_overhead(sink: int) -> None:
    options = FormatOptions(database="shop", max_message_bytes=sink)
    encoder = IbmDelimitedEncoder(options)
    assert encoder.max_message_size == sink - len(b"shop") - HEADER_BYTES - RECORD_OVERHEAD
    messages = encode_txn(encoder, _big_transaction())
    assert len(messages) >= 2
    for message in messages:
        assert len(message.value) <= encoder.max_message_size
        assert _wire_size(message) + RECORD_OVERHEAD <= sink
    assert sum(len(records(m.value)) for m in messages) == 2000


def test_an_explicit_size_the_sink_cannot_take_is_a_config_error() -> None:
    options = FormatOptions(
        database="shop",
        max_message_bytes=PRODUCER_MAX - DAEMON_ENVELOPE,
        settings=parse_settings("ibm", {"ibm.max_message_size": "1000000"}),
    )
    with pytest.raises(ConfigError, match=r"^ibm\.max_message_size: 1000000 bytes do not fit"):
        IbmDelimitedEncoder(options)
    small = FormatOptions(max_message_bytes=300)
    with pytest.raises(ConfigError, match=r"^ibm\.max_message_size: the sink takes messages"):
        IbmDelimitedEncoder(small)


def _produce(bootstrap: str, topic: str, messages: list[EncodedMessage]) -> list[str]:
    """Produce ``messages`` with librdkafka's defaults; return the errors."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[str] = []
    for message in messages:
        try:
            producer.produce(
                topic,
                message.value,
                message.key,
                headers=message.kafka_headers(),
                on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
            )
        except KafkaException as exc:
            errors.append(str(exc))
    assert producer.flush(60) == 0
    return errors


@pytest.mark.integration
def test_a_big_transaction_at_the_defaults_fits_the_producer_limit(kafka_bootstrap: str) -> None:
    """2,000 rows of ~1 kB through librdkafka's default message.max.bytes, on a real broker.

    The former default (1,000,000-byte segments, whatever the sink) is refused as too large.
    """
    topic = f"walcast-test-ibm-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    try:
        options = FormatOptions(database="shop", max_message_bytes=PRODUCER_MAX - DAEMON_ENVELOPE)
        messages = encode_txn(IbmDelimitedEncoder(options), _big_transaction())
        assert _produce(kafka_bootstrap, topic, messages) == []
        delivered = read_all(kafka_bootstrap, [topic])
        assert [r.value for r in delivered] == [m.value for m in messages]
        former = FormatOptions(
            database="shop", settings=parse_settings("ibm", {"ibm.max_message_size": "1000000"})
        )
        errors = _produce(
            kafka_bootstrap, topic, encode_txn(IbmDelimitedEncoder(former), _big_transaction())
        )
        assert any("Message size too large" in e for e in errors)
    finally:
        admin.delete_topics([topic])


# --------------------------------------------------------------------------- found by the soak


DOCS = [
    ("id", "int8", True),
    ("title", "text", False),
    ("body", "text", False),
    ("summary", "text", False),
]


def test_every_unavailable_column_is_named_in_the_identifier() -> None:
    """Two unchanged TOAST columns of one row change: both are flagged, in column order
    (the first one where IBM's consumers look for it), so neither reads as NULL."""
    table = keyed_table(DOCS)
    after = {"id": "1", "title": UNCHANGED_TOAST, "body": "new", "summary": UNCHANGED_TOAST}
    [message] = encode_txn(IbmDelimitedEncoder(), [event(Op.UPDATE, table, after=after)])
    fields = records(message.value)[0]
    assert fields[1] == "IBM-INVALID-COLUMN-002A-004A-NULL"
    assert fields[12:] == ["1", None, None, None, "1", None, "new", None]


def test_the_plan_name_carries_the_layout_version() -> None:
    """Records name the layout they were written under (``version`` of the layout
    record): an ADD then DROP COLUMN that brings the field count back still gives
    another version, so a reader never takes one layout's names for another's."""
    first = keyed_table([("id", "int8", True), ("a", "text", False), ("b", "text", False)])
    added = keyed_table(
        [("id", "int8", True), ("a", "text", False), ("b", "text", False), ("c", "int4", False)]
    )
    dropped = keyed_table([("id", "int8", True), ("b", "text", False), ("c", "int4", False)])
    enc = IbmDelimitedEncoder()
    [message] = encode_txn(
        enc,
        [
            event(Op.INSERT, first, after={"id": "1", "a": "x", "b": "y"}),
            event(Op.INSERT, added, after={"id": "2", "a": "x", "b": "y", "c": "3"}),
            event(Op.INSERT, dropped, after={"id": "3", "b": "y", "c": "3"}),
            event(Op.INSERT, first, after={"id": "4", "a": "x", "b": "y"}),
        ],
    )
    plans = [fields[10] for fields in records(message.value)]
    versions = [layout_record(t)["version"] for t in (first, added, dropped, first)]
    assert plans == versions
    assert len(set(versions)) == 3
    assert all(re.fullmatch("[0-9a-f]{16}", v) for v in versions)
    # an explicit plan name is kept as it is (and then no version is written)
    named = IbmDelimitedEncoder(
        FormatOptions(settings=parse_settings("ibm", {"ibm.plan_name": "ASNQCAP"}))
    )
    [message] = encode_txn(named, [event(Op.INSERT, first, after={"id": "1", "a": "x"})])
    assert records(message.value)[0][10] == "ASNQCAP"


def test_a_plan_name_that_looks_like_a_layout_version_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"ibm\.plan_name"):
        parse_settings("ibm", {"ibm.plan_name": "0efd47f9fd2cd13a"})

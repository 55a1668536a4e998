"""The contract every output format keeps, checked for each format of the registry.

Format-specific behaviour (masks, segments, value types …) is tested in each format's own
module; what every encoder promises is tested here once:

* it is registered under its name and declares its settings;
* every message it writes follows the format's schema in ``schemas/``;
* its synthetic stream is byte for byte the golden file (``produce-test-stream`` output);
* the same stream encodes to the same bytes again (replays are detectable);
* text values survive exactly, NULL stays distinct from the empty string;
* every change message carries its commit LSN, xid and ordinal, and all changes of one row
  share one Kafka key;
* ``tail_lines`` prints what the messages frame to.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import orjson
import pytest

from capture.events import ChangeEvent, Op, StreamItem, TransactionBegin, TransactionCommit
from capture.formats import FORMAT_NAMES, EncodedMessage, FormatOptions, encoder_for, format_class
from capture.formats.base import Encoder
from capture.formats.ibm.encode import HEADER_FIELDS, parse_commit_lsn
from capture.lsn import parse_lsn
from capture.synthetic import format_options, generate
from capture.teststream import produce
from tests.support.events import event, make_table
from tests.support.formats import (
    DELIMITERS,
    SCHEMAS,
    assert_golden_stream,
    framed_values,
    golden_path,
)
from tests.support.formats import message_checker as schema_checker

TEXTS = make_table(
    "public", "notes", [("k", "text", True), ("a", "text", False), ("b", "text", False)]
)
NEEDS_TRANSACTION_SIZE = {"shareplex", "qlik"}
"""Formats that state a transaction's size before its changes (``size``,
``transactionLastEvent``)."""
FORMAT_OPTIONS = FormatOptions(database="shop")
FIXED = FormatOptions(database="shop", clock=lambda: 1_714_673_850.25)
"""Options with a fixed clock, so that build-time fields are deterministic."""


KEYED_BY_PRIMARY_KEY_ONLY = {"debezium"}
"""Formats whose key is the primary key or null (Debezium's rule), never the table's name."""


def message_checker(fmt: str) -> Callable[[bytes | None], Any]:
    """The schema check of ``fmt``'s messages; a debezium tombstone (None) decodes to None."""
    if fmt != "debezium":
        return schema_checker(fmt)  # type: ignore[return-value]
    schema = json.loads((SCHEMAS / "debezium.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)

    def check_debezium(value: bytes | None) -> Any:
        if value is None or value == b"null":  # a tombstone (``tail`` prints it as null)
            return None
        doc = orjson.loads(value)
        validator.validate(doc)
        return doc

    return check_debezium


def encode_items(encoder: Encoder, items: list[StreamItem]) -> list[EncodedMessage]:
    out: list[EncodedMessage] = []
    for item in items:
        out.extend(encoder.encode(item))
    return out + encoder.flush()


def transaction(events: list[ChangeEvent]) -> list[StreamItem]:
    first = events[0]
    n = len(events)
    return [
        TransactionBegin(first.xid, first.commit_lsn, first.commit_ts, n),
        *events,
        TransactionCommit(first.xid, first.commit_lsn, first.commit_lsn + 64, first.commit_ts, n),
    ]


def after_texts(fmt: str, decoded: Any, names: list[str]) -> list[dict[str, Any]]:
    """The new rows (column → text) of the row messages of one decoded message."""
    if fmt == "json":
        return [decoded["after"]]
    if fmt == "debezium":
        return [] if decoded is None or decoded.get("after") is None else [decoded["after"]]
    if fmt == "canal":
        return list(decoded["data"])
    if fmt == "shareplex":
        return [decoded["data"]]
    if fmt == "dataworks":
        return [decoded["payload"]["after"]["dataColumn"]]
    if fmt == "qlik":
        return [decoded["message"]["data"]] if decoded["type"] == "DT" else []
    if fmt == "ibm":
        n = len(names)
        first = len(HEADER_FIELDS) + n
        return [dict(zip(names, fields[first : first + n], strict=True)) for fields in decoded]
    items = decoded["afterImages"]
    return [
        {
            name: None if item is None else item[1]["value"].decode()
            for name, item in zip(names, items, strict=True)
        }
    ]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_registered_under_its_name(fmt: str) -> None:
    cls = format_class(fmt)
    assert cls.name == fmt
    assert isinstance(encoder_for(fmt), cls)
    assert cls.settings_class.format_name == fmt
    assert cls.needs_transaction_size == (fmt in NEEDS_TRANSACTION_SIZE)
    assert cls.binary_output == (fmt == "dts-avro")


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_message_of_a_synthetic_stream_follows_the_schema(fmt: str) -> None:
    check = message_checker(fmt)
    encoder = encoder_for(fmt, format_options())
    changes = 0
    for item in generate(400, seed=3, tables=8):
        keyed = not isinstance(item, ChangeEvent) or bool(item.table.primary_key)
        for message in encoder.encode(item):
            check(message.value)
            if message.kind not in ("change", "transaction"):
                continue
            changes += 1
            assert message.commit_lsn is not None
            assert message.xid is not None
            assert message.ordinal is not None
            assert message.ordinal >= 1
            names = {k for k, _ in message.kafka_headers()}
            assert {"walcast.commit_lsn", "walcast.xid", "walcast.ordinal"} <= names
            if fmt in KEYED_BY_PRIMARY_KEY_ONLY:
                assert (message.key is not None) == keyed
            else:
                assert message.key
    for message in encoder.flush():
        check(message.value)
    assert changes > 0


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_golden_stream(fmt: str) -> None:
    """``produce-test-stream`` output, byte for byte (``WALCAST_UPDATE_GOLDEN=1`` rewrites)."""
    data = assert_golden_stream(encoder_for(fmt, format_options()), golden_path(fmt))
    if fmt == "ibm":
        return  # one line per record, not per message: checked record by record in test_ibm
    check = message_checker(fmt)
    for value in framed_values(fmt, data):
        check(value)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_the_same_stream_encodes_to_the_same_bytes(fmt: str) -> None:
    items = list(generate(300, seed=5, tables=8))
    first = encode_items(encoder_for(fmt, FIXED), items)
    again = encode_items(encoder_for(fmt, FIXED), items)
    assert [(m.key, m.value) for m in first] == [(m.key, m.value) for m in again]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@pytest.mark.parametrize(
    "row",
    [
        {"k": "1", "a": DELIMITERS, "b": ""},
        {"k": "2", "a": None, "b": "x"},
        {"k": "'\"", "a": "", "b": None},
    ],
    ids=["delimiters", "null", "quotes-in-key"],
)
def test_text_values_survive_and_null_is_not_empty(fmt: str, row: dict[str, Any]) -> None:
    check = message_checker(fmt)
    messages = encode_items(encoder_for(fmt), transaction([event(Op.INSERT, TEXTS, after=row)]))
    rows = [r for m in messages for r in after_texts(fmt, check(m.value), list(TEXTS.column_names))]
    assert rows == [row]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_changes_of_one_row_share_one_kafka_key(fmt: str) -> None:
    events = [
        event(Op.INSERT, TEXTS, after={"k": "7", "a": "x"}, ordinal=1),
        event(Op.UPDATE, TEXTS, after={"k": "7", "a": "y"}, ordinal=2),
        event(Op.DELETE, TEXTS, before={"k": "7"}, before_key_only=True, ordinal=3),
    ]
    other = event(Op.INSERT, TEXTS, after={"k": "8"}, ordinal=4, commit_lsn=0x2000000)
    encoder = encoder_for(fmt)
    keys = {m.key for m in encode_items(encoder, transaction(events)) if m.kind != "metadata"}
    assert len(keys) == 1
    [other_key] = {
        m.key for m in encode_items(encoder, transaction([other])) if m.kind != "metadata"
    }
    if fmt == "ibm":
        assert keys == {other_key}  # one key for every transaction: commit order
    else:
        assert keys != {other_key}


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_tail_lines_print_what_the_messages_frame_to(fmt: str) -> None:
    printing, framing = encoder_for(fmt, FIXED), encoder_for(fmt, FIXED)
    for item in generate(60, seed=2, tables=8):
        if isinstance(item, ChangeEvent):
            expected = b"".join(framing.frame_for_tail(m) for m in framing.change(item))
            assert printing.tail_lines(item) == expected
        else:
            printing.encode(item)
            framing.encode(item)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_truncate_is_encoded_or_skipped_by_rule(fmt: str) -> None:
    check = message_checker(fmt)
    truncate = event(Op.TRUNCATE, TEXTS)
    for message in encode_items(encoder_for(fmt), transaction([truncate])):
        check(message.value)
        assert message.key


def _decode_lines(fmt: str, data: bytes) -> list[bytes]:
    if format_class(fmt).binary_output:
        return [base64.b64decode(line) for line in data.splitlines()]
    return data.splitlines()


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_produce_writes_one_frame_per_message(fmt: str) -> None:
    out: list[bytes] = []
    encoder = encoder_for(fmt, format_options())
    _, messages = produce(encoder, generate(40, seed=1, tables=4), lambda m: out.append(m.value))
    assert len(out) == messages
    check: Callable[[bytes], Any] = message_checker(fmt)
    for value in out:
        check(value)


# --------------------------------------------------------------------------- load rows

WATERMARK = 0x3000000
LOAD_MARK: dict[str, Callable[[Any], Any]] = {
    "json": lambda d: d["op"],
    "canal": lambda d: d["type"],
    "shareplex": lambda d: d["meta"]["op"],
    "dataworks": lambda d: d["payload"]["op"],
    "qlik": lambda d: d["message"]["headers"]["operation"],
    "ibm": lambda d: (d[0][6], d[0][7]),
    "dts-avro": lambda d: d["operation"],
    "debezium": lambda d: d["op"],
}
"""How each format marks a row of a load (Op.SNAPSHOT)."""
LOAD_FORM = {
    "json": "snapshot",
    "canal": "INIT",
    "shareplex": "INIT",
    "dataworks": "INSERT",
    "qlik": "REFRESH",
    "ibm": ("ISRT", "0000:0000:0000:0000:0000:0000"),
    "dts-avro": "INIT",
    "debezium": "r",
}


def position(fmt: str, decoded: Any) -> tuple[Any, ...]:
    """A change's position in the format's own fields (sorts like the stream)."""
    if fmt == "json":
        return (parse_lsn(decoded["commit_lsn"]),)
    if fmt == "canal":
        return (decoded["id"],)
    if fmt == "shareplex":
        return (int(decoded["meta"]["scn"]), decoded["meta"]["seq"])
    if fmt == "dataworks":
        return (decoded["payload"]["sequenceId"],)
    if fmt == "qlik":
        headers = decoded["message"]["headers"]
        return (headers["streamPosition"], headers["transactionEventCounter"])
    if fmt == "ibm":
        return (parse_commit_lsn(decoded[0][8]),)
    if fmt == "debezium":
        return (int(json.loads(decoded["source"]["sequence"])[1]),)
    lsn, _, ordinal = decoded["sourcePosition"].partition("@")
    return (parse_lsn(lsn), int(ordinal))


def load_chunk(rows: list[dict[str, Any]], *, count: bool) -> list[StreamItem]:
    """A load chunk as the snapshot source sends it: xid 0 at the chunk's watermark."""
    events = [
        event(Op.SNAPSHOT, TEXTS, after=row, xid=0, commit_lsn=WATERMARK, ordinal=i)
        for i, row in enumerate(rows, start=1)
    ]
    ts = events[0].commit_ts
    n = len(events)
    return [
        TransactionBegin(0, WATERMARK, ts, n if count else None),
        *events,
        TransactionCommit(0, WATERMARK, WATERMARK, ts, n),
    ]


LOAD_CASES = [
    (fmt, count)
    for fmt in FORMAT_NAMES
    for count in (True, False)
    if count or fmt not in NEEDS_TRANSACTION_SIZE  # the source always sends them their sizes
]


@pytest.mark.parametrize(("fmt", "count"), LOAD_CASES)
def test_load_rows_take_the_format_s_full_load_form(fmt: str, count: bool) -> None:
    check = message_checker(fmt)
    rows = [{"k": "1", "a": "x", "b": None}, {"k": "2", "a": DELIMITERS, "b": ""}]
    messages = [
        m
        for m in encode_items(encoder_for(fmt), load_chunk(rows, count=count))
        if m.kind != "metadata"
    ]
    assert messages
    decoded = [check(m.value) for m in messages]
    assert {LOAD_MARK[fmt](d) for d in decoded} == {LOAD_FORM[fmt]}
    read = [r for d in decoded for r in after_texts(fmt, d, list(TEXTS.column_names))]
    assert read == rows
    for message in messages:
        headers = dict(message.kafka_headers())
        assert headers["walcast.commit_lsn"] == b"0/3000000"
        assert headers["walcast.xid"] == b"0"
        assert int(headers["walcast.ordinal"]) >= 1


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_load_row_sorts_between_the_changes_before_and_after_its_watermark(fmt: str) -> None:
    check = message_checker(fmt)
    earlier = event(Op.UPDATE, TEXTS, after={"k": "1", "a": "old"}, commit_lsn=WATERMARK - 0x100)
    later = event(Op.UPDATE, TEXTS, after={"k": "1", "a": "new"}, commit_lsn=WATERMARK + 0x100)
    encoder = encoder_for(fmt)
    stream = [
        *transaction([earlier]),
        *load_chunk([{"k": "1", "a": "loaded"}], count=True),
        *transaction([later]),
    ]
    positions = [
        position(fmt, check(m.value)) for m in encode_items(encoder, stream) if m.kind != "metadata"
    ]
    if fmt == "dataworks":  # an update is two records sharing one sequenceId
        positions = list(dict.fromkeys(positions))
    assert len(positions) == 3
    assert positions == sorted(positions)
    assert len(set(positions)) == 3


# --------------------------------------------------------------------------- keys

KEYLESS = make_table("public", "audit", [("at", "text", False), ("what", "text", False)], "f")
"""REPLICA IDENTITY FULL without a primary key: no stable row identity."""


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_table_without_a_primary_key_is_keyed_by_the_table(fmt: str) -> None:
    """An update must not move a keyless row to another partition: one key, commit order."""
    row = {"at": "1", "what": "a"}
    events = [
        event(Op.INSERT, KEYLESS, after=row, ordinal=1),
        event(Op.UPDATE, KEYLESS, before=row, after={"at": "2", "what": "b"}, ordinal=2),
        event(Op.DELETE, KEYLESS, before={"at": "2", "what": "b"}, ordinal=3),
        event(Op.SNAPSHOT, KEYLESS, after={"at": "3", "what": "c"}, ordinal=4),
    ]
    messages = encode_items(encoder_for(fmt, FORMAT_OPTIONS), transaction(events))
    keys = {m.key for m in messages if m.kind != "metadata"}
    if fmt in KEYED_BY_PRIMARY_KEY_ONLY:
        assert keys == {
            None
        }  # Debezium's null key (documented in capture/formats/debezium/encode.py)
        return
    assert keys == ({b"shop"} if fmt == "ibm" else {b"public.audit"})

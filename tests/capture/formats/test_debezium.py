"""The ``debezium`` format: records, options and bad input (capture/formats/debezium/encode.py).

What Debezium itself writes for the capture scenario is checked against the real connector
in tests/readers/test_debezium_compare.py; these tests pin each documented decision and
option without a server.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import orjson
import pytest

from capture.consistency import explain
from capture.errors import ConfigError, DecodeError, WalcastError
from capture.events import Op, TransactionBegin, TransactionCommit
from capture.formats import encoder_for, parse_settings
from capture.formats.base import EncodedMessage, FormatOptions
from capture.formats.debezium.encode import DebeziumEncoder
from capture.formats.debezium.scalars import (
    float32,
    java_double,
    java_float,
    java_hashmap_order,
)
from capture.pgoutput.messages import UNCHANGED_TOAST
from tests.support.events import event, keyed_table, make_table
from tests.support.scenario import walcast

NUMERIC_10_2 = (10 << 16 | 2) + 4
ITEMS = keyed_table(
    [("id", "int4", True), ("name", "text", False), ("price", "numeric", False)],
    name="items",
    typmods={"price": NUMERIC_10_2},
)
TYPES = make_table(
    "public",
    "types",
    [
        ("id", "int8", True), ("f4", "float4", False), ("f8", "float8", False),
        ("n", "numeric", False), ("b", "bytea", False), ("ts", "timestamp", False),
        ("tstz", "timestamptz", False), ("t", "time", False), ("d", "date", False),
    ],
)  # fmt: skip
KEYLESS = make_table("public", "log", [("at", "text", False), ("msg", "text", False)], "f")


def encoder(**settings: str) -> DebeziumEncoder:
    parsed = parse_settings("debezium", {f"debezium.{k}": v for k, v in settings.items()})
    made = encoder_for("debezium", FormatOptions(database="shop", settings=parsed))
    assert isinstance(made, DebeziumEncoder)
    return made


def run(enc: DebeziumEncoder, *events: Any, xid: int = 700) -> list[EncodedMessage]:
    first = events[0]
    out = enc.encode(TransactionBegin(xid, first.commit_lsn, first.commit_ts, len(events)))
    for ev in events:
        out += enc.encode(ev)
    end = first.commit_lsn + 64
    out += enc.encode(TransactionCommit(xid, first.commit_lsn, end, first.commit_ts, len(events)))
    return out


def values(messages: list[EncodedMessage]) -> list[Any]:
    return [None if m.value is None else orjson.loads(m.value) for m in messages]


def unscaled(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big", signed=True)


# ------------------------------------------------------------------ records


def test_insert_record_envelope_source_and_key() -> None:
    [message] = run(encoder(), event(Op.INSERT, ITEMS, after={"id": "7", "name": "hi"}))
    value = orjson.loads(message.value or b"")
    assert list(value) == [
        "before",
        "after",
        "source",
        "transaction",
        "op",
        "ts_ms",
        "ts_us",
        "ts_ns",
    ]
    assert value["op"] == "c"
    assert value["after"] == {"id": 7, "name": "hi", "price": None}
    assert message.key == b'{"id":7}'
    source = value["source"]
    assert (source["connector"], source["name"], source["db"], source["snapshot"]) == (
        "postgresql", "walcast", "shop", "false",
    )  # fmt: skip
    assert source["txId"] == 700
    assert source["lsn"] == 0x16B3748
    assert source["sequence"] == f'[null,"{0x16B3748}"]'  # first transaction of the process
    assert source["ts_us"] == source["ts_ms"] * 1000 + 456


def test_sequence_names_the_previous_commit_s_end() -> None:
    enc = encoder()
    run(enc, event(Op.INSERT, ITEMS, after={"id": "1"}))
    [message] = run(enc, event(Op.INSERT, ITEMS, after={"id": "2"}, commit_lsn=0x2000000))
    previous, lsn = json.loads(orjson.loads(message.value or b"")["source"]["sequence"])
    assert (previous, lsn) == (str(0x16B3748 + 64), str(0x2000000))


def test_delete_writes_a_tombstone_with_the_same_key_unless_turned_off() -> None:
    delete = event(Op.DELETE, ITEMS, before={"id": "3"}, before_key_only=True)
    record, tombstone = run(encoder(), delete)
    assert orjson.loads(record.value or b"")["before"] == {"id": 3, "name": None, "price": None}
    assert (tombstone.value, tombstone.key) == (None, record.key)
    assert encoder().frame_for_tail(tombstone) == b"null\n"
    assert len(run(encoder(tombstones="false"), delete)) == 1


def test_a_key_change_is_a_delete_its_tombstone_and_a_create() -> None:
    update = event(
        Op.UPDATE, ITEMS, before={"id": "2"}, after={"id": "20", "name": "b"}, before_key_only=True
    )
    messages = run(encoder(), update)
    assert [(v or {}).get("op") for v in values(messages)] == ["d", None, "c"]
    assert [m.key for m in messages] == [b'{"id":2}', b'{"id":2}', b'{"id":20}']


def test_the_halves_of_a_key_change_carry_the_connector_s_key_headers() -> None:
    """The delete and its tombstone name the new key, the create the old one.

    ``__debezium.newkey``/``__debezium.oldkey`` as RelationalChangeRecordEmitter adds them,
    in SimpleHeaderConverter's text, after walcast's headers; other records have none.
    """
    update = event(
        Op.UPDATE,
        ITEMS,
        before={"id": "2"},
        after={"id": "20", "name": UNCHANGED_TOAST, "price": "1.00"},
        before_key_only=True,
    )
    delete, tombstone, create = run(encoder(), update)
    walcast_headers = [
        ("walcast.commit_lsn", b"0/16B3748"),
        ("walcast.xid", b"700"),
        ("walcast.ordinal", b"1"),
        ("walcast.change_lsn", b"0/16B3748"),  # the event has no own LSN: its commit's
        ("walcast.layout", ITEMS.layout_version.encode()),  # the layout it was encoded with
    ]
    assert delete.kafka_headers() == [*walcast_headers, ("__debezium.newkey", b'{"id":20}')]
    assert tombstone.kafka_headers() == delete.kafka_headers()
    source = ("walcast.source", b"1/shop/slot")
    assert create.kafka_headers(source) == [
        *walcast_headers,
        source,
        ("__debezium.oldkey", b'{"id":2}'),
    ]
    assert orjson.loads(create.value or b"")["after"]["name"] == "__debezium_unavailable_value"
    plain = run(encoder(), event(Op.UPDATE, ITEMS, after={"id": "1", "name": "x"}))
    deleted = run(encoder(), event(Op.DELETE, ITEMS, before={"id": "3"}, before_key_only=True))
    assert [m.headers for m in plain + deleted] == [(), (), ()]


def test_key_headers_write_values_as_kafka_connect_s_values_class() -> None:
    """Strings quoted with only backslash and quote escaped, Decimal keys as BigDecimal."""
    table = keyed_table(
        [("k", "text", True), ("n", "numeric", True), ("v", "text", False)],
        name="pairs",
        typmods={"n": NUMERIC_10_2},
    )
    update = event(
        Op.UPDATE,
        table,
        before={"k": 'a"b\\c', "n": "1.50"},
        after={"k": "x\ny", "n": "-0.05", "v": "z"},
        before_key_only=True,
    )
    delete, _, create = run(encoder(), update)
    assert delete.headers == (("__debezium.newkey", b'{"k":"x\ny","n":-0.05}'),)
    assert create.headers == (("__debezium.oldkey", b'{"k":"a\\"b\\\\c","n":1.50}'),)
    key_only = run(encoder(skipped_operations="d"), update)
    assert [m.headers for m in key_only] == [(("__debezium.oldkey", create.headers[0][1]),)]


def test_update_under_default_identity_has_no_before() -> None:
    [message] = run(encoder(), event(Op.UPDATE, ITEMS, after={"id": "1", "name": "x"}))
    assert orjson.loads(message.value or b"")["before"] is None


def test_truncates_are_skipped_by_default_like_debezium_s_skipped_operations() -> None:
    truncate = event(Op.TRUNCATE, ITEMS)
    assert run(encoder(), truncate) == []
    [message] = run(encoder(skipped_operations="none"), truncate)
    assert (orjson.loads(message.value or b"")["op"], message.key) == ("t", None)
    assert run(encoder(skipped_operations="c,u"), event(Op.INSERT, ITEMS, after={"id": "1"})) == []


def test_a_table_without_a_primary_key_has_a_null_key() -> None:
    [message] = run(encoder(), event(Op.INSERT, KEYLESS, after={"at": "1", "msg": "m"}))
    assert message.key is None


def test_load_rows_are_op_r_marked_incremental_or_true() -> None:
    row = event(Op.SNAPSHOT, ITEMS, after={"id": "1"}, xid=0)
    [message] = run(encoder(), row, xid=0)
    value = orjson.loads(message.value or b"")
    assert (value["op"], value["source"]["snapshot"]) == ("r", "incremental")
    assert (value["source"]["txId"], value["source"]["lsn"]) == (None, None)
    [marked] = run(encoder(load_snapshot="true"), row, xid=0)
    source = orjson.loads(marked.value or b"")["source"]
    assert (source["snapshot"], source["lsn"]) == ("true", 0x16B3748)


def test_transaction_metadata_begin_end_and_event_blocks() -> None:
    enc = encoder(provide_transaction_metadata="true")
    begin, first, second, end = run(
        enc,
        event(Op.INSERT, ITEMS, after={"id": "1"}, ordinal=1),
        event(Op.INSERT, KEYLESS, after={"at": "1"}, ordinal=2),
    )
    assert (begin.kind, end.kind) == ("begin", "commit")
    assert orjson.loads(begin.value or b"")["status"] == "BEGIN"
    assert orjson.loads(first.value or b"")["transaction"] == {
        "id": f"700:{0x16B3748}", "total_order": 1, "data_collection_order": 1,
    }  # fmt: skip
    closing = orjson.loads(end.value or b"")
    assert (closing["status"], closing["event_count"]) == ("END", 2)
    # in java.util.HashMap's order, as Debezium's TransactionContext iterates them
    assert closing["data_collections"] == [
        {"data_collection": "public.items", "event_count": 1},
        {"data_collection": "public.log", "event_count": 1},
    ]
    names = ["s.items", "s.items_full"]  # first seen: items; the HashMap's order: items_full
    assert java_hashmap_order(names) == ["s.items_full", "s.items"]
    assert end.key == orjson.dumps({"id": closing["id"]})
    assert second.value is not None


def test_heartbeats_and_topics() -> None:
    enc = encoder(heartbeats="true", topic_prefix="inv")
    [beat] = enc.heartbeat(0x100, 1_700_000_000_123_456)
    assert (beat.key, beat.value) == (b'{"serverName":"inv"}', b'{"ts_ms":1700000000123}')
    assert (enc.default_topic, enc.default_transaction_topic, enc.heartbeat_topic) == (
        "inv.{schema}.{table}", "inv.transaction", "__debezium-heartbeat.inv",
    )  # fmt: skip
    assert encoder().heartbeat(0x100, 1) == []


def test_schemas_true_wraps_keys_and_values() -> None:
    [message] = run(encoder(schemas="true"), event(Op.INSERT, ITEMS, after={"id": "1"}))
    key = orjson.loads(message.key or b"")
    assert key["payload"] == {"id": 1}
    assert key["schema"]["name"] == "walcast.public.items.Key"
    value = orjson.loads(message.value or b"")
    assert value["schema"]["name"] == "walcast.public.items.Envelope"
    price = next(f for f in value["schema"]["fields"][1]["fields"] if f["field"] == "price")
    assert price["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}


# ------------------------------------------------------------------ values and modes


def test_value_forms_under_the_defaults_and_other_modes() -> None:
    row = {
        "id": "1", "f4": "3.4028235e+38", "f8": "1e-05", "n": "12.340", "b": "\\x00ff",
        "ts": "2024-02-29 13:45:01.123456", "tstz": "2024-02-29 13:45:01.5+02",
        "t": "12:00:00", "d": "1970-01-02",
    }  # fmt: skip
    [default] = run(encoder(), event(Op.INSERT, TYPES, after=row))
    after = orjson.loads(default.value or b"")["after"]
    assert after["f4"] == pytest.approx(3.4028235e38)
    assert b'"f4":3.4028235E38,"f8":1.0E-5' in (default.value or b"")
    assert after["n"] == {"scale": 2, "value": base64.b64encode(bytes([0x04, 0xD2])).decode()}
    assert after["b"] == "AP8="
    assert (after["ts"], after["tstz"]) == (1709214301123456, "2024-02-29T11:45:01.500000Z")
    assert (after["t"], after["d"]) == (43_200_000_000, 1)
    [other] = run(
        encoder(decimal_handling="string", binary_handling="hex", time_precision="connect"),
        event(Op.INSERT, TYPES, after=row),
    )
    after = orjson.loads(other.value or b"")["after"]
    assert (after["n"], after["b"], after["ts"], after["t"]) == (
        "12.340", "00ff", 1709214301123, 43_200_000,
    )  # fmt: skip


def test_java_number_text() -> None:
    assert [orjson.dumps(java_double(v)) for v in (1e-5, 1e7, 123.0, -0.0, 2e23)] == [
        b"1.0E-5", b"1.0E7", b"123.0", b"-0.0", b"2.0E23",
    ]  # fmt: skip
    assert orjson.dumps(java_float(float32(0.1))) == b"0.1"
    assert java_double(float("nan")) == "NaN"


def test_numeric_nan_is_null_or_a_one_line_failure() -> None:
    nan = event(Op.INSERT, ITEMS, after={"id": "1", "price": "NaN"})
    [message] = run(encoder(), nan)
    assert orjson.loads(message.value or b"")["after"]["price"] is None
    with pytest.raises(WalcastError, match=r"items\.price .*NaN") as failed:
        run(encoder(unrepresentable="fail"), nan)
    assert "\n" not in str(failed.value)
    [text] = run(encoder(decimal_handling="string"), nan)
    assert orjson.loads(text.value or b"")["after"]["price"] == "NAN"


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("id", "99999999999999999999"),  # past the 64-bit range
        ("n", "1" + "0" * 200_000),  # past PostgreSQL's numeric
    ],
)
def test_values_no_server_sends_fail_with_walcast_s_error(column: str, text: str) -> None:
    """The encoder raises a DecodeError, or the table's codecs reject the value (the sinks
    then raise :func:`~capture.consistency.explain`'s DecodeError): never another error."""
    bad = event(Op.INSERT, TYPES, after={"id": "1", column: text})
    with pytest.raises(Exception) as raised:
        encoder().change(bad)
    found = raised.value if isinstance(raised.value, DecodeError) else explain(bad, raised.value)
    assert found is not None, raised.value
    assert found.column == column


def test_a_numeric_of_many_digits_is_written_exactly() -> None:
    digits = "9" * 5000 + "." + "1" * 100
    [message] = run(encoder(), event(Op.INSERT, TYPES, after={"id": "1", "n": digits}))
    value = orjson.loads(message.value or b"")["after"]["n"]
    assert value["scale"] == 100
    assert unscaled(value["value"]) == int(Decimal(digits.replace(".", "")))


# ------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("debezium.decimal_handling", "exact", "not one of precise, string, double"),
        ("debezium.skipped_operations", "x", "unknown: x"),
        ("debezium.topic_prefix", "a b", "not a topic prefix"),
        ("debezium.tombstones", "maybe", "not a boolean"),
        ("debezium.nope", "1", "unknown setting of format debezium"),
    ],
)
def test_bad_settings_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as failed:
        parse_settings("debezium", {key: value})
    assert key in str(failed.value)


def test_a_bad_setting_is_one_line_through_the_cli() -> None:
    done = walcast(
        "produce-test-stream", "--format", "debezium", "--count", "1",
        "--format-option", "debezium.decimal_handling=exact",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "walcast: error: debezium.decimal_handling: 'exact' is not one of precise, string, double"
    ]


def test_tail_prints_a_tombstone_as_null_after_its_delete() -> None:
    done = walcast("produce-test-stream", "--format", "debezium", "--count", "200", "--seed", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    tombstones = [i for i, line in enumerate(lines) if line == "null"]
    assert tombstones
    assert all(json.loads(lines[i - 1])["op"] == "d" for i in tombstones)

"""Qlik Replicate JSON: masks, changeSequence, MD messages, images, exact values, schema."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import fastavro
import jsonschema
import orjson

from capture.events import ChangeEvent, Op, TransactionBegin, TransactionCommit
from capture.formats import parse_settings
from capture.formats._common import row_key
from capture.formats.base import FormatOptions
from capture.formats.qlik.encode import QlikEncoder
from capture.pgoutput.messages import UNCHANGED_TOAST
from tests.support.events import event, make_table, table_with
from tests.support.formats import DELIMITERS, encode_transaction, orders_tables

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "formats" / "qlik"
SCHEMA = json.loads((REPO / "schemas" / "qlik.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
encode = partial(encode_transaction, validator=VALIDATOR)
ENVELOPE = ["magic", "type", "headers", "messageSchemaId", "messageSchema", "message"]
HEADERS = [
    "operation", "changeSequence", "timestamp", "streamPosition", "transactionId", "changeMask",
    "columnMask", "transactionEventCounter", "transactionLastEvent",
]  # fmt: skip


def data_messages(events: list[ChangeEvent], **settings: Any) -> list[dict[str, Any]]:
    """The DT ``message`` objects of one transaction (MD messages left out)."""
    encoder = QlikEncoder(FormatOptions(server="db1", settings=parse_settings("qlik", settings)))
    docs = [orjson.loads(m.value) for m in encode(encoder, events)]
    return [d["message"] for d in docs if d["type"] == "DT"]


def one(ev: ChangeEvent, **settings: Any) -> dict[str, Any]:
    (message,) = data_messages([ev], **settings)
    return message


def ordinals(mask: str) -> set[int]:
    """Decode a mask as the module docstring says: byte k holds ordinals 8k+1 … 8k+8."""
    raw = bytes.fromhex(mask)
    return {n for n in range(1, len(raw) * 8 + 1) if raw[(n - 1) // 8] >> ((n - 1) % 8) & 1}


ORDERS, ORDERS_FULL = orders_tables("varchar")


# ------------------------------------------------------------------ registry, schema


def test_vendor_example_validates() -> None:
    VALIDATOR.validate(json.loads((DATA / "community_update.json").read_text()))


# ------------------------------------------------------------------ golden


def test_golden_seed_document_mask_example() -> None:
    """The seed document: UPDATE mask 0B = columns at ordinals 1, 2 and 4 changed."""
    table = table_with(
        "public",
        "four",
        [(f"c{i}", "int4", True, -1) for i in range(1, 5)],
        identity="f",
        pk=("c1",),
    )
    got = one(
        event(
            Op.UPDATE,
            table,
            before={"c1": "1", "c2": "2", "c3": "3", "c4": "4"},
            after={"c1": "10", "c2": "20", "c3": "3", "c4": "40"},
        )
    )
    assert got["headers"]["changeMask"] == "0B"
    assert ordinals("0B") == {1, 2, 4}
    assert got["headers"]["columnMask"] == "0F"


def test_golden_community_update_message() -> None:
    """Rebuild the Qlik Replicate UPDATE message published by Qlik (see the data README)."""
    expected = json.loads((DATA / "community_update.json").read_text())
    table = table_with(
        "HR",
        "KIT",
        [
            ("ID", "numeric", True, -1),
            ("NAME", "varchar", True, -1),
            ("tableName", "varchar", True, -1),
        ],
        identity="f",
        pk=("ID",),
    )
    ev = event(
        Op.UPDATE,
        table,
        before={"ID": "2", "NAME": "ok", "tableName": "kit"},
        after={"ID": "2", "NAME": "test Kafka", "tableName": "kit"},
        xid=0x60008,
        when=dt.datetime(2023, 9, 11, 3, 23, 25, tzinfo=dt.UTC),
    )
    encoder = QlikEncoder()
    messages = encode(encoder, [ev])
    assert [orjson.loads(m.value)["type"] for m in messages] == ["MD", "DT"]
    got = orjson.loads(messages[1].value)
    assert list(got) == list(expected) == ENVELOPE
    for field in ENVELOPE[:-1]:
        assert got[field] == expected[field], field
    message, want = got["message"], expected["message"]
    assert list(message) == list(want) == ["data", "beforeData", "headers"]
    assert message["data"] == want["data"]
    assert message["beforeData"] == want["beforeData"]
    headers, want_headers = message["headers"], want["headers"]
    assert list(headers) == list(want_headers) == HEADERS
    for field in (
        "operation", "timestamp", "transactionId", "changeMask", "columnMask",
        "transactionEventCounter", "transactionLastEvent",
    ):  # fmt: skip
        assert headers[field] == want_headers[field], field
    # changeSequence: same commit-time prefix; the 19-digit counter is walcast's
    # (commit LSN and ordinal), Qlik's is internal.
    assert headers["changeSequence"][:16] == want_headers["changeSequence"][:16]
    assert len(headers["changeSequence"]) == len(want_headers["changeSequence"]) == 35
    # streamPosition is the source's position: an Oracle SCN/redo address in the example,
    # PostgreSQL's commit LSN here.
    assert headers["streamPosition"] == "00000000/016B3748"


# ------------------------------------------------------------------ masks


def test_masks_are_little_endian_by_byte() -> None:
    table = table_with(
        "public",
        "wide",
        [(f"c{i}", "int4", True, -1) for i in range(1, 11)],
        identity="f",
        pk=("c1",),
    )
    before = {f"c{i}": str(i) for i in range(1, 11)}
    got = one(event(Op.UPDATE, table, before=before, after={**before, "c9": "99"}))
    assert got["headers"]["changeMask"] == "0001"
    assert got["headers"]["columnMask"] == "FF03"
    assert ordinals("0001") == {9}
    assert ordinals("FF03") == set(range(1, 11))


def test_lob_columns_never_have_change_mask_bits() -> None:
    table = table_with(
        "public",
        "docs",
        [
            ("id", "int4", True, -1),
            ("body", "text", True, -1),
            ("blob", "bytea", True, -1),
            ("doc", "jsonb", True, -1),
            ("n", "int4", True, -1),
        ],
        identity="f",
        pk=("id",),
    )
    row = {"id": "1", "body": "b", "blob": "\\x00", "doc": "{}", "n": "1"}
    inserted = one(event(Op.INSERT, table, after=row))
    assert ordinals(inserted["headers"]["changeMask"]) == {1, 5}
    assert ordinals(inserted["headers"]["columnMask"]) == {1, 2, 3, 4, 5}
    changed = {"id": "1", "body": "c", "blob": "\\x01", "doc": '{"a": 1}', "n": "2"}
    updated = one(event(Op.UPDATE, table, before=row, after=changed))
    assert ordinals(updated["headers"]["changeMask"]) == {5}
    assert updated["data"]["body"] == "c"


def test_delete_change_mask_is_the_primary_key() -> None:
    table = table_with(
        "public",
        "pairs",
        [("a", "int4", True, -1), ("b", "int4", True, -1), ("v", "varchar", True, -1)],
        identity="f",
        pk=("b", "a"),
    )
    got = one(event(Op.DELETE, table, before={"a": "1", "b": "2", "v": "x"}))
    assert got["headers"]["operation"] == "DELETE"
    assert ordinals(got["headers"]["changeMask"]) == {1, 2}
    assert ordinals(got["headers"]["columnMask"]) == {1, 2, 3}
    assert got["data"] == {"a": 1, "b": 2, "v": "x"}
    assert got["beforeData"] is None


def test_delete_key_only_marks_the_other_columns_not_replicated() -> None:
    got = one(event(Op.DELETE, ORDERS, before={"id": "7"}, before_key_only=True))
    assert got["data"] == {"id": 7, "note": None, "qty": None}
    assert ordinals(got["headers"]["columnMask"]) == {1}
    assert ordinals(got["headers"]["changeMask"]) == {1}


def test_insert_masks() -> None:
    got = one(event(Op.INSERT, ORDERS, after={"id": "1", "note": None, "qty": "2"}))
    assert got["headers"]["changeMask"] == got["headers"]["columnMask"] == "07"
    assert got["data"] == {"id": 1, "note": None, "qty": 2}
    assert got["beforeData"] is None


def test_update_without_before_image() -> None:
    """REPLICA IDENTITY DEFAULT, key unchanged: every present non-key column may have changed."""
    got = one(event(Op.UPDATE, ORDERS, after={"id": "1", "note": "n", "qty": "4"}))
    assert ordinals(got["headers"]["changeMask"]) == {2, 3}
    assert ordinals(got["headers"]["columnMask"]) == {1, 2, 3}
    assert got["beforeData"] is None


def test_update_with_key_only_before_image() -> None:
    got = one(
        event(
            Op.UPDATE,
            ORDERS,
            before={"id": "1"},
            before_key_only=True,
            after={"id": "2", "note": "n", "qty": "4"},
        )
    )
    assert ordinals(got["headers"]["changeMask"]) == {1, 2, 3}
    assert got["beforeData"] == {"id": 1}
    assert got["data"] == {"id": 2, "note": "n", "qty": 4}


def test_update_full_identity() -> None:
    got = one(
        event(
            Op.UPDATE,
            ORDERS_FULL,
            before={"id": "1", "note": "a", "qty": "4"},
            after={"id": "1", "note": None, "qty": "4"},
        )
    )
    assert ordinals(got["headers"]["changeMask"]) == {2}
    assert got["beforeData"] == {"id": 1, "note": "a", "qty": 4}
    assert got["data"] == {"id": 1, "note": None, "qty": 4}


def test_unchanged_toast() -> None:
    got = one(event(Op.UPDATE, ORDERS, after={"id": "1", "note": UNCHANGED_TOAST, "qty": "4"}))
    assert got["data"] == {"id": 1, "note": None, "qty": 4}
    assert ordinals(got["headers"]["columnMask"]) == {1, 3}
    assert ordinals(got["headers"]["changeMask"]) == {3}
    full = one(
        event(
            Op.UPDATE,
            ORDERS_FULL,
            before={"id": "1", "note": "long", "qty": "3"},
            after={"id": "1", "note": UNCHANGED_TOAST, "qty": "4"},
        )
    )
    assert full["data"] == {"id": 1, "note": "long", "qty": 4}
    assert ordinals(full["headers"]["columnMask"]) == {1, 2, 3}
    assert ordinals(full["headers"]["changeMask"]) == {3}


# ------------------------------------------------------------------ headers


def test_headers() -> None:
    when = dt.datetime(2024, 5, 2, 18, 17, 29, 987654, tzinfo=dt.UTC)
    got = one(
        event(
            Op.INSERT,
            ORDERS,
            after={"id": "1"},
            xid=0xABCDEF,
            when=when,
            commit_lsn=(5 << 32) | 0x10,
        )
    )
    headers = got["headers"]
    assert list(headers) == HEADERS
    assert headers["timestamp"] == "2024-05-02T18:17:29.987"
    assert headers["streamPosition"] == "00000005/00000010"
    assert headers["transactionId"] == "00000000000000000000000000ABCDEF"
    assert (
        headers["changeSequence"] == "2024050218172998" + f"{((5 << 32) | 0x10) * 10**6 + 1:019d}"
    )
    assert headers["transactionEventCounter"] == 1
    assert headers["transactionLastEvent"] is True


def test_change_sequence_is_strictly_increasing_and_deterministic() -> None:
    base = dt.datetime(2024, 5, 2, 18, 0, 0, tzinfo=dt.UTC)
    transactions = [
        (0x1000, base, 3),
        (0x2000, base, 2),  # same hundredth of a second: ordered by LSN
        (0x3000, base - dt.timedelta(seconds=1), 2),  # commit time went backwards
        (0x4000, base + dt.timedelta(minutes=1), 1),
    ]

    def run() -> list[str]:
        encoder = QlikEncoder()
        sequences = []
        for xid, (lsn, when, n) in enumerate(transactions, start=900):
            events = [
                event(
                    Op.INSERT,
                    ORDERS,
                    after={"id": str(i)},
                    ordinal=i,
                    xid=xid,
                    commit_lsn=lsn,
                    when=when,
                )
                for i in range(1, n + 1)
            ]
            for message in encode(encoder, events):
                doc = orjson.loads(message.value)
                if doc["type"] == "DT":
                    sequences.append(doc["message"]["headers"]["changeSequence"])
        return sequences

    sequences = run()
    assert len(sequences) == 8
    assert all(len(s) == 35 and s.isdigit() for s in sequences)
    assert sequences == sorted(sequences)
    assert len(set(sequences)) == len(sequences)
    assert run() == sequences  # a replay gives the same values
    # The backwards transaction is clamped above its predecessor.
    assert sequences[5] == str(int(sequences[4]) + 1).zfill(35)


def test_transaction_last_event_from_the_transaction_size() -> None:
    events = [event(Op.INSERT, ORDERS, after={"id": str(i)}, ordinal=i) for i in (1, 2, 3)]
    got = data_messages(events)
    assert [m["headers"]["transactionLastEvent"] for m in got] == [False, False, True]
    assert [m["headers"]["transactionEventCounter"] for m in got] == [1, 2, 3]


def test_transaction_last_event_without_the_size_holds_one_message_back() -> None:
    encoder = QlikEncoder()
    events = [event(Op.INSERT, ORDERS, after={"id": str(i)}, ordinal=i) for i in (1, 2)]
    first = events[0]
    assert encoder.encode(TransactionBegin(700, first.commit_lsn, first.commit_ts, None)) == []
    out1 = encoder.encode(events[0])
    assert [orjson.loads(m.value)["type"] for m in out1] == ["MD"]  # the DT is held back
    out2 = encoder.encode(events[1])
    out3 = encoder.encode(TransactionCommit(700, first.commit_lsn, first.commit_lsn + 8, 0, 2))
    dts = [orjson.loads(m.value)["message"]["headers"] for m in out2 + out3]
    assert [(h["transactionEventCounter"], h["transactionLastEvent"]) for h in dts] == [
        (1, False),
        (2, True),
    ]
    assert [m.ordinal for m in out2 + out3] == [1, 2]
    assert encoder.flush() == []


# ------------------------------------------------------------------ metadata messages


def test_metadata_before_the_first_data_of_each_table_only() -> None:
    other = make_table("sales", "items", [("sku", "varchar", True)])
    events = [
        event(Op.INSERT, ORDERS, after={"id": "1"}, ordinal=1),
        event(Op.INSERT, other, after={"sku": "a"}, ordinal=2),
        event(Op.INSERT, ORDERS, after={"id": "2"}, ordinal=3),
    ]
    encoder = QlikEncoder(
        FormatOptions(server="db1", settings=parse_settings("qlik", {"qlik.task": "orders-cdc"}))
    )
    messages = encode(encoder, events)
    kinds = [(orjson.loads(m.value)["type"], m.kind) for m in messages]
    md_kind, dt_kind = ("MD", "metadata"), ("DT", "change")
    assert kinds == [md_kind, dt_kind, md_kind, dt_kind, dt_kind]
    md = orjson.loads(messages[0].value)["message"]
    assert md["lineage"] == {
        "server": "db1",
        "task": "orders-cdc",
        "schema": "public",
        "table": "orders",
        "tableVersion": 1,
        "timestamp": "2024-05-02T18:17:29.123",
    }
    assert messages[0].key == b"public.orders"
    sizes = {"length": 0, "precision": 0, "scale": 0}
    assert md["tableStructure"]["tableColumns"] == {
        "id": {"ordinal": 1, "type": "INT4", **sizes, "primaryKeyPosition": 1},
        "note": {"ordinal": 2, "type": "WSTRING", **sizes, "primaryKeyPosition": 0},
        "qty": {"ordinal": 3, "type": "INT8", **sizes, "primaryKeyPosition": 0},
    }
    avro = fastavro.parse_schema(json.loads(md["dataSchema"]))
    assert [f["name"] for f in avro["fields"]] == ["id", "note", "qty"]
    assert [f["type"] for f in avro["fields"]] == [
        ["null", "int"],
        ["null", "string"],
        ["null", "long"],
    ]


def test_metadata_again_only_when_the_structure_changes() -> None:
    columns = [("id", "int4", True, -1), ("v", "varchar", False, 24)]
    first = table_with("public", "t", columns, relation_id=54999)
    same = table_with("public", "t", columns, relation_id=54999)
    changed = table_with("public", "t", [*columns, ("w", "numeric", False, -1)], relation_id=54999)
    encoder = QlikEncoder()
    types = []
    versions = []
    for ordinal, table in enumerate([first, same, changed], start=1):
        for message in encode(
            encoder, [event(Op.INSERT, table, after={"id": "1"}, ordinal=ordinal)]
        ):
            doc = orjson.loads(message.value)
            types.append(doc["type"])
            if doc["type"] == "MD":
                versions.append(
                    (doc["message"]["lineage"]["tableVersion"], doc["message"]["schemaId"])
                )
    assert types == ["MD", "DT", "DT", "MD", "DT"]
    assert [v for v, _ in versions] == [1, 2]
    assert versions[0][1] != versions[1][1]
    # schemaId is a hash of the structure: the same in a new process.
    fresh = encode(QlikEncoder(), [event(Op.INSERT, same, after={"id": "1"})])
    assert orjson.loads(fresh[0].value)["message"]["schemaId"] == versions[0][1]


def test_table_structure_types_lengths_and_key_positions() -> None:
    table = table_with(
        "public",
        "typed",
        [
            ("b", "int8", True, -1),
            ("a", "int2", True, -1),
            ("name", "varchar", False, 24),
            ("code", "bpchar", False, 7),
            ("amount", "numeric", False, ((38 << 16) | 10) + 4),
            ("at", "timestamptz", False, 3),
            ("at6", "timestamp", False, -1),
            ("body", "text", False, -1),
            ("blob", "bytea", False, -1),
            ("f", "float4", False, -1),
            ("ok", "bool", False, -1),
            ("day", "date", False, -1),
            ("u", "uuid", False, -1),
            ("my col", "_int4", False, -1),
        ],
        pk=("b", "a"),
    )
    encoder = QlikEncoder()
    md = orjson.loads(
        encode(encoder, [event(Op.INSERT, table, after={"b": "1", "a": "2"})])[0].value
    )
    columns = md["message"]["tableStructure"]["tableColumns"]
    summary = {
        name: (c["type"], c["length"], c["precision"], c["scale"], c["primaryKeyPosition"])
        for name, c in columns.items()
    }
    assert summary == {
        "b": ("INT8", 0, 0, 0, 1),
        "a": ("INT2", 0, 0, 0, 2),
        "name": ("WSTRING", 20, 0, 0, 0),
        "code": ("WSTRING", 3, 0, 0, 0),
        "amount": ("NUMERIC", 0, 38, 10, 0),
        "at": ("DATETIME", 0, 0, 3, 0),
        "at6": ("DATETIME", 0, 0, 6, 0),
        "body": ("NCLOB", 0, 0, 0, 0),
        "blob": ("BLOB", 0, 0, 0, 0),
        "f": ("REAL4", 0, 0, 0, 0),
        "ok": ("BOOLEAN", 0, 0, 0, 0),
        "day": ("DATE", 0, 0, 0, 0),
        "u": ("STRING", 0, 0, 0, 0),
        "my col": ("WSTRING", 0, 0, 0, 0),
    }
    assert [c["ordinal"] for c in columns.values()] == list(range(1, 15))
    avro = fastavro.parse_schema(json.loads(md["message"]["dataSchema"]))
    assert avro["fields"][-1]["name"] == "my_col"
    assert avro["fields"][9]["type"] == ["null", "float", "string"]


# ------------------------------------------------------------------ values


def test_value_types_and_exact_values() -> None:
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
            ("r", "float4", False, -1),
            ("nan", "float8", False, -1),
            ("ok", "bool", False, -1),
            ("day", "date", False, -1),
            ("text", "text", False, -1),
            ("empty", "varchar", False, -1),
            ("missing", "varchar", False, -1),
        ],
    )
    after = {
        "id": "9223372036854775807",
        "amount": "1234567890123456789012345678.0123456789",
        "low": "-9223372036854775808",
        "at": "2024-05-02 18:17:29.123456+00",
        "blob": "\\x00ab0000",
        "f": "0.30000000000000004",
        "r": "1.1",
        "nan": "-Infinity",
        "ok": "f",
        "day": "2024-05-02",
        "text": DELIMITERS,
        "empty": "",
        "missing": None,
    }
    data = one(event(Op.INSERT, table, after=after))["data"]
    assert data["id"] == 2**63 - 1
    assert data["low"] == -(2**63)
    assert Decimal(data["amount"]) == Decimal("1234567890123456789012345678.0123456789")
    assert dt.datetime.fromisoformat(data["at"]) == dt.datetime(
        2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC
    )
    assert data["blob"] == "00AB0000"
    assert bytes.fromhex(data["blob"]) == b"\x00\xab\x00\x00"
    assert data["f"] == 0.30000000000000004
    assert data["r"] == 1.1
    assert data["nan"] == "-Infinity"
    assert data["ok"] is False
    assert data["day"] == "2024-05-02"
    assert data["text"] == DELIMITERS
    assert data["empty"] == ""
    assert data["missing"] is None


def test_truncate_message() -> None:
    ev = ChangeEvent(Op.TRUNCATE, ORDERS, None, None, 700, 0x16B3748, 0, 1)
    encoder = QlikEncoder()
    messages = encode(encoder, [ev])
    got = orjson.loads(messages[-1].value)["message"]
    assert got["headers"]["operation"] == "TRUNCATE"
    assert got["data"] == {}
    assert got["headers"]["changeMask"] == got["headers"]["columnMask"] == "00"
    assert messages[-1].key == b"public.orders"


def test_kafka_keys_are_row_keys() -> None:
    events = [
        event(Op.INSERT, ORDERS, after={"id": "1"}, ordinal=1),
        event(Op.DELETE, ORDERS, before={"id": "1"}, before_key_only=True, ordinal=2),
    ]
    messages = [m for m in encode(QlikEncoder(), events) if m.kind == "change"]
    assert messages[0].key == row_key(ORDERS, events[0].after)
    assert messages[1].key == row_key(ORDERS, events[1].before)
    assert [(m.commit_lsn, m.xid, m.ordinal) for m in messages] == [
        (0x16B3748, 700, 1),
        (0x16B3748, 700, 2),
    ]

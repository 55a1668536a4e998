"""Shareplex JSON (DTS): DTS's examples rebuilt, seq/size/idx, images, exact values, schema."""

from __future__ import annotations

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

from capture.errors import WalcastError
from capture.events import ChangeEvent, Op, TransactionBegin
from capture.formats import parse_settings
from capture.formats._common import row_key
from capture.formats.base import FormatOptions
from capture.formats.shareplex.encode import ShareplexEncoder, TransactionSizeError
from capture.pgoutput.messages import UNCHANGED_TOAST
from tests.support.events import event, make_table, table_with
from tests.support.formats import encode_transaction, orders_tables

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "formats" / "shareplex"
SCHEMA = json.loads((REPO / "schemas" / "shareplex.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
encode = partial(encode_transaction, validator=VALIDATOR)
SECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")
META_KEYS = [
    "time", "userid", "op", "scn", "rowid", "trans", "seq", "size", "table", "idx", "posttime",
]  # fmt: skip


def docs(events: list[ChangeEvent], count: int | None = None, **settings: Any) -> list[dict]:
    encoder = ShareplexEncoder(FormatOptions(settings=parse_settings("shareplex", settings)))
    return [orjson.loads(m.value) for m in encode(encoder, events, count)]


def one(ev: ChangeEvent, **settings: Any) -> dict[str, Any]:
    (doc,) = docs([ev], **settings)
    return doc


ORDERS, ORDERS_FULL = orders_tables()
MIO_LOG_COLUMNS = ["MIO_LOG_ID", "PLNMIO_REC_ID", "POL_CODE", "CNTR_TYPE", "CNTR_NO", "CG_NO"]
MIO_LOG = table_with(
    "CL_BIZ1",
    "MIO_LOG",
    [(c, "numeric" if c.endswith("ID") else "varchar", True, -1) for c in MIO_LOG_COLUMNS],
    identity="f",
    pk=("MIO_LOG_ID", "PLNMIO_REC_ID", "POL_CODE", "CNTR_TYPE"),
)


# ------------------------------------------------------------------ registry, schema


def test_vendor_insert_example_validates() -> None:
    # The update and delete examples are abbreviated in the document ("…" in meta).
    VALIDATOR.validate(json.loads((DATA / "dts_insert.json").read_text()))


# ------------------------------------------------------------------ golden: DTS's examples


def test_golden_dts_insert() -> None:
    """DTS's insert: the first of 11 operations, committed 2017-06-16T14:24:34 UTC."""
    expected = json.loads((DATA / "dts_insert.json").read_text())
    table = table_with("CL_BIZ1", "MIO_LOG", [("MIO_LOG_ID", "numeric", True, -1)])
    ev = event(
        Op.INSERT,
        table,
        after={"MIO_LOG_ID": "32539737"},
        commit_lsn=14589063118712,  # the example's SCN, as a commit LSN
        when=dt.datetime(2017, 6, 16, 14, 24, 34, tzinfo=dt.UTC),
        ordinal=1,
    )
    (got,) = docs([ev], count=11)[:1]
    assert got["data"] == expected["data"]
    meta, want = got["meta"], expected["meta"]
    assert list(meta) == list(want) == META_KEYS
    for field in ("time", "op", "scn", "seq", "size", "table", "idx"):
        assert meta[field] == want[field], field
    # pgoutput carries no committing user and PostgreSQL rows have no row address.
    assert meta["userid"] is None
    assert meta["rowid"] is None
    # trans is PostgreSQL's xid (DTS shows Oracle's undo-segment form "7.0.411499").
    assert meta["trans"] == "700"
    # posttime is when walcast wrote the message.
    assert SECONDS.match(meta["posttime"])
    assert set(got) == set(expected)


def test_golden_dts_update() -> None:
    """DTS's update: data = changed column's new value, key = key + changed old value."""
    expected = json.loads((DATA / "dts_update.json").read_text())
    before = {
        "MIO_LOG_ID": "32537893",
        "PLNMIO_REC_ID": "31557806",
        "POL_CODE": None,
        "CNTR_TYPE": None,
        "CNTR_NO": "1171201606syui26",
        "CG_NO": "7",
    }
    after = {**before, "CNTR_NO": "1171201606"}
    ev = event(
        Op.UPDATE,
        MIO_LOG,
        before=before,
        after=after,
        when=dt.datetime(2017, 6, 16, 15, 38, 13, tzinfo=dt.UTC),
    )
    got = one(ev)
    assert got["data"] == expected["data"]
    assert got["key"] == expected["key"]
    assert list(got["key"]) == list(expected["key"])
    for field in ("time", "op", "table"):
        assert got["meta"][field] == expected["meta"][field], field
    assert got["meta"]["userid"] is None  # DTS: 84; pgoutput carries no user
    assert list(got) == ["meta", "data", "key"]


def test_golden_dts_delete() -> None:
    expected = json.loads((DATA / "dts_delete.json").read_text())
    table = table_with(
        "CL_BIZ1",
        "MIO_LOG",
        [(c, "varchar", True, -1) for c in expected["data"]],
        identity="f",
        pk=("MIO_LOG_ID",),
    )
    ev = event(
        Op.DELETE,
        table,
        before=expected["data"],
        when=dt.datetime(2017, 6, 16, 15, 51, 35, tzinfo=dt.UTC),
    )
    got = one(ev)
    assert got["data"] == expected["data"]
    assert list(got["data"]) == list(expected["data"])
    for field in ("time", "op"):
        assert got["meta"][field] == expected["meta"][field], field
    assert list(got) == ["meta", "data"]


# ------------------------------------------------------------------ seq / size / idx


def test_seq_size_idx_over_a_multi_row_transaction() -> None:
    other = make_table("sales", "items", [("sku", "varchar", True)])
    events = [
        event(Op.INSERT, ORDERS, after={"id": "1"}, ordinal=1),
        event(Op.INSERT, other, after={"sku": "A"}, ordinal=2),
        event(Op.UPDATE, ORDERS, after={"id": "1", "qty": "2"}, ordinal=3),
        event(Op.DELETE, other, before={"sku": "A"}, before_key_only=True, ordinal=4),
    ]
    got = docs(events)
    assert [d["meta"]["seq"] for d in got] == [1, 2, 3, 4]
    assert [d["meta"]["size"] for d in got] == [4, 4, 4, 4]
    assert [d["meta"]["idx"] for d in got] == ["1/4", "2/4", "3/4", "4/4"]
    assert [d["meta"]["op"] for d in got] == ["ins", "ins", "upd", "del"]
    assert [d["meta"]["table"] for d in got] == [
        "public.orders", "sales.items", "public.orders", "sales.items",
    ]  # fmt: skip
    assert {d["meta"]["scn"] for d in got} == {str(0x16B3748)}
    assert {d["meta"]["trans"] for d in got} == {"700"}


def test_consecutive_transactions_each_have_their_own_size() -> None:
    encoder = ShareplexEncoder()
    first = encode(
        encoder, [event(Op.INSERT, ORDERS, after={"id": str(i)}, ordinal=i) for i in (1, 2)]
    )
    second = encode(
        encoder,
        [event(Op.INSERT, ORDERS, after={"id": "3"}, ordinal=1, xid=701, commit_lsn=0x16B4000)],
    )
    assert [orjson.loads(m.value)["meta"]["idx"] for m in first] == ["1/2", "2/2"]
    (last,) = [orjson.loads(m.value)["meta"] for m in second]
    assert (last["idx"], last["trans"], last["scn"]) == ("1/1", "701", str(0x16B4000))
    assert [m.ordinal for m in first] == [1, 2]


def test_a_change_without_the_transaction_size_is_an_error() -> None:
    encoder = ShareplexEncoder()
    ev = event(Op.INSERT, ORDERS, after={"id": "1"})
    with pytest.raises(TransactionSizeError, match="transaction 700") as raised:
        encoder.change(ev)
    assert isinstance(raised.value, WalcastError)
    encoder.begin(TransactionBegin(700, ev.commit_lsn, ev.commit_ts, None))
    with pytest.raises(TransactionSizeError):
        encoder.change(ev)


def test_scn_is_the_commit_lsn_as_a_decimal_number() -> None:
    got = one(event(Op.INSERT, ORDERS, after={"id": "1"}, commit_lsn=(0x1F << 32) | 0xABCDEF01))
    assert got["meta"]["scn"] == str((0x1F << 32) | 0xABCDEF01)


# ------------------------------------------------------------------ images


def test_update_without_before_image() -> None:
    """REPLICA IDENTITY DEFAULT, key unchanged: every sent non-key column; key from new row."""
    got = one(event(Op.UPDATE, ORDERS, after={"id": "1", "note": "n", "qty": "4"}))
    assert got["data"] == {"note": "n", "qty": "4"}
    assert got["key"] == {"id": "1"}


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
    assert got["data"] == {"id": "2", "note": "n", "qty": "4"}
    assert got["key"] == {"id": "1"}


def test_update_full_identity_only_changed_columns() -> None:
    got = one(
        event(
            Op.UPDATE,
            ORDERS_FULL,
            before={"id": "1", "note": "a", "qty": "4"},
            after={"id": "1", "note": "b", "qty": "4"},
        )
    )
    assert got["data"] == {"note": "b"}
    assert got["key"] == {"id": "1", "note": "a"}


def test_update_unchanged_toast_is_never_data() -> None:
    got = one(event(Op.UPDATE, ORDERS, after={"id": "1", "note": UNCHANGED_TOAST, "qty": "5"}))
    assert got["data"] == {"qty": "5"}
    full = one(
        event(
            Op.UPDATE,
            ORDERS_FULL,
            before={"id": "1", "note": "long", "qty": "4"},
            after={"id": "1", "note": UNCHANGED_TOAST, "qty": "5"},
        )
    )
    assert full["data"] == {"qty": "5"}
    assert full["key"] == {"id": "1", "qty": "4"}


def test_insert_has_no_key_object() -> None:
    got = one(event(Op.INSERT, ORDERS, after={"id": "1", "note": None, "qty": "2"}))
    assert got == {"meta": got["meta"], "data": {"id": "1", "note": None, "qty": "2"}}


def test_delete_key_only_and_full() -> None:
    assert one(event(Op.DELETE, ORDERS, before={"id": "3"}, before_key_only=True))["data"] == {
        "id": "3"
    }
    row = {"id": "3", "note": None, "qty": "1"}
    assert one(event(Op.DELETE, ORDERS_FULL, before=row))["data"] == row


def test_exact_values_survive() -> None:
    table = table_with(
        "public",
        "exact",
        [
            ("id", "int8", True, -1),
            ("amount", "numeric", False, ((38 << 16) | 10) + 4),
            ("low", "int8", False, -1),
            ("at", "timestamptz", False, -1),
            ("blob", "bytea", False, -1),
        ],
    )
    after = {
        "id": "9223372036854775807",
        "amount": "1234567890123456789012345678.0123456789",
        "low": "-9223372036854775808",
        "at": "2024-05-02 18:17:29.123456+00",
        "blob": "\\x000100",
    }
    data = one(event(Op.INSERT, table, after=after))["data"]
    assert data == after
    assert Decimal(data["amount"]) == Decimal("1234567890123456789012345678.0123456789")
    assert int(data["id"]) == 2**63 - 1
    assert int(data["low"]) == -(2**63)
    assert dt.datetime.fromisoformat(data["at"]).microsecond == 123456
    assert bytes.fromhex(data["blob"][2:]) == b"\x00\x01\x00"


def test_truncate() -> None:
    ev = ChangeEvent(Op.TRUNCATE, ORDERS, None, None, 700, 0x16B3748, 0, 1)
    got = one(ev)
    assert got["meta"]["op"] == "truncate"
    assert got["data"] == {}
    encoder = ShareplexEncoder(
        FormatOptions(settings=parse_settings("shareplex", {"shareplex.truncate": "skip"}))
    )
    assert encode(encoder, [ev]) == []


def test_kafka_keys_are_row_keys() -> None:
    events = [
        event(Op.INSERT, ORDERS, after={"id": "1"}, ordinal=1),
        event(Op.DELETE, ORDERS, before={"id": "1"}, before_key_only=True, ordinal=2),
    ]
    messages = encode(ShareplexEncoder(), events)
    assert messages[0].key == row_key(ORDERS, events[0].after)
    assert messages[1].key == row_key(ORDERS, events[1].before)
    assert all(m.kind == "change" and m.commit_lsn == 0x16B3748 for m in messages)

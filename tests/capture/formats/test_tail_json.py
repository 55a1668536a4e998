"""walcast's own JSON line format (``walcast tail --format json``)."""

from __future__ import annotations

import datetime as dt

import orjson

from capture.events import Op
from capture.formats import encoder_for
from capture.pgoutput.messages import UNCHANGED_TOAST
from tests.support.events import event, make_table

TABLE = make_table(
    "public", "docs", [("id", "int4", True), ("title", "text", False), ("body", "text", False)]
)
WHEN = dt.datetime(2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC)


def line(ev) -> dict:
    raw = encoder_for("json").tail_lines(ev)
    assert raw.endswith(b"\n")
    assert raw.count(b"\n") == 1
    return orjson.loads(raw)


def test_insert_line() -> None:
    got = line(event(Op.INSERT, TABLE, after={"id": "1", "title": "a\nb", "body": None}, when=WHEN))
    assert got == {
        "op": "insert",
        "schema": "public",
        "table": "docs",
        "xid": 700,
        "commit_lsn": "0/16B3748",
        "commit_time": "2024-05-02T18:17:29.123456+00:00",
        "before": None,
        "after": {"id": "1", "title": "a\nb", "body": None},
        "unchanged_toast": [],
    }


def test_update_with_key_only_before_and_unchanged_toast() -> None:
    ev = event(
        Op.UPDATE, TABLE,
        before={"id": "1"}, before_key_only=True,
        after={"id": "2", "title": "t", "body": UNCHANGED_TOAST},
    )  # fmt: skip
    got = line(ev)
    assert got["before"] == {"id": "1"}
    assert got["after"] == {"id": "2", "title": "t"}
    assert got["unchanged_toast"] == ["body"]


def test_delete_and_truncate() -> None:
    got = line(event(Op.DELETE, TABLE, before={"id": "3"}, before_key_only=True))
    assert (got["op"], got["before"], got["after"]) == ("delete", {"id": "3"}, None)
    got = line(event(Op.TRUNCATE, TABLE))
    assert (got["op"], got["before"], got["after"]) == ("truncate", None, None)


def test_prefix_cache_does_not_leak_between_tables_or_transactions() -> None:
    other = make_table("s2", "t2", [("k", "text", True)])
    enc = encoder_for("json")
    a = orjson.loads(enc.tail_lines(event(Op.INSERT, TABLE, after={"id": "1"}, commit_lsn=1)))
    b = orjson.loads(enc.tail_lines(event(Op.INSERT, other, after={"k": "x"}, commit_lsn=1)))
    c = orjson.loads(enc.tail_lines(event(Op.INSERT, other, after={"k": "y"}, commit_lsn=2, xid=9)))
    assert (a["table"], b["table"], c["table"]) == ("docs", "t2", "t2")
    assert (b["commit_lsn"], c["commit_lsn"], c["xid"]) == ("0/1", "0/2", 9)

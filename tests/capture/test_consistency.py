"""Change events against their tables: the source's row check and the sink's diagnosis."""

from __future__ import annotations

import pytest

from capture.consistency import check_row, explain
from capture.errors import DecodeError
from capture.events import Op
from capture.formats import FORMAT_NAMES, encoder_for
from capture.pgoutput.messages import TupleData
from tests.support.events import event, make_table

TABLE = make_table("shop", "orders", [("id", "int4", True), ("note", "text", False)])


def test_a_row_that_fits_passes() -> None:
    check_row(TABLE, "I", b"I...", 0x10, TupleData(b"tt", (b"1", b"caf\xc3\xa9")))
    check_row(TABLE, "I", b"I", 0x10, TupleData(b"bb", (b"\x00\x00\x00\x01", b"\xff")))
    check_row(TABLE, "D", b"D\xff", 0x10, key_only=TupleData(b"tn", (b"1", None)))


@pytest.mark.parametrize(
    ("tuples", "key_only", "expected"),
    [
        ((TupleData(b"ttt", (b"1", b"a", b"b")),), None, "the tuple has 3 columns"),
        ((TupleData(b"t", (b"1",)),), None, "the tuple has 1 columns"),
        ((TupleData(b"tt", (b"1", b"\xc3")),), None, "column note: the text value is not"),
        ((), TupleData(b"tt", (b"1", b"x")), "column note: the old key image carries"),
        ((TupleData(b"bt", (b"\x07", b"a")),), None, "column id: the binary int4 value has 1"),
        ((TupleData(b"bt", (b"\x00" * 8, b"a")),), None, "binary int4 value has 8 bytes"),
    ],
)
def test_a_row_that_does_not_fit_is_a_decode_error_naming_where(
    tuples: tuple[TupleData, ...], key_only: TupleData | None, expected: str
) -> None:
    with pytest.raises(DecodeError) as info:
        check_row(TABLE, "U", b"U\x80", 0x1_0000_0010, *tuples, key_only=key_only)
    message = str(info.value)
    assert expected in message
    assert "WAL position 1/10" in message
    assert "relation shop.orders" in message
    assert "hint:" in info.value.one_line()


def test_an_all_ascii_message_skips_the_utf8_check_but_never_the_count() -> None:
    # (bytes that are not UTF-8 cannot sit in an all-ASCII message; the count is checked)
    with pytest.raises(DecodeError, match="has 3 columns"):
        check_row(TABLE, "I", b"I", 0, TupleData(b"ttt", (b"1", b"a", b"b")))


@pytest.mark.parametrize(
    ("values", "binary", "column", "what"),
    [
        ({"id": "x", "note": "ok"}, (), "id", "text value (1 bytes) is not a valid int4"),
        ({"id": "99999999999", "note": "ok"}, (), "id", "is not a valid int4"),
        (
            {"id": b"\x00", "note": "ok"},
            ("id",),
            "id",
            "binary value (1 bytes) is not a valid int4",
        ),
    ],
)
def test_explain_names_the_column_a_format_failed_on(
    values: dict[str, str | bytes], binary: tuple[str, ...], column: str, what: str
) -> None:
    change = event(Op.INSERT, TABLE, after=values, binary=binary, ordinal=4, xid=77)
    failures: list[tuple[str, Exception]] = []
    for name in FORMAT_NAMES:
        try:
            encoder_for(name).change(change)
        except Exception as exc:  # noqa: BLE001 - what each format does with the value
            failures.append((name, exc))
    assert failures  # at least one format parses the value
    for name, exc in failures:
        found = explain(change, exc)
        assert found is not None, (name, exc)
        message = found.one_line()
        assert f"relation shop.orders column {column}" in message
        assert what in message
        assert "change 4 of transaction 77 (insert, new row)" in message
        assert "WAL position 0/16B3748" in message


def test_explain_finds_nothing_in_a_consistent_event() -> None:
    change = event(Op.UPDATE, TABLE, before={"id": "1", "note": "a"}, after={"id": "1"})
    assert explain(change, RuntimeError("a bug in a format")) is None

"""COPY text rows: one split in the common case, every escape COPY can write decoded."""

from __future__ import annotations

import pytest

from capture.snapshot.copytext import row_values, split_rows, unescape


def test_plain_line_is_split_on_tabs() -> None:
    assert row_values(b"1\tabc\t") == (b"1", b"abc", b"")


def test_null_and_escapes() -> None:
    line = b"\\N\tline\\nbreak\ttab\\there\tback\\\\slash\t\\x41\\101\\b\\f\\r\\v\\q"
    assert row_values(line) == (
        None,
        b"line\nbreak",
        b"tab\there",
        b"back\\slash",
        b"AA\b\f\r\vq",
    )


@pytest.mark.parametrize(
    ("escaped", "raw"),
    [(b"\\\\N", b"\\N"), (b"a\\\\", b"a\\"), (b"\\0", b"\x00"), (b"\\777", b"\xff")],
)
def test_unescape_edge_cases(escaped: bytes, raw: bytes) -> None:
    assert unescape(escaped) == raw


def test_a_literal_backslash_n_is_not_null() -> None:
    assert row_values(b"\\\\N\tx") == (b"\\N", b"x")


def test_rows_are_reassembled_across_blocks() -> None:
    blocks = [b"1\ta\n2\t", memoryview(b"b\n3"), bytearray(b"\tc\n")]
    assert list(split_rows(blocks)) == [b"1\ta", b"2\tb", b"3\tc"]
    assert list(split_rows([b"1\ta"])) == [b"1\ta"]

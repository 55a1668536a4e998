"""Unit tests (no server): character types, "char", bytea, xml."""

from __future__ import annotations

import pytest

from capture.types import TypeRegistry

REG = TypeRegistry()


@pytest.mark.parametrize("oid", [25, 1043, 1042, 19, 142, 1790])
@pytest.mark.parametrize("value", ["", "hello", "ünïcødé ✓ 😀", 'a"b\\c', "ab   ", "NULL"])
def test_text_like(oid: int, value: str) -> None:
    codec = REG.codec(oid)
    data = value.encode()
    assert codec.from_text(data) == value
    assert codec.from_binary(data) == value
    assert codec.to_text(value) == value


def test_text_rejects_invalid_utf8() -> None:
    with pytest.raises(UnicodeDecodeError):
        REG.codec(25).from_text(b"\xff")


def test_bpchar_keeps_padding() -> None:
    assert REG.codec(1042).from_binary(b"ab   ") == "ab   "


@pytest.mark.parametrize(
    ("binary", "text"),
    [(b"a", "a"), (b"\x00", ""), (b"\xe9", "\\351"), (b"\x80", "\\200"), (b"~", "~")],
)
def test_char(binary: bytes, text: str) -> None:
    codec = REG.codec(18)
    assert codec.name == "char"
    assert codec.from_binary(binary) == text
    assert codec.from_text(text.encode()) == text
    assert codec.to_text(text) == text


BYTEA = REG.codec(17)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (b"\\x", b""),
        (b"\\x00ff10", b"\x00\xff\x10"),
        (b"\\xDEADbeef", b"\xde\xad\xbe\xef"),
        # legacy escape format
        (b"abc", b"abc"),
        (b"a\\000b", b"a\x00b"),
        (b"\\\\x", b"\\x"),
        (b"\\377\\\\", b"\xff\\"),
    ],
)
def test_bytea_text(text: bytes, value: bytes) -> None:
    assert BYTEA.from_text(text) == value


def test_bytea_binary_and_output() -> None:
    data = bytes(range(256))
    assert BYTEA.from_binary(data) == data
    assert BYTEA.to_text(data) == "\\x" + data.hex()
    assert BYTEA.to_text(b"") == "\\x"
    assert BYTEA.from_text(BYTEA.to_text(data).encode()) == data

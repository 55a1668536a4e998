"""capture.types._wire: the shared count / length readers and the quoting of send decoders."""

from __future__ import annotations

import re
import struct

import pytest

from capture.types import _wire
from capture.types.composites import field_text, record_decoder
from capture.types.extensions import hstore_from_binary
from capture.types.ranges import RangeFlag, bound_text, multirange_decoder, range_decoder
from capture.types.textsearch import ItemType, Operator, tsquery_from_binary


def int4(value: int) -> bytes:
    return struct.pack(">i", value)


def test_structs_are_big_endian() -> None:
    assert _wire.INT2.unpack(b"\xff\xfe") == (-2,)
    assert _wire.UINT2.unpack(b"\xff\xfe") == (65534,)
    assert _wire.INT4.unpack(b"\x00\x00\x01\x00") == (256,)
    assert _wire.UINT4.unpack(b"\xff\xff\xff\xff") == (2**32 - 1,)
    assert _wire.INT8.unpack(b"\xff" * 8) == (-1,)
    assert _wire.UINT8.unpack(b"\xff" * 8) == (2**64 - 1,)
    assert _wire.FLOAT4.unpack(b"\x3f\x80\x00\x00") == (1.0,)
    assert _wire.FLOAT8.unpack(b"\x3f\xf0" + b"\x00" * 6) == (1.0,)


def test_read_count() -> None:
    assert _wire.read_count(int4(3) + b"rest", "hstore", "pair") == 3
    assert _wire.read_count(int4(0), "hstore", "pair") == 0
    with pytest.raises(ValueError, match=r"^hstore send data: pair count -1$"):
        _wire.read_count(int4(-1), "hstore", "pair")
    with pytest.raises(struct.error):
        _wire.read_count(b"\x00\x00", "hstore", "pair")


def test_read_length() -> None:
    data = b"xx" + int4(3) + b"abc"
    assert _wire.read_length(data, 2, "k", "field") == (3, 6)
    assert _wire.read_length(int4(0), 0, "k", "field") == (0, 4)
    with pytest.raises(ValueError, match=r"^k send data: field length 4$"):
        _wire.read_length(b"xx" + int4(4) + b"abc", 2, "k", "field")
    with pytest.raises(ValueError, match=r"^k send data: field length -2$"):
        _wire.read_length(int4(-2), 0, "k", "field", nullable=True)
    with pytest.raises(ValueError, match=r"^k send data: field length -1$"):
        _wire.read_length(int4(-1), 0, "k", "field")
    assert _wire.read_length(int4(-1), 0, "k", "field", nullable=True) == (-1, 4)
    with pytest.raises(ValueError, match=r"^k send data: field length 9 at offset 2$"):
        _wire.read_length(b"xx" + int4(9), 2, "k", "field", show_offset=True)
    with pytest.raises(struct.error):
        _wire.read_length(b"xx\x00", 2, "k", "field")


def test_quoted_if() -> None:
    pattern = re.compile("[ ,]")
    assert _wire.quoted_if(pattern, "abc") == "abc"
    assert _wire.quoted_if(pattern, "") == '""'
    assert _wire.quoted_if(pattern, "a b") == '"a b"'
    assert _wire.quoted_if(pattern, 'a"\\') == 'a"\\'  # no match: left as is
    assert _wire.quoted_if(pattern, 'a,"\\') == '"a,""\\\\"'


def test_public_quoting_wrappers_keep_their_characters() -> None:
    # brackets force quotes in a range bound, not in a record attribute
    assert bound_text("[1]") == '"[1]"'
    assert field_text("[1]") == "[1]"
    assert bound_text("a b") == field_text("a b") == '"a b"'
    assert bound_text("") == field_text("") == '""'


def test_decoders_keep_their_messages() -> None:
    int4_text = lambda data: str(struct.unpack(">i", data)[0])  # noqa: E731
    multirange = multirange_decoder(range_decoder(int4_text))
    good_range = bytes([RangeFlag.LB_INC]) + int4(4) + int4(1) + int4(4) + int4(5)
    assert multirange(int4(1) + int4(len(good_range)) + good_range) == "{[1,5)}"
    with pytest.raises(ValueError, match=r"^multirange send data: range count -3$"):
        multirange(int4(-3))
    with pytest.raises(ValueError, match=r"^multirange send data: range length 99$"):
        multirange(int4(1) + int4(99) + good_range)
    with pytest.raises(ValueError, match=r"^range send data: bound length 7 at offset 1$"):
        range_decoder(int4_text)(bytes([RangeFlag.UB_INF]) + int4(7) + int4(1))
    record = record_decoder(lambda _oid: bytes.decode)
    attributes = struct.pack(">Ii", 25, 3) + b"a b" + struct.pack(">Ii", 25, -1)
    assert record(int4(2) + attributes) == '("a b",)'
    with pytest.raises(ValueError, match=r"^record send data: attribute length -2$"):
        record(int4(1) + struct.pack(">Ii", 25, -2))
    assert hstore_from_binary(int4(1) + int4(1) + b"k" + int4(-1)) == '"k"=>NULL'
    with pytest.raises(ValueError, match=r"^hstore send data: value length -2$"):
        hstore_from_binary(int4(1) + int4(1) + b"k" + int4(-2))
    with pytest.raises(ValueError, match=r"^hstore send data: key length -1$"):
        hstore_from_binary(int4(1) + int4(-1))
    query = int4(3) + bytes([ItemType.OPR, Operator.PHRASE]) + struct.pack(">h", 2)
    query += bytes([ItemType.VAL, 0, 0]) + b"b\0" + bytes([ItemType.VAL, 0, 0]) + b"a\0"
    assert tsquery_from_binary(query) == "'a' <2> 'b'"
    with pytest.raises(ValueError, match=r"^tsquery send data: item count -1$"):
        tsquery_from_binary(int4(-1))

"""Unit tests (no server): the binary decoders of geometric, range, text search, snapshot,
composite and contrib types, written against send layouts built here by hand.

The real proof (server send bytes vs. server text) is test_binary_types_pg.py; these pin
the layouts, the quoting rules and the refusal of malformed data.
"""

from __future__ import annotations

import math
import struct

import pytest

from capture.types import TypeRegistry
from capture.types.composites import record_decoder
from capture.types.extensions import cube_from_binary, hstore_from_binary
from capture.types.ranges import multirange_decoder, range_decoder
from capture.types.textsearch import tsquery_from_binary, tsvector_from_binary

REG = TypeRegistry()


def f8(*values: float) -> bytes:
    return struct.pack(f">{len(values)}d", *values)


def i4(value: int) -> bytes:
    return struct.pack(">i", value)


# --------------------------------------------------------------------------- geometric


@pytest.mark.parametrize(
    ("oid", "data", "text"),
    [
        (600, f8(1.5, 2), "(1.5,2)"),
        (600, f8(-0.0, math.nan), "(-0,NaN)"),
        (600, f8(math.inf, -math.inf), "(Infinity,-Infinity)"),
        (600, f8(1e300, 5e-324), "(1e+300,5e-324)"),
        (600, f8(0.1, 123456789012345680000), "(0.1,1.2345678901234568e+20)"),
        (628, f8(1, -2, 0.5), "{1,-2,0.5}"),
        (601, f8(1, 2, 3, 4), "[(1,2),(3,4)]"),
        (603, f8(3, 4, 1, 2), "(3,4),(1,2)"),
        (602, b"\x00" + i4(2) + f8(1, 2, 3, 4), "[(1,2),(3,4)]"),
        (602, b"\x01" + i4(2) + f8(1, 2, 3, 4), "((1,2),(3,4))"),
        (602, b"\x01" + i4(1) + f8(0, 0), "((0,0))"),
        (604, i4(3) + f8(0, 0, 1, 1, 1, 0), "((0,0),(1,1),(1,0))"),
        (718, f8(1, 2, 3), "<(1,2),3>"),
        (718, f8(-0.0, 0, math.inf), "<(-0,0),Infinity>"),
    ],
)
def test_geometric(oid: int, data: bytes, text: str) -> None:
    codec = REG.codec(oid)
    assert codec.binary_refusal is None
    assert codec.from_binary(data) == text
    assert codec.to_text(codec.from_binary(data)) == text
    assert codec.from_text(text.encode()) == text


@pytest.mark.parametrize(
    ("oid", "data"),
    [
        (600, f8(1)),
        (600, f8(1, 2, 3)),
        (628, f8(1, 2)),
        (601, f8(1, 2, 3)),
        (602, b"\x02" + i4(1) + f8(0, 0)),
        (602, b"\x00" + i4(2) + f8(0, 0)),
        (602, b"\x00" + i4(-1)),
        (604, i4(1) + f8(0, 0) + b"\x00"),
        (718, f8(1, 2)),
    ],
)
def test_geometric_rejects_malformed_data(oid: int, data: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        REG.codec(oid).from_binary(data)


def test_box_array_uses_semicolons() -> None:
    codec = REG.codec(1020)
    data = struct.pack(">iiIii", 1, 0, 603, 2, 1) + b"".join(
        i4(32) + f8(*box) for box in ((1, 1, 0, 0), (3, 3, 2, 2))
    )
    assert codec.to_text(codec.from_binary(data)) == "{(1,1),(0,0);(3,3),(2,2)}"


# --------------------------------------------------------------------------- ranges


def bound(data: bytes) -> bytes:
    return i4(len(data)) + data


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"\x02" + bound(i4(1)) + bound(i4(10)), "[1,10)"),
        (b"\x01", "empty"),
        (b"\x81", "empty"),  # contains-empty bit set too
        (b"\x08" + bound(i4(6)), "(,6)"),
        (b"\x18", "(,)"),
        (b"\x12" + bound(i4(-5)), "[-5,)"),
        (b"\x06" + bound(i4(1)) + bound(i4(1)), "[1,1]"),
    ],
)
def test_int4range(data: bytes, text: str) -> None:
    codec = REG.codec(3904)
    assert codec.from_binary(data) == text
    assert codec.to_text(codec.from_binary(data)) == text


def test_range_bounds_are_quoted_like_range_out() -> None:
    decode = range_decoder(bytes.decode)
    cases = {
        "": '""',
        "a": "a",
        "a b": '"a b"',
        'a"b': '"a""b"',
        "a\\b": '"a\\\\b"',
        "(x)": '"(x)"',
        "[": '"["',
        "x,y": '"x,y"',
        "tab\t": '"tab\t"',
        "{}": "{}",  # braces are not special in range_out
        "ü": "ü",
    }
    for value, shown in cases.items():
        data = b"\x06" + bound(value.encode()) + bound(b"z")
        assert decode(data) == f"[{shown},z]"


@pytest.mark.parametrize(
    "data",
    [b"", b"\x01\x00", b"\x02" + bound(i4(1)), b"\x02" + bound(i4(1)) + bound(i4(2)) + b"x"],
)
def test_range_rejects_malformed_data(data: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        REG.codec(3904).from_binary(data)


def test_multirange() -> None:
    codec = REG.codec(4451)
    one = b"\x02" + bound(i4(1)) + bound(i4(3))
    two = b"\x02" + bound(i4(5)) + bound(i4(7))
    assert codec.from_binary(i4(2) + bound(one) + bound(two)) == "{[1,3),[5,7)}"
    assert codec.from_binary(i4(0)) == "{}"
    with pytest.raises(ValueError, match="trailing"):
        codec.from_binary(i4(1) + bound(one) + b"\x00")
    text_multi = multirange_decoder(range_decoder(bytes.decode))
    assert text_multi(i4(1) + bound(b"\x02" + bound(b"a b") + bound(b"c"))) == '{["a b",c)}'


def test_date_and_timestamp_ranges_render_their_subtype() -> None:
    date = REG.codec(3912)
    data = b"\x02" + bound(i4(0)) + bound(i4(366))
    assert date.from_binary(data) == "[2000-01-01,2001-01-01)"
    tstz = REG.codec(3910)
    data = b"\x12" + bound(struct.pack(">q", 0))
    assert tstz.from_binary(data) == '["2000-01-01 00:00:00+00",)'
    infinite = b"\x12" + bound(struct.pack(">q", 2**63 - 1))
    assert tstz.from_binary(infinite) == "[infinity,)"


# --------------------------------------------------------------------------- text search


def lexeme(text: str, *positions: int) -> bytes:
    return text.encode() + b"\x00" + struct.pack(f">H{len(positions)}H", len(positions), *positions)


def test_tsvector() -> None:
    data = (
        i4(3)
        + lexeme("a", 1 | 3 << 14, 2 | 2 << 14, 3 | 1 << 14, 4)
        + lexeme("it's")
        + (lexeme("back\\slash", 16383))
    )
    assert tsvector_from_binary(data) == "'a':1A,2B,3C,4 'it''s' 'back\\\\slash':16383"
    assert tsvector_from_binary(i4(0)) == ""
    assert tsvector_from_binary(i4(1) + lexeme("ünï")) == "'ünï'"
    for bad in (i4(1) + b"a", i4(1) + lexeme("a", 1)[:-1], i4(0) + b"x", i4(-1)):
        with pytest.raises((ValueError, struct.error)):
            tsvector_from_binary(bad)


def val(text: str, weight: int = 0, prefix: int = 0) -> bytes:
    return bytes((1, weight, prefix)) + text.encode() + b"\x00"


NOT, AND, OR = b"\x02\x01", b"\x02\x02", b"\x02\x03"


def phrase(distance: int = 1) -> bytes:
    return b"\x02\x04" + struct.pack(">h", distance)


def query(*items: bytes) -> bytes:
    return struct.pack(">I", len(items)) + b"".join(items)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        # prefix order: operator, RIGHT operand, left operand
        (query(val("a")), "'a'"),
        (query(AND, val("b"), val("a")), "'a' & 'b'"),
        (query(OR, val("c"), AND, val("b"), val("a")), "'a' & 'b' | 'c'"),
        (query(AND, val("c"), OR, val("b"), val("a")), "( 'a' | 'b' ) & 'c'"),
        (query(AND, OR, NOT, val("c"), val("b"), val("a")), "'a' & ( 'b' | !'c' )"),
        (query(NOT, AND, val("b"), val("a")), "!( 'a' & 'b' )"),
        (query(NOT, NOT, val("a")), "!!'a'"),
        (query(phrase(), phrase(), val("c"), val("b"), val("a")), "'a' <-> ( 'b' <-> 'c' )"),
        (query(phrase(), val("c"), phrase(), val("b"), val("a")), "'a' <-> 'b' <-> 'c'"),
        (query(phrase(3), val("b"), val("a")), "'a' <3> 'b'"),
        (query(phrase(0), val("b"), val("a")), "'a' <0> 'b'"),
        (query(AND, phrase(), val("c"), val("b"), val("a")), "'a' & 'b' <-> 'c'"),
        (query(phrase(), AND, val("c"), val("b"), val("a")), "'a' <-> ( 'b' & 'c' )"),
        (query(val("fat", 8 | 4)), "'fat':AB"),
        (query(val("rat", 0, 1)), "'rat':*"),
        (query(val("x", 15, 1)), "'x':*ABCD"),
        (query(val("it's")), "'it''s'"),
        (query(val("back\\slash", 1)), "'back\\\\slash':D"),
        (query(), ""),
    ],
)
def test_tsquery(data: bytes, text: str) -> None:
    assert tsquery_from_binary(data) == text
    assert REG.codec(3615).from_binary(data) == text


def test_tsquery_deep_tree_does_not_recurse() -> None:
    depth = 5000
    data = query(*[AND, val("x")] * depth, val("y"))
    text = tsquery_from_binary(data)
    assert text == "'y'" + " & 'x'" * depth


@pytest.mark.parametrize(
    "data",
    [
        query(AND, val("a")),
        query(val("a"), val("b")),
        query(NOT),
        query(b"\x02\x09", val("a"), val("b")),
        query(b"\x05\x00"),
        query(val("a", 16)),
        query(val("a"))[:-1],
        query(val("a")) + b"\x00",
    ],
)
def test_tsquery_rejects_malformed_data(data: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        tsquery_from_binary(data)


# --------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("oid", [5038, 2970])
def test_snapshots(oid: int) -> None:
    codec = REG.codec(oid)
    data = struct.pack(">iQQQQQ", 3, 10, 20, 10, 14, 15)
    assert codec.from_binary(data) == "10:20:10,14,15"
    assert codec.from_binary(struct.pack(">iQQ", 0, 10, 10)) == "10:10:"
    big = 2**64 - 1
    assert codec.from_binary(struct.pack(">iQQQ", 1, 1, big, big)) == f"1:{big}:{big}"
    with pytest.raises(ValueError, match="xids"):
        codec.from_binary(struct.pack(">iQQ", 1, 10, 10))


def test_int2vector_and_oidvector() -> None:
    int2v, oidv = REG.codec(22), REG.codec(30)
    data = struct.pack(">iiIii", 1, 0, 21, 3, 0) + b"".join(
        i4(2) + struct.pack(">h", v) for v in (1, -2, 3)
    )
    assert int2v.from_binary(data) == "1 -2 3"
    assert int2v.from_binary(struct.pack(">iiI", 0, 0, 21)) == ""
    data = struct.pack(">iiIii", 1, 0, 26, 1, 0) + i4(4) + struct.pack(">I", 4294967295)
    assert oidv.from_binary(data) == "4294967295"
    with pytest.raises(ValueError, match="vector"):
        oidv.from_binary(struct.pack(">iiIii", 1, 1, 26, 1, 0) + i4(-1))


# --------------------------------------------------------------------------- composites


def attribute(oid: int, data: bytes | None) -> bytes:
    if data is None:
        return struct.pack(">Ii", oid, -1)
    return struct.pack(">Ii", oid, len(data)) + data


def _render_for(oid: int):  # type: ignore[no-untyped-def]
    codec = REG.codec(oid)
    return lambda data: codec.to_text(codec.from_binary(data))


def test_record() -> None:
    decode = record_decoder(_render_for)
    data = (
        i4(5)
        + attribute(23, i4(1))
        + attribute(25, b"a b")
        + attribute(25, None)
        + (attribute(25, b"") + attribute(25, b'q"b\\s'))
    )
    assert decode(data) == '(1,"a b",,"","q""b\\\\s")'
    assert decode(i4(0)) == "()"
    assert decode(i4(1) + attribute(25, b"{x}[y]")) == "({x}[y])"  # not special here
    assert decode(i4(1) + attribute(25, b"(x)")) == '("(x)")'
    nested = i4(2) + attribute(23, i4(7)) + attribute(25, b"a,b")
    outer = record_decoder(lambda oid: decode if oid == 99999 else _render_for(oid))
    assert outer(i4(2) + attribute(99999, nested) + attribute(23, i4(2))) == '("(7,""a,b"")",2)'
    for bad in (i4(1), i4(1) + attribute(23, i4(1)) + b"x", i4(1) + struct.pack(">Ii", 23, 9)):
        with pytest.raises((ValueError, struct.error)):
            decode(bad)


# --------------------------------------------------------------------------- contrib


def test_hstore() -> None:
    def pair(key: bytes, value: bytes | None) -> bytes:
        out = i4(len(key)) + key
        return out + (i4(-1) if value is None else i4(len(value)) + value)

    data = i4(3) + pair(b"a", b"1") + pair(b'q"k', b"back\\slash") + pair(b"n", None)
    assert hstore_from_binary(data) == '"a"=>"1", "q\\"k"=>"back\\\\slash", "n"=>NULL'
    assert hstore_from_binary(i4(0)) == ""
    assert hstore_from_binary(i4(1) + pair(b"", b"")) == '""=>""'
    with pytest.raises((ValueError, struct.error)):
        hstore_from_binary(i4(2) + pair(b"a", b"1"))


def test_cube() -> None:
    point = struct.pack(">I", 0x80000002) + f8(1, 2)
    assert cube_from_binary(point) == "(1, 2)"
    box = struct.pack(">I", 2) + f8(1, 2, 3, 4)
    assert cube_from_binary(box) == "(1, 2),(3, 4)"
    same = struct.pack(">I", 2) + f8(1, -0.0, 1, 0.0)  # equal corners print as a point
    assert cube_from_binary(same) == "(1, -0)"
    nan = struct.pack(">I", 1) + f8(math.nan, math.nan)  # NaN != NaN: not a point
    assert cube_from_binary(nan) == "(NaN),(NaN)"
    with pytest.raises(ValueError, match="coordinates"):
        cube_from_binary(struct.pack(">I", 2) + f8(1, 2))

"""Unit tests (no server): arrays in text and binary form."""

from __future__ import annotations

import struct
from datetime import date
from decimal import Decimal

import pytest

from capture.types import INFINITY, PgArray, PgDate, RawBinary, TypeRegistry
from tests.capture.types import _wire as wire
from tests.capture.types._helpers import same

REG = TypeRegistry()
INT4S = REG.codec(1007)
TEXTS = REG.codec(1009)


def test_array_codec_names() -> None:
    assert (INT4S.name, INT4S.category) == ("_int4", "A")
    assert REG.name_of(1000) == "_bool"
    assert REG.name_of(1231) == "_numeric"
    assert REG.name_of(1020) == "_box"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{}", []),
        ("{1,2,3}", [1, 2, 3]),
        ("{1,NULL,3}", [1, None, 3]),
        ("{NULL}", [None]),
        ("{{1,2},{3,4}}", [[1, 2], [3, 4]]),
        ("{{{1,2}},{{3,NULL}}}", [[[1, 2]], [[3, None]]]),
        ("[0:2]={1,2,3}", PgArray((0,), [1, 2, 3])),
        ("[1:2][0:1]={{1,2},{3,4}}", PgArray((1, 0), [[1, 2], [3, 4]])),
        ("[-5:-4]={7,8}", PgArray((-5,), [7, 8])),
    ],
)
def test_int_array_text(text: str, expected: object) -> None:
    assert same(INT4S.from_text(text.encode()), expected)
    assert INT4S.to_text(expected) == text


def test_int_array_text_lenient_input() -> None:
    assert INT4S.from_text(b"{ 1 , 2 ,null}") == [1, 2, None]
    assert INT4S.from_text(b'{"1", 2}') == [1, 2]
    assert INT4S.from_text(b"[1:2]={1,2}") == [1, 2]  # all lower bounds 1: plain list
    assert INT4S.from_text(b"{{1},{2}} ") == [[1], [2]]


@pytest.mark.parametrize(
    "bad", [b"{1,2", b"{1}}", b"1,2", b"{1}{2}", b"[0:1]{1,2}", b"{{{{{{{1}}}}}}}"]
)
def test_array_text_malformed(bad: bytes) -> None:
    with pytest.raises(ValueError, match="array"):
        INT4S.from_text(bad)


# Elements that need quoting in array_out, with their quoted forms.
QUOTING = [
    ("", '""'),
    ("NULL", '"NULL"'),
    ("null", '"null"'),
    ("nUlL", '"nUlL"'),
    ("a b", '"a b"'),
    ("a\tb", '"a\tb"'),
    ("a\vb", '"a\vb"'),
    ("a\fb", '"a\fb"'),
    ("a\nb", '"a\nb"'),
    ("a\rb", '"a\rb"'),
    ('x"y', '"x\\"y"'),
    ("x\\y", '"x\\\\y"'),
    ("{", '"{"'),
    ("}", '"}"'),
    (",", '","'),
    # no quoting needed
    (";", ";"),
    ("plain", "plain"),
    ("ünï😀", "ünï😀"),
    ("nul", "nul"),
    ("NULLS", "NULLS"),
    ("=", "="),
    ("[1:2]", "[1:2]"),
    ("'", "'"),
]


@pytest.mark.parametrize(("element", "quoted"), QUOTING)
def test_text_array_quoting(element: str, quoted: str) -> None:
    text = "{" + quoted + ",NULL}"
    assert TEXTS.to_text([element, None]) == text
    assert TEXTS.from_text(text.encode()) == [element, None]


def test_text_array_all_at_once() -> None:
    elements = [e for e, _ in QUOTING]
    text = TEXTS.to_text(elements)
    assert text == "{" + ",".join(q for _, q in QUOTING) + "}"
    assert TEXTS.from_text(text.encode()) == elements
    nested = [["a b", None], ["c", 'd"e']]
    assert TEXTS.to_text(nested) == '{{"a b",NULL},{c,"d\\"e"}}'
    assert TEXTS.from_text(b'{{"a b",NULL},{c,"d\\"e"}}') == nested


def test_unquoted_escapes_and_whitespace() -> None:
    assert TEXTS.from_text(b"{a\\,b,  c d  ,\\ x\\ }") == ["a,b", "c d", " x "]
    assert TEXTS.from_text(b"{\\NULL}") == ["NULL"]


def test_box_array_delimiter() -> None:
    boxes = REG.codec(1020)
    assert boxes.from_text(b"{(1,1),(0,0);(3,3),(2,2)}") == ["(1,1),(0,0)", "(3,3),(2,2)"]
    assert boxes.to_text(["(1,1),(0,0)", "(3,3),(2,2)"]) == "{(1,1),(0,0);(3,3),(2,2)}"


def test_binary_one_dimension_with_nulls() -> None:
    data = bytes.fromhex(
        "00000001" "00000001" "00000017"  # ndim 1, has nulls, int4
        "00000003" "00000001"  # 3 elements, lower bound 1
        "00000004" "00000001"  # 1
        "ffffffff"  # NULL
        "00000004" "00000003"  # 3
    )  # fmt: skip
    assert INT4S.from_binary(data) == [1, None, 3]


def test_binary_lower_bounds_and_multi_dim() -> None:
    value = PgArray((0, -1), [[1, None], [3, 4], [5, 6]])
    data = wire.array(23, value, wire.int4)
    assert same(INT4S.from_binary(data), value)
    assert INT4S.to_text(value) == "[0:2][-1:0]={{1,NULL},{3,4},{5,6}}"
    assert same(INT4S.from_text(INT4S.to_text(value).encode()), value)


def test_binary_empty() -> None:
    assert INT4S.from_binary(struct.pack(">iiI", 0, 0, 23)) == []
    assert INT4S.to_text([]) == "{}"
    assert INT4S.to_text(PgArray((0,), [])) == "{}"


def test_binary_rejects_trailing_bytes_and_bad_ndim() -> None:
    data = wire.array(23, [1], wire.int4)
    with pytest.raises(ValueError, match="trailing"):
        INT4S.from_binary(data + b"\x00")
    with pytest.raises(ValueError, match="dimension"):
        INT4S.from_binary(struct.pack(">iiI", 7, 0, 23))


def test_binary_element_oid_is_resolved_when_different() -> None:
    # An int8 array sent where an int4 array was expected: elements follow the wire's OID.
    data = wire.array(20, [2**40], wire.int8)
    assert INT4S.from_binary(data) == [2**40]
    # unknown element OID: raw bytes, kept losslessly
    data = wire.array(99999, [1], wire.int4)
    assert INT4S.from_binary(data) == [RawBinary(99999, b"\x00\x00\x00\x01")]


def test_typed_arrays() -> None:
    dates = REG.codec(1182)
    text = '{2024-01-01,infinity,"0044-03-15 BC",NULL}'
    value = dates.from_text(text.encode())
    assert value[:2] == [date(2024, 1, 1), INFINITY]
    assert isinstance(value[2], PgDate)
    assert dates.to_text(value) == text
    numerics = REG.codec(1231)
    value = numerics.from_text(b"{1.500,NaN,-Infinity}")
    assert str(value[0]) == "1.500"
    assert numerics.to_text(value) == "{1.500,NaN,-Infinity}"
    assert same(numerics.from_binary(wire.array(1700, value, wire.numeric)), value)
    byteas = REG.codec(1001)
    assert byteas.to_text([b"\x00\xff", b""]) == '{"\\\\x00ff","\\\\x"}'
    assert byteas.from_text(b'{"\\\\x00ff","\\\\x"}') == [b"\x00\xff", b""]
    assert REG.codec(1022).to_text([1e15, float("nan")]) == "{1e+15,NaN}"
    assert REG.codec(1000).from_text(b"{t,f,NULL}") == [True, False, None]
    assert REG.codec(1231).to_text([Decimal("-0.001")]) == "{-0.001}"

"""Unit tests (no server): integers, bool, numeric, float4/float8."""

from __future__ import annotations

import math
import struct
from decimal import Decimal

import pytest

from capture.types import TypeRegistry
from tests.capture.types import _wire as wire
from tests.capture.types._helpers import same

REG = TypeRegistry()


@pytest.mark.parametrize(
    ("oid", "data", "expected"),
    [
        (21, b"\x80\x00", -32768),
        (21, b"\x7f\xff", 32767),
        (23, b"\xff\xff\xff\xff", -1),
        (23, b"\x80\x00\x00\x00", -(2**31)),
        (20, b"\x7f\xff\xff\xff\xff\xff\xff\xff", 2**63 - 1),
        (20, b"\x80\x00\x00\x00\x00\x00\x00\x00", -(2**63)),
        (26, b"\xff\xff\xff\xff", 2**32 - 1),  # oid is unsigned
        (28, b"\xff\xff\xff\xfe", 2**32 - 2),  # xid
        (29, b"\x00\x00\x00\x07", 7),  # cid
        (5069, b"\xff" * 8, 2**64 - 1),  # xid8
    ],
)
def test_integers_binary(oid: int, data: bytes, expected: int) -> None:
    codec = REG.codec(oid)
    assert codec.from_binary(data) == expected
    assert codec.from_text(str(expected).encode()) == expected
    assert codec.to_text(expected) == str(expected)
    assert codec.category == ("U" if oid in (28, 29, 5069) else "N")


@pytest.mark.parametrize(
    ("oid", "low", "high"),
    [(21, -(2**15), 2**15 - 1), (23, -(2**31), 2**31 - 1), (20, -(2**63), 2**63 - 1),
     (26, 0, 2**32 - 1), (28, 0, 2**32 - 1), (29, 0, 2**32 - 1), (5069, 0, 2**64 - 1)],
)  # fmt: skip
def test_integer_text_outside_the_types_range_is_a_value_error(
    oid: int, low: int, high: int
) -> None:
    codec = REG.codec(oid)
    assert codec.from_text(str(low).encode()) == low
    assert codec.from_text(str(high).encode()) == high
    for bad in (low - 1, high + 1, 10**40):
        with pytest.raises(ValueError, match="out of range"):
            codec.from_text(str(bad).encode())
    assert REG.codec(25).from_text is bytes.decode  # text stays the builtin (hot path)


def test_bool_accepts_only_what_postgresql_sends() -> None:
    codec = REG.codec(16)
    for bad in (b"", b"x", b"true", b"T"):
        with pytest.raises(ValueError, match="invalid bool text"):
            codec.from_text(bad)
    for bad in (b"", b"\x02", b"\x00\x01"):
        with pytest.raises(ValueError, match="invalid bool send"):
            codec.from_binary(bad)
    assert REG.codec(1000).from_binary(struct.pack(">iiIiiiBiB", 1, 0, 16, 2, 1, 1, 1, 1, 0)) == [
        True,
        False,
    ]


def test_bool() -> None:
    codec = REG.codec(16)
    assert codec.from_text(b"t") is True
    assert codec.from_text(b"f") is False
    assert codec.from_binary(b"\x01") is True
    assert codec.from_binary(b"\x00") is False
    assert codec.to_text(True) == "t"
    assert codec.to_text(False) == "f"
    assert codec.category == "B"


NUMERIC = REG.codec(1700)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        # ndigits, weight, sign, dscale, digits...
        (struct.pack(">hhHH", 0, 0, 0, 0), "0"),
        (struct.pack(">hhHH", 0, 0, 0, 3), "0.000"),
        (struct.pack(">hhHHHH", 2, 0, 0, 3, 1, 5000), "1.500"),
        (struct.pack(">hhHHHH", 2, 0, 0x4000, 3, 1, 5000), "-1.500"),
        (struct.pack(">hhHHH", 1, -2, 0x4000, 7, 10), "-0.0000001"),
        (struct.pack(">hhHHH", 1, 5, 0, 0, 1), "100000000000000000000"),
        (struct.pack(">hhHHH", 1, -5, 0, 20, 1), "0.00000000000000000001"),
        (struct.pack(">hhHHHHH", 3, 1, 0, 2, 123, 4567, 8000), "1234567.80"),
        (struct.pack(">hhHHH", 1, 0, 0, 0, 9999), "9999"),
        (struct.pack(">hhHHH", 1, 1, 0, 0, 9999), "99990000"),
        (struct.pack(">hhHH", 0, 0, 0xC000, 0), "NaN"),
        (struct.pack(">hhHH", 0, 0, 0xD000, 0), "Infinity"),
        (struct.pack(">hhHH", 0, 0, 0xF000, 0), "-Infinity"),
    ],
)
def test_numeric_binary(data: bytes, text: str) -> None:
    from_binary = NUMERIC.from_binary(data)
    from_text = NUMERIC.from_text(text.encode())
    assert same(from_binary, from_text)
    assert NUMERIC.to_text(from_binary) == text
    assert str(from_binary) == str(Decimal(text))


def test_numeric_keeps_scale() -> None:
    value = NUMERIC.from_text(b"1.500")
    assert value.as_tuple() == Decimal("1.500").as_tuple()
    assert NUMERIC.to_text(value) == "1.500"


def test_numeric_38_10_extremes_and_1000_digits() -> None:
    for text in (
        "9999999999999999999999999999.9999999999",
        "-9999999999999999999999999999.9999999999",
        "0.0000000001",
        "9" * 1000,
        "1" + "0" * 999,
        "0." + "0" * 500 + "1",
        "-" + "1234567890" * 40 + "." + "9876543210" * 30,
    ):
        value = Decimal(text)
        decoded = NUMERIC.from_binary(wire.numeric(value))
        assert same(decoded, value)
        assert NUMERIC.to_text(decoded) == text


def test_numeric_to_text_never_prints_exponent_or_negative_zero() -> None:
    assert NUMERIC.to_text(Decimal("1E+3")) == "1000"
    assert NUMERIC.to_text(Decimal("1E-7")) == "0.0000001"
    assert NUMERIC.to_text(Decimal("-0.00")) == "0.00"
    assert NUMERIC.to_text(Decimal("-0")) == "0"
    assert NUMERIC.to_text(Decimal("-NaN")) == "NaN"
    assert NUMERIC.to_text(Decimal("-Infinity")) == "-Infinity"


def test_numeric_rejects_bad_sign() -> None:
    with pytest.raises(ValueError, match="sign"):
        NUMERIC.from_binary(struct.pack(">hhHH", 0, 0, 0x1234, 0))
    with pytest.raises(ValueError, match="sign"):
        NUMERIC.from_binary(struct.pack(">hhHH", 0, 0, 0xE000, 0))


FLOAT8 = REG.codec(701)
FLOAT4 = REG.codec(700)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (0.1, "0.1"),
        (1e15, "1e+15"),
        (1e14, "100000000000000"),
        (123456789012345.6, "123456789012345.6"),
        (999999999999999.9, "999999999999999.9"),
        (1e16, "1e+16"),
        (123456789012345680000.0, "1.2345678901234568e+20"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (0.00012345, "0.00012345"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (-1.5, "-1.5"),
        (100.0, "100"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        # Ryu without STRICTLY_SHORTEST: the 16-digit candidate sits exactly on the
        # rounding bound, so PostgreSQL prints 17 digits where repr prints 16.
        (-4.0492877048616563e17, "-4.0492877048616563e+17"),
    ],
)
def test_float8(value: float, text: str) -> None:
    assert FLOAT8.to_text(value) == text
    assert same(FLOAT8.from_text(text.encode()), value)
    assert same(FLOAT8.from_binary(wire.float8(value)), value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (0.1, "0.1"),
        (3.4028234663852886e38, "3.4028235e+38"),
        (1.401298464324817e-45, "1e-45"),
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (16777216.0, "1.6777216e+07"),
        (708634368.0, "7.0863437e+08"),  # bound case, as for float8 above
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (-2.5, "-2.5"),
    ],
)
def test_float4(value: float, text: str) -> None:
    value = struct.unpack(">f", struct.pack(">f", value))[0]
    assert FLOAT4.to_text(value) == text
    assert same(FLOAT4.from_text(text.encode()), value)
    assert same(FLOAT4.from_binary(wire.float4(value)), value)


def test_float4_text_is_rounded_to_float32() -> None:
    assert FLOAT4.from_text(b"0.1") == struct.unpack(">f", struct.pack(">f", 0.1))[0]
    assert FLOAT4.from_text(b"0.1") != 0.1


def _numeric_wire(groups: list[int], weight: int, dscale: int, sign: int = 0) -> bytes:
    """numeric_send bytes built by hand (ndigits is an unsigned 16-bit count)."""
    return struct.pack(f">HhHH{len(groups)}H", len(groups), weight, sign, dscale, *groups)


def test_numeric_with_more_than_32767_base_10000_digits() -> None:
    # repeat('9', 131072)::numeric: 32,768 base-10000 digits, an ndigits above Int16's range.
    data = _numeric_wire([9999] * 32768, 32767, 0)
    value = NUMERIC.from_binary(data)
    assert NUMERIC.to_text(value) == "9" * 131072
    assert same(value, NUMERIC.from_text(b"9" * 131072))


def test_numeric_at_the_largest_size_postgresql_sends() -> None:
    # 131,072 digits before the point and 16,383 after it (NUMERIC_DSCALE_MAX).
    text = "9" * 131072 + "." + "9" * 16383
    groups = [9999] * 32768 + [9999] * 4095 + [9990]
    value = NUMERIC.from_binary(_numeric_wire(groups, 32767, 16383, 0x4000))
    assert NUMERIC.to_text(value) == "-" + text
    assert same(value, NUMERIC.from_text(b"-" + text.encode()))


def test_long_numeric_keeps_scale_and_inner_zeros() -> None:
    # 40 base-10000 digits (the long path) with zero groups inside and a fraction.
    groups = [1, 0, 20, 300, 4000, *([0] * 30), 5, 60, 700, 8000, 9]
    text = "1" + "0000" + "0020" + "0300" + "4000" + "0000" * 30 + "0005." + "0060070080000009"
    value = NUMERIC.from_binary(_numeric_wire(groups, 35, 16))
    assert NUMERIC.to_text(value) == text
    assert same(value, NUMERIC.from_text(text.encode()))
    shorter = NUMERIC.from_binary(_numeric_wire(groups, 35, 13))  # dscale cuts zeros only
    assert NUMERIC.to_text(shorter) == text[:-3]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (struct.pack(">HhHH", 1, 0, 0, 0), "needs 10 bytes"),  # digit missing
        (struct.pack(">HhHHHH", 1, 0, 0, 0, 1, 2), "needs 10 bytes"),  # trailing bytes
        (_numeric_wire([10000], 0, 0), "base 10000"),
        (_numeric_wire([1] * 20 + [12345], 20, 0), "base 10000"),
        (b"\x00\x01", "shorter than its header"),
    ],
)
def test_malformed_numeric_send_raises_value_error(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NUMERIC.from_binary(data)

"""Numbers and booleans: int2/int4/int8, oid/xid/cid/xid8, numeric, float4/float8, bool.

Python values: ``int``, ``decimal.Decimal``, ``float``, ``bool``.

numeric keeps PostgreSQL's display scale exactly: text ``1.500`` and binary ``dscale 3``
both decode to ``Decimal('1.500')`` (same digits and exponent, not only numerically
equal), and :func:`numeric_to_text` prints it back as ``1.500``. ``NaN`` and
(PostgreSQL 14+) ``Infinity``/``-Infinity`` map to the matching ``Decimal`` specials.

float output follows PostgreSQL 12+ with ``extra_float_digits >= 1`` (the default): the
shortest digits that read back to the same value (float4: the same float32), printed in
fixed notation for decimal exponents -4 .. 14 (float8) or -4 .. 5 (float4) and as
``d.ddde+XX`` otherwise; ``NaN``, ``Infinity``, ``-Infinity`` and ``-0`` are spelled as
PostgreSQL spells them. float4 values are Python floats holding exactly the float32 value
(text input is rounded to float32 too, so text and binary decode to equal floats).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from enum import IntEnum
from typing import Final

from capture.types import _wire

_NUMERIC_HEAD: Final = struct.Struct(">HhHH")

_unpack_i2 = _wire.INT2.unpack
_unpack_i4 = _wire.INT4.unpack
_unpack_i8 = _wire.INT8.unpack
_unpack_u4 = _wire.UINT4.unpack
_unpack_u8 = _wire.UINT8.unpack
_unpack_f4 = _wire.FLOAT4.unpack
_unpack_f8 = _wire.FLOAT8.unpack
_pack_f4 = _wire.FLOAT4.pack

# --------------------------------------------------------------------------- integers
# to_text for every integer type is the builtin ``str``. from_text is ``int`` with the
# type's range checked: text out of range (which PostgreSQL never sends) is a ValueError,
# so that no output format meets an int2 of 10**40.


def _ranged(name: str, low: int, high: int) -> Callable[[bytes], int]:
    def from_text(data: bytes) -> int:
        value = int(data)
        if low <= value <= high:
            return value
        raise ValueError(f"{name} text {data[:24]!r} is out of range")

    from_text.__name__ = f"{name}_from_text"
    from_text.__doc__ = f"Decode {name}out (a decimal integer in {name}'s range)."
    return from_text


int2_from_text: Final = _ranged("int2", -(2**15), 2**15 - 1)
int4_from_text: Final = _ranged("int4", -(2**31), 2**31 - 1)
int8_from_text: Final = _ranged("int8", -(2**63), 2**63 - 1)
uint4_from_text: Final = _ranged("oid", 0, 2**32 - 1)
uint8_from_text: Final = _ranged("xid8", 0, 2**64 - 1)


def int2_from_binary(data: bytes) -> int:
    """Decode int2send (big-endian signed 16-bit)."""
    return _unpack_i2(data)[0]  # type: ignore[no-any-return]


def int4_from_binary(data: bytes) -> int:
    """Decode int4send (big-endian signed 32-bit)."""
    return _unpack_i4(data)[0]  # type: ignore[no-any-return]


def int8_from_binary(data: bytes) -> int:
    """Decode int8send (big-endian signed 64-bit)."""
    return _unpack_i8(data)[0]  # type: ignore[no-any-return]


def uint4_from_binary(data: bytes) -> int:
    """Decode oid/xid/cid send (big-endian unsigned 32-bit)."""
    return _unpack_u4(data)[0]  # type: ignore[no-any-return]


def uint8_from_binary(data: bytes) -> int:
    """Decode xid8send (big-endian unsigned 64-bit)."""
    return _unpack_u8(data)[0]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- bool


_BOOL_TEXT: Final = {b"t": True, b"f": False}
_BOOL_BINARY: Final = {b"\x01": True, b"\x00": False}


def bool_from_text(data: bytes) -> bool:
    """Decode boolout: ``t`` or ``f`` (anything else is a ValueError)."""
    try:
        return _BOOL_TEXT[data]
    except KeyError:
        raise ValueError(f"invalid bool text {data[:20]!r}") from None


def bool_from_binary(data: bytes) -> bool:
    """Decode boolsend: one byte, 1 or 0 (anything else is a ValueError)."""
    try:
        return _BOOL_BINARY[data]
    except KeyError:
        raise ValueError(f"invalid bool send data {data[:20]!r}") from None


def bool_to_text(value: bool) -> str:
    """Render like boolout."""
    return "t" if value else "f"


# --------------------------------------------------------------------------- numeric


class NumericSign(IntEnum):
    """The sign word of numeric_send (``NUMERIC_POS`` ... in numeric.c)."""

    POS = 0x0000
    """A positive number or zero."""
    NEG = 0x4000
    """A negative number."""
    NAN = 0xC000
    """NaN (no digits follow)."""
    PINF = 0xD000
    """+Infinity (PostgreSQL 14+; no digits follow)."""
    NINF = 0xF000
    """-Infinity (PostgreSQL 14+; no digits follow)."""


_NUMERIC_SPECIAL: Final = 0xC000
"""The bits every special sign (NaN, +/-Infinity) has set (``NUMERIC_SPECIAL``)."""
# Plain ints for numeric_from_binary: looking an enum member up costs several int tests.
_POS, _NEG = int(NumericSign.POS), int(NumericSign.NEG)
_SPECIALS: Final = {
    int(NumericSign.NAN): Decimal("NaN"),
    int(NumericSign.PINF): Decimal("Infinity"),
    int(NumericSign.NINF): Decimal("-Infinity"),
}

_NBASE: Final = 10000
_SMALL_NUMERIC: Final = 8
"""Up to this many base-10000 digits, the coefficient is built as an int (fastest for
the usual sizes); longer ones go through decimal text, linear in the digit count."""

# scaleb() in this context never rounds: it only sets the exponent of an exact integer.
_UNBOUNDED: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
_digit_structs: dict[int, struct.Struct] = {}


def _digits_struct(ndigits: int) -> struct.Struct:
    found = _digit_structs.get(ndigits)
    if found is None:
        found = _digit_structs[ndigits] = struct.Struct(f">{ndigits}H")
        if len(_digit_structs) > 256:  # hostile or unusual sizes must not grow it forever
            _digit_structs.clear()
    return found


def numeric_from_text(data: bytes) -> Decimal:
    """Decode numeric_out (``-12.500``, ``NaN``, ``Infinity``); the scale is kept exactly."""
    return Decimal(data.decode("ascii"))


def numeric_from_binary(data: bytes) -> Decimal:
    """Decode numeric_send.

    Layout: UInt16 ndigits (numeric_send writes it with pq_sendint16; up to 32,767
    base-10000 digits before the point plus 4,096 after it, so it can exceed 32,767),
    Int16 weight (of the first base-10000 digit), UInt16 sign (0x0000 +, 0x4000 -,
    0xC000 NaN, 0xD000 +Inf, 0xF000 -Inf), UInt16 dscale (digits shown after the point),
    then ndigits UInt16 base-10000 digits, each below 10,000.

    Time is linear in ``ndigits``: long values are assembled as decimal text (a base-10000
    digit is exactly four decimal digits), never by repeated big-integer multiplication.
    Raises ValueError on a malformed value.
    """
    if len(data) < 8:
        raise ValueError(f"numeric send data of {len(data)} bytes is shorter than its header")
    ndigits, weight, sign, dscale = _NUMERIC_HEAD.unpack_from(data)
    if sign & _NUMERIC_SPECIAL == _NUMERIC_SPECIAL:
        special = _SPECIALS.get(sign)
        if special is None:
            raise ValueError(f"invalid numeric sign 0x{sign:04X}")
        return special
    if sign != _POS and sign != _NEG:  # noqa: PLR1714 - ints, not a set lookup
        raise ValueError(f"invalid numeric sign 0x{sign:04X}")
    if len(data) != 8 + 2 * ndigits:
        raise ValueError(
            f"numeric of {ndigits} digits needs {8 + 2 * ndigits} bytes, got {len(data)}"
        )
    if not ndigits:
        return Decimal((0, (0,), -dscale))  # PostgreSQL has no negative zero
    digits = _digits_struct(ndigits).unpack_from(data, 8)
    if max(digits) >= _NBASE:
        raise ValueError("numeric digit out of range (not base 10000)")
    # value == coef * 10**shift10, coef the digits read as one base-10000 number.
    # PostgreSQL rounds to dscale before sending, so dropping -(shift10 + dscale) trailing
    # decimal digits (when negative) only drops zeros.
    shift = 4 * (weight - ndigits + 1) + dscale
    if ndigits <= _SMALL_NUMERIC:
        coef = 0
        for digit in digits:
            coef = coef * _NBASE + digit
        if shift > 0:
            coef *= 10**shift
        elif shift < 0:
            coef //= 10**-shift
        if sign == _NEG:
            coef = -coef
        return Decimal(coef).scaleb(-dscale, _UNBOUNDED)
    text = ("%04d" * ndigits) % digits
    if shift > 0:
        text += "0" * shift
    elif shift < 0:
        text = text[:shift] or "0"
    return Decimal(f"{'-' if sign == _NEG else ''}{text}E-{dscale}")


def numeric_to_text(value: Decimal) -> str:
    """Render like numeric_out: plain notation, the Decimal's exponent as the scale.

    PostgreSQL has no negative zero (``-0.00`` prints ``0.00``) and a single NaN.
    """
    text = format(value, "f")
    if text[0] == "-" and (not value or value.is_nan()):
        return text[1:]
    return text


# --------------------------------------------------------------------------- floats
#
# PostgreSQL 12+ prints floats with Ryu (src/common/d2s.c, f2s.c), compiled WITHOUT
# STRICTLY_SHORTEST: the digits are the shortest that lie strictly inside the rounding
# interval of the value (the interval's bounds are excluded even when round-half-even
# would read them back as the value), the closest to the value among those. Python's repr
# differs only when its shortest candidate sits exactly on a bound, which needs an
# integral midpoint: |value| >= 2**53 (float8) or 2**24 (float4). Those values, and all
# float4 values (Python has no float32 repr), go through an exact check with Decimal.

_EXACT: Final = Context(prec=1200, Emin=-9999, Emax=9999)  # exact sums of two doubles
_F8_INTEGRAL: Final = float(2**53)
_F4_INTEGRAL: Final = float(2**24)
_F4_INF_BITS: Final = 0x7F800000


def float4_from_text(data: bytes) -> float:
    """Decode float4out, rounded to the float32 it denotes (as float4in does)."""
    return _unpack_f4(_pack_f4(float(data)))[0]  # type: ignore[no-any-return]


def float4_from_binary(data: bytes) -> float:
    """Decode float4send (big-endian IEEE 754 binary32)."""
    return _unpack_f4(data)[0]  # type: ignore[no-any-return]


def float8_from_binary(data: bytes) -> float:
    """Decode float8send (big-endian IEEE 754 binary64)."""
    return _unpack_f8(data)[0]  # type: ignore[no-any-return]


def _special_float(value: float) -> str | None:
    if value != value:  # noqa: PLR0124 - the NaN test
        return "NaN"
    if value == math.inf:
        return "Infinity"
    if value == -math.inf:
        return "-Infinity"
    return None


def _format_shortest(negative: bool, digits: str, exp10: int, fixed_limit: int) -> str:
    """Lay out ``0.<digits> * 10**(exp10 + 1)`` the way PostgreSQL's d2s/f2s do.

    ``digits`` has no leading or trailing zeros; ``exp10`` is the decimal exponent of its
    first digit. Fixed notation for ``-4 <= exp10 < fixed_limit``, else ``d.ddde+XX``.
    """
    sign = "-" if negative else ""
    if -4 <= exp10 < fixed_limit:
        if exp10 < 0:
            return f"{sign}0.{'0' * (-exp10 - 1)}{digits}"
        point = exp10 + 1
        if len(digits) <= point:
            return f"{sign}{digits}{'0' * (point - len(digits))}"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    mantissa = digits[0] if len(digits) == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"


def _split_repr(text: str) -> tuple[str, int]:
    """Split a positive float's shortest text (repr or ``%e``) into digits and exponent."""
    mantissa, _, exponent = text.partition("e")
    exp10 = int(exponent) if exponent else 0
    whole, _, frac = mantissa.partition(".")
    if whole.strip("0"):
        exp10 += len(whole.lstrip("0")) - 1
        digits = (whole.lstrip("0") + frac).rstrip("0")
    else:
        stripped = frac.lstrip("0")
        exp10 -= len(frac) - len(stripped) + 1
        digits = stripped.rstrip("0")
    return digits, exp10


def _shortest_inside(value: float, below: float, above: float | None, start: int) -> str:
    """Shortest decimal strictly between the midpoints of ``value`` (> 0) and its neighbours.

    ``above`` is None for the largest finite value (its upper gap mirrors the lower one).
    For each length from ``start``, the correctly rounded candidate (the closest) is tried,
    then its neighbour on the other side of ``value``. Returns ``%e``-style text.
    """
    exact = Decimal(value)
    low = _EXACT.divide(_EXACT.add(exact, Decimal(below)), 2)
    if above is None:
        high = _EXACT.subtract(_EXACT.multiply(exact, 2), low)
    else:
        high = _EXACT.divide(_EXACT.add(exact, Decimal(above)), 2)
    for precision in range(start, 18):
        text = f"{value:.{precision - 1}e}"
        candidate = Decimal(text)
        if low < candidate < high:
            return text
        mantissa, _, exponent = text.partition("e")
        coef = int(mantissa.replace(".", "")) + (1 if candidate < exact else -1)
        other = f"{coef}e{int(exponent) - precision + 1}"
        if coef > 0 and low < Decimal(other) < high:
            return other
    return repr(value)  # unreachable: 17 digits always fit strictly inside


def float8_to_text(value: float) -> str:
    """Render like float8out with ``extra_float_digits = 1`` (shortest exact digits)."""
    text = repr(value)
    if "e" not in text and -1e15 < value < 1e15:
        # repr already uses fixed notation and PostgreSQL's digits (no bound issue below
        # 2**53); they differ only in repr's ".0" suffix on integral values.
        return text[:-2] if text[-2:] == ".0" else text
    special = _special_float(value)
    if special is not None:
        return special
    negative = text[0] == "-"
    if negative:
        text = text[1:]
        value = -value
    if value >= _F8_INTEGRAL:
        below = math.nextafter(value, 0.0)
        above = math.nextafter(value, math.inf)
        start = len(_split_repr(text)[0])
        text = _shortest_inside(value, below, above if above != math.inf else None, start)
    digits, exp10 = _split_repr(text)
    return _format_shortest(negative, digits, exp10, 15)


def _float4_shortest(value: float) -> str:
    """Shortest digits (``%e``-style) PostgreSQL's f2s prints for float32 ``value`` (> 0)."""
    bits = _wire.UINT4.unpack(_pack_f4(value))[0]
    below = _unpack_f4(_wire.UINT4.pack(bits - 1))[0]
    above = None if bits + 1 >= _F4_INF_BITS else _unpack_f4(_wire.UINT4.pack(bits + 1))[0]
    if value < _F4_INTEGRAL:
        # No bound can be a short decimal here, so the first length whose correctly
        # rounded candidate reads back as the value (round trip through float32) is it;
        # the exact check below confirms, guarding against double rounding.
        for precision in range(1, 10):
            text = f"{value:.{precision - 1}e}"
            if _roundtrips_f4(text, value):
                return _shortest_inside(value, below, above, precision)
    return _shortest_inside(value, below, above, 1)


def _roundtrips_f4(text: str, value: float) -> bool:
    try:
        return _unpack_f4(_pack_f4(float(text)))[0] == value  # type: ignore[no-any-return]
    except OverflowError:  # beyond float32's range
        return False


def float4_to_text(value: float) -> str:
    """Render like float4out with ``extra_float_digits = 1`` (shortest float32 digits)."""
    special = _special_float(value)
    if special is not None:
        return special
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    digits, exp10 = _split_repr(_float4_shortest(abs(value)))
    return _format_shortest(value < 0, digits, exp10, 6)

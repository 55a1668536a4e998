"""Scalar conversions of the ``debezium`` format that do not depend on a column.

Java's number text (``Double.toString``/``Float.toString``, as Jackson writes floats),
Kafka Connect's Decimal and Debezium's VariableScaleDecimal, money, point, bit strings and
hstore. :mod:`capture.formats.debezium.encode_values` picks one of these per column.

Invariants: every function either returns the value Debezium 3.6.1 writes for its input,
raises :class:`UnrepresentableError` (the mode has no form for the value: the encoder
decides, see :mod:`capture.formats.debezium.encode`), or raises :class:`InvalidValueError` (input
no PostgreSQL server sends, e.g. ``'2'`` in a bit string): never another exception for a
value, so that an encoder never crashes on one. Integers have no digit limit (numeric holds
up to 131,072 digits; Python's ``int(str)`` limit of 4,300 is never met).
"""

from __future__ import annotations

import binascii
import functools
import math
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, Literal

import orjson

DecimalMode = Literal["precise", "string", "double"]
Convert = Callable[[Any], Any]
"""A walcast value (typed or text) → its JSON value."""

_NAN: Final = "NaN"
_SPECIAL_NAMES: Final = {
    "NaN": "NAN",
    "Infinity": "POSITIVE_INFINITY",
    "-Infinity": "NEGATIVE_INFINITY",
}
"""numeric NaN/±Infinity under ``decimal_handling=string`` (Debezium's enum names)."""
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
NUMERIC_MAX_WHOLE_DIGITS: Final = 131_072
NUMERIC_MAX_SCALE: Final = 16_383


class UnrepresentableError(ValueError):
    """A value the chosen mode has no form for (Debezium writes null or stops)."""


class InvalidValueError(ValueError):
    """A value no PostgreSQL server sends for the column's type (corrupt input)."""


def checked_long(value: int) -> int:
    """An integer column's value, which must fit Java's long (int2/int4/int8/oid do)."""
    if not LONG_MIN <= value <= LONG_MAX:
        raise InvalidValueError(f"integer {value} is outside the 64-bit range")
    return value


# ------------------------------------------------------------------ Java number text


def _java_text(negative: bool, digits: str, exponent: int) -> str:
    """``Double.toString`` layout of ``0.digits * 10^(exponent+1)`` (``exponent`` = scientific)."""
    if -3 <= exponent < 7:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1 :] or "0"
        else:
            whole = "0"
            fraction = "0" * (-exponent - 1) + digits
        text = f"{whole}.{fraction}"
    else:
        text = f"{digits[0]}.{digits[1:] or '0'}E{exponent}"
    return "-" + text if negative else text


def _shortest(text: str) -> tuple[bool, str, int]:
    """(negative, significant digits without trailing zeros, scientific exponent) of ``text``."""
    sign, digit_tuple, exp = Decimal(text).as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    return bool(sign), digits, len(digit_tuple) - 1 + exp


def java_double(value: float) -> Any:
    """A float64 as Jackson writes it: ``Double.toString`` digits, NaN/±Infinity as strings."""
    if math.isnan(value):
        return _NAN
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return orjson.Fragment(b"-0.0" if str(value)[0] == "-" else b"0.0")
    return orjson.Fragment(_java_text(*_shortest(repr(value))).encode())


_F32: Final = struct.Struct("<f")


def float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (held exactly as a Python float)."""
    return float(_F32.unpack(_F32.pack(value))[0])


def java_float(value: float) -> Any:
    """A float32 as Jackson writes it: ``Float.toString`` digits (the shortest that read back)."""
    if not math.isfinite(value) or value == 0:
        return java_double(value)
    for precision in range(9):
        candidate = f"{value:.{precision}e}"
        try:
            if float32(float(candidate)) == value:
                break
        except OverflowError:
            continue
    return orjson.Fragment(_java_text(*_shortest(candidate)).encode())


# ------------------------------------------------------------------ numbers


def unscaled_bytes(unscaled: int) -> bytes:
    """``BigInteger.toByteArray()``: minimal big-endian two's complement."""
    length = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
    return unscaled.to_bytes(length, "big", signed=True)


def b64(data: bytes) -> str:
    """``data`` in base64 (no newline), as Jackson writes a byte[]."""
    return binascii.b2a_base64(data, newline=False).decode()


def _digits(value: Decimal) -> tuple[int, str, int]:
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    return sign, "".join(map(str, digit_tuple)), exponent


_CHUNK_DIGITS: Final = 2000
"""Below Python's 4,300-digit limit of ``int(str)``, and where it is still fast."""


@functools.lru_cache(maxsize=64)
def _power_of_ten(exponent: int) -> int:
    power: int = 10**exponent
    return power


def _whole(digits: str) -> int:
    """``int(digits)`` of any length (numeric holds 131,072 digits), in O(n^1.6).

    Python's ``int(str)`` refuses more than 4,300 digits and ``int(Decimal)`` takes a
    second for PostgreSQL's longest numeric; halving the text takes 40 ms.
    """
    if len(digits) <= _CHUNK_DIGITS:
        return int(digits) if digits else 0
    half = len(digits) // 2
    return _whole(digits[:half]) * _power_of_ten(len(digits) - half) + _whole(digits[half:])


def decimal_bytes(value: Decimal, scale: int) -> str:
    """``Decimal.fromLogical`` at ``scale`` (base64): the unscaled value's bytes."""
    sign, digits, exponent = _digits(value)
    shift = exponent + scale
    whole = _whole(digits)
    unscaled = whole * _power_of_ten(shift) if shift >= 0 else whole // _power_of_ten(-shift)
    return b64(unscaled_bytes(-unscaled if sign else unscaled))


def variable_scale(value: Decimal) -> dict[str, Any]:
    """``VariableScaleDecimal``: ``{"scale", "value"}`` of the value without trailing zeros."""
    sign, digits, exponent = _digits(value)
    if exponent >= 0:
        unscaled, scale = _whole(digits) * _power_of_ten(exponent), 0
    else:
        stripped = digits.rstrip("0")
        dropped = min(len(digits) - len(stripped), -exponent)
        unscaled, scale = _whole(digits[: len(digits) - dropped]), -exponent - dropped
        if unscaled == 0:
            scale = 0
    return {"scale": scale, "value": b64(unscaled_bytes(-unscaled if sign else unscaled))}


def _special(value: Decimal) -> str | None:
    """The special numeric's name (NaN, Infinity, -Infinity), or None for a number."""
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "-Infinity" if value.is_signed() else "Infinity"
    return None


def numeric_in_range(value: Decimal) -> Decimal:
    """``value`` if PostgreSQL's numeric can hold it, else InvalidValueError.

    PostgreSQL's numeric has at most 131,072 digits before the point and 16,383 after;
    corrupt input must not make this format build a number of unbounded size.
    """
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    if value.adjusted() >= NUMERIC_MAX_WHOLE_DIGITS or exponent < -NUMERIC_MAX_SCALE:
        raise InvalidValueError("a numeric outside PostgreSQL's numeric range")
    return value


def numeric_converter(mode: DecimalMode, scale: int | None) -> Convert:
    """A numeric column (``scale`` None: unconstrained) under ``decimal.handling.mode``."""

    def precise(value: Decimal) -> Any:
        if not value.is_finite():
            raise UnrepresentableError(
                f"numeric {_special(value)} has no form under debezium.decimal_handling=precise"
            )
        value = numeric_in_range(value)
        return variable_scale(value) if scale is None else decimal_bytes(value, scale)

    def string(value: Decimal) -> Any:
        special = _special(value)
        return format(numeric_in_range(value), "f") if special is None else _SPECIAL_NAMES[special]

    def double(value: Decimal) -> Any:
        return java_double(float(value))

    return {"precise": precise, "string": string, "double": double}[mode]


def money_decimal(text: str) -> Decimal:
    """The text of a money value (``$1,234.56``, ``-$0.01``) as a Decimal of 2 fraction digits."""
    negative = "-" in text or "(" in text
    digits = "".join(c for c in text if c.isdigit() or c == ".")
    value = Decimal(digits or "0").quantize(Decimal("0.01"))
    return -value if negative else value


def money_converter(mode: DecimalMode) -> Convert:
    """A money column (``money.fraction.digits=2``)."""
    if mode == "precise":
        return lambda text: decimal_bytes(money_decimal(text), 2)
    if mode == "string":
        return lambda text: format(money_decimal(text), "f")
    return lambda text: java_double(float(money_decimal(text)))


# ------------------------------------------------------------------ other types


def point_struct(text: str) -> dict[str, Any]:
    """``io.debezium.data.geometry.Point``: x, y, the WKB of the point, no SRID."""
    x_text, _, y_text = text.strip("()").partition(",")
    x, y = float(x_text), float(y_text)
    wkb = struct.pack("<BIdd", 1, 1, x, y)
    return {"x": java_double(x), "y": java_double(y), "wkb": b64(wkb), "srid": None}


def bits_bytes(text: str) -> str:
    """``io.debezium.data.Bits``: the bit string as a little-endian integer, minimal bytes."""
    if text.strip("01"):
        raise InvalidValueError(f"{text[:40]!r} is not a bit string")
    number = int(text, 2) if text else 0
    return b64(number.to_bytes((number.bit_length() + 7) // 8, "little"))


def _java_string_hash(text: str) -> int:
    """``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: list[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` filled with ``keys`` in this order.

    Buckets by ``(h ^ h >>> 16) & (capacity - 1)``; the capacity starts at 16 and doubles
    when the size passes 3/4 of it; a bucket keeps insertion order (a resize splits it
    without reordering). Buckets of 8+ colliding keys (tree bins) are not modelled.
    """
    unique = list(dict.fromkeys(keys))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2
    buckets: dict[int, list[str]] = {}
    for key in unique:
        h = _java_string_hash(key)
        buckets.setdefault((h ^ (h >> 16)) & (capacity - 1), []).append(key)
    return [key for index in sorted(buckets) for key in buckets[index]]


def _hstore_pairs(text: str) -> list[tuple[str, str | None]]:
    """The hstore output ``"k"=>"v", "k2"=>NULL`` as (key, value) pairs."""
    pairs: list[tuple[str, str | None]] = []
    i, end = 0, len(text)

    def quoted(at: int) -> tuple[str, int]:
        out = []
        at += 1
        while text[at] != '"':
            if text[at] == "\\":
                at += 1
            out.append(text[at])
            at += 1
        return "".join(out), at + 1

    while i < end:
        while i < end and text[i] in " ,":
            i += 1
        if i >= end:
            break
        key, i = quoted(i)
        i = text.index("=>", i) + 2
        while text[i] == " ":
            i += 1
        if text.startswith("NULL", i):
            pairs.append((key, None))
            i += 4
        else:
            value, i = quoted(i)
            pairs.append((key, value))
    return pairs


def hstore_json(text: str) -> str:
    """``hstore.handling.mode=json``: the pairs as a JSON object in java.util.HashMap order."""
    pairs = dict(_hstore_pairs(text))
    ordered = {k: pairs[k] for k in java_hashmap_order(list(pairs))}
    return orjson.dumps(ordered).decode()

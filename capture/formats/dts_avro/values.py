"""DTS Avro image items: a column's PostgreSQL value as one branch of the image union.

An image (``beforeImages``/``afterImages``) is an array with one item per column; each
item is a union of DTS's typed records (``Integer``, ``Character``, ``Decimal``, ``Float``,
``Timestamp``, ``DateTime``, ``TimestampWithTimeZone``, ``BinaryObject``, ``TextObject``,
``EmptyObject`` …, :data:`IMAGE_TYPES`). :func:`converter` returns, per column, a function
from the value's PostgreSQL text (bytes, as the walsender prints it) to the encoded item.
The mapping is documented in :mod:`capture.formats.dts_avro.encode`.

Dates and times are read with :mod:`capture.types.datetimes` (exact for BC dates, years
past 9999 and every offset) and the conversions of date/time values are memoized per
value, since rows repeat their unchanged timestamps in every update.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from capture.events import Column
from capture.formats._common import Family, family
from capture.formats._instants import civil_fields, date_fields, unix_us
from capture.formats.avro import (
    SMALL,
    SMALL_LIMIT,
    avro_bytes,
    avro_double,
    avro_string,
    optional_long,
    varint,
    zigzag,
)
from capture.types.datetimes import (
    date_from_text,
    time_from_text,
    timestamp_from_text,
    timestamptz_from_text,
    timetz_from_text,
)
from capture.types.text import bytea_from_text
from capture.types.typmod import numeric_precision_scale
from capture.types.values import Infinity, Time24

Converter = Callable[[bytes], bytes]

CHARSET: Final = "UTF8"
IMAGE_TYPES: Final = (
    "null",
    "Integer",
    "Character",
    "Decimal",
    "Float",
    "Timestamp",
    "DateTime",
    "TimestampWithTimeZone",
    "BinaryGeometry",
    "TextGeometry",
    "BinaryObject",
    "TextObject",
    "EmptyObject",
)
"""The branches of an image item's union, in schema order (index = branch)."""


def branch(name: str) -> bytes:
    """The union branch number of the image type ``name``."""
    return zigzag(IMAGE_TYPES.index(name))


NULL: Final = b"\x00"
"""Avro ``null``: SQL NULL."""
NONE: Final = branch("EmptyObject") + zigzag(1)
"""``EmptyObject.NONE``: the column has a value that was not sent."""

_MEMO_LIMIT: Final = 65536
_UNIX_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
_DATETIME: Final = branch("DateTime")


def _memo(convert: Converter) -> Converter:
    """Cache ``convert`` by value (bounded; cleared when full)."""
    cache: dict[bytes, bytes] = {}
    get = cache.get

    def memo(raw: bytes) -> bytes:
        out = get(raw)
        if out is None:
            if len(cache) >= _MEMO_LIMIT:
                cache.clear()
            out = cache[raw] = convert(raw)
        return out

    return memo


def _length_prefixed(prefix: bytes) -> Converter:
    """``prefix`` then the value as Avro bytes."""

    def convert(raw: bytes) -> bytes:
        n = len(raw)
        return prefix + (SMALL[n] if n < SMALL_LIMIT else varint(n)) + raw

    return convert


def text_object(object_type: str) -> Converter:
    """``TextObject{type: object_type, value: the PostgreSQL text}``."""
    return _length_prefixed(branch("TextObject") + avro_string(object_type))


def datetime_bytes(*values: int | None) -> bytes:
    """The fields of a ``DateTime`` record (no union branch).

    ``values`` are year, month, day, hour, minute, second, micros; missing ones are null.
    """
    padded = values + (None,) * (7 - len(values))
    return b"".join(optional_long(v) for v in padded)


def _clock(value: object) -> tuple[int, int, int, int]:
    """(hour, minute, second, µs) of a ``datetime.time`` or :class:`Time24`."""
    if isinstance(value, Time24):
        return 24, 0, 0, 0
    return value.hour, value.minute, value.second, value.microsecond  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- dates, times


def _civil(
    parse: Callable[[bytes], object], fields: Callable[[Any], tuple[int, ...]], special: Converter
) -> Converter:
    """A DateTime converter: ``parse`` the text, ``fields`` of the value; ±infinity is special."""

    def convert(raw: bytes) -> bytes:
        value = parse(raw)
        if isinstance(value, Infinity):
            return special(raw)
        return _DATETIME + datetime_bytes(*fields(value))

    return _memo(convert)


def _timestamptz(special: Converter) -> Converter:
    timestamp = branch("Timestamp")
    aware = datetime

    def convert(raw: bytes) -> bytes:
        value = timestamptz_from_text(raw)
        if type(value) is aware:  # the common case, inlined
            delta = value - _UNIX_EPOCH_UTC
            seconds = delta.days * 86_400 + delta.seconds
            micros = delta.microseconds
        elif isinstance(value, Infinity):
            return special(raw)
        else:
            seconds, micros = divmod(unix_us(value), 1_000_000)
        return (
            timestamp
            + varint(seconds)
            + (SMALL[micros] if micros < SMALL_LIMIT else varint(micros))
        )

    return _memo(convert)


def _time() -> Converter:
    def convert(raw: bytes) -> bytes:
        return _DATETIME + datetime_bytes(None, None, None, *_clock(time_from_text(raw)))

    return _memo(convert)


def _timetz() -> Converter:
    with_zone = branch("TimestampWithTimeZone")

    def convert(raw: bytes) -> bytes:
        # The offset is written as PostgreSQL printed it (``+05:30``, ``-03:30:15``).
        cut = max(raw.rfind(b"+"), raw.rfind(b"-"))
        clock = _clock(timetz_from_text(raw))
        return with_zone + datetime_bytes(None, None, None, *clock) + avro_bytes(raw[cut:])

    return _memo(convert)


# --------------------------------------------------------------------------- numbers, text


def _integer(precision: int) -> Converter:
    return _length_prefixed(branch("Integer") + zigzag(precision))


def _bool() -> Converter:
    prefix = branch("Integer") + zigzag(1)
    true = prefix + avro_bytes(b"1")
    false = prefix + avro_bytes(b"0")

    def convert(raw: bytes) -> bytes:
        return true if raw in (b"t", b"true") else false

    return convert


def value_precision_scale(text: str) -> tuple[int, int]:
    """Precision and scale of a numeric value, as Java's ``BigDecimal`` reports them."""
    digits = text.lstrip("-+")
    if not digits[:1].isdigit():
        return 0, 0  # NaN, Infinity
    whole, _, fraction = digits.partition(".")
    significant = (whole + fraction).lstrip("0")
    return max(len(significant), 1), len(fraction)


_NUMERIC_SPECIALS: Final = {
    text: branch("Float") + avro_double(float(text)) + zigzag(0) + zigzag(-1)
    for text in (b"NaN", b"Infinity", b"-Infinity")
}
"""numeric's NaN and ±Infinity as ``Float`` items (precision 0: not a binary float column).

A ``Decimal`` cannot carry them: the DTS SDK reads its value with ``new BigDecimal(…)``,
which throws on them, and Java's ``Double.toString`` of the ``Float`` prints exactly
PostgreSQL's text (``NaN``, ``Infinity``, ``-Infinity``).
"""


def _decimal(typmod: int) -> Converter:
    prefix = branch("Decimal")
    specials = _NUMERIC_SPECIALS
    declared = numeric_precision_scale(typmod)
    if declared is not None:
        suffix = zigzag(declared[0]) + zigzag(declared[1])

        def convert(raw: bytes) -> bytes:
            if raw[-1:] > b"9" and raw in specials:  # ends past "9": NaN, ±Infinity
                return specials[raw]
            n = len(raw)
            return prefix + (SMALL[n] if n < SMALL_LIMIT else varint(n)) + raw + suffix

        return convert

    def convert_free(raw: bytes) -> bytes:
        if raw[-1:] > b"9" and raw in specials:
            return specials[raw]
        precision, scale = value_precision_scale(raw.decode())
        return prefix + avro_bytes(raw) + zigzag(precision) + zigzag(scale)

    return convert_free


def _float(precision: int) -> Converter:
    prefix = branch("Float")
    suffix = zigzag(precision) + zigzag(-1)

    def convert(raw: bytes) -> bytes:
        return prefix + avro_double(float(raw)) + suffix

    return convert


def _character() -> Converter:
    return _length_prefixed(branch("Character") + avro_string(CHARSET))


def _bytea(object_type: str) -> Converter:
    prefix = branch("BinaryObject") + avro_string(object_type)

    def convert(raw: bytes) -> bytes:
        data = binascii.unhexlify(raw[2:]) if raw[:2] == b"\\x" else bytea_from_text(raw)
        n = len(data)
        return prefix + (SMALL[n] if n < SMALL_LIMIT else varint(n)) + data

    return convert


# --------------------------------------------------------------------------- per column

_SHARED: dict[tuple[str, str], Converter] = {}


def _shared(kind: str, type_name: str, make: Callable[[], Converter]) -> Converter:
    """One memoized converter per (kind, type), shared by every column of that type."""
    key = (kind, type_name)
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = make()
    return found


OBJECT_TYPES: Final = (
    "BINARY", "BOOL", "BLOB", "XML", "JSON", "TEXT", "BFILE", "RAW", "LONG_RAW", "ROWID",
    "UROWID", "ENUM", "SET", "BYTEA", "GEOMETRY", "XTYPE", "UUID",
)  # fmt: skip
"""The ``type`` names of TextObject/BinaryObject that DTS's SDK accepts (its ``ObjectType``
enum; ``ObjectType.valueOf(type.toUpperCase())`` throws for any other)."""
_OBJECT_TYPE_BY_NAME: Final = {
    "json": "JSON",
    "jsonb": "JSON",
    "xml": "XML",
    "uuid": "UUID",
    **dict.fromkeys(("point", "line", "lseg", "box", "path", "polygon", "circle"), "GEOMETRY"),
}


def object_type(column: Column) -> str:
    """The TextObject ``type`` of a column: JSON, XML, UUID, GEOMETRY, else TEXT."""
    return _OBJECT_TYPE_BY_NAME.get(column.type_name, "TEXT")


def converter(column: Column) -> Converter:
    """The function turning ``column``'s PostgreSQL text (bytes) into its image item."""
    fam = family(column)
    name = column.type_name
    if fam is Family.BOOL:
        return _bool()
    if fam is Family.SMALLINT:
        return _integer(2)
    if fam is Family.INTEGER:
        return _integer(4)
    if fam is Family.BIGINT:
        return _integer(8)
    if fam is Family.NUMERIC:
        return _decimal(column.type_modifier)
    if fam is Family.REAL:
        return _float(24)
    if fam is Family.DOUBLE:
        return _float(53)
    if fam in (Family.CHAR, Family.STRING):
        return _character()
    if fam is Family.BYTES:
        return _bytea("BYTEA")
    special = text_object(object_type(column))
    if fam is Family.DATE:
        return _shared("date", name, lambda: _civil(date_from_text, date_fields, special))
    if fam is Family.TIME:
        return _shared("time", name, _time)
    if fam is Family.TIMETZ:
        return _shared("timetz", name, _timetz)
    if fam is Family.TIMESTAMP:
        return _shared(
            "timestamp", name, lambda: _civil(timestamp_from_text, civil_fields, special)
        )
    if fam is Family.TIMESTAMPTZ:
        return _shared("timestamptz", name, lambda: _timestamptz(special))
    return special


__all__ = [
    "CHARSET",
    "IMAGE_TYPES",
    "NONE",
    "NULL",
    "OBJECT_TYPES",
    "Converter",
    "branch",
    "converter",
    "datetime_bytes",
    "object_type",
    "text_object",
    "value_precision_scale",
]

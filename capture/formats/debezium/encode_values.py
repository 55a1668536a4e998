"""Column values as the Debezium PostgreSQL connector writes them (``debezium`` format).

One :class:`ColumnForm` per column says how its values are written in the change events'
``before``/``after`` (and in the key): a converter from walcast's value (the typed value
:meth:`~capture.events.Image.value` decodes, or the PostgreSQL text for the types Debezium
passes on as text), the value an unchanged TOAST column takes, and the column's Kafka
Connect schema (:mod:`capture.formats.debezium.schemas`). A column whose type Debezium
leaves out of its events (no converter: ``box``, ``xid``, ``money[]`` …) has no form.

Every conversion reproduces what Debezium 3.6.1 writes for the value it decodes from the
same pgoutput text (``PostgresValueConverter``, ``JdbcValueConverters``, pgjdbc's
``PGInterval``/``PgArray``, Jackson's number output), and was checked against the real
connector on the capture scenario (``tests/readers/test_debezium_compare.py``). The module
docstring of :mod:`capture.formats.debezium.encode` lists the values per type and every known
difference. Numbers Jackson writes from Java floats are written with Java's
``Float.toString``/``Double.toString`` digits (the shortest that read back, JDK 19+), as
:class:`orjson.Fragment`; NaN and the infinities are the strings Jackson writes for them.

A value the chosen mode cannot represent (a numeric NaN under
``debezium.decimal_handling=precise``; an array holding one in any mode) raises
:class:`UnrepresentableError`; the encoder decides what to write (see the module docstring
of :mod:`capture.formats.debezium.encode`).
"""

from __future__ import annotations

import binascii
import datetime as dt
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Literal

import orjson

from capture.events import Column
from capture.formats._instants import civil_fields, unix_days, unix_us
from capture.formats.debezium.scalars import (
    LONG_MAX,
    LONG_MIN,
    Convert,
    DecimalMode,
    InvalidValueError,
    UnrepresentableError,
    b64,
    bits_bytes,
    checked_long,
    float32,
    hstore_json,
    java_double,
    java_float,
    money_converter,
    numeric_converter,
    point_struct,
)
from capture.formats.debezium.schemas import column_schema
from capture.types import typmod
from capture.types.arrays import text_array_decoder
from capture.types.datetimes import (
    date_from_text,
    time_from_text,
    timestamp_from_text,
    timestamptz_from_text,
    timetz_from_text,
)
from capture.types.numeric import numeric_from_text
from capture.types.values import Infinity, Interval, PgArray, PgDate, PgTimestamp, Time24

TimeMode = Literal["adaptive", "adaptive_time_microseconds", "connect"]
BinaryMode = Literal["bytes", "base64", "hex"]

DATE_INFINITY: Final = -2_147_472_692
"""``'infinity'::date`` as Debezium writes it (pgjdbc's LocalDate for it, as epoch days)."""
DATE_NEG_INFINITY: Final = -2_147_472_691
TIMESTAMP_INFINITY_US: Final = 9_223_372_036_825_200_000
"""``'infinity'::timestamp`` (pgjdbc's ``DATE_POSITIVE_INFINITY`` read as microseconds)."""
TIMESTAMP_NEG_INFINITY_US: Final = -9_223_372_036_832_400_000
ARRAY_DATE_INFINITY: Final = -622_191_234
"""``infinity`` inside a ``date[]`` (pgjdbc's java.sql.Date for it, as int epoch days)."""
ARRAY_DATE_NEG_INFINITY: Final = -622_191_234
_DAY_US: Final = 86_400_000_000
_DAYS_PER_MONTH: Final = 365.25 / 12.0
"""``MicroDuration.DAYS_PER_MONTH_AVG``."""


class NoPlaceholderError(ValueError):
    """An unchanged TOAST value of a type Debezium has no placeholder for."""


# ------------------------------------------------------------------ dates and times


def epoch_days(value: dt.date | PgDate | Infinity) -> int:
    """``io.debezium.time.Date``: days since 1970-01-01 (proleptic Gregorian)."""
    if isinstance(value, Infinity):
        return DATE_INFINITY if value.sign > 0 else DATE_NEG_INFINITY
    return unix_days(value)


def epoch_us(value: dt.datetime | PgTimestamp | Infinity) -> int:
    """A timestamp's microseconds since the Unix epoch (UTC); infinity as pgjdbc's values."""
    if isinstance(value, Infinity):
        return TIMESTAMP_INFINITY_US if value.sign > 0 else TIMESTAMP_NEG_INFINITY_US
    return unix_us(value)


def array_epoch_days(value: dt.date | PgDate | Infinity) -> int:
    """A ``date[]`` element: as :func:`epoch_days`, but infinity is pgjdbc's java.sql.Date."""
    if isinstance(value, Infinity):
        return ARRAY_DATE_INFINITY if value.sign > 0 else ARRAY_DATE_NEG_INFINITY
    return unix_days(value)


def array_time_us(value: dt.time | Time24) -> int:
    """A ``time[]`` element as pgjdbc reads it (java.sql.Time): milliseconds, 24:00 is 0."""
    if isinstance(value, Time24):
        return 0
    micros = time_us(value)
    return micros - micros % 1000


def time_us(value: dt.time | Time24) -> int:
    """A time of day in microseconds (``24:00:00`` is 86,400,000,000)."""
    if isinstance(value, Time24):
        return _DAY_US
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _fraction(micros: int, width: int | None) -> str:
    """The fraction of a second: ``width`` digits, or (None) as few as needed, none for 0."""
    if width is None:
        return f".{micros:06d}".rstrip("0").rstrip(".") if micros else ""
    return f".{micros:06d}"[: width + 1] if width else ""


def _iso_year(year: int) -> str:
    """``ISO_LOCAL_DATE``'s year: 4 digits, ``+`` above 9999, ``-`` (padded) below 0."""
    if year > 9999:
        return f"+{year}"
    if year < 0:
        return f"-{-year:04d}"
    return f"{year:04d}"


def zoned_timestamp(value: dt.datetime | PgTimestamp | Infinity, width: int | None) -> str:
    """``io.debezium.time.ZonedTimestamp``: ISO-8601 in UTC, ``width`` fraction digits."""
    if isinstance(value, Infinity):
        return str(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    year, month, day, hour, minute, second, micros = civil_fields(value)
    return (
        f"{_iso_year(year)}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        f"{_fraction(micros, width)}Z"
    )


def zoned_time(value: dt.time | Time24, *, millis: bool = False) -> str:
    """``io.debezium.time.ZonedTime``: the time in UTC, ``HH:MM:SS[.f]Z``.

    ``24:00:00`` reads as midnight (Java's SMART resolver); ``millis`` truncates to the
    millisecond (java.sql.Time, inside arrays).
    """
    if isinstance(value, Time24):
        local, offset = 0, value.utcoffset or 0
    else:
        local = time_us(value.replace(tzinfo=None))
        delta = value.utcoffset()
        offset = 0 if delta is None else int(delta.total_seconds())
    utc = (local - offset * 1_000_000) % _DAY_US
    if millis:
        utc -= utc % 1000
    seconds, micros = divmod(utc, 1_000_000)
    hours, minutes = seconds // 3600, seconds // 60 % 60
    return f"{hours:02d}:{minutes:02d}:{seconds % 60:02d}{_fraction(micros, None)}Z"


def _time_precision(column: Column) -> int:
    """Fractional digits declared for a time/timestamp column (pgjdbc's default 6)."""
    precision = typmod.time_precision(column.type_modifier)
    return 6 if precision is None else precision


def time_unit_us(column: Column, mode: TimeMode) -> int:
    """Microseconds per unit of a time column's value: 1000 (ms) or 1 (µs)."""
    if mode == "connect" or (mode == "adaptive" and _time_precision(column) <= 3):
        return 1000
    return 1


def timestamp_unit_us(column: Column, mode: TimeMode) -> int:
    """Microseconds per unit of a timestamp column's value: 1000 (ms) or 1 (µs)."""
    return 1000 if mode == "connect" or _time_precision(column) <= 3 else 1


def interval_micros(value: Interval) -> int:
    """``MicroDuration.durationMicros`` of pgjdbc's reading of the interval's text.

    PostgreSQL prints ``[y years m mons] [d days] [-]hh:mm:ss[.f]``; pgjdbc splits the time
    part into hours, minutes and seconds (a double), and Debezium adds them up in doubles
    with 365.25/12 days a month, truncating (and saturating) to a long.
    """
    sign = -1 if value.microseconds < 0 else 1
    rest = abs(value.microseconds)
    hours = sign * (rest // 3_600_000_000)
    minutes = sign * (rest // 60_000_000 % 60)
    whole, micros = divmod(rest % 60_000_000, 1_000_000)
    seconds = sign * whole + (sign * micros) / 1_000_000
    days = float(value.months) * _DAYS_PER_MONTH + value.days
    total = (((days * 24 + hours) * 60) + minutes) * 60 + seconds
    micros_total = total * 1e6 + 0
    if micros_total != micros_total:  # noqa: PLR0124 - the NaN test
        return 0
    if micros_total >= 2.0**63:
        return LONG_MAX
    if micros_total <= -(2.0**63):
        return LONG_MIN
    return int(micros_total)


# ------------------------------------------------------------------ forms


@dataclass(frozen=True, slots=True)
class ValueModes:
    """The connector settings that decide values (see :class:`ColumnForm`)."""

    decimal: DecimalMode = "precise"
    time: TimeMode = "adaptive"
    binary: BinaryMode = "bytes"
    placeholder: str = "__debezium_unavailable_value"
    """``unavailable.value.placeholder``."""


_NO_PLACEHOLDER: Final = object()


@dataclass(frozen=True, slots=True)
class ColumnForm:
    """How one column's values are written."""

    name: str
    index: int
    convert: Convert
    toast: Any
    """The value of an unchanged TOAST column (Debezium's placeholder in the column's form)."""
    schema: dict[str, Any]
    """The Connect schema of the column (without ``optional`` and ``field``)."""
    type_name: str = field(kw_only=True)
    """The column's PostgreSQL type (for error messages)."""
    typed: bool = field(kw_only=True)
    """Convert :meth:`~capture.events.Image.value` (True) or the PostgreSQL text (False)."""

    def unchanged_toast(self, table: str) -> Any:
        """The placeholder, or NoPlaceholderError when the type has none."""
        if self.toast is _NO_PLACEHOLDER:
            raise NoPlaceholderError(
                f"column {table}.{self.name} holds an unchanged TOAST value, for which Debezium "
                "has no placeholder of its type"
            )
        return self.toast


_OMITTED: Final = frozenset(
    {
        "box", "circle", "line", "lseg", "path", "polygon", "xid", "xid8", "cid", "tid",
        "pg_lsn", "tsquery", "txid_snapshot", "pg_snapshot", "refcursor", "regclass",
        "regtype", "regproc", "regprocedure", "regoper", "regoperator", "regconfig",
        "regdictionary", "regnamespace", "regrole", "regcollation", "aclitem", "int2vector",
        "oidvector", "pg_node_tree", "_money", "_name", "_interval", "_varbit", "_bit",
        "_xml", "_point", "_refcursor",
    }
)  # fmt: skip
"""Types the connector leaves out of its events (no Kafka Connect schema for them)."""
_TEXT_ARRAY_TOAST: Final = frozenset({"_text", "_varchar", "_bpchar", "_json", "_jsonb"})
_INT_ARRAY_TOAST: Final = frozenset({"_int4", "_date", "_int8"})


def _identity(value: Any) -> Any:
    return value


def _bytes_converter(mode: BinaryMode) -> Convert:
    if mode == "hex":
        return lambda data: binascii.hexlify(data).decode()
    return b64


def _scalar(column: Column, type_name: str, modes: ValueModes, *, in_array: bool) -> Convert | None:
    """The converter of one (typed) value of ``type_name``; None for text-passed types."""
    mod = column.type_modifier
    if type_name in ("int2", "int4", "int8", "oid"):
        return checked_long
    if type_name == "bool":
        return _identity
    if type_name == "float4":
        return lambda value: java_float(float32(value))
    if type_name == "float8":
        return java_double
    if type_name == "numeric":
        declared = typmod.numeric_precision_scale(mod)
        return numeric_converter(modes.decimal, None if declared is None else declared[1])
    if type_name == "bytea":
        return _bytes_converter(modes.binary)
    if type_name == "date":
        return array_epoch_days if in_array else epoch_days
    if type_name == "time":
        unit = time_unit_us(column, modes.time)
        if in_array:
            return lambda value: array_time_us(value) // unit
        return lambda value: time_us(value) // unit
    if type_name == "timetz":
        return lambda value: zoned_time(value, millis=in_array)
    if type_name == "timestamp":
        unit = timestamp_unit_us(column, modes.time)
        return lambda value: epoch_us(value) // unit
    if type_name == "timestamptz":
        width = typmod.time_precision(mod)
        digits = 6 if width is None else (width or None)
        return lambda value: zoned_timestamp(value, digits)
    if type_name == "interval":
        return interval_micros
    if type_name == "uuid":
        return str
    return None


def _text_converter(type_name: str, modes: ValueModes) -> Convert | None:
    """The converter of a type whose value is written from its PostgreSQL text."""
    if type_name == "name":
        return lambda _text: None  # pgoutput's name values are not decoded by the connector
    if type_name == "money":
        return money_converter(modes.decimal)
    if type_name == "point":
        return point_struct
    if type_name in ("bit", "varbit"):
        return bits_bytes
    if type_name == "hstore":
        return hstore_json
    return None


def _bit_flag(text: str) -> bool:
    """bit(1)'s text as the connector's boolean."""
    if text not in ("0", "1"):
        raise InvalidValueError(f"{text[:40]!r} is not a bit(1) value")
    return text == "1"


def _bit_boolean(column: Column) -> bool:
    """bit(1)/varbit(1) (and an undeclared length) are booleans to the connector."""
    length = typmod.bit_length(column.type_modifier)
    return length is None or length <= 1


def _array_form(column: Column, modes: ValueModes) -> tuple[Convert, Any]:
    """(converter of the array's text, its TOAST placeholder) for an array column."""
    element_name = column.type_name[1:]
    element = _scalar(column, element_name, modes, in_array=True)
    if element is not None:
        decode = text_array_decoder(_ELEMENT_DECODERS[element_name])
    else:
        decode = text_array_decoder(bytes.decode)
        element = _identity

    def convert(text: str) -> Any:
        items = decode(text.encode())
        if isinstance(items, PgArray):
            items = items.items
        if element_name == "numeric" and any(
            isinstance(item, Decimal) and not item.is_finite() for item in items
        ):
            raise UnrepresentableError(
                "numeric[] holding NaN or ±Infinity has no form in any "
                "debezium.decimal_handling (pgjdbc cannot read it)"
            )
        try:
            return [
                None if item is None or isinstance(item, list) else element(item) for item in items
            ]
        except UnrepresentableError:
            raise UnrepresentableError(
                f"{column.type_name[1:]}[] holding NaN or ±Infinity has no form in any "
                "debezium.decimal_handling (pgjdbc cannot read it)"
            ) from None

    placeholder = modes.placeholder
    raw = placeholder.encode()
    toast: Any = _NO_PLACEHOLDER
    if column.type_name in _TEXT_ARRAY_TOAST:
        toast = [placeholder]
    elif column.type_name in _INT_ARRAY_TOAST:
        toast = [b if b < 128 else b - 256 for b in raw]
    elif column.type_name == "_uuid":
        toast = [str(uuid.UUID(bytes=hashlib.md5(raw).digest(), version=3))]  # noqa: S324 - Java's nameUUIDFromBytes
    elif column.type_name == "_bytea":
        toast = [_bytes_converter(modes.binary)(raw)]
    return convert, toast


_ELEMENT_DECODERS: Final[dict[str, Callable[[bytes], Any]]] = {
    "int2": int,
    "int4": int,
    "int8": int,
    "oid": int,
    "bool": lambda data: data == b"t",
    "float4": float,
    "float8": float,
    "numeric": numeric_from_text,
    "bytea": lambda data: bytes.fromhex(data[2:].decode()),
    "date": date_from_text,
    "time": time_from_text,
    "timetz": timetz_from_text,
    "timestamp": timestamp_from_text,
    "timestamptz": timestamptz_from_text,
    "uuid": lambda data: uuid.UUID(data.decode()),
}
"""Element text → the typed value :func:`_scalar` converts (arrays are read from text)."""


def column_form(column: Column, index: int, modes: ValueModes) -> ColumnForm | None:
    """How ``column`` is written, or None when the connector leaves it out."""
    type_name = column.type_name
    if type_name in _OMITTED:
        return None
    schema = column_schema(column, modes.decimal, modes.time, modes.binary)
    placeholder: Any = _NO_PLACEHOLDER
    if type_name.startswith("_"):
        convert, placeholder = _array_form(column, modes)
        return ColumnForm(
            column.name, index, convert, placeholder, schema, type_name=type_name, typed=False
        )
    if type_name in ("bit", "varbit") and _bit_boolean(column):
        return ColumnForm(
            column.name, index, _bit_flag, _NO_PLACEHOLDER, schema, type_name=type_name, typed=False
        )
    scalar = _scalar(column, type_name, modes, in_array=False)
    if scalar is not None:
        if type_name == "bytea":
            raw = modes.placeholder.encode()
            placeholder = modes.placeholder if modes.binary != "bytes" else b64(raw)
        return ColumnForm(
            column.name, index, scalar, placeholder, schema, type_name=type_name, typed=True
        )
    text = _text_converter(type_name, modes)
    if text is not None:
        if type_name == "hstore":
            placeholder = orjson.dumps({modes.placeholder: modes.placeholder}).decode()
        return ColumnForm(
            column.name, index, text, placeholder, schema, type_name=type_name, typed=False
        )
    # text, varchar, json, xml, enums and every other type: the PostgreSQL text
    return ColumnForm(
        column.name, index, _identity, modes.placeholder, schema, type_name=type_name, typed=False
    )


__all__ = [
    "ColumnForm",
    "NoPlaceholderError",
    "UnrepresentableError",
    "ValueModes",
    "bits_bytes",
    "column_form",
    "epoch_days",
    "epoch_us",
    "hstore_json",
    "interval_micros",
    "java_double",
    "java_float",
    "point_struct",
    "zoned_time",
    "zoned_timestamp",
]

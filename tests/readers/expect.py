"""What a correct reader understands of a PostgreSQL value, rendered as the harness renders it.

Each function takes a column (:class:`~tests.readers.reference.RefColumn`) and the value's
PostgreSQL text (as ``test_decoding`` prints it: DateStyle ISO, TimeZone UTC) and returns the
reader's typed value in the harness's rendering (``tests/readers/src/.../Harness.java``). They
are written from PostgreSQL's semantics and the readers' documented types, not from walcast's
encoders, so a test can catch an encoder that writes a value its readers misread.

:class:`UnrepresentableError` marks a value the reader's own type cannot hold (a Flink ``DATE`` of
``infinity`` or 44 BC: Flink's date and timestamp types span years 0000 to 9999); the reader
must then reject the message loudly, never return a different value.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tests.readers.reference import RefColumn

UNIX_EPOCH_DAYS = 719_468  # days from 0000-03-01 to 1970-01-01 (civil-from-days algorithm)


class UnrepresentableError(ValueError):
    """The reader's type cannot hold this value."""


class AnyOf:
    """Equal to any of ``options``: where more than one correct form exists."""

    def __init__(self, *options: Any) -> None:
        self.options = options

    def __eq__(self, other: object) -> bool:
        return other in self.options

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return " or ".join(map(repr, self.options))


@dataclass(frozen=True)
class Civil:
    """A date/time value's fields, the year astronomical (1 BC is 0, 44 BC is -43)."""

    year: int | None = None
    month: int | None = None
    day: int | None = None
    hour: int | None = None
    minute: int | None = None
    second: int | None = None
    micro: int | None = None
    offset: str | None = None
    """The offset as PostgreSQL prints it (``+00``, ``+05:30``)."""


_DATE_TIME = re.compile(
    r"^(?:(?P<y>\d{4,})-(?P<mo>\d\d)-(?P<d>\d\d) ?)?"
    r"(?:(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,6}))?)?"
    r"(?P<tz>[+-]\d\d(?::\d\d){0,2})?(?P<bc> BC)?$"
)


def civil(text: str) -> Civil:
    """Parse PostgreSQL's ISO text of a date, time, timetz, timestamp or timestamptz."""
    match = _DATE_TIME.match(text)
    if match is None or not text:
        raise ValueError(f"not an ISO date/time: {text!r}")
    year = None
    if match["y"] is not None:
        year = int(match["y"])
        if match["bc"]:
            year = 1 - year
    micro = None
    if match["h"] is not None:
        micro = int((match["f"] or "").ljust(6, "0"))
    return Civil(
        year=year,
        month=int(match["mo"]) if match["mo"] else None,
        day=int(match["d"]) if match["d"] else None,
        hour=int(match["h"]) if match["h"] else None,
        minute=int(match["mi"]) if match["mi"] else None,
        second=int(match["s"]) if match["s"] else None,
        micro=micro,
        offset=match["tz"],
    )


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (any astronomical year)."""
    y = year - (month <= 2)
    era = y // 400  # floor division (the C original truncates, hence its y - 399)
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - UNIX_EPOCH_DAYS


def offset_seconds(offset: str | None) -> int:
    if not offset:
        return 0
    sign = -1 if offset[0] == "-" else 1
    parts = [int(p) for p in offset[1:].split(":")] + [0, 0]
    return sign * (parts[0] * 3600 + parts[1] * 60 + parts[2])


def epoch_us(value: Civil) -> int:
    """Unix microseconds of a timestamp (its offset applied)."""
    assert value.year is not None
    assert value.month is not None
    assert value.day is not None
    seconds = days_from_civil(value.year, value.month, value.day) * 86400
    seconds += (value.hour or 0) * 3600 + (value.minute or 0) * 60 + (value.second or 0)
    seconds -= offset_seconds(value.offset)
    return seconds * 1_000_000 + (value.micro or 0)


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    if typmod < 4:
        return None
    raw = typmod - 4
    return (raw >> 16) & 0xFFFF, ((raw & 0x7FF) ^ 1024) - 1024


def bytea_bytes(text: str) -> bytes:
    assert text.startswith("\\x"), text
    return bytes.fromhex(text[2:])


def float32_bits(value: float) -> str:
    return "f32:" + struct.pack(">f", value).hex()


def float64_bits(value: float) -> str:
    return "f64:" + struct.pack(">d", value).hex()


def same_float(java_text: str, pg_text: str, *, single: bool) -> bool:
    """A Java double's text equals PostgreSQL's float4/float8 value (float4 at 32 bits)."""
    got, want = float(java_text), float(pg_text)
    if math.isnan(want):
        return math.isnan(got)
    if single:
        return struct.pack(">f", got) == struct.pack(">f", want)
    return struct.pack(">d", got) == struct.pack(">d", want)


# ------------------------------------------------------------------ Flink canal-json

_INTEGERS = {"int2": "SMALLINT", "int4": "INT", "int8": "BIGINT"}


def flink_type(column: RefColumn) -> str:
    """The Flink SQL type a user declares for ``column`` to read canal-json.

    Exact where a Flink type holds every value of the PostgreSQL type; STRING otherwise
    (unconstrained numeric: NaN and any scale; time: Flink's JSON TIME keeps whole seconds;
    timetz, intervals, arrays, json, network types …).
    """
    name = column.type_name
    if name in _INTEGERS:
        return _INTEGERS[name]
    if name == "bool":
        return "BOOLEAN"
    if name == "float4":
        return "FLOAT"
    if name == "float8":
        return "DOUBLE"
    if name == "numeric":
        ps = numeric_precision_scale(column.typmod)
        if ps is not None and ps[0] <= 38 and ps[1] >= 0:
            return f"DECIMAL({ps[0]}, {ps[1]})"
        return "STRING"
    if name == "bytea":
        return "BYTES"
    if name == "date":
        return "DATE"
    if name in ("timestamp", "timestamptz"):
        return "TIMESTAMP(6)"
    return "STRING"


def flink_row_type(columns: tuple[RefColumn, ...]) -> str:
    fields = ", ".join(f"`{c.name}` {flink_type(c)}" for c in columns)
    return f"ROW<{fields}>"


def _flink_civil(text: str) -> Civil:
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        raise UnrepresentableError(text)
    value = civil(text)
    if value.year is None or not 0 <= value.year <= 9999:
        raise UnrepresentableError(text)
    return value


def flink_value(column: RefColumn, text: str | None) -> Any:
    """Flink's value of ``text`` read as :func:`flink_type`, rendered as the harness does."""
    if text is None:
        return None
    kind = flink_type(column)
    if kind == "BOOLEAN":
        return {"t": True, "f": False}[text]
    if kind in ("SMALLINT", "INT", "BIGINT"):
        return int(text)
    if kind == "FLOAT":
        return float32_bits(float(text))
    if kind == "DOUBLE":
        return float64_bits(float(text))
    if kind.startswith("DECIMAL"):
        if text in ("NaN", "Infinity", "-Infinity"):
            raise UnrepresentableError(text)
        return text
    if kind == "BYTES":
        return bytea_bytes(text).hex()
    if kind == "DATE":
        value = _flink_civil(text)
        assert value.year is not None
        assert value.month is not None
        assert value.day is not None
        return days_from_civil(value.year, value.month, value.day)
    if kind == "TIMESTAMP(6)":
        return epoch_us(_flink_civil(text))
    return text


# ------------------------------------------------------------------ canal FlatMessage

CANAL_ADAPTER_SETTINGS = ("canal.bytea=latin1", "canal.boolean=1-0")
"""The settings canal's own consumers need: bytea as canal writes binary columns (the bytes
read as ISO-8859-1, which canal's client adapter turns back into bytes) and booleans as
MySQL's tinyint(1) ``1``/``0``."""


def canal_text(column: RefColumn, text: str | None) -> str | None:
    """The FlatMessage string of ``text`` with :data:`CANAL_ADAPTER_SETTINGS` (bytea: hex of
    the bytes the harness recovers from the ISO-8859-1 string)."""
    if text is None:
        return None
    name = column.type_name
    if name == "bool":
        return {"t": "1", "f": "0"}[text]
    if name == "bytea":
        return bytea_bytes(text).hex()
    if name == "timestamptz" and text not in ("infinity", "-infinity"):
        # canal writes the UTC wall-clock time with no offset (test_decoding prints +00).
        value = civil(text)
        assert value.offset == "+00", text
        return text.replace("+00", "", 1)
    return text


# ------------------------------------------------------------------ DTS: the SDK and Avro

_CHARACTER = {"bpchar", "varchar", "text", "name", "char"}
_OBJECT = {
    "json": "JSON",
    "jsonb": "JSON",
    "xml": "XML",
    "uuid": "UUID",
    **dict.fromkeys(("point", "line", "lseg", "box", "path", "polygon", "circle"), "GEOMETRY"),
}
_INTEGER_BYTES = {"int2": 2, "int4": 4, "int8": 8}
_SPECIAL_NUMERIC = {"NaN", "Infinity", "-Infinity"}
_AVRO = "com.alibaba.dts.formats.avro"


def _decimal_precision_scale(column: RefColumn, text: str) -> tuple[int, int]:
    declared = numeric_precision_scale(column.typmod)
    if declared is not None:
        return declared
    value = Decimal(text)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    digits = value.as_tuple().digits
    unscaled = int("".join(map(str, digits))) if digits else 0
    return max(len(str(unscaled)), 1), -exponent


def dts_kind(column: RefColumn, text: str) -> str:
    """Which DTS image type a value is written as.

    Documented in capture/formats/dts_avro/encode.py.
    """
    name = column.type_name
    if name in _INTEGER_BYTES or name == "bool":
        return "Integer"
    if name == "numeric":
        return "Float" if text in _SPECIAL_NUMERIC else "Decimal"
    if name in ("float4", "float8"):
        return "Float"
    if name in _CHARACTER or column.is_enum:
        return "Character"
    if name == "bytea":
        return "BinaryObject"
    if name in ("date", "timestamp", "timestamptz") and text in ("infinity", "-infinity"):
        return "TextObject"
    if name == "timestamptz":
        return "Timestamp"
    if name in ("date", "time", "timestamp"):
        return "DateTime"
    if name == "timetz":
        return "TimestampWithTimeZone"
    return "TextObject"


def _unix(text: str) -> tuple[int, int]:
    micros = epoch_us(civil(text))
    return micros // 1_000_000, micros % 1_000_000


def dts_sdk_value(column: RefColumn, text: str | None) -> Any:
    """The DTS SDK's ``Value`` for ``text``, as the harness renders it (see ``dtsValue``)."""
    if text is None:
        return None
    kind = dts_kind(column, text)
    name = column.type_name
    if kind == "Integer":
        return {"int": {"t": "1", "f": "0"}.get(text, text) if name == "bool" else text}
    if kind == "Decimal":
        return {"dec": text}
    if kind == "Float":
        return {"float": text}  # compared with same_float
    if kind == "Character":
        return {"str": text, "charset": "UTF8"}
    if kind == "BinaryObject":
        return {"obj": "BYTEA", "hex": bytea_bytes(text).hex()}
    if kind == "TextObject":
        return {"obj": _OBJECT.get(name, "TEXT"), "text": text}
    if kind == "Timestamp":
        seconds, micro = _unix(text)
        return {"unix": seconds, "micro": micro}
    value = civil(text)
    return {
        "datetime": {
            "year": value.year,
            "month": value.month,
            "day": value.day,
            "hour": value.hour,
            "minute": value.minute,
            "second": value.second,
            "nanos": None if value.micro is None else value.micro * 1000,
            "timezone": value.offset,
        }
    }


NONE_SDK = {"none": True}
NONE_AVRO = "NONE"


def dts_avro_item(column: RefColumn, text: str | None) -> Any:
    """The raw Avro image item of ``text`` as GenericDatumReader decodes it."""
    if text is None:
        return None
    kind = dts_kind(column, text)
    name = column.type_name
    record = f"{_AVRO}.{kind}"
    if kind == "Integer":
        precision = 1 if name == "bool" else _INTEGER_BYTES[name]
        value = {"t": "1", "f": "0"}.get(text, text) if name == "bool" else text
        return {"@type": record, "precision": precision, "value": value}
    if kind == "Decimal":
        precision, scale = _decimal_precision_scale(column, text)
        return {"@type": record, "value": text, "precision": precision, "scale": scale}
    if kind == "Float":
        return {
            "@type": record,
            "value": text,  # compared with same_float
            "precision": {"float4": 24, "float8": 53}.get(name, 0),  # numeric NaN/±Infinity: 0
            "scale": -1,
        }
    if kind == "Character":
        return {"@type": record, "charset": "UTF8", "value": {"@hex": text.encode().hex()}}
    if kind == "BinaryObject":
        return {"@type": record, "type": "BYTEA", "value": {"@hex": bytea_bytes(text).hex()}}
    if kind == "TextObject":
        return {"@type": record, "type": _OBJECT.get(name, "TEXT"), "value": text}
    if kind == "Timestamp":
        seconds, micro = _unix(text)
        return {"@type": record, "timestamp": seconds, "millis": micro}
    value = civil(text)
    fields = {
        "@type": f"{_AVRO}.DateTime",
        "year": value.year,
        "month": value.month,
        "day": value.day,
        "hour": value.hour,
        "minute": value.minute,
        "second": value.second,
        "millis": value.micro,
    }
    if kind == "TimestampWithTimeZone":
        return {"@type": record, "value": fields, "timezone": value.offset}
    return fields


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()

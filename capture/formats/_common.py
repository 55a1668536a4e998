"""Helpers every encoder shares: type families, keys, times and positions.

Type families group PostgreSQL types by how formats treat them; each encoder maps a
family to its own type system (and documents the mapping in its module docstring).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

import orjson

from capture.events import ChangeEvent, Column, Image, Table, pg_ts_to_datetime
from capture.pgoutput.messages import (
    TRUNCATE_CASCADE,
    TRUNCATE_RESTART_IDENTITY,
    UNCHANGED_TOAST,
    UnchangedToast,
)

_BINARY: Final = ord("b")


class Family(enum.Enum):
    """How a column's type is treated by the output formats."""

    BOOL = "bool"
    SMALLINT = "smallint"
    INTEGER = "integer"
    BIGINT = "bigint"
    NUMERIC = "numeric"
    REAL = "real"
    DOUBLE = "double"
    CHAR = "char"
    """Fixed-length character (bpchar)."""
    STRING = "string"
    """text, varchar, name, enums, and any type without a better family."""
    BYTES = "bytes"
    DATE = "date"
    TIME = "time"
    TIMETZ = "timetz"
    TIMESTAMP = "timestamp"
    TIMESTAMPTZ = "timestamptz"
    INTERVAL = "interval"
    UUID = "uuid"
    JSON = "json"
    NETWORK = "network"
    ARRAY = "array"
    OTHER = "other"
    """Known to PostgreSQL but with no portable form (point, money, tsvector…): text."""


_FAMILIES: Final = {
    "bool": Family.BOOL,
    "int2": Family.SMALLINT,
    "int4": Family.INTEGER,
    "oid": Family.BIGINT,
    "xid": Family.BIGINT,
    "int8": Family.BIGINT,
    "numeric": Family.NUMERIC,
    "float4": Family.REAL,
    "float8": Family.DOUBLE,
    "bpchar": Family.CHAR,
    "char": Family.CHAR,
    "text": Family.STRING,
    "varchar": Family.STRING,
    "name": Family.STRING,
    "bytea": Family.BYTES,
    "date": Family.DATE,
    "time": Family.TIME,
    "timetz": Family.TIMETZ,
    "timestamp": Family.TIMESTAMP,
    "timestamptz": Family.TIMESTAMPTZ,
    "interval": Family.INTERVAL,
    "uuid": Family.UUID,
    "json": Family.JSON,
    "jsonb": Family.JSON,
    "inet": Family.NETWORK,
    "cidr": Family.NETWORK,
    "macaddr": Family.NETWORK,
    "macaddr8": Family.NETWORK,
    "money": Family.OTHER,
    "point": Family.OTHER,
    "tsvector": Family.OTHER,
    "bit": Family.OTHER,
    "varbit": Family.OTHER,
    "xml": Family.OTHER,
}

LOB_FAMILIES: Final = frozenset({Family.BYTES, Family.JSON})
"""Families that formats with a LOB notion treat as LOBs (with text, see ``is_lob``)."""


def family(column: Column) -> Family:
    """The family of ``column``'s type (arrays first, then by type name)."""
    name = column.type_name
    if name.startswith("_"):
        return Family.ARRAY
    return _FAMILIES.get(name, Family.STRING)


def is_lob(column: Column) -> bool:
    """Whether the column is a LOB: unbounded text, bytea or json (Qlik masks, IBM)."""
    fam = family(column)
    if fam in LOB_FAMILIES:
        return True
    return fam is Family.STRING and column.type_name == "text"


def column_texts(image: Image) -> list[str | UnchangedToast | None]:
    """Return the PostgreSQL text of every column of ``image`` (None = NULL, TOAST kept)."""
    values = image.tuple.values
    kinds = image.tuple.kinds
    if _BINARY not in kinds:
        return [v.decode() if isinstance(v, bytes) else v for v in values]
    table = image.table
    out: list[str | UnchangedToast | None] = []
    for i, v in enumerate(values):
        if not isinstance(v, bytes):
            out.append(v)
        elif kinds[i] == _BINARY:
            out.append(table.renderers[i](table.binary_decoders[i](v)))
        else:
            out.append(v.decode())
    return out


def key_indexes_of(table: Table) -> tuple[int, ...] | None:
    """Indexes of the primary-key columns in key order (None without a primary key)."""
    if not table.primary_key:
        return None
    index = {n: i for i, n in enumerate(table.column_names)}
    return tuple(index[n] for n in table.primary_key)


def key_prefix_of(table: Table) -> bytes:
    """The bytes every row key of ``table`` starts with."""
    return table.qualified_name.encode() + b":"


def fast_row_key(
    table: Table, key_prefix: bytes, pk_indexes: tuple[int, ...] | None, image: Image | None
) -> bytes:
    """Return :func:`row_key`'s bytes with the per-table parts precomputed.

    Encoders compute ``key_prefix_of(table)`` and ``key_indexes_of(table)`` once per table.
    """
    if image is None:
        return table.qualified_name.encode()
    text = image.text
    indexes = image.present_indexes() if pk_indexes is None else pk_indexes
    values = [None if (v := text(i)) is UNCHANGED_TOAST else v for i in indexes]
    return key_prefix + orjson.dumps(values)


def row_key(table: Table, image: Image | None) -> bytes:
    """Kafka key that puts every change of one row in one partition.

    ``schema.table:`` plus the primary-key values (text form) as a JSON array; the whole
    row's values when the table has no key. Stable across restarts and processes.
    """
    return fast_row_key(table, key_prefix_of(table), key_indexes_of(table), image)


def clock_us(clock: Callable[[], float]) -> int:
    """``clock()`` (Unix seconds, a float) as whole microseconds.

    Rounded to the microsecond first, so that a clock reading an exact microsecond (the
    synthetic clock) gives exactly it, then callers floor to their unit.
    """
    return round(clock() * 1_000_000)


def clock_ms(clock: Callable[[], float]) -> int:
    """``clock()`` as Unix milliseconds (floor): "when the message was built" fields."""
    return clock_us(clock) // 1000


def commit_unix_ms(event: ChangeEvent) -> int:
    """Commit time as milliseconds since the Unix epoch."""
    return (event.commit_ts + 946_684_800_000_000) // 1000


def commit_datetime_text(event: ChangeEvent) -> str:
    """Commit time, ISO-8601 UTC with microseconds."""
    return pg_ts_to_datetime(event.commit_ts).isoformat()


def quote_ident(name: str) -> str:
    """Return ``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def truncate_sql(table: Table, options: int) -> str:
    """Return the TRUNCATE statement for one table of a TRUNCATE event."""
    sql = f"TRUNCATE TABLE {quote_ident(table.schema)}.{quote_ident(table.name)}"
    if options & TRUNCATE_RESTART_IDENTITY:
        sql += " RESTART IDENTITY"
    if options & TRUNCATE_CASCADE:
        sql += " CASCADE"
    return sql


def raw_texts(image: Image) -> tuple[list[bytes | None], list[int]]:
    """Text bytes of every column (binary values rendered), and the unchanged-TOAST indexes.

    Unchanged TOAST columns come back as None, to be patched by the caller.
    """
    table = image.table
    tup = image.tuple
    out: list[bytes | None] = []
    patch: list[int] = []
    for i, raw in enumerate(tup.values):
        if raw is UNCHANGED_TOAST:
            patch.append(i)
            out.append(None)
        elif isinstance(raw, bytes) and tup.kinds[i] == _BINARY:
            out.append(table.renderers[i](table.binary_decoders[i](raw)).encode())
        else:
            out.append(raw)  # type: ignore[arg-type]
    return out, patch

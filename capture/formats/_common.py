"""Helpers every encoder shares: type families, keys, times and positions.

Type families group PostgreSQL types by how formats treat them; each encoder maps a
family to its own type system (and documents the mapping in its module docstring).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final, TypeVar

import orjson

from capture.events import ChangeEvent, Column, Image, Op, Table
from capture.formats.base import EncodedMessage
from capture.pgoutput.messages import (
    TRUNCATE_CASCADE,
    TRUNCATE_RESTART_IDENTITY,
    UNCHANGED_TOAST,
    UnchangedToast,
)
from capture.types.text import bytea_from_text

_BINARY: Final = ord("b")
_TEXT: Final = ord("t")


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


T = TypeVar("T")


class PerTable(dict[Table, T]):
    """What an encoder precomputes per table: ``states[table]`` builds it on first use.

    A new Relation message makes a new ``Table`` object; its entry replaces the one built
    for the relation's previous ``Table``, so memory is bounded by the number of tables,
    not by the number of Relation messages seen. Lookups are plain dict lookups (``Table``
    hashes by identity), so the hot path runs no Python code.
    """

    __slots__ = ("_build", "_current")

    def __init__(self, build: Callable[[Table], T]) -> None:
        super().__init__()
        self._build = build
        self._current: dict[int, Table] = {}
        """relation OID → the Table object its entry was built for."""

    def __missing__(self, table: Table) -> T:
        stale = self._current.get(table.relation_id)
        if stale is not None:
            del self[stale]
        self._current[table.relation_id] = table
        value = self[table] = self._build(table)
        return value


def json_number(text: str) -> float | str:
    """A float4/float8 text as a JSON number; NaN and ±Infinity (no JSON number) stay text."""
    if text[-1] in "yN":
        return text
    return float(text)


def bytea_bytes(text: str) -> bytes:
    r"""The bytes of a bytea's text form (hex ``\x…``, or the escape format)."""
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    return bytea_from_text(text.encode())


def pg_bool(text: str) -> bool:
    """A bool's text (PostgreSQL prints ``t`` or ``f``) as a JSON boolean."""
    return text == "t"


def key_indexes_of(table: Table) -> tuple[int, ...] | None:
    """Indexes of the primary-key columns in key order (None without a primary key)."""
    if not table.primary_key:
        return None
    index = {n: i for i, n in enumerate(table.column_names)}
    return tuple(index[n] for n in table.primary_key)


class RowKeys:
    """The Kafka keys of one table's row changes (built once per Table object).

    A row's key is ``schema.table:`` plus its primary-key values (PostgreSQL text, unchanged
    TOAST as null) as a JSON array, so every change of one row goes to one partition, in
    order, stable across restarts and processes. A table without a primary key
    (``Table.primary_key`` empty: no key, or REPLICA IDENTITY FULL without a known one) has
    no stable row identity: its row's values change with every update, so keying by them
    would move the row to another partition. All its changes take the table's key,
    ``schema.table``, instead: one partition, in commit order.
    """

    __slots__ = ("indexes", "prefix", "single", "table_key")

    def __init__(self, table: Table) -> None:
        self.table_key = table.qualified_name.encode()
        self.prefix = self.table_key + b":"
        self.indexes = key_indexes_of(table)
        self.single = self.indexes[0] if self.indexes and len(self.indexes) == 1 else -1

    def key(self, image: Image | None) -> bytes:
        """The key of the row ``image`` shows (the table's key without an image or a key)."""
        if image is None:
            return self.table_key
        indexes = self.indexes
        if indexes is None:
            return self.table_key
        if self.single >= 0:
            raw = image.tuple.values[self.single]
            if type(raw) is bytes and image.tuple.kinds[self.single] == _TEXT:
                return self.prefix + orjson.dumps([raw.decode()])
        text = image.text
        values = [None if (v := text(i)) is UNCHANGED_TOAST else v for i in indexes]
        return self.prefix + orjson.dumps(values)


def keyed_image(event: ChangeEvent) -> Image | None:
    """The image a change's Kafka key comes from.

    The old row of a DELETE, the new row otherwise, None for a TRUNCATE (keyed by its table).
    """
    op = event.op
    if op is Op.DELETE:
        return event.before
    return None if op is Op.TRUNCATE else event.after


def json_change(
    event: ChangeEvent, doc: dict[str, Any] | None, keys: RowKeys
) -> list[EncodedMessage]:
    """The message of a change whose value is ``doc`` as JSON, keyed by its row; none for None."""
    if doc is None:
        return []
    return [EncodedMessage.for_change(event, orjson.dumps(doc), keys.key(keyed_image(event)))]


def row_key(table: Table, image: Image | None) -> bytes:
    """The Kafka key of the row ``image`` shows (see :class:`RowKeys`)."""
    return RowKeys(table).key(image)


def text_row(names: tuple[str, ...], texts: list[str | UnchangedToast | None]) -> dict[str, Any]:
    """Column → text for a complete image; unchanged TOAST columns left out."""
    if UNCHANGED_TOAST not in texts:
        return dict(zip(names, texts, strict=True))
    return {n: t for n, t in zip(names, texts, strict=True) if not isinstance(t, UnchangedToast)}


def present_text_row(image: Image) -> dict[str, Any]:
    """Column → text for the columns ``image`` carries (only the key for a key image)."""
    texts = column_texts(image)
    names = image.table.column_names
    if not image.key_only:
        return text_row(names, texts)
    return {
        names[i]: t
        for i in image.table.key_indexes
        if not isinstance(t := texts[i], UnchangedToast)
    }


def clock_us(clock: Callable[[], float]) -> int:
    """``clock()`` (Unix seconds, a float) as whole microseconds.

    Rounded to the microsecond first, so that a clock reading an exact microsecond (the
    synthetic clock) gives exactly it, then callers floor to their unit.
    """
    return round(clock() * 1_000_000)


def clock_ms(clock: Callable[[], float]) -> int:
    """``clock()`` as Unix milliseconds (floor): "when the message was built" fields."""
    return clock_us(clock) // 1000


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

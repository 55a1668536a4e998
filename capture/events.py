"""The change-event model every output format consumes.

A replication stream becomes, per committed transaction, this sequence::

    TransactionBegin, ChangeEvent * n, TransactionCommit

in commit order. Streamed and prepared transactions are reassembled first, so consumers
never see a change of a transaction that did not commit (see :mod:`capture.transactions`).

Invariants:

* ``ChangeEvent.ordinal`` is 1-based and dense within its transaction; a TRUNCATE of k
  tables is k events with consecutive ordinals.
* ``(commit_lsn, ordinal)`` identifies a change across restarts: a replay after a crash
  repeats exactly the same pairs, so consumers can drop duplicates.
* Images keep the raw wire values and decode on demand (``values()`` typed, ``texts()``
  PostgreSQL text). A column whose TOASTed value did not change holds
  :data:`~capture.pgoutput.messages.UNCHANGED_TOAST`, never ``None``.
* A key-only before image (``Image.key_only``) holds meaningful values only for key
  columns; the other columns were sent as NULL placeholders and are reported as absent.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from capture.pgoutput.messages import UNCHANGED_TOAST, ReplicaIdentity, TupleData, UnchangedToast

PG_EPOCH_US: Final = 946_684_800_000_000
"""Microseconds from the Unix epoch to PostgreSQL's epoch (2000-01-01 UTC)."""

_UNIX_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def pg_ts_to_datetime(pg_us: int) -> dt.datetime:
    """Convert a wire timestamp (µs since 2000-01-01 UTC) to an aware UTC datetime."""
    return _UNIX_EPOCH + dt.timedelta(microseconds=pg_us + PG_EPOCH_US)


class Op(enum.StrEnum):
    """The kind of a row change."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    TRUNCATE = "truncate"
    SNAPSHOT = "snapshot"
    """A row read by an initial or on-demand load (not a change): ``before`` is None and
    ``after`` is the whole row. ``xid`` is 0; ``commit_lsn`` is the position of the load
    chunk's low watermark in the stream, so ``(commit_lsn, ordinal)`` sorts the row after
    every streamed change it includes and before every later one."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table as the server described it (generated columns are not sent)."""

    name: str
    type_oid: int
    type_name: str
    type_modifier: int
    is_key: bool
    """Part of the replica identity. With REPLICA IDENTITY FULL pgoutput flags every column."""


ValueDecoder = Callable[[bytes], Any]
TextRenderer = Callable[[Any], str]


@dataclass(frozen=True, slots=True, eq=False)
class Table:
    """A table's layout from the newest Relation message, with per-column decoders.

    ``relation_id`` is the table's OID. ``text_decoders[i]``, ``binary_decoders[i]`` and
    ``renderers[i]`` are compiled once per Relation message so that decoding a row costs
    no lookups.
    """

    relation_id: int
    schema: str
    name: str
    replica_identity: ReplicaIdentity
    columns: tuple[Column, ...]
    text_decoders: tuple[ValueDecoder, ...] = field(repr=False)
    binary_decoders: tuple[ValueDecoder, ...] = field(repr=False)
    renderers: tuple[TextRenderer, ...] = field(repr=False)
    column_names: tuple[str, ...] = field(repr=False)
    key_indexes: tuple[int, ...] = field(repr=False)
    primary_key: tuple[str, ...] = ()
    """Primary-key column names, in key order. The replica-identity columns unless the
    identity is FULL (pgoutput then flags every column), where it comes from the catalog
    when a key resolver is configured, and is empty otherwise."""
    missing_values: Mapping[str, str | None] = field(default_factory=dict, repr=False)
    """Column name → the value (PostgreSQL text) that rows stored before the column was
    added read as: ``ALTER TABLE … ADD COLUMN … DEFAULT`` of a non-volatile expression
    stores it once in the catalog (``pg_attribute.attmissingval``) and writes no row, so no
    change carries it; None (NULL) for a column without a DEFAULT. A column with a DEFAULT
    whose value for those rows the catalog does not hold (a volatile DEFAULT rewrote the
    table, or the DEFAULT was set after the ADD) is not here: unknown. Looked up when the
    Relation message arrives (a column resolver); empty when no resolver is configured. Not
    part of :attr:`layout_version`."""
    column_numbers: Mapping[str, int] = field(default_factory=dict, repr=False)
    """Column name → its number in the catalog (``attnum``), which a RENAME COLUMN keeps and
    no other column ever gets again: what tells a renamed column from a dropped one and a
    new one. Looked up when the Relation message arrives (a column resolver); a column
    whose name or type the catalog no longer has by then (later DDL) has none, and so has
    every column without a resolver. Not part of :attr:`layout_version`."""
    layout_version: str = field(init=False, repr=False)
    """The fingerprint of this layout (16 hex digits): schema, name, replica identity,
    primary key and each column's name, type OID, modifier and key flag. Equal layouts have
    equal versions in any process and after any restart; a changed layout has a new one.
    Computed once per Relation message; it names the layout record walcast publishes
    (:mod:`capture.formats.layout`) in every change message (the ``walcast.layout``
    header) and in IBM's ``plan_name``."""

    def __post_init__(self) -> None:
        fingerprint = orjson.dumps(
            [
                self.schema,
                self.name,
                self.replica_identity.name.lower(),
                list(self.primary_key),
                [[c.name, c.type_oid, c.type_modifier, c.is_key] for c in self.columns],
            ]
        )
        version = hashlib.sha256(fingerprint).hexdigest()[:16]
        object.__setattr__(self, "layout_version", version)  # frozen: set once, here

    @property
    def qualified_name(self) -> str:
        """``schema.table`` (unquoted)."""
        return f"{self.schema}.{self.name}"

    @property
    def key_columns(self) -> tuple[Column, ...]:
        """The replica-identity columns."""
        return tuple(self.columns[i] for i in self.key_indexes)


_T: Final = ord("t")
_B: Final = ord("b")


class Image:
    """A row image (before or after) of one change, decoded lazily.

    ``key_only`` marks an old key (``'K'``): only ``table.key_indexes`` hold values.
    """

    __slots__ = ("key_only", "table", "tuple")

    def __init__(self, table: Table, data: TupleData, *, key_only: bool = False) -> None:
        self.table = table
        self.tuple = data
        self.key_only = key_only

    def __repr__(self) -> str:
        return f"Image({self.table.qualified_name}, key_only={self.key_only}, {self.as_dict()!r})"

    def present_indexes(self) -> range | tuple[int, ...]:
        """Indexes of the columns this image carries (all, or the key for a key image)."""
        if self.key_only:
            return self.table.key_indexes
        return range(len(self.tuple.values))

    def value(self, index: int) -> Any:
        """Typed value of column ``index``: None, UNCHANGED_TOAST or the decoded value."""
        raw = self.tuple.values[index]
        if raw is None or raw is UNCHANGED_TOAST:
            return raw
        assert isinstance(raw, bytes)
        if self.tuple.kinds[index] == _B:
            return self.table.binary_decoders[index](raw)
        return self.table.text_decoders[index](raw)

    def text(self, index: int) -> str | UnchangedToast | None:
        """PostgreSQL text form of column ``index`` (exact for text-mode streams)."""
        raw = self.tuple.values[index]
        if raw is None or raw is UNCHANGED_TOAST:
            return raw
        assert isinstance(raw, bytes)
        if self.tuple.kinds[index] == _T:
            return raw.decode()
        return self.table.renderers[index](self.table.binary_decoders[index](raw))

    def values(self) -> list[Any]:
        """Typed values of all columns (absent key-image columns are None)."""
        present = set(self.present_indexes()) if self.key_only else None
        return [
            self.value(i) if present is None or i in present else None
            for i in range(len(self.tuple.values))
        ]

    def as_dict(self, *, typed: bool = True) -> dict[str, Any]:
        """Column name → value for the columns present; unchanged TOAST columns included."""
        names = self.table.column_names
        get = self.value if typed else self.text
        return {names[i]: get(i) for i in self.present_indexes()}

    def items(self, *, typed: bool = True) -> Iterator[tuple[Column, Any]]:
        """(column, value) pairs for the columns present."""
        get = self.value if typed else self.text
        for i in self.present_indexes():
            yield self.table.columns[i], get(i)

    def unchanged_toast_columns(self) -> list[str]:
        """Names of the columns whose unchanged TOASTed value was not sent."""
        names = self.table.column_names
        return [names[i] for i, v in enumerate(self.tuple.values) if v is UNCHANGED_TOAST]


@dataclass(frozen=True, slots=True)
class TransactionBegin:
    """A committed transaction starts; its commit LSN and time are already known."""

    xid: int
    commit_lsn: int
    commit_ts: int
    """µs since 2000-01-01 UTC, as on the wire."""
    change_count: int | None = None
    """Number of ChangeEvents that follow, when known in advance: always for streamed and
    prepared transactions, and for ordinary ones when the assembler holds transactions."""


@dataclass(frozen=True, slots=True)
class TransactionCommit:
    """The transaction ended; ``end_lsn`` is the position to acknowledge once delivered."""

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    change_count: int


@dataclass(slots=True)
class ChangeEvent:
    """One row change (or one table of a TRUNCATE) of a committed transaction."""

    op: Op
    table: Table
    before: Image | None
    after: Image | None
    xid: int
    commit_lsn: int
    commit_ts: int
    """µs since 2000-01-01 UTC, as on the wire."""
    ordinal: int
    """1-based position within the transaction."""
    truncate_options: int = 0
    """For TRUNCATE: bit 1 CASCADE, bit 2 RESTART IDENTITY."""
    lsn: int = 0
    """The change's own WAL position: the start of the XLogData message that carried its
    pgoutput message (every table of one TRUNCATE shares it); at or before ``commit_lsn``,
    increasing within the transaction. 0 where there is none: a load row (its position
    is its chunk's watermark, ``commit_lsn``) and events built without a server."""

    @property
    def commit_time(self) -> dt.datetime:
        """Commit time as an aware UTC datetime."""
        return pg_ts_to_datetime(self.commit_ts)

    @property
    def schema(self) -> str:
        """Schema (namespace) of the table."""
        return self.table.schema

    @property
    def table_name(self) -> str:
        """Name of the table."""
        return self.table.name


@dataclass(frozen=True, slots=True)
class LogicalMessageEvent:
    """A ``pg_logical_emit_message`` record (non-transactional, or of a committed txn)."""

    lsn: int
    prefix: str
    content: bytes
    transactional: bool
    xid: int | None


StreamItem = TransactionBegin | ChangeEvent | TransactionCommit | LogicalMessageEvent
"""What :mod:`capture.transactions` yields to consumers."""

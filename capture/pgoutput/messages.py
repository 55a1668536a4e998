"""pgoutput logical replication messages (protocol versions 1 to 4), as plain data.

These classes only hold what the bytes said. Resolving a relation OID to its columns,
or a type OID to a decoder, is the job of :mod:`capture.relcache`, owned by the caller.

Conventions:

* The classes created once per row (TupleData, Insert, Update, Delete) are plain slotted
  dataclasses, not frozen ones: frozen ``__init__`` costs a ``object.__setattr__`` call
  per field, on the hottest path. Treat every message as immutable all the same.

* LSNs are ``int`` (64-bit), timestamps are ``int`` microseconds since 2000-01-01 UTC
  (PostgreSQL's epoch), exactly as on the wire.
* ``xid`` on row-level messages is ``None`` outside a streamed transaction; inside one
  (protocol v2+), it is the (sub)transaction id the server put after the type byte.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class MessageType(enum.IntEnum):
    """The type byte that starts every pgoutput message."""

    BEGIN = ord("B")
    """Start of a (non-streamed) transaction; carries its final LSN, commit time and xid."""
    COMMIT = ord("C")
    """End of a transaction."""
    ORIGIN = ord("O")
    """The transaction was replicated from another node (replication origin)."""
    RELATION = ord("R")
    """Describes a table: its namespace, name, replica identity and columns."""
    TYPE = ord("Y")
    """Names a non-built-in data type used by a following Relation."""
    INSERT = ord("I")
    """A row was inserted: the new tuple."""
    UPDATE = ord("U")
    """A row was updated: optional old key or old tuple, then the new tuple."""
    DELETE = ord("D")
    """A row was deleted: its key or its whole old tuple."""
    TRUNCATE = ord("T")
    """One or more tables were truncated."""
    MESSAGE = ord("M")
    """A logical decoding message (``pg_logical_emit_message``); needs ``messages 'true'``."""
    STREAM_START = ord("S")
    """v2+: a chunk of an in-progress transaction follows."""
    STREAM_STOP = ord("E")
    """v2+: the current streamed chunk ends."""
    STREAM_COMMIT = ord("c")
    """v2+: a streamed transaction committed."""
    STREAM_ABORT = ord("A")
    """v2+: a streamed transaction, or one of its subtransactions, aborted."""
    BEGIN_PREPARE = ord("b")
    """v3+: start of a transaction prepared for two-phase commit."""
    PREPARE = ord("P")
    """v3+: the transaction was prepared (``PREPARE TRANSACTION``)."""
    COMMIT_PREPARED = ord("K")
    """v3+: ``COMMIT PREPARED``."""
    ROLLBACK_PREPARED = ord("r")
    """v3+: ``ROLLBACK PREPARED``."""
    STREAM_PREPARE = ord("p")
    """v3+: a streamed transaction was prepared."""


class ReplicaIdentity(enum.Enum):
    """``pg_class.relreplident``: what the old image of an update or delete holds."""

    DEFAULT = "d"
    """The primary key (old key sent only when it changed, and on delete)."""
    NOTHING = "n"
    """No old image at all."""
    FULL = "f"
    """The whole old row."""
    INDEX = "i"
    """The columns of a chosen unique index."""


class UnchangedToast:
    """Marker for a TOASTed column whose value did not change and was not sent (``'u'``).

    It is not NULL: the column has a value, the server just did not repeat it. There is
    one instance, :data:`UNCHANGED_TOAST`.
    """

    _instance: UnchangedToast | None = None

    def __new__(cls) -> UnchangedToast:  # noqa: PYI034, D102 - a singleton constructor
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = UnchangedToast()


@dataclass(slots=True)
class TupleData:
    """One row image as sent.

    ``kinds[i]`` is the column's kind byte as sent: ``n`` (NULL), ``u`` (unchanged TOASTed
    value, not sent), ``t`` (the type's text output) or ``b`` (its binary send format,
    with ``binary 'true'``). ``values[i]`` is ``None`` for ``n``, :data:`UNCHANGED_TOAST`
    for ``u``, otherwise the raw bytes.
    """

    kinds: bytes
    values: tuple[bytes | UnchangedToast | None, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    """``B``: a transaction whose changes follow; it commits at ``final_lsn``."""

    final_lsn: int
    commit_ts: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    """``C``: the transaction committed at ``commit_lsn``; ``end_lsn`` is just past it."""

    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class Origin:
    """``O``: the transaction came from replication origin ``name``."""

    origin_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One column of a Relation message. ``flags & 1`` marks a replica-identity key column."""

    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        """Whether the column is part of the replica identity."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    """``R``: the layout of relation ``relation_id``. ``namespace`` is ``""`` for pg_catalog."""

    xid: int | None
    relation_id: int
    namespace: str
    name: str
    replica_identity: ReplicaIdentity
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class Type:
    """``Y``: names type ``type_oid``. For a domain, the name is that of its base type."""

    xid: int | None
    type_oid: int
    namespace: str
    name: str


@dataclass(slots=True)
class Insert:
    """``I``: a new row in ``relation_id``."""

    xid: int | None
    relation_id: int
    new: TupleData


@dataclass(slots=True)
class Update:
    """``U``: an updated row.

    ``old`` is the old key (``old_is_key``: replica-identity columns only, the others sent
    as NULL) or the whole old row (REPLICA IDENTITY FULL), or ``None`` when the server sent
    neither (the key did not change).
    """

    xid: int | None
    relation_id: int
    old: TupleData | None
    old_is_key: bool
    new: TupleData


@dataclass(slots=True)
class Delete:
    """``D``: a deleted row; ``old`` as in :class:`Update`."""

    xid: int | None
    relation_id: int
    old: TupleData | None
    old_is_key: bool


TRUNCATE_CASCADE: Final = 1
TRUNCATE_RESTART_IDENTITY: Final = 2


@dataclass(frozen=True, slots=True)
class Truncate:
    """``T``: the relations were truncated; ``options`` holds CASCADE/RESTART IDENTITY bits."""

    xid: int | None
    options: int
    relation_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """``M``: a ``pg_logical_emit_message`` record. ``transactional`` is ``flags & 1``."""

    xid: int | None
    flags: int
    lsn: int
    prefix: str
    content: bytes

    @property
    def transactional(self) -> bool:
        """Whether the message is part of a transaction (else it is delivered at once)."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class StreamStart:
    """``S``: a chunk of in-progress transaction ``xid`` follows."""

    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    """``E``: the current streamed chunk ended."""


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """``c``: streamed transaction ``xid`` committed at ``commit_lsn``."""

    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """``A``: ``subxid`` of streamed transaction ``xid`` aborted (the whole one if equal).

    ``abort_lsn``/``abort_ts`` are sent only by protocol v4 with ``streaming 'parallel'``.
    """

    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_ts: int | None = None


@dataclass(frozen=True, slots=True)
class BeginPrepare:
    """``b``: a transaction to be prepared (two-phase) starts."""

    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class Prepare:
    """``P``: the transaction was prepared with global id ``gid``."""

    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class StreamPrepare:
    """``p``: a streamed transaction was prepared with global id ``gid``."""

    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class CommitPrepared:
    """``K``: prepared transaction ``gid`` committed at ``commit_lsn``."""

    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    """``r``: prepared transaction ``gid`` was rolled back."""

    flags: int
    prepare_end_lsn: int
    rollback_end_lsn: int
    prepare_ts: int
    rollback_ts: int
    xid: int
    gid: str


Message = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
    | BeginPrepare
    | Prepare
    | StreamPrepare
    | CommitPrepared
    | RollbackPrepared
)
"""Any decoded pgoutput message."""

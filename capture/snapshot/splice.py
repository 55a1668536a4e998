"""The splice: a loaded chunk inserted into the replication stream at its low watermark.

:class:`Splice` is the part of :class:`~capture.snapshot.loading_source.LoadingSource` that touches
the stream; why it gives every row exactly once is the module docstring of
:mod:`capture.snapshot.loading_source`. It

* follows the stream's committed transactions while loads run (:meth:`Splice.observe`):
  the recent ones' xids, commit LSNs and tables, for the race check;
* inserts a chunk when the stream reaches its watermark (:meth:`Splice.insert`): unless the
  race check finds a transaction of the table that committed before the watermark and that
  the read's snapshot does not see (the chunk is then read again: :class:`Raced`), it yields
  ``TransactionBegin(xid 0, at the watermark)``, one ``Op.SNAPSHOT`` change per row as the
  reader hands them on, and ``TransactionCommit``;
* drops the changes of a table without a key that its loaded chunk already holds: each such
  chunk leaves a :class:`HeldChanges` (kept in its ``done`` progress record as a
  :class:`~capture.state.progress.KeylessWindow`, and restored from it after a restart);
* completes a key-changing update of a table being loaded whose unchanged TOAST values were
  not sent, from the table.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final

from psycopg import sql

from capture.errors import ConnectionLostError, WalcastError
from capture.events import (
    PG_EPOCH_US,
    ChangeEvent,
    Image,
    Op,
    StreamItem,
    Table,
    TransactionBegin,
    TransactionCommit,
)
from capture.interfaces import StopRequested
from capture.lsn import format_lsn
from capture.pgoutput.messages import (
    UNCHANGED_TOAST,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    TupleData,
)
from capture.position import Checkpoint
from capture.relcache import RelationCache
from capture.replication import catalog
from capture.replication.catalog import TableLayout
from capture.snapshot.assigner import TableLoad
from capture.snapshot.connection import LoadConnection, describe, unreadable_text
from capture.snapshot.reader import ChunkRead, ReadSnapshot, abandon, drain
from capture.split import key_changed
from capture.state.progress import KeylessWindow

RECENT_TRANSACTIONS: Final = 4096
"""Committed transactions remembered for the watermark race check."""


@dataclass(frozen=True, slots=True)
class HeldChanges:
    """The stream changes of a keyless table that its loaded chunk already holds.

    Those of a transaction that commits at or after the chunk's watermark message
    (``low_lsn``) and before the read's WAL horizon, and that the read's snapshot sees. The
    progress record keeps it as a :class:`~capture.state.progress.KeylessWindow`.
    """

    relation_id: int
    low_lsn: int
    snapshot: ReadSnapshot

    @classmethod
    def from_record(cls, relation_id: int, window: KeylessWindow) -> HeldChanges:
        """From a ``done`` progress record's window."""
        snapshot = ReadSnapshot.parse(window.snapshot, format_lsn(window.horizon_lsn))
        return cls(relation_id, window.low_lsn, snapshot)

    def record(self) -> KeylessWindow:
        """The window as the progress record keeps it."""
        return KeylessWindow(self.low_lsn, self.snapshot.horizon_lsn, self.snapshot.text())

    def holds(self, relation_id: int, commit_lsn: int, xid: int) -> bool:
        """Whether a change of ``relation_id`` by that transaction is in the chunk."""
        return (
            relation_id == self.relation_id
            and self.low_lsn <= commit_lsn < self.snapshot.horizon_lsn
            and self.snapshot.sees(xid)
        )


@dataclass(frozen=True, slots=True)
class Spliced:
    """The chunk is in the stream: ``rows`` rows at ``low_lsn``."""

    low_lsn: int
    rows: int
    window: KeylessWindow | None
    """For a table without a key: what its ``done`` record keeps."""


@dataclass(frozen=True, slots=True)
class Raced:
    """Read the chunk again: its read missed a transaction, or DDL came in between.

    The read's snapshot missed a transaction the stream had already sent, or DDL of the
    table committed between the snapshot and the read's lock (:mod:`capture.snapshot.reader`).
    """

    reason: str


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """The chunk's read failed before its first row."""

    error: BaseException


Outcome = Spliced | Raced | ReadFailed


@dataclass(slots=True)
class _Transaction:
    """The stream transaction being passed through."""

    xid: int = 0
    commit_lsn: int = 0
    touched: set[int] = field(default_factory=set)


@dataclass(eq=False)
class Splice:
    """Chunks into the stream, and the stream's changes around them (module docstring).

    ``loading`` tells whether a table is being loaded (its load, else None); ``keep_alive``
    keeps the replication connection alive while the stream waits for a reader; ``stop``
    asks to stop waiting.
    """

    conn: LoadConnection
    relations: RelationCache
    _: KW_ONLY
    publications: list[str]
    loading: Callable[[int], TableLoad | None]
    keep_alive: Callable[[], None]
    stop: Callable[[], bool]
    read_timeout: Callable[[], float | None] = lambda: None
    """Seconds a reader may hand on nothing before it is abandoned (None: no bound)."""
    held: list[HeldChanges] = field(default_factory=list, init=False)
    """Keyless tables' chunks whose changes the stream may still carry."""
    _recent: deque[tuple[int, int, frozenset[int]]] = field(
        default_factory=lambda: deque(maxlen=RECENT_TRANSACTIONS), init=False
    )
    _current: _Transaction = field(default_factory=_Transaction, init=False)
    _tables: dict[int, tuple[TableLayout, Table]] = field(default_factory=dict, init=False)

    def hold(self, relation_id: int, window: KeylessWindow) -> None:
        """Drop again what a chunk read before a restart holds (its ``done`` record)."""
        self.held.append(HeldChanges.from_record(relation_id, window))

    # -- the stream ------------------------------------------------------------------------------

    def observe(self, item: StreamItem | Checkpoint, kind: type) -> StreamItem | Checkpoint | None:
        """``item`` as it goes on (``kind``: its type), or None when it is dropped."""
        if kind is TransactionBegin:
            assert isinstance(item, TransactionBegin)
            self._current = _Transaction(item.xid, item.commit_lsn)
        elif kind is ChangeEvent:
            assert isinstance(item, ChangeEvent)
            relation_id = item.table.relation_id
            self._current.touched.add(relation_id)
            if self.held and self._suppressed(relation_id):
                return None
            if (
                item.op is Op.UPDATE
                and item.after is not None
                and (load := self.loading(relation_id)) is not None
                and UNCHANGED_TOAST in item.after.tuple.values
                and key_changed(item)
            ):
                return self._completed(item, load)
        elif kind is TransactionCommit:
            assert isinstance(item, TransactionCommit)
            self._recent.append((item.xid, item.commit_lsn, frozenset(self._current.touched)))
            if self.held:
                self.held = [h for h in self.held if item.commit_lsn < h.snapshot.horizon_lsn]
        return item

    def _suppressed(self, relation_id: int) -> bool:
        """A change of a keyless table that its loaded chunk already holds."""
        current = self._current
        return any(h.holds(relation_id, current.commit_lsn, current.xid) for h in self.held)

    # -- a chunk at its watermark ----------------------------------------------------------------

    def insert(
        self, read: ChunkRead, message_lsn: int, name: str
    ) -> Generator[StreamItem, None, Outcome]:
        """The chunk of ``read`` (table ``name``), whose watermark message ends at ``message_lsn``.

        Yields the chunk's transaction and returns :class:`Spliced`, or yields nothing and
        returns :class:`Raced` (read it again) or :class:`ReadFailed`.
        """
        chunk = read.chunk
        first = self._next_result(read)
        if first[0] == "error":
            return ReadFailed(first[1])
        if first[0] == "changed":  # DDL between the read's snapshot and its lock
            drain(read, self.keep_alive)
            return Raced(first[1])
        _, snapshot, count, layout = first
        # The message's LSN is the END of its WAL record, which is where the commit record
        # of the next transaction may start: one less sorts after every commit before the
        # watermark and before every commit after it, and equals none of them.
        low = message_lsn - 1
        if self._raced(low, chunk.table.relation_id, snapshot):
            drain(read, self.keep_alive)
            return Raced("a transaction committed before its watermark was not in its snapshot")
        table = self._table(layout)
        commit_ts = time.time_ns() // 1000 - PG_EPOCH_US
        yield TransactionBegin(0, low, commit_ts, count)
        ordinal = 0
        width = len(table.columns)
        all_text = b"t" * width
        while True:
            result = self._next_result(read)
            if result[0] == "rows":
                for values in result[1]:
                    ordinal += 1
                    if len(values) != width:
                        raise WalcastError(
                            f"load of {name}: a COPY row has {len(values)} values for "
                            f"{width} columns",
                            hint="the table changed while it was read; restart to read it again",
                        )
                    kinds = all_text if None not in values else _kinds(values)
                    yield ChangeEvent(
                        Op.SNAPSHOT, table, None, Image(table, TupleData(kinds, values)),
                        0, low, commit_ts, ordinal,
                    )  # fmt: skip
                continue
            if result[0] == "end":
                break
            unreadable = unreadable_text(result[1], name, self.conn.dsn)
            if unreadable is not None:
                raise unreadable
            raise ConnectionLostError(
                f"load of {name} failed while reading chunk {chunk.number}: "
                f"{describe(result[1], self.conn.dsn)}",
                hint="walcast retries the chunk",
            )
        yield TransactionCommit(0, low, low, commit_ts, ordinal)
        window = None
        if not chunk.table.chunk_key:
            held = HeldChanges(chunk.table.relation_id, message_lsn, snapshot)
            self.held.append(held)
            window = held.record()
        return Spliced(low, ordinal, window)

    def _raced(self, low_lsn: int, relation_id: int, snapshot: ReadSnapshot) -> bool:
        """A transaction of the table committed before the watermark is invisible to the read."""
        return any(
            commit_lsn < low_lsn and relation_id in touched and not snapshot.sees(xid)
            for xid, commit_lsn, touched in self._recent
        )

    def _next_result(self, read: ChunkRead) -> tuple[Any, ...]:
        """The reader's next result; a reader silent for ``read_timeout()`` s is abandoned.

        A reader waiting for its rows sends nothing, so TCP's bounds never end its wait
        behind a hung proxy: this one does (:class:`ConnectionLostError`, the session is
        retried and the chunk read again).
        """
        since = time.monotonic()
        while True:
            try:
                return read.results.get(timeout=0.5)
            except queue.Empty:
                self.keep_alive()
                if self.stop():
                    drain(read, self.keep_alive)
                    raise StopRequested from None
                limit = self.read_timeout()
                if limit is not None and time.monotonic() - since >= limit:
                    abandon(read)
                    drain(read, self.keep_alive)
                    raise ConnectionLostError(
                        f"load of {read.chunk.table.qualified_name}: the read of chunk "
                        f"{read.chunk.number} received nothing for {limit:g} s: the server or "
                        "the network hangs",
                        hint="walcast retries the chunk; source.receive_timeout sets the wait",
                    ) from None

    def _table(self, layout: TableLayout) -> Table:
        """The table as a Relation message would describe it (once per layout read)."""
        cached = self._tables.get(layout.relation_id)
        if cached is not None and _same_relation(cached[0], layout):
            return cached[1]
        types = self.conn.run(
            f"naming the types of {layout.qualified_name}",
            lambda conn: catalog.type_names(conn, [c[1] for c in layout.columns]),
        )
        for oid, namespace, name in types:
            self.relations.types.register_type(oid, namespace, name)
        relation = Relation(
            None,
            layout.relation_id,
            layout.schema,
            layout.name,
            ReplicaIdentity(layout.replica_identity),
            tuple(
                RelationColumn(1 if key else 0, name, oid, typmod)
                for name, oid, typmod, key in layout.columns
            ),
        )
        table = self.relations.apply_relation(relation)
        self._tables[layout.relation_id] = (layout, table)
        return table

    # -- unchanged TOAST ----------------------------------------------------------------------

    def _completed(self, event: ChangeEvent, load: TableLoad) -> ChangeEvent:
        """A key-changing update with unchanged TOAST values, completed from the table."""
        after = event.after
        assert after is not None
        table = event.table
        missing = [i for i, v in enumerate(after.tuple.values) if v is UNCHANGED_TOAST]
        key = table.primary_key or tuple(table.column_names[i] for i in table.key_indexes)
        names = table.column_names
        if not key:
            return event
        layout = load.layout or self.conn.run(
            f"reading the layout of {load.name}",
            lambda conn: catalog.table_layout(conn, table.relation_id, self.publications),
        )
        types = dict(zip(layout.chunk_key, layout.chunk_key_types, strict=True)) if layout else {}
        where = sql.SQL(" AND ").join(
            sql.SQL("{} = CAST({} AS {})").format(
                sql.Identifier(k), sql.Literal(after.text(names.index(k))), sql.SQL(types[k])
            )
            if k in types
            else sql.SQL("CAST({} AS text) = {}").format(
                sql.Identifier(k), sql.Literal(after.text(names.index(k)))
            )
            for k in key
        )
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join(
                sql.SQL("CAST({} AS text)").format(sql.Identifier(names[i])) for i in missing
            ),
            sql.Identifier(table.schema, table.name),
            where,
        )
        row = self.conn.run(
            f"reading unchanged TOAST values of {load.name}",
            lambda conn: conn.execute(query).fetchone(),
        )
        if row is None:
            return event
        values = list(after.tuple.values)
        kinds = bytearray(after.tuple.kinds)
        for i, value in zip(missing, row, strict=True):
            values[i] = None if value is None else str(value).encode()
            kinds[i] = ord("n") if value is None else ord("t")
        filled = Image(table, TupleData(bytes(kinds), tuple(values)))
        return ChangeEvent(
            event.op, table, event.before, filled, event.xid, event.commit_lsn,
            event.commit_ts, event.ordinal,
        )  # fmt: skip


def _same_relation(a: TableLayout, b: TableLayout) -> bool:
    """Whether a Relation message would describe both layouts alike.

    Each chunk's read brings its own layout; the Table is built again only when it changed.
    """
    return (a.schema, a.name, a.replica_identity, a.columns) == (
        b.schema, b.name, b.replica_identity, b.columns,
    )  # fmt: skip


def _kinds(values: tuple[bytes | None, ...]) -> bytes:
    return bytes(110 if v is None else 116 for v in values)

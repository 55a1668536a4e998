"""The loading source: a replication source that also loads tables, chunk by chunk.

:class:`LoadingSource` wraps a :class:`~capture.source.ReplicationSource`. It passes the
stream through and, for each chunk a reader read (see :mod:`capture.snapshot.reader`),
inserts the chunk's rows into the stream **at the chunk's low watermark**: when the stream
yields the watermark message, the source stops reading the stream (status updates keep
the connection alive), yields ``TransactionBegin(xid 0, at the watermark)``, one
``Op.SNAPSHOT`` change per row as the reader streams them, ``TransactionCommit``, and goes on
with the stream. The pump treats the chunk like any transaction: same encoders, topics,
delivery tracking; the slot is acknowledged past the watermark only once the chunk is in
Kafka.

Why this gives every row exactly once, with no gap (the reasoning of DBLog and Flink CDC's
incremental snapshots, with the read aligned to the stream instead of de-duplicated after):

* The chunk's rows are positioned at the watermark (its message's LSN minus one, so that
  ``(commit LSN, ordinal)`` sorts them after every transaction committed before the
  watermark and before every one committed after it, and is unique).
* Every transaction committed before the watermark was streamed before the chunk and is
  visible to the read (the read's snapshot is taken after the watermark was written), so
  the chunk's rows are the state after them: emitting the rows after them is right.
* Every transaction committed after the watermark is streamed after the chunk: applied on
  top of the chunk's rows. If the read's snapshot already saw it (it committed in the
  microseconds between the watermark and the snapshot; its commit is before the snapshot's
  WAL horizon), applying it again gives the same row for a keyed table (an upsert of the
  same values, a delete of a row already gone); for a table without a key, where applying
  it again would duplicate a row, its changes of that table are dropped from the stream;
  the table's ``done`` progress record keeps that window, so a restarted daemon drops
  them again when the slot replays them.
* One race remains: a transaction whose commit record precedes the watermark but which had
  not yet become visible when the snapshot was taken. It is detected (its xid is invisible
  to the snapshot, and the source remembers the xids and tables of the recent
  transactions) and the chunk is read again.
* Chunks are key ranges, so every row is in exactly one chunk; a row whose key moves across
  ranges during the load arrives through the stream's update.
* The stream may update, before its chunk is loaded, a row whose unchanged TOASTed value
  was not sent; that row's chunk, read later, carries the whole row. Only a key change into
  an already-loaded range can leave a consumer without the value: such an update is
  completed from the table (the current value of the column, which later changes of the
  row, streamed after, supersede).

Why not the slot's exported snapshot (``CREATE_REPLICATION_SLOT … SNAPSHOT 'export'``): it
must be read in one transaction held open for the whole load (hours of WAL and vacuum held
back), cannot be resumed after a crash, and cannot serve a re-load while streaming.
Watermarked chunks give parallel reads, bounded transactions, resumption from the last
confirmed chunk (:mod:`capture.snapshot.progress`) and on-demand loads
(``walcast snapshot``, a ``walcast.snapshot.request`` logical message) with one mechanism.

A table whose changes carry no key (no primary key, nor a USING INDEX identity) is one
chunk, read in one transaction while the stream waits at its watermark: its consumers keep
it as a multiset and start it over at a load row with ordinal 1, which is therefore the
whole table (a unique NOT NULL index the changes do not name is not used to split it).
"""

from __future__ import annotations

import functools
import queue
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import orjson
import psycopg
import structlog
from psycopg import sql

from capture import dsn as dsn_util
from capture.errors import ConfigError, ConnectionLostError, WalcastError
from capture.events import (
    PG_EPOCH_US,
    ChangeEvent,
    Image,
    LogicalMessageEvent,
    Op,
    StreamItem,
    Table,
    TransactionBegin,
    TransactionCommit,
)
from capture.lsn import format_lsn
from capture.pgoutput.messages import (
    UNCHANGED_TOAST,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    TupleData,
)
from capture.position import Checkpoint
from capture.pump import SourceWrapper
from capture.relcache import RelationCache
from capture.replication import catalog
from capture.replication.catalog import TableLayout
from capture.sinks import StopRequested
from capture.snapshot.chunks import Bound, Chunk, next_upper
from capture.snapshot.progress import KeylessWindow, ProgressStore, TableProgress
from capture.snapshot.reader import WATERMARK_PREFIX, ChunkRead, ReaderPool, ReadSnapshot, drain
from capture.source import ReplicationSource
from capture.split import key_changed

log = structlog.get_logger("walcast.snapshot")

T = TypeVar("T")

REQUEST_PREFIX: Final = "walcast.snapshot.request"
"""Prefix of the logical message ``walcast snapshot`` writes to ask for a load."""
INITIAL_REQUEST: Final = "initial"
ALL_TABLES: Final = "*"
"""The table name of a record that stands for every table of the publications."""
RECENT_TRANSACTIONS: Final = 4096
"""Committed transactions remembered for the watermark race check."""
MODES: Final = ("initial", "never", "initial-only")


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How to load: ``mode`` (initial, never, initial-only), parallel readers, chunk size."""

    mode: str = "never"
    workers: int = 2
    chunk_rows: int = 50_000

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"--snapshot: {self.mode!r} is not one of {', '.join(MODES)}")
        if self.workers < 1:
            raise ConfigError(f"--snapshot-workers: {self.workers} must be at least 1")
        if self.chunk_rows < 1:
            raise ConfigError(f"--snapshot-chunk-rows: {self.chunk_rows} must be at least 1")


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """One observation of a table's load, for logs, progress lines and metrics."""

    table: str
    rows: int
    estimated_rows: int
    rows_per_second: float
    done: bool
    chunks: int


@dataclass(slots=True)
class _TableLoad:
    relation_id: int
    name: str
    request: str
    layout: TableLayout | None = None
    table: Table | None = None
    next_lower: Bound | None = None
    planned_all: bool = False
    next_number: int = 1
    in_flight: int = 0
    delivered_numbers: set[int] = field(default_factory=set)
    bounds: dict[int, Bound | None] = field(default_factory=dict)
    """Upper bound of each emitted chunk not yet counted as delivered."""
    rows_by_chunk: dict[int, int] = field(default_factory=dict)
    progress: TableProgress | None = None
    started: float = field(default_factory=time.monotonic)
    emitted_rows: int = 0
    dropped: bool = False
    keyless_window: KeylessWindow | None = None

    @property
    def finished(self) -> bool:
        return self.planned_all and self.in_flight == 0 and not self.bounds


@dataclass(slots=True)
class _KeylessWindow:
    relation_id: int
    low_lsn: int
    snapshot: ReadSnapshot


class LoadingSource(SourceWrapper[ReplicationSource]):
    """A replication source whose stream also carries loaded tables (see module docstring)."""

    def __init__(
        self,
        inner: ReplicationSource,
        *,
        dsn: str,
        slot: str,
        publications: Sequence[str],
        settings: LoadSettings,
        progress: ProgressStore,
        delivered_lsn: Callable[[], int],
        count_rows: bool = False,
        observer: Callable[[LoadProgress], None] | None = None,
        records: list[TableProgress] | None = None,
    ) -> None:
        """Wrap ``inner``; resume the loads that ``progress`` (or ``records``) knows.

        ``records`` are the progress store's records, read before the stream started: the
        store is then not read again, so a store that stopped answering cannot keep the new
        stream from answering its server. None: read them now.
        """
        super().__init__(inner)
        self.settings = settings
        self.slot = slot
        self.publications = list(publications)
        self.stop: Callable[[], bool] = lambda: False
        self._dsn = dsn
        self._progress = progress
        self._delivered_lsn = delivered_lsn
        self._observer = observer
        self._run = uuid.uuid4().hex[:12]
        self._sequence = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._relations = RelationCache(
            types=inner.relations.types, key_resolver=inner.relations.key_resolver
        )
        self._loads: dict[int, _TableLoad] = {}
        self._order: deque[int] = deque()
        self._in_flight: dict[str, tuple[ChunkRead, _TableLoad]] = {}
        self._emitted: deque[tuple[int, _TableLoad, int]] = deque()
        self._recent: deque[tuple[int, int, frozenset[int]]] = deque(maxlen=RECENT_TRANSACTIONS)
        self._keyless: list[_KeylessWindow] = []
        self._xid = 0
        self._commit_lsn = 0
        self._touched: set[int] = set()
        self._last_report = 0.0
        self.requested = False
        """A load was ever scheduled in this run (``initial-only`` ends when it is done)."""
        self._pool: ReaderPool | None = None
        self._count_rows = count_rows
        self._resume(records)

    # -- the Source interface ------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """With ``initial-only``: the load is done and Kafka confirmed all of it."""
        return (
            self.settings.mode == "initial-only"
            and not self._loads
            and not self._emitted
            and not self._in_flight
        )

    def close_readers(self) -> None:
        """Stop the readers and close the load's connection (the stream stays open)."""
        if self._pool is not None:
            for read, _ in self._in_flight.values():
                read.cancelled.set()
            self._pool.close()
            self._pool = None
        if self._conn is not None:
            self._conn.close()

    def close(self) -> None:
        """Stop the readers and close the stream."""
        self.close_readers()
        super().close()

    def after_acknowledge(self) -> None:
        """Record the chunks the last acknowledgement covered (at shutdown)."""
        self._count_delivered()

    @property
    def loading(self) -> bool:
        """Tables are being loaded or wait for it."""
        return bool(self._loads) or bool(self._emitted)

    def poll(self, timeout: float) -> Iterator[StreamItem | Checkpoint]:
        """The stream's items, with loaded chunks inserted at their watermarks."""
        self._count_delivered()
        self._dispatch()
        for received in self.inner.poll(timeout):
            item = received
            kind = type(item)
            if kind is LogicalMessageEvent:
                assert isinstance(item, LogicalMessageEvent)
                if item.prefix == WATERMARK_PREFIX:
                    yield from self._chunk_at(item)
                    continue
                if item.prefix == REQUEST_PREFIX:
                    self._request(item)
                    continue
            elif self._recent_needed:
                if kind is TransactionBegin:
                    assert isinstance(item, TransactionBegin)
                    self._xid, self._commit_lsn = item.xid, item.commit_lsn
                    self._touched = set()
                elif kind is ChangeEvent:
                    assert isinstance(item, ChangeEvent)
                    relation_id = item.table.relation_id
                    self._touched.add(relation_id)
                    if self._keyless and self._suppressed(relation_id):
                        continue
                    if (
                        item.op is Op.UPDATE
                        and relation_id in self._loads
                        and item.after is not None
                        and UNCHANGED_TOAST in item.after.tuple.values
                        and key_changed(item)
                    ):
                        item = self._completed(item)
                elif kind is TransactionCommit:
                    assert isinstance(item, TransactionCommit)
                    self._recent.append((item.xid, item.commit_lsn, frozenset(self._touched)))
                    self._keyless = [
                        w for w in self._keyless if item.commit_lsn < w.snapshot.horizon_lsn
                    ]
            yield item
        self._count_delivered()

    @property
    def _recent_needed(self) -> bool:
        return bool(self._loads) or bool(self._keyless) or bool(self._in_flight)

    # -- scheduling ---------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(
                    dsn_util.with_session_options(self._dsn), autocommit=True, connect_timeout=10
                )
            except psycopg.OperationalError as exc:
                text = dsn_util.scrub(str(exc), self._dsn).strip().splitlines()
                raise ConnectionLostError(
                    f"load: cannot connect to PostgreSQL ({dsn_util.describe(self._dsn)}): "
                    f"{text[-1] if text else 'connection failed'}",
                    hint="walcast retries",
                ) from None
        return self._conn

    def _catalog(self, what: str, query: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``query`` on the load's connection; failures become one-line walcast errors.

        A table dropped meanwhile raises :class:`_TableGone`.
        """
        try:
            return query(self._connection())
        except psycopg.errors.UndefinedTable as exc:
            raise _TableGone(f"the table was dropped ({_describe(exc, self._dsn)})") from None
        except psycopg.OperationalError as exc:
            if self._conn is not None:
                self._conn.close()
            raise ConnectionLostError(
                f"load: {what} failed: {_describe(exc, self._dsn)}", hint="walcast retries"
            ) from None
        except psycopg.Error as exc:
            raise WalcastError(f"load: {what} failed: {_describe(exc, self._dsn)}") from None

    def _resume(self, records: list[TableProgress] | None) -> None:
        """Pick up every unfinished load the progress store knows (initial, requested)."""
        if records is None:
            records = self._progress.load()
        for record in records:
            if record.table == ALL_TABLES and record.state == "pending":
                self._expand(record)
            window = record.keyless_window
            if record.state == "done" and window is not None:
                # The slot may replay what this table's chunk holds: drop it again.
                snapshot = ReadSnapshot.parse(window.snapshot, format_lsn(window.horizon_lsn))
                self._keyless.append(_KeylessWindow(record.relation_id, window.low_lsn, snapshot))
        for record in records:
            if (
                record.state not in ("pending", "loading")
                or record.table == ALL_TABLES
                or record.relation_id in self._loads
            ):
                continue
            load = _TableLoad(record.relation_id, record.table, record.request)
            load.progress = record
            load.next_lower = tuple(record.after) if record.after is not None else None
            load.next_number = record.chunks + 1
            self._schedule(load)
            log.info(
                "snapshot_resumed" if record.chunks else "snapshot_scheduled",
                table=record.table,
                request=record.request,
                chunks_done=record.chunks,
                rows_done=record.rows,
            )

    def _expand(self, record: TableProgress) -> None:
        """Turn a pending load of every published table into one pending load per table."""
        tables = self._catalog(
            "listing the published tables",
            lambda conn: catalog.publication_tables(conn, self.publications),
        )
        for table in tables:
            self._add(table.relation_id, table.qualified_name, record.request)
        record.state = "done"
        self._progress.save(record)
        log.info(
            "snapshot_requested",
            request=record.request,
            tables=[t.qualified_name for t in tables],
            workers=self.settings.workers,
            chunk_rows=self.settings.chunk_rows,
        )

    def _add(self, relation_id: int, name: str, request: str) -> None:
        existing = self._loads.get(relation_id)
        if existing is not None:
            log.info("snapshot_already_loading", table=name, request=existing.request)
            return
        load = _TableLoad(relation_id, name, request)
        load.progress = TableProgress(name, relation_id, request, "pending")
        self._progress.save(load.progress)
        self._schedule(load)

    def _schedule(self, load: _TableLoad) -> None:
        self._loads[load.relation_id] = load
        self._order.append(load.relation_id)
        self.requested = True

    def _request(self, message: LogicalMessageEvent) -> None:
        """A ``walcast snapshot`` request seen in the stream."""
        try:
            request = orjson.loads(message.content)
            wanted = [str(t) for t in request["tables"]]
            request_id = str(request["id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning("snapshot_request_ignored", lsn=format_lsn(message.lsn), reason="malformed")
            return
        if request.get("slot") not in (None, self.slot):
            return
        published = {
            t.qualified_name: t
            for t in self._catalog(
                "listing the published tables",
                lambda conn: catalog.publication_tables(conn, self.publications),
            )
        }
        for name in wanted:
            table = published.get(name)
            if table is None:
                log.warning(
                    "snapshot_request_ignored",
                    table=name,
                    request=request_id,
                    reason=f"not in publication(s) {', '.join(self.publications)}",
                )
                continue
            self._add(table.relation_id, name, request_id)
        log.info("snapshot_requested", request=request_id, tables=wanted)

    def _dispatch(self) -> None:
        """Hand chunks to readers until every reader has one."""
        if not self._loads:
            return
        if self._pool is None:
            self._pool = ReaderPool(self._dsn, self.settings.workers, count_rows=self._count_rows)
        while len(self._in_flight) < self.settings.workers:
            planned = self._plan()
            if planned is None:
                return
            chunk, load = planned
            self._sequence += 1
            marker = f"{self._run}:{self._sequence}"
            self._in_flight[marker] = (self._pool.submit(chunk, marker), load)
            load.in_flight += 1

    def _plan(self) -> tuple[Chunk, _TableLoad] | None:
        """The next chunk to read, in table order then key order."""
        for relation_id in list(self._order):
            load = self._loads.get(relation_id)
            if load is None or load.planned_all:
                continue
            try:
                layout = load.layout or self._start_table(load)
                upper = self._planned_upper(load, layout) if layout.chunk_key else None
            except _TableGone as gone:
                self._dropped(load, str(gone))
                continue
            chunk = Chunk(layout, load.next_number, load.next_lower, upper, load.request)
            load.next_number += 1
            load.next_lower = upper
            load.planned_all = upper is None
            return chunk, load
        return None

    def _start_table(self, load: _TableLoad) -> TableLayout:
        """Read the table's layout when its first chunk is planned."""
        layout = self._catalog(
            f"reading the layout of {load.name}",
            functools.partial(
                catalog.table_layout,
                relation_id=load.relation_id,
                publications=self.publications,
            ),
        )
        if layout is None:
            raise _TableGone("the table no longer exists")
        load.layout = layout
        load.table = self._table(layout)
        if load.progress is not None and load.progress.state == "pending":
            load.progress.state = "loading"
            self._progress.save(load.progress)
        return layout

    def _planned_upper(self, load: _TableLoad, layout: TableLayout) -> Bound | None:
        return self._catalog(
            f"planning the next chunk of {load.name}",
            functools.partial(
                next_upper,
                table=layout,
                lower=load.next_lower,
                chunk_rows=self.settings.chunk_rows,
            ),
        )

    def _table(self, layout: TableLayout) -> Table:
        """The table as a Relation message would describe it."""
        types = self._catalog(
            f"naming the types of {layout.qualified_name}",
            lambda conn: catalog.type_names(conn, [c[1] for c in layout.columns]),
        )
        for oid, namespace, name in types:
            self._relations.types.register_type(oid, namespace, name)
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
        return self._relations.apply_relation(relation)

    def _dropped(self, load: _TableLoad, reason: str) -> None:
        if load.dropped:
            return
        load.dropped = True
        log.warning("snapshot_table_dropped", table=load.name, request=load.request, reason=reason)
        self._loads.pop(load.relation_id, None)
        if load.relation_id in self._order:
            self._order.remove(load.relation_id)
        if load.progress is not None:
            load.progress.state = "dropped"
            self._progress.save(load.progress)

    # -- a chunk at its watermark ---------------------------------------------------------------

    def _next_result(self, read: ChunkRead) -> tuple[Any, ...]:
        while True:
            try:
                return read.results.get(timeout=0.5)
            except queue.Empty:
                self.inner.keep_alive()
                if self.stop():
                    drain(read, self.inner.keep_alive)
                    raise StopRequested from None

    def _chunk_at(self, message: LogicalMessageEvent) -> Iterator[StreamItem]:
        try:
            marker = str(orjson.loads(message.content)["marker"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return
        entry = self._in_flight.pop(marker, None)
        if entry is None:  # another daemon's watermark, or one from before a restart
            return
        read, load = entry
        chunk = read.chunk
        load.in_flight -= 1
        if load.dropped:
            drain(read, self.inner.keep_alive)
            return
        first = self._next_result(read)
        if first[0] == "error":
            self._read_failed(load, chunk, first[1])
            return
        _, snapshot, count = first
        if self._raced(message.lsn - 1, load.relation_id, snapshot):
            drain(read, self.inner.keep_alive)
            log.info("snapshot_chunk_reread", table=load.name, chunk=chunk.number)
            self._requeue(load, chunk)
            return
        table = load.table
        assert table is not None
        # The message's LSN is the END of its WAL record, which is where the commit record
        # of the next transaction may start: one less sorts after every commit before the
        # watermark and before every commit after it, and equals none of them.
        low = message.lsn - 1
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
                            f"load of {load.name}: a COPY row has {len(values)} values for "
                            f"{width} columns",
                            hint="the table changed while it was read; restart to read it again",
                        )
                    kinds = all_text if None not in values else _kinds(values)
                    yield ChangeEvent(
                        Op.SNAPSHOT, table, None, Image(table, TupleData(kinds, values)),
                        0, low, commit_ts, ordinal,
                    )  # fmt: skip
            elif result[0] == "end":
                break
            else:
                raise ConnectionLostError(
                    f"load of {load.name} failed while reading chunk {chunk.number}: "
                    f"{_describe(result[1], self._dsn)}",
                    hint="walcast retries the chunk",
                )
        yield TransactionCommit(0, low, low, commit_ts, ordinal)
        self._emitted.append((low, load, chunk.number))
        load.bounds[chunk.number] = chunk.upper
        load.rows_by_chunk[chunk.number] = ordinal
        load.emitted_rows += ordinal
        if not chunk.table.chunk_key:
            self._keyless.append(_KeylessWindow(load.relation_id, message.lsn, snapshot))
            load.keyless_window = KeylessWindow(message.lsn, snapshot.horizon_lsn, snapshot.text())
        log.info(
            "snapshot_chunk",
            table=load.name,
            chunk=chunk.number,
            rows=ordinal,
            at=format_lsn(low),
            last=chunk.last,
        )
        self._report(load, force=False)

    def _raced(self, low_lsn: int, relation_id: int, snapshot: ReadSnapshot) -> bool:
        """A transaction of the table committed before the watermark is invisible to the read."""
        return any(
            commit_lsn < low_lsn and relation_id in touched and not snapshot.sees(xid)
            for xid, commit_lsn, touched in self._recent
        )

    def _requeue(self, load: _TableLoad, chunk: Chunk) -> None:
        assert self._pool is not None
        self._sequence += 1
        marker = f"{self._run}:{self._sequence}"
        self._in_flight[marker] = (self._pool.submit(chunk, marker), load)
        load.in_flight += 1

    def _read_failed(self, load: _TableLoad, chunk: Chunk, exc: BaseException) -> None:
        if isinstance(exc, psycopg.errors.UndefinedTable) or (
            "could not open relation with OID" in str(exc)
        ):
            self._dropped(load, "the table was dropped during the load")
            return
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            raise WalcastError(
                f"load of {load.name}: {_describe(exc, self._dsn)}",
                hint=f"GRANT SELECT ON {load.name} TO the walcast role, or leave the table out "
                "of the publication",
            )
        if isinstance(exc, psycopg.OperationalError):
            raise ConnectionLostError(
                f"load of {load.name} failed at chunk {chunk.number}: {_describe(exc, self._dsn)}",
                hint="walcast retries",
            )
        raise WalcastError(
            f"load of {load.name} failed at chunk {chunk.number}: {_describe(exc, self._dsn)}"
        )

    def _suppressed(self, relation_id: int) -> bool:
        """A change of a keyless table that its loaded chunk already holds."""
        for window in self._keyless:
            if (
                window.relation_id == relation_id
                and window.low_lsn <= self._commit_lsn < window.snapshot.horizon_lsn
                and window.snapshot.sees(self._xid)
            ):
                return True
        return False

    def _completed(self, event: ChangeEvent) -> ChangeEvent:
        """A key-changing update with unchanged TOAST values, completed from the table."""
        after = event.after
        assert after is not None
        table = event.table
        missing = [i for i, v in enumerate(after.tuple.values) if v is UNCHANGED_TOAST]
        key = table.primary_key or tuple(table.column_names[i] for i in table.key_indexes)
        names = table.column_names
        if not key:
            return event
        load = self._loads[table.relation_id]
        layout = load.layout or self._catalog(
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
        row = self._catalog(
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

    # -- progress -------------------------------------------------------------------------------

    def _count_delivered(self) -> None:
        """Record the chunks Kafka confirmed (all of them, and everything before)."""
        if not self._emitted:
            return
        delivered = self._delivered_lsn()
        while self._emitted and self._emitted[0][0] <= delivered:
            _, load, number = self._emitted.popleft()
            if load.dropped:
                continue
            load.delivered_numbers.add(number)
            progress = load.progress
            assert progress is not None
            while progress.chunks + 1 in load.delivered_numbers:
                progress.chunks += 1
                load.delivered_numbers.discard(progress.chunks)
                upper = load.bounds.pop(progress.chunks, None)
                progress.after = list(upper) if upper is not None else None
                progress.rows += load.rows_by_chunk.pop(progress.chunks, 0)
            progress.state = "loading"
            if load.finished and not load.delivered_numbers:
                progress.state = "done"
                progress.after = None
                progress.keyless_window = load.keyless_window
                self._loads.pop(load.relation_id, None)
                if load.relation_id in self._order:
                    self._order.remove(load.relation_id)
                self._report(load, force=True)
                log.info(
                    "snapshot_table_done",
                    table=load.name,
                    rows=progress.rows,
                    chunks=progress.chunks,
                    seconds=round(time.monotonic() - load.started, 1),
                )
            self._progress.save(progress)

    def _report(self, load: _TableLoad, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < 1.0:
            return
        self._last_report = now
        if self._observer is None:
            return
        elapsed = max(now - load.started, 1e-6)
        estimate = load.layout.estimated_rows if load.layout is not None else 0
        self._observer(
            LoadProgress(
                load.name,
                load.emitted_rows,
                max(estimate, load.emitted_rows),
                load.emitted_rows / elapsed,
                force,
                load.next_number - 1,
            )
        )


def _kinds(values: tuple[bytes | None, ...]) -> bytes:
    return bytes(110 if v is None else 116 for v in values)


def _describe(exc: BaseException, dsn: str) -> str:
    lines = dsn_util.scrub(str(exc), dsn).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class _TableGone(Exception):  # noqa: N818 - an outcome, handled where it is raised
    """The table being loaded was dropped (``relation … does not exist``)."""

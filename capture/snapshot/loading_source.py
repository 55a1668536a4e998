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

It is the composition of three parts, each of which knows only its own concern (as Flink
CDC separates its split assigner from reading and merging):

* :mod:`capture.snapshot.assigner`, **which chunk next**: the tables' loads, ``walcast
  snapshot`` requests, resumption from the progress records, and the records of the chunks
  Kafka confirmed; it knows nothing of the stream;
* :mod:`capture.snapshot.reader`, **the read**: one chunk at a time per reader thread (its
  watermark, its snapshot, its ``COPY``), with :class:`~capture.snapshot.reader.LoadHooks`
  at the points of a chunk's window where a concurrent transaction lands differently;
* :mod:`capture.snapshot.splice`, **the splice**: the chunk inserted at its watermark, the
  race check and the re-read, keyless tables' windows, and the completion of key-changing
  updates with unchanged TOAST values.

The source polls the stream, hands the assigner's chunks to readers, and gives the splice
each watermark of its own and each transaction while a load runs.

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
  to the snapshot, and the splice remembers the xids and tables of the recent
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
confirmed chunk (:mod:`capture.state.progress`) and on-demand loads
(``walcast snapshot``, a ``walcast.snapshot.request`` logical message) with one mechanism.

A table whose changes carry no key (no primary key, nor a USING INDEX identity) is one
chunk, read in one transaction while the stream waits at its watermark: its consumers keep
it as a multiset and start it over at a load row with ordinal 1, which is therefore the
whole table (a unique NOT NULL index the changes do not name is not used to split it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import orjson
import structlog

from capture.errors import ConnectionLostError
from capture.events import LogicalMessageEvent, StreamItem
from capture.interfaces import SourceWrapper
from capture.load_mode import SnapshotMode
from capture.position import Checkpoint
from capture.relcache import RelationCache
from capture.snapshot.assigner import (
    ALL_TABLES,
    INITIAL_REQUEST,
    REQUEST_PREFIX,
    ChunkAssigner,
    LoadProgress,
    LoadSettings,
    TableLoad,
)
from capture.snapshot.chunks import Chunk
from capture.snapshot.connection import LoadConnection
from capture.snapshot.reader import (
    NO_HOOKS,
    WATERMARK_PREFIX,
    ChunkRead,
    LoadHooks,
    ReaderPool,
    abandon,
    drain,
)
from capture.snapshot.splice import RECENT_TRANSACTIONS, Raced, ReadFailed, Splice
from capture.source import ReplicationSource
from capture.state.progress import ProgressStore, TableProgress

__all__ = [
    "ALL_TABLES",
    "INITIAL_REQUEST",
    "RECENT_TRANSACTIONS",
    "REQUEST_PREFIX",
    "LoadProgress",
    "LoadSettings",
    "LoadingSource",
]

log = structlog.get_logger("walcast.snapshot")


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
        hooks: LoadHooks = NO_HOOKS,
    ) -> None:
        """Wrap ``inner``; resume the loads that ``progress`` (or ``records``) knows.

        ``records`` are the progress store's records, read before the stream started: the
        store is then not read again, so a store that stopped answering cannot keep the new
        stream from answering its server. None: read them now. ``hooks``: called by the
        readers (tests place concurrent transactions with them).
        """
        super().__init__(inner)
        self.settings = settings
        self.slot = slot
        self.publications = list(publications)
        self.stop: Callable[[], bool] = lambda: False
        self._dsn = dsn
        self._run = uuid.uuid4().hex[:12]
        self._sequence = 0
        self._count_rows = count_rows
        self._hooks = hooks
        self._pool: ReaderPool | None = None
        self._in_flight: dict[str, tuple[ChunkRead, TableLoad]] = {}
        """Chunks handed to readers, by their watermark's marker."""
        self._conn = LoadConnection(dsn)
        self._assigner = ChunkAssigner(
            self._conn,
            slot=slot,
            publications=self.publications,
            settings=settings,
            progress=progress,
            delivered_lsn=delivered_lsn,
            observer=observer,
            records=records,
        )
        self._splice = Splice(
            self._conn,
            RelationCache(
                types=inner.relations.types,
                key_resolver=inner.relations.key_resolver,
                column_resolver=inner.relations.column_resolver,
            ),
            publications=self.publications,
            loading=self._assigner.load_of,
            # late-bound: runner and tail set ``stop`` after construction
            keep_alive=lambda: self.inner.keep_alive(),  # noqa: PLW0108
            stop=lambda: self.stop(),  # noqa: PLW0108
            read_timeout=lambda: self.inner.stream.receive_timeout,
        )
        for relation_id, window in self._assigner.windows:
            self._splice.hold(relation_id, window)

    # -- the Source interface ------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """With ``initial-only``: the load is done and Kafka confirmed all of it."""
        return (
            self.settings.mode is SnapshotMode.INITIAL_ONLY
            and self._assigner.done
            and not self._in_flight
        )

    @property
    def loading(self) -> bool:
        """Tables are being loaded or wait for it."""
        return self._assigner.loading

    def close_readers(self) -> None:
        """Stop the readers and close the load's connection (the stream stays open)."""
        if self._pool is not None:
            for read, _ in self._in_flight.values():
                read.cancelled.set()
            self._pool.close()
            self._pool = None
        self._conn.close()

    def close(self) -> None:
        """Stop the readers and close the stream."""
        self.close_readers()
        super().close()

    def after_acknowledge(self) -> None:
        """Record the chunks the last acknowledgement covered (at shutdown)."""
        self._assigner.count_delivered()

    def poll(self, timeout: float) -> Iterator[StreamItem | Checkpoint]:
        """The stream's items, with loaded chunks inserted at their watermarks."""
        assigner, splice = self._assigner, self._splice
        assigner.count_delivered()
        self._failed_early()
        self._dispatch()
        for received in self.inner.poll(timeout):
            item: StreamItem | Checkpoint | None = received
            kind = type(item)
            if kind is LogicalMessageEvent:
                assert isinstance(item, LogicalMessageEvent)
                if item.prefix == WATERMARK_PREFIX:
                    yield from self._chunk_at(item)
                    continue
                if item.prefix == REQUEST_PREFIX:
                    assigner.request(item.content, item.lsn)
                    continue
            elif assigner.busy or splice.held or self._in_flight:
                item = splice.observe(received, kind)
                if item is None:  # a keyless table's change its loaded chunk holds
                    continue
            assert item is not None
            yield item
        assigner.count_delivered()

    # -- chunks to readers, and back at their watermarks -------------------------------------

    def _dispatch(self) -> None:
        """Hand chunks to readers until every reader has one."""
        if not self._assigner.busy:
            return
        if self._pool is None:
            self._pool = ReaderPool(
                self._dsn,
                self.settings.workers,
                publications=self.publications,
                count_rows=self._count_rows,
                hooks=self._hooks,
            )
        while len(self._in_flight) < self.settings.workers:
            planned = self._assigner.next_chunk()
            if planned is None:
                return
            self._submit(*planned)

    def _failed_early(self) -> None:
        """Reads that failed, or hang, before their watermark: no watermark will tell.

        A read that failed is handed to the assigner (its error). A read that started more
        than the stream's receive timeout ago and has still not written its watermark (the
        emit's answer never came: a frozen network or a hung server, which TCP's bounds do
        not end while libpq waits for a reply) is abandoned, and the session ends as lost
        (one line, retried; the chunk is read again), as a silent reader after its
        watermark does (:meth:`capture.snapshot.splice.Splice._next_result`).
        """
        for marker, (read, load) in list(self._in_flight.items()):
            if read.failed_early is not None:
                del self._in_flight[marker]
                drain(read, self.inner.keep_alive)
                self._assigner.read_failed(load, read.chunk, read.failed_early)
                continue
            if not read.started or read.watermarked:
                continue
            limit = self._splice.read_timeout()  # the stream's receive timeout (late-bound)
            if limit is not None and time.monotonic() - read.started >= limit:
                del self._in_flight[marker]
                abandon(read)
                drain(read, self.inner.keep_alive)
                raise ConnectionLostError(
                    f"load of {load.name}: the watermark of chunk {read.chunk.number} was not "
                    f"written within {limit:g} s: the server or the network hangs",
                    hint="walcast retries the chunk; source.receive_timeout sets the wait",
                )

    def _submit(self, chunk: Chunk, load: TableLoad) -> None:
        assert self._pool is not None
        self._sequence += 1
        marker = f"{self._run}:{self._sequence}"
        self._in_flight[marker] = (self._pool.submit(chunk, marker), load)

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
        if load.dropped:
            self._assigner.discarded(load)
            drain(read, self.inner.keep_alive)
            return
        outcome = yield from self._splice.insert(read, message.lsn, load.name)
        if isinstance(outcome, Raced):
            log.info(
                "snapshot_chunk_reread", table=load.name, chunk=chunk.number, reason=outcome.reason
            )
            self._submit(chunk, load)
        elif isinstance(outcome, ReadFailed):
            self._assigner.read_failed(load, chunk, outcome.error)
        else:
            self._assigner.spliced(load, chunk, outcome.low_lsn, outcome.rows, outcome.window)

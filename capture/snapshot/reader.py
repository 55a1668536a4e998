"""Reader threads: each reads one chunk at a time, in its own transaction, with ``COPY``.

For a chunk, a reader:

1. writes the chunk's **low watermark**, a non-transactional logical message
   (``pg_logical_emit_message(false, 'walcast.snapshot.watermark', …)``) that the replication
   stream delivers at its WAL position;
2. opens a ``REPEATABLE READ READ ONLY`` transaction and, as its first statement, takes the
   snapshot's ``pg_current_snapshot()`` (which transactions it sees) and
   ``pg_current_wal_insert_lsn()`` (a WAL position every visible transaction committed
   before);
3. takes the table's ``ACCESS SHARE`` lock (:func:`~capture.snapshot.chunks.lock_query`),
   waiting :data:`READ_LOCK_TIMEOUT` at most (else the chunk is read again: below), and
   checks that no DDL of the table committed after the snapshot (below);
4. reads the table's **layout in that snapshot** (its columns as the rows it sees have
   them: :func:`capture.replication.catalog.table_layout`, whose catalog queries see what
   the snapshot sees), and reads those columns;
5. optionally counts the chunk's rows in that snapshot (for formats that state a
   transaction's size up front);
6. streams ``COPY (SELECT …) TO STDOUT`` and hands the rows on in batches through a bounded
   queue, so a reader never holds more than :data:`QUEUE_BATCHES` batches;
7. commits.

**DDL during a load.** A table's layout is read for each chunk, not once per load: an
``ALTER TABLE … ADD COLUMN`` committed before a chunk's snapshot is in that chunk's rows
(with the values later updates gave it, which the stream carried before the chunk). The
snapshot is taken before the lock (it must follow the watermark, and a ``REPEATABLE READ``
snapshot is the first statement's), so DDL may commit between the two: then the ``COPY``
would parse against a catalog the snapshot does not see (a dropped or renamed column named,
an added one read under another's name), and a table rewritten by ``ALTER … TYPE`` looks
empty to an older snapshot (PostgreSQL: such rewrites are not MVCC-safe). Once the lock is
held, no DDL of the table can commit until the read ends, and a row of ``pg_class`` or
``pg_attribute`` for the table whose visible version was replaced by a transaction the
snapshot does not see (its ``xmax``) says DDL came in between: the reader stops before
reading (``("changed", reason)``) and the splice reads the chunk again
(:class:`~capture.snapshot.splice.Raced`), in a snapshot that sees the change. An aborted
DDL's ``xmax`` stays on the rows; it is older than a later snapshot's ``xmin``, so it
makes a chunk read again at most while it is recent. A chunk key that changed (its column
renamed or dropped, a new primary key) stops the load of the table with one line: its
chunks' bounds no longer name the rows.

**Locks.** A read holds the table's lock until the coordinator has taken its rows, at its
watermark. DDL waiting for that lock makes every later lock of the table wait behind it,
so nothing that the coordinator waits for may wait for the lock: a read of an earlier
watermark gives its chunk up after :data:`READ_LOCK_TIMEOUT` (:func:`_locked`), and the
coordinator's planning of a chunk after a moment
(:func:`~capture.snapshot.chunks.upper_unless_locked`).

The transaction lives as long as one chunk's read (and, when the stream lags behind, until
the stream reaches the low watermark and drains the queue): it never spans the load.
Connections use walcast's session options, so values are the exact text the replication
stream carries (UTC, ISO dates, hex bytea, shortest-exact floats).

**Hooks.** A :class:`LoadHooks` object is called, in the reader thread, at the points of a
chunk's read that decide where a concurrent transaction lands relative to the chunk:
before the watermark (the transaction is streamed before the chunk and the read sees it),
between the watermark and the read's snapshot (streamed after the chunk, and seen by the
read), after the snapshot (streamed after the chunk, not seen). The default does nothing;
tests commit a transaction from another connection at each point, and
:meth:`LoadHooks.after_snapshot` may replace the snapshot the splice checks the chunk
against (e.g. report a transaction as in progress: a stand-in for one whose commit record
precedes the watermark but which the snapshot did not see, the race that makes the splice
read the chunk again).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final

import orjson
import psycopg
from psycopg import sql

from capture.errors import WalcastError
from capture.lsn import parse_lsn
from capture.replication import catalog
from capture.replication.catalog import TableLayout
from capture.replication.connect import connect
from capture.replication.session import Purpose
from capture.snapshot.chunks import Chunk, copy_query, count_query, lock_query
from capture.snapshot.copytext import row_values, split_rows

WATERMARK_PREFIX: Final = "walcast.snapshot.watermark"
"""Prefix of the low-watermark logical messages readers write."""
BATCH_ROWS: Final = 2000
QUEUE_BATCHES: Final = 8
Row = tuple[bytes | None, ...]


@dataclass(frozen=True, slots=True)
class ReadSnapshot:
    """What a chunk's read transaction sees: ``pg_current_snapshot()`` and the WAL horizon."""

    xmin: int
    xmax: int
    in_progress: frozenset[int]
    horizon_lsn: int
    """``pg_current_wal_insert_lsn()`` in the snapshot: every visible transaction committed
    before it, so no stream transaction at or past it is visible to the read."""

    @classmethod
    def parse(cls, snapshot: str, horizon: str) -> ReadSnapshot:
        """From ``pg_current_snapshot()::text`` (``xmin:xmax:xip,…``) and an LSN text."""
        xmin, xmax, xip = snapshot.split(":")
        return cls(
            int(xmin),
            int(xmax),
            frozenset(int(x) for x in xip.split(",") if x),
            parse_lsn(horizon),
        )

    def text(self) -> str:
        """``xmin:xmax:xip,…``, as :meth:`parse` reads it (``pg_current_snapshot()::text``)."""
        return f"{self.xmin}:{self.xmax}:{','.join(map(str, sorted(self.in_progress)))}"

    def sees(self, xid: int) -> bool:
        """Whether a committed transaction with 32-bit ``xid`` is visible to the read."""
        full = (self.xmax & ~0xFFFF_FFFF) | xid  # the epoch nearest xmax, as PostgreSQL does
        if full > self.xmax + (1 << 31):
            full -= 1 << 32
        elif full < self.xmax - (1 << 31):
            full += 1 << 32
        if full < self.xmin:
            return True
        return full < self.xmax and full not in self.in_progress


class LoadHooks:
    """Points of a chunk's read where a test acts (see the module docstring); no-ops here.

    Called in the reader thread, each time the chunk is read (a chunk read again after a
    race passes them again). An exception fails the read like a read error, which the
    source learns at the chunk's watermark: one from :meth:`before_watermark` (like a
    failure to write the watermark) is never seen, and the chunk stays in flight.
    """

    def before_watermark(self, chunk: Chunk) -> None:
        """The chunk's low watermark is about to be written."""

    def after_watermark(self, chunk: Chunk) -> None:
        """The watermark is written; the read's snapshot is not taken yet."""

    def after_snapshot(self, chunk: Chunk, snapshot: ReadSnapshot) -> ReadSnapshot:  # noqa: ARG002
        """The read's snapshot is taken (the rows are not read yet): what the splice gets."""
        return snapshot


NO_HOOKS: Final = LoadHooks()


@dataclass(slots=True)
class ChunkRead:
    """One chunk handed to a reader; its results arrive on ``results``.

    ``results`` carries, in order: ``("snapshot", ReadSnapshot, count | None, TableLayout)``
    (the table's layout in the read's snapshot: the columns of its rows), then
    ``("rows", [row, …])`` batches, then ``("end", rows)``; or ``("changed", reason)``
    alone (DDL of the table committed after the snapshot: read the chunk again); or
    ``("error", exception)`` at any point. The coordinator reads ``results`` only once the
    stream reached the chunk's watermark; a read that failed before writing it (no
    connection, the emit refused) has no watermark to wait for, so it also sets
    ``failed_early``, which the coordinator checks on every poll (a load never stalls
    silently).
    """

    chunk: Chunk
    marker: str
    """The watermark's identity (run id and chunk sequence), as written in its content."""
    results: queue.Queue[tuple[Any, ...]]
    cancelled: threading.Event
    watermarked: bool = False
    """The watermark was written (the stream will bring it)."""
    failed_early: BaseException | None = None
    """The read failed before its watermark was written."""
    conn: psycopg.Connection[Any] | None = None
    """The reader's connection while it reads this chunk (to wake it, :func:`abandon`)."""
    started: float = 0.0
    """``time.monotonic()`` when a reader took the chunk (0: still queued): a read that has
    not written its watermark long after it started is stuck (the coordinator gives up on
    it, :meth:`capture.snapshot.loading_source.LoadingSource.poll`)."""


class ReaderPool:
    """``workers`` daemon threads reading chunks; each keeps one connection."""

    def __init__(
        self,
        dsn: str,
        workers: int,
        *,
        publications: Sequence[str],
        count_rows: bool,
        hooks: LoadHooks = NO_HOOKS,
    ) -> None:
        self._dsn = dsn
        self._publications = list(publications)
        self._jobs: queue.Queue[ChunkRead | None] = queue.Queue()
        self._count_rows = count_rows
        self._hooks = hooks
        self._threads = [
            threading.Thread(target=self._work, name=f"walcast-load-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, chunk: Chunk, marker: str) -> ChunkRead:
        """Queue ``chunk`` for the next free reader."""
        read = ChunkRead(chunk, marker, queue.Queue(QUEUE_BATCHES), threading.Event())
        self._jobs.put(read)
        return read

    def close(self) -> None:
        """Stop the readers after their current chunk (they are daemon threads)."""
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            while (job := self._jobs.get()) is not None:
                try:
                    if conn is None or conn.closed:
                        conn = connect(self._dsn, purpose=Purpose.LOAD)
                    job.conn = conn
                    job.started = time.monotonic()
                    self._read(conn, job)
                except Exception as exc:  # noqa: BLE001 - handed to the coordinator
                    if not job.watermarked:
                        job.failed_early = exc
                    _put(job, ("error", exc))
                    if conn is not None:
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()

    def _read(self, conn: psycopg.Connection[Any], job: ChunkRead) -> None:
        hooks = self._hooks
        content = orjson.dumps({"marker": job.marker})
        hooks.before_watermark(job.chunk)
        conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (WATERMARK_PREFIX, content))
        job.watermarked = True
        hooks.after_watermark(job.chunk)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            row = conn.execute(
                "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
            ).fetchone()
            assert row is not None
            snapshot = hooks.after_snapshot(job.chunk, ReadSnapshot.parse(str(row[0]), str(row[1])))
            if not _locked(conn, job.chunk):
                _put(job, ("changed", "DDL waits for the table's lock, behind another read"))
                return
            changed = _changed_since(conn, job.chunk, snapshot)
            if changed is not None:
                _put(job, ("changed", changed))
                return
            layout = self._layout(conn, job.chunk)
            count = None
            if self._count_rows:
                counted = conn.execute(count_query(job.chunk)).fetchone()
                count = int(counted[0]) if counted else 0
            if not _put(job, ("snapshot", snapshot, count, layout)):
                return
            rows = 0
            batch: list[Row] = []
            with conn.cursor().copy(copy_query(job.chunk, layout)) as copy:
                for line in split_rows(copy):
                    batch.append(row_values(line))
                    if len(batch) >= BATCH_ROWS:
                        rows += len(batch)
                        if not _put(job, ("rows", batch)):
                            return
                        batch = []
            rows += len(batch)
            if batch and not _put(job, ("rows", batch)):
                return
            _put(job, ("end", rows))
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.UNKNOWN:
                conn.execute("ROLLBACK")

    def _layout(self, conn: psycopg.Connection[Any], chunk: Chunk) -> TableLayout:
        """The table's layout in the read's snapshot.

        The planned one if the snapshot does not see the table (the ``COPY`` then fails as
        for a dropped table). Raises a WalcastError when its chunk key is not the planned
        one: the chunks' bounds are values of the planned key.
        """
        planned = chunk.table
        layout = catalog.table_layout(conn, planned.relation_id, self._publications)
        if layout is None:
            return planned
        if layout.chunk_key != planned.chunk_key:
            was, now = ", ".join(planned.chunk_key) or "none", ", ".join(layout.chunk_key) or "none"
            raise WalcastError(
                f"load of {planned.qualified_name}: its key changed during the load ({was} → "
                f"{now}), and the load's chunks are ranges of the old one",
                hint="restart walcast: the table's load goes on from its last confirmed chunk, "
                "planned by the key it has then",
            )
        return layout


READ_LOCK_TIMEOUT: Final = "1s"
"""How long a read waits for the table's lock before it gives its chunk up, to be read again."""


def _locked(conn: psycopg.Connection[Any], chunk: Chunk) -> bool:
    """Take the table's lock for the read; False when not granted in :data:`READ_LOCK_TIMEOUT`.

    DDL waiting for the lock of a read whose watermark comes later makes every later lock
    wait behind it; a read of an earlier watermark that waited for the lock would wait for
    the coordinator, which waits for it at its watermark (a deadlock PostgreSQL cannot see).
    Given up, the chunk is read again behind a new watermark, after the later one.
    """
    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(READ_LOCK_TIMEOUT)))
    try:
        conn.execute(lock_query(chunk))
    except psycopg.errors.LockNotAvailable:
        return False
    conn.execute("SET LOCAL lock_timeout TO DEFAULT")  # the session's pinned value again
    return True


def _changed_since(
    conn: psycopg.Connection[Any], chunk: Chunk, snapshot: ReadSnapshot
) -> str | None:
    """Why the table's catalog changed after ``snapshot`` (None: it did not).

    Run with the table's lock held: the visible versions of its ``pg_class`` row and
    ``pg_attribute`` rows, replaced by a transaction ``snapshot`` does not see, were replaced
    by DDL that committed after the snapshot (it cannot still be running: it would hold the
    lock), or that aborted recently.
    """
    rows = conn.execute(
        "SELECT 'pg_class', xmax::text FROM pg_class WHERE oid = %(t)s "
        "UNION ALL SELECT 'pg_attribute', xmax::text FROM pg_attribute WHERE attrelid = %(t)s",
        {"t": chunk.table.relation_id},
    ).fetchall()
    for catalog_table, xmax in rows:
        xid = int(xmax)
        if xid and not snapshot.sees(xid):
            return (
                f"DDL of the table (transaction {xid}, {catalog_table}) committed after the "
                "read's snapshot"
            )
    return None


def _put(job: ChunkRead, item: tuple[Any, ...]) -> bool:
    """Hand ``item`` on, waiting for room; False once the coordinator cancelled the job."""
    while not job.cancelled.is_set():
        try:
            job.results.put(item, timeout=0.5)
        except queue.Full:
            continue
        return True
    return False


def abandon(read: ChunkRead) -> None:
    """Wake a reader stuck on ``read``: shut its socket down (its thread closes it)."""
    conn = read.conn
    if conn is None:
        return
    with suppress(Exception):
        sock = socket.socket(fileno=conn.pgconn.socket)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


def drain(read: ChunkRead, keep_alive: Callable[[], None]) -> None:
    """Cancel ``read`` and empty its queue, so its reader moves on."""
    read.cancelled.set()
    while True:
        try:
            read.results.get_nowait()
        except queue.Empty:
            keep_alive()
            return

"""Which chunk next: the tables' loads, requests, resumption and the progress records.

:class:`ChunkAssigner` keeps the load state of every table a
:class:`~capture.snapshot.loading_source.LoadingSource` loads, and knows nothing of the replication
stream (the source tells it what the stream asked for and what the splice inserted):

* **Loads** come from the progress store's records when the source starts: every
  ``pending`` or ``loading`` table goes on at the chunk after the last one its record counts,
  from that chunk's lower bound; a pending record for every published table (table ``*``,
  the initial load, :mod:`capture.snapshot.initial`) becomes one pending record per table.
  ``walcast snapshot`` requests add tables while the stream runs (:meth:`ChunkAssigner.request`
  takes the content of a ``walcast.snapshot.request`` message); a table already being loaded
  is not loaded twice.
* **Chunks** are handed out in table order, then key order (:meth:`ChunkAssigner.next_chunk`):
  a table's layout is read when its first chunk is planned, and each chunk's upper bound just
  before the chunk is handed out (:func:`~capture.snapshot.chunks.next_upper`; when DDL
  waits for the table's lock, the chunk is planned at a later poll:
  :func:`~capture.snapshot.chunks.upper_unless_locked`). A table without a key is one chunk.
* **Records**: a chunk the splice inserted into the stream (:meth:`ChunkAssigner.spliced`, at
  its low watermark) is counted once Kafka confirmed that position
  (:meth:`ChunkAssigner.count_delivered`) and every earlier chunk of its table: the table's
  record then moves to that chunk's upper bound, and to ``done`` after the last one, carrying
  the keyless window of a table without a key. A record is never written before Kafka has
  what it counts, so a restart reads again at most the chunks that were in flight.
* A table dropped during its load ends as ``dropped``; a read's failure is a walcast error.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Final

import orjson
import psycopg
import structlog

from capture.errors import ConfigError, ConnectionLostError, WalcastError
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, SnapshotMode
from capture.lsn import format_lsn
from capture.replication import catalog
from capture.replication.catalog import TableLayout
from capture.snapshot.chunks import Bound, Chunk, Locked, upper_unless_locked
from capture.snapshot.connection import LoadConnection, TableGone, describe, unreadable_text
from capture.state.progress import KeylessWindow, ProgressStore, TableProgress

log = structlog.get_logger("walcast.snapshot")

REQUEST_PREFIX: Final = "walcast.snapshot.request"
"""Prefix of the logical message ``walcast snapshot`` writes to ask for a load."""
INITIAL_REQUEST: Final = "initial"
ALL_TABLES: Final = "*"
"""The table name of a record that stands for every table of the publications."""


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How to load: ``mode`` (resolved: initial, never, initial-only), readers, chunk size."""

    mode: SnapshotMode = SnapshotMode.NEVER
    workers: int = DEFAULT_WORKERS
    chunk_rows: int = DEFAULT_CHUNK_ROWS

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", SnapshotMode(self.mode))  # its name is accepted too
        if self.mode is SnapshotMode.AUTO:
            raise ConfigError("--snapshot: auto must be resolved before a load (resolve_mode)")
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

    def describe(self) -> str:
        """``loading s.t: 150,000 of ~500,000 rows (30%), 95,000 rows/s, ETA 4 s``."""
        rate = self.rows_per_second
        if self.done:
            return f"loaded {self.table}: {self.rows:,} rows ({rate:,.0f} rows/s)"
        total = self.estimated_rows
        share = f" ({100 * self.rows / total:.0f}%)" if total else ""
        eta = f", ETA {max(total - self.rows, 0) / rate:,.0f} s" if rate and total else ""
        return (
            f"loading {self.table}: {self.rows:,} of ~{total:,} rows{share}, "
            f"{rate:,.0f} rows/s{eta}"
        )


@dataclass(slots=True)
class TableLoad:
    """One table's load: what was planned, what is in flight, what Kafka confirmed."""

    relation_id: int
    name: str
    request: str
    layout: TableLayout | None = None
    next_lower: Bound | None = None
    planned_all: bool = False
    next_number: int = 1
    in_flight: int = 0
    """Chunks handed out and not yet inserted into the stream (or failed)."""
    delivered_numbers: set[int] = field(default_factory=set)
    bounds: dict[int, Bound | None] = field(default_factory=dict)
    """Upper bound of each inserted chunk not yet counted as delivered."""
    rows_by_chunk: dict[int, int] = field(default_factory=dict)
    progress: TableProgress | None = None
    started: float = field(default_factory=time.monotonic)
    emitted_rows: int = 0
    dropped: bool = False
    keyless_window: KeylessWindow | None = None

    @property
    def finished(self) -> bool:
        """Every chunk was planned and inserted into the stream."""
        return self.planned_all and self.in_flight == 0 and not self.bounds


@dataclass(eq=False)
class ChunkAssigner:
    """The loads of one source and their chunks, in order (see the module docstring).

    ``records`` are the progress store's records, read before the stream started (None:
    read them now). ``delivered_lsn`` is the position up to which Kafka confirmed everything;
    ``observer`` is told of each table's progress as it changes (the CLI's progress lines).
    """

    conn: LoadConnection
    _: KW_ONLY
    slot: str
    publications: list[str]
    settings: LoadSettings
    progress: ProgressStore
    delivered_lsn: Callable[[], int]
    observer: Callable[[LoadProgress], None] | None = None
    records: InitVar[list[TableProgress] | None] = None
    windows: list[tuple[int, KeylessWindow]] = field(default_factory=list, init=False)
    """(relation id, window) of the ``done`` records of keyless tables: the slot may
    replay the changes their chunks hold, which the splice drops again."""
    _loads: dict[int, TableLoad] = field(default_factory=dict, init=False)
    _order: deque[int] = field(default_factory=deque, init=False)
    _emitted: deque[tuple[int, TableLoad, int]] = field(default_factory=deque, init=False)
    """(low watermark, load, chunk number) of inserted chunks not yet counted."""
    _last_report: float = field(default=0.0, init=False)

    def __post_init__(self, records: list[TableProgress] | None) -> None:
        self._resume(self.progress.load() if records is None else records)

    # -- what the source asks ----------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Tables are being loaded (chunks remain to be read or inserted)."""
        return bool(self._loads)

    @property
    def loading(self) -> bool:
        """Tables are being loaded, or inserted chunks wait for Kafka's confirmation."""
        return bool(self._loads) or bool(self._emitted)

    @property
    def done(self) -> bool:
        """Nothing to load, and Kafka confirmed every inserted chunk."""
        return not self._loads and not self._emitted

    def load_of(self, relation_id: int) -> TableLoad | None:
        """The load of table ``relation_id``, if it is being loaded."""
        return self._loads.get(relation_id)

    def next_chunk(self) -> tuple[Chunk, TableLoad] | None:
        """The next chunk to read, in table order then key order (None: none for now)."""
        for relation_id in list(self._order):
            load = self._loads.get(relation_id)
            if load is None or load.planned_all:
                continue
            try:
                layout = load.layout or self._start_table(load)
                upper = self._planned_upper(load, layout) if layout.chunk_key else None
            except TableGone as gone:
                self._dropped(load, str(gone))
                continue
            if isinstance(upper, Locked):  # DDL waits for a reader: plan at a later poll
                return None
            chunk = Chunk(layout, load.next_number, load.next_lower, upper, load.request)
            load.next_number += 1
            load.next_lower = upper
            load.planned_all = upper is None
            load.in_flight += 1
            return chunk, load
        return None

    # -- what happened to a chunk ------------------------------------------------------------

    def spliced(
        self, load: TableLoad, chunk: Chunk, low_lsn: int, rows: int, window: KeylessWindow | None
    ) -> None:
        """``chunk`` is in the stream at ``low_lsn``; it counts once Kafka confirms that."""
        load.in_flight -= 1
        self._emitted.append((low_lsn, load, chunk.number))
        load.bounds[chunk.number] = chunk.upper
        load.rows_by_chunk[chunk.number] = rows
        load.emitted_rows += rows
        if window is not None:
            load.keyless_window = window
        log.info(
            "snapshot_chunk",
            table=load.name,
            chunk=chunk.number,
            rows=rows,
            at=format_lsn(low_lsn),
            last=chunk.last,
        )
        self._report(load, force=False)

    def discarded(self, load: TableLoad) -> None:
        """A chunk of a table dropped meanwhile reached the stream: it is not inserted."""
        load.in_flight -= 1

    def read_failed(self, load: TableLoad, chunk: Chunk, exc: BaseException) -> None:
        """``chunk``'s read failed: the table was dropped (its load ends), or an error."""
        load.in_flight -= 1
        if isinstance(exc, WalcastError):  # the reader's own one line (its key changed)
            raise exc
        dsn = self.conn.dsn
        if isinstance(exc, psycopg.errors.UndefinedTable) or (
            "could not open relation with OID" in str(exc)
        ):
            self._dropped(load, "the table was dropped during the load")
            return
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            raise WalcastError(
                f"load of {load.name}: {describe(exc, dsn)}",
                hint=f"GRANT SELECT ON {load.name} TO the walcast role, or leave the table out "
                "of the publication",
            )
        unreadable = unreadable_text(exc, load.name, dsn)
        if unreadable is not None:
            raise unreadable
        if isinstance(exc, psycopg.OperationalError):
            raise ConnectionLostError(
                f"load of {load.name} failed at chunk {chunk.number}: {describe(exc, dsn)}",
                hint="walcast retries",
            )
        raise WalcastError(
            f"load of {load.name} failed at chunk {chunk.number}: {describe(exc, dsn)}"
        )

    def count_delivered(self) -> None:
        """Record the chunks Kafka confirmed (all of them, and everything before)."""
        if not self._emitted:
            return
        delivered = self.delivered_lsn()
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
                self._forget(load)
                self._report(load, force=True)
                log.info(
                    "snapshot_table_done",
                    table=load.name,
                    rows=progress.rows,
                    chunks=progress.chunks,
                    seconds=round(time.monotonic() - load.started, 1),
                )
            self.progress.save(progress)

    # -- requests and resumption ---------------------------------------------------------------

    def request(self, content: bytes, lsn: int) -> None:
        """A ``walcast snapshot`` request (its message's content, written at ``lsn``)."""
        try:
            request = orjson.loads(content)
            wanted = [str(t) for t in request["tables"]]
            request_id = str(request["id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning("snapshot_request_ignored", lsn=format_lsn(lsn), reason="malformed")
            return
        if request.get("slot") not in (None, self.slot):
            return
        published = {t.qualified_name: t for t in self._published()}
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

    def _resume(self, records: list[TableProgress]) -> None:
        """Pick up every unfinished load the progress store knows (initial, requested)."""
        for record in records:
            if record.table == ALL_TABLES and record.state == "pending":
                self._expand(record)
            if record.state == "done" and record.keyless_window is not None:
                self.windows.append((record.relation_id, record.keyless_window))
        for record in records:
            if (
                record.state not in ("pending", "loading")
                or record.table == ALL_TABLES
                or record.relation_id in self._loads
            ):
                continue
            load = TableLoad(record.relation_id, record.table, record.request)
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
        tables = self._published()
        for table in tables:
            self._add(table.relation_id, table.qualified_name, record.request)
        record.state = "done"
        self.progress.save(record)
        log.info(
            "snapshot_requested",
            request=record.request,
            tables=[t.qualified_name for t in tables],
            workers=self.settings.workers,
            chunk_rows=self.settings.chunk_rows,
        )

    def _published(self) -> list[catalog.PublishedTable]:
        return self.conn.run(
            "listing the published tables",
            lambda conn: catalog.publication_tables(conn, self.publications),
        )

    def _add(self, relation_id: int, name: str, request: str) -> None:
        existing = self._loads.get(relation_id)
        if existing is not None:
            log.info("snapshot_already_loading", table=name, request=existing.request)
            return
        load = TableLoad(relation_id, name, request)
        load.progress = TableProgress(name, relation_id, request, "pending")
        self.progress.save(load.progress)
        self._schedule(load)

    def _schedule(self, load: TableLoad) -> None:
        self._loads[load.relation_id] = load
        self._order.append(load.relation_id)

    # -- planning --------------------------------------------------------------------------------

    def _start_table(self, load: TableLoad) -> TableLayout:
        """Read the table's layout when its first chunk is planned."""
        layout = self.conn.run(
            f"reading the layout of {load.name}",
            functools.partial(
                catalog.table_layout,
                relation_id=load.relation_id,
                publications=self.publications,
            ),
            table=load.name,
        )
        if layout is None:
            raise TableGone("the table no longer exists")
        load.layout = layout
        if load.progress is not None and load.progress.state == "pending":
            load.progress.state = "loading"
            self.progress.save(load.progress)
        return layout

    def _planned_upper(self, load: TableLoad, layout: TableLayout) -> Bound | Locked | None:
        return self.conn.run(
            f"planning the next chunk of {load.name}",
            functools.partial(
                upper_unless_locked,
                table=layout,
                lower=load.next_lower,
                chunk_rows=self.settings.chunk_rows,
            ),
            table=load.name,
        )

    def _dropped(self, load: TableLoad, reason: str) -> None:
        if load.dropped:
            return
        load.dropped = True
        log.warning("snapshot_table_dropped", table=load.name, request=load.request, reason=reason)
        self._forget(load)
        if load.progress is not None:
            load.progress.state = "dropped"
            self.progress.save(load.progress)

    def _forget(self, load: TableLoad) -> None:
        self._loads.pop(load.relation_id, None)
        if load.relation_id in self._order:
            self._order.remove(load.relation_id)

    def _report(self, load: TableLoad, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < 1.0:
            return
        self._last_report = now
        if self.observer is None:
            return
        elapsed = max(now - load.started, 1e-6)
        estimate = load.layout.estimated_rows if load.layout is not None else 0
        self.observer(
            LoadProgress(
                load.name,
                load.emitted_rows,
                max(estimate, load.emitted_rows),
                load.emitted_rows / elapsed,
                force,
                load.next_number - 1,
            )
        )

"""``walcast tail``: print every committed row change as it happens, in any format.

A front door of the pump: the replication source (wrapped in a
:class:`~capture.snapshot.LoadingSource` when tables are loaded first), one output format,
and a :class:`~capture.sinks.stream.StreamSink` on stdout. JSON formats print one document
per line, binary formats (DTS Avro) one base64 line per datum, and IBM delimited its own
record stream (see each format's module).

Loads (``--snapshot``): ``initial`` prints every published table's rows first (as each
format's load form), then the stream; it is the default when tail creates the slot.
tail keeps the load's progress in memory only: a tail stopped during a load does not resume
it (``walcast run`` does). Progress goes to stderr, one line per table every few seconds.

Acknowledgement: output is flushed before the slot is acknowledged, and only whole
transactions are acknowledged (the :class:`~capture.position.PositionLedger` decides). When
the ``--max-events``-th change is the last of its transaction, tail waits (briefly) for the
commit and acknowledges it; when it falls inside a transaction, that transaction is sent
again by the next run (its changes repeat with the same commit LSN and ordinals, so the
duplicates are detectable).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import IO

from capture.formats import format_class
from capture.formats.settings import FormatSettings
from capture.load_mode import SnapshotMode
from capture.position import PositionLedger
from capture.pump import Output, Pump, Source, needs_transaction_sizes
from capture.replication import catalog
from capture.replication.setup import connect
from capture.replication.side import SideConnection
from capture.replication.slots import find_slot
from capture.sinks.stream import StreamSink
from capture.snapshot import (
    LoadingSource,
    LoadProgress,
    LoadSettings,
    MemoryProgress,
    record_initial_load,
    resolve_mode,
)
from capture.source import ReplicationSource, SourceConfig

FINISH_TIMEOUT = 5.0
PROGRESS_EVERY = 5.0


def primary_key_resolver(
    side: SideConnection,
) -> Callable[[int, str, str], tuple[str, ...] | None]:
    """The catalog lookup of a REPLICA IDENTITY FULL table's primary key, on ``side``."""

    def resolve(relation_id: int, _schema: str, _table: str) -> tuple[str, ...] | None:
        return side.run(lambda conn: catalog.primary_key(conn, relation_id))

    return resolve


class ProgressLines:
    """Load progress as one stderr line per table every :data:`PROGRESS_EVERY` seconds."""

    def __init__(self, out: IO[str] = sys.stderr) -> None:
        self.out = out
        self._last: dict[str, float] = {}

    def __call__(self, progress: LoadProgress) -> None:
        """Print ``progress`` if the table's last line is old enough (or it is done)."""
        now = time.monotonic()
        if not progress.done and now - self._last.get(progress.table, 0.0) < PROGRESS_EVERY:
            return
        self._last[progress.table] = now
        self.out.write(describe_progress(progress) + "\n")
        self.out.flush()


def describe_progress(progress: LoadProgress) -> str:
    """``walcast: loading s.t: 150,000 of ~500,000 rows (30%), 95,000 rows/s, ETA 4 s``."""
    rate = progress.rows_per_second
    if progress.done:
        return f"walcast: loaded {progress.table}: {progress.rows:,} rows ({rate:,.0f} rows/s)"
    total = progress.estimated_rows
    share = f" ({100 * progress.rows / total:.0f}%)" if total else ""
    eta = f", ETA {max(total - progress.rows, 0) / rate:,.0f} s" if rate and total else ""
    return (
        f"walcast: loading {progress.table}: {progress.rows:,} of ~{total:,} rows{share}, "
        f"{rate:,.0f} rows/s{eta}"
    )


def run_tail(
    config: SourceConfig,
    fmt: str,
    settings: FormatSettings | None,
    out: IO[bytes],
    *,
    max_events: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    load: LoadSettings | None = None,
    snapshot: SnapshotMode = SnapshotMode.AUTO,
) -> int:
    """Print changes until ``max_events`` row changes or ``stop()``; return the count.

    ``snapshot`` is the load mode (auto: initial when tail creates the slot, else never);
    ``load`` the readers and chunk size (the defaults when None).
    """
    config = dataclasses.replace(config, hold_transactions=needs_transaction_sizes([fmt]))
    with connect(config.dsn) as conn:
        creating = config.create_slot and find_slot(conn, config.slot) is None
        mode = resolve_mode(
            snapshot, creating_slot=creating, server_version=conn.info.server_version
        )
    progress = MemoryProgress()
    if mode is not SnapshotMode.NEVER:
        record_initial_load(progress)
        config = dataclasses.replace(config, messages=True)
    side = SideConnection(config.dsn)
    replication = ReplicationSource(config, key_resolver=primary_key_resolver(side))
    ledger = PositionLedger()
    source: Source = replication
    if mode is not SnapshotMode.NEVER:
        source = LoadingSource(
            replication,
            dsn=config.dsn,
            slot=config.slot,
            publications=config.publications,
            settings=dataclasses.replace(load or LoadSettings(), mode=mode),
            progress=progress,
            delivered_lsn=lambda: ledger.delivered_lsn,
            count_rows=config.hold_transactions,
            observer=ProgressLines(),
        )
        source.stop = stop
    try:
        encoder = format_class(fmt)(replication.format_options(settings))
        sink = StreamSink(out)
        pump = Pump(source, sink, [Output(fmt, encoder)], ledger)
        pump.run(stop, max_changes=max_events, poll_timeout=1.0)
        pump.finish(FINISH_TIMEOUT)
        return pump.changes
    finally:
        source.close()
        side.close()

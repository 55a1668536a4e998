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

from capture.assembly import LoadPlan, OutputPlan, connect_source, replication_pipeline
from capture.formats.settings import FormatSettings
from capture.load_mode import SnapshotMode
from capture.position import PositionLedger
from capture.replication.connect import connect
from capture.replication.side import SideConnection
from capture.replication.slots import find_slot
from capture.sinks.stream import StreamSink
from capture.snapshot import (
    LoadProgress,
    LoadSettings,
    record_initial_load,
    resolve_mode,
)
from capture.source import SourceConfig
from capture.state.progress import MemoryProgress

FINISH_TIMEOUT = 5.0
PROGRESS_EVERY = 5.0


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
        self.out.write("walcast: " + progress.describe() + "\n")
        self.out.flush()


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
    with connect(config.dsn) as conn:
        creating = config.create_slot and find_slot(conn, config.slot) is None
        mode = resolve_mode(
            snapshot, creating_slot=creating, server_version=conn.info.server_version
        )
    plan: LoadPlan | None = None
    if mode is not SnapshotMode.NEVER:
        progress = MemoryProgress()
        record_initial_load(progress)
        settings_of_load = dataclasses.replace(load or LoadSettings(), mode=mode)
        plan = LoadPlan(settings_of_load, progress, observer=ProgressLines())
    side = SideConnection(config.dsn)
    try:
        replication = connect_source(config, [fmt], side, load=plan is not None)
        pipeline = replication_pipeline(
            replication,
            [OutputPlan(fmt, settings)],
            StreamSink(out),
            PositionLedger(),
            load=plan,
            stop=stop,
        )
        try:
            pipeline.pump.run(stop, max_changes=max_events, poll_timeout=1.0)
            pipeline.pump.finish(FINISH_TIMEOUT)
            return pipeline.pump.changes
        finally:
            pipeline.close()
    finally:
        side.close()

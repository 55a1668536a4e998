"""The initial load: whether a session loads, and recording it before the slot exists.

The initial load is decided before the slot exists, and recorded first: the front door
writes a ``pending`` progress record for every published table (request ``initial``), waits
until the progress store has it, and only then creates the slot. A crash between the two
leaves the records; the restart creates the slot and loads. The other order could leave a
slot whose load nobody remembers.

Loads asked for while streaming come from ``walcast snapshot``
(:mod:`capture.snapshot_command`), as logical messages in the stream.
"""

from __future__ import annotations

from capture.errors import ConfigError
from capture.load_mode import MIN_SERVER_FOR_LOADS, SnapshotMode
from capture.snapshot.assigner import ALL_TABLES, INITIAL_REQUEST
from capture.state.progress import ProgressStore, TableProgress


def resolve_mode(mode: SnapshotMode, *, creating_slot: bool, server_version: int) -> SnapshotMode:
    """The load mode to use: ``auto`` is initial when the slot is created now, else never.

    Loads need PostgreSQL 14 (logical messages): ``auto`` on an older server only streams;
    ``initial`` and ``initial-only`` are refused there in one line.
    """
    if mode is SnapshotMode.AUTO:
        if creating_slot and server_version >= MIN_SERVER_FOR_LOADS:
            return SnapshotMode.INITIAL
        return SnapshotMode.NEVER
    if mode is not SnapshotMode.NEVER and server_version < MIN_SERVER_FOR_LOADS:
        raise ConfigError(
            f"--snapshot {mode}: loading needs PostgreSQL 14 or newer (logical messages "
            "in pgoutput)",
            hint="use --snapshot never, or upgrade the server",
        )
    return mode


def record_initial_load(progress: ProgressStore) -> bool:
    """Record that the publications' tables are to be loaded, unless that is already known.

    One record stands for "every table of the publications" (table ``*``): the publication
    may not exist yet (``--create-publication``), and its tables are listed when the load
    starts. Returns whether a new initial load was recorded.
    """
    if any(r.request == INITIAL_REQUEST for r in progress.load()):
        return False
    progress.save(TableProgress(ALL_TABLES, 0, INITIAL_REQUEST, "pending"))
    return True

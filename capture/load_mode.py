"""Whether existing rows are loaded: the ``--snapshot`` mode and its defaults.

One place for the flags, the daemon's settings (``source.snapshot``) and the load itself.

Kept free of heavy imports: the CLI reads it to build its flags.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class SnapshotMode(StrEnum):
    """``--snapshot`` / ``source.snapshot``."""

    AUTO = "auto"
    """The default: ``initial`` when this run creates the slot, else ``never``."""
    INITIAL = "initial"
    """Load every published table once for this slot (its generation), then stream."""
    NEVER = "never"
    """Stream only (an unfinished load is still resumed, ``walcast snapshot`` still served)."""
    INITIAL_ONLY = "initial-only"
    """Load, wait until Kafka confirmed it, exit 0."""


MODES: Final = tuple(m.value for m in SnapshotMode)
"""Every mode's name, for flags and settings (``choices``)."""
DEFAULT_WORKERS: Final = 2
"""``--snapshot-workers``: connections that read chunks in parallel."""
DEFAULT_CHUNK_ROWS: Final = 50_000
"""``--snapshot-chunk-rows``: rows per key-range chunk."""
MIN_SERVER_FOR_LOADS: Final = 140000
"""Loads need logical messages in pgoutput (PostgreSQL 14)."""

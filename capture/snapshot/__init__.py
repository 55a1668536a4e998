"""Loading tables' existing rows into the stream: the initial load and on-demand loads.

* :mod:`capture.snapshot.loading_source`: :class:`LoadingSource`, which inserts loaded
  chunks into the replication stream at their watermarks (the design and its guarantees
  are there), composed of:
* :mod:`capture.snapshot.assigner`: which chunk next (loads, requests, resumption, records);
* :mod:`capture.snapshot.reader`: reader threads, one ``COPY`` per chunk, and their hooks;
* :mod:`capture.snapshot.splice`: a chunk into the stream at its watermark, the race check;
* :mod:`capture.snapshot.connection`: the load's catalog connection;
* :mod:`capture.snapshot.chunks`: key-range chunks and their SQL;
* :mod:`capture.snapshot.copytext`: COPY text rows as pgoutput text values;
* :mod:`capture.snapshot.initial`: whether a session loads, recorded before the slot exists.

Where a load's progress is kept is state, not loading: :mod:`capture.state.progress`.
"""

from capture.snapshot.initial import record_initial_load, resolve_mode
from capture.snapshot.loading_source import LoadingSource, LoadProgress, LoadSettings

__all__ = [
    "LoadProgress",
    "LoadSettings",
    "LoadingSource",
    "record_initial_load",
    "resolve_mode",
]

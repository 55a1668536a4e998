"""The daemon's periodic side queries, in a thread of their own (issue 35).

Invariant: nothing the pump's loop does waits on a side query. The heartbeat's logical
message (the slot advances on a quiet database) and the health sample (the server's WAL
position and the WAL the slot retains, :meth:`capture.daemon.health.Health.sample`) run
here, on the daemon's :class:`~capture.replication.side.SideConnection`, each bounded by
``daemon.side_query_timeout``; a stuck one is abandoned there (one warning event) and the
next opens a new connection. The format heartbeats (records in Kafka) stay with the pump,
whose thread alone produces.

The thread starts with the first session and ends with the daemon; it is a daemon thread,
so a query stuck beyond its bound can never keep the process alive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from capture.pump import HEARTBEAT_PREFIX
from capture.replication.side import SideConnection

TICK: Final = 0.2
"""Seconds between looks at what is due."""


class SideWork:
    """The side-work thread: heartbeats and health samples, until :meth:`close`.

    A heartbeat every ``heartbeat_interval`` seconds (0: none), a health sample every
    ``sample_interval`` seconds.
    """

    def __init__(
        self,
        side: SideConnection,
        *,
        heartbeat_interval: float,
        sample: Callable[[], None],
        sample_interval: float,
    ) -> None:
        self._side = side
        self._heartbeat_interval = heartbeat_interval
        self._sample = sample
        self._sample_interval = sample_interval
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="walcast-side-work", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Ask the thread to end; never waits for a query in flight."""
        self._closed.set()

    def _run(self) -> None:
        last_heartbeat = last_sample = float("-inf")
        while not self._closed.wait(TICK):
            now = time.monotonic()
            interval = self._heartbeat_interval
            if interval and now - last_heartbeat >= interval:
                last_heartbeat = now
                self._side.run(
                    lambda conn: conn.execute(
                        "SELECT pg_logical_emit_message(false, %s, '')", (HEARTBEAT_PREFIX,)
                    )
                )
            now = time.monotonic()
            if now - last_sample >= self._sample_interval:
                last_sample = now
                self._sample()

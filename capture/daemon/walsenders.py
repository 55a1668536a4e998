"""The daemon's own walsenders: recognising, after a network cut, the one that holds the slot.

A network cut (a firewall, a NAT or a load balancer that dropped the connection) leaves the
server's walsender alive until ``wal_sender_timeout``; a reconnect within that time finds
the slot held by it. Decision: the daemon ends that walsender (``pg_terminate_backend``) and
resumes at once, but only when it is provably its own: the same process id AND the same
``backend_start`` as a connection this daemon made. Any other holder is another consumer,
never ended (the start fails with one :class:`~capture.errors.SlotInUseError` line).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog

from capture.replication import slots
from capture.replication.side import SideConnection

log = structlog.get_logger("walcast.daemon")

RELEASE_WAIT: Final = 10.0
"""How long a reconnect waits for the server to let go of the walsender walcast ended."""


class OwnWalsenders:
    """The walsenders this daemon's sessions used, by process id and ``backend_start``."""

    def __init__(self, side: SideConnection, slot: str) -> None:
        self._side = side
        self._slot = slot
        self._started: dict[int, object] = {}

    def _backend_start(self, pid: int) -> object | None:
        row = self._side.run(
            lambda conn: conn.execute(
                "SELECT backend_start FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
        )
        return None if row is None else row[0]

    def remember(self, pid: int) -> None:
        """Note the walsender serving the session that just started."""
        started = self._backend_start(pid)
        if started is not None:
            self._started[pid] = started

    def end_if_ours(self, pid: int, wait: Callable[[float], None]) -> bool:
        """End walsender ``pid`` if this daemon used it; True once the slot is free of it.

        ``wait(seconds)`` passes time while the server lets go (serving Kafka meanwhile).
        """
        known = self._started.get(pid)
        if known is None or self._backend_start(pid) != known:
            return False  # never ours, or a new process behind a reused pid
        log.warning(
            "own_walsender_ended",
            slot=self._slot,
            pid=pid,
            detail="the slot was still held by this walcast's previous replication "
            "connection, lost without the server noticing (a network cut); it was ended",
        )
        self._side.run(lambda conn: conn.execute("SELECT pg_terminate_backend(%s)", (pid,)))
        deadline = time.monotonic() + RELEASE_WAIT
        while time.monotonic() < deadline:
            holder = self._side.run(lambda conn: slots.find_slot(conn, self._slot))
            if holder is None or holder.active_pid != pid:
                break
            wait(0.2)
        return True

"""Local ports for tests of what walcast does when nothing answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_port() -> Iterator[int]:
    """A ``127.0.0.1`` port that refuses every connection while the block runs.

    The port is held by a bound socket that never listens: the kernel refuses connections
    to it, and no other process can bind it meanwhile. A free port given back at once could
    be taken by a server another test worker starts (CI rehearsal of 6aac8c9, 2026-12-05: a
    worker's PostgreSQL took it, and walcast, meant to find nothing there, met that server's
    refusal of its password).
    """
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])

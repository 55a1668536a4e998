"""Local ports for the tests: a free one to hand a server, one that refuses connections."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A ``127.0.0.1`` port free now, for a server the test starts on it at once (nothing
    holds it after: a test that needs a port where nothing listens takes
    :func:`refused_port`)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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

"""The replication stream's status update never waits without a bound (issue 35.4)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from capture.errors import ConnectionLostError
from capture.replication.client import ReplicationStream


class _StuckPgconn:
    """libpq whose output buffer never drains: flush() always has more to send."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock.fileno()
        self.sent: list[bytes] = []

    def put_copy_data(self, data: bytes) -> int:
        self.sent.append(data)
        return 1

    def flush(self) -> int:
        return 1


@pytest.fixture
def full_socket() -> Iterator[socket.socket]:
    """A socket that is never writable: its peer reads nothing and its buffer is full."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        while True:
            ours.send(b"x" * 65536)
    except BlockingIOError:
        pass
    yield ours
    ours.close()
    theirs.close()


def _stream(pgconn: _StuckPgconn, receive_timeout: float | None) -> ReplicationStream:
    stream = object.__new__(ReplicationStream)
    stream.slot = "s"
    stream.received_lsn = stream.acked_lsn = 0x16B3F48
    stream.receive_timeout = receive_timeout
    stream._pgconn = pgconn  # type: ignore[assignment]
    return stream


def test_a_status_update_the_socket_never_takes_ends_the_stream_as_lost(
    full_socket: socket.socket,
) -> None:
    pgconn = _StuckPgconn(full_socket)
    stream = _stream(pgconn, receive_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(ConnectionLostError) as lost:
        stream.send_status()
    assert 0.5 <= time.monotonic() - started < 2
    assert pgconn.sent
    text = str(lost.value)
    assert "status update could not be sent for 0.5 s at 0/16B3F48" in text
    assert "\n" not in text
    assert lost.value.hint is not None
    assert "source.receive_timeout" in lost.value.hint


def test_an_explicit_timeout_bounds_the_flush_without_a_receive_timeout(
    full_socket: socket.socket,
) -> None:
    stream = _stream(_StuckPgconn(full_socket), receive_timeout=None)
    started = time.monotonic()
    with pytest.raises(ConnectionLostError):
        stream.send_status(timeout=0.3)
    assert time.monotonic() - started < 1.5

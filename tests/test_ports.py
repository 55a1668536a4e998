"""tests.support.ports: a port that refuses connections and that nobody else can take."""

from __future__ import annotations

import socket

import pytest

from tests.support.ports import refused_port


def test_a_refused_port_refuses_and_cannot_be_taken() -> None:
    with refused_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError, match="in use"):
                other.bind(("127.0.0.1", port))
    with socket.socket() as after:  # given back at the end of the block
        after.bind(("127.0.0.1", port))

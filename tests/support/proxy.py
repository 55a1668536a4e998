"""A TCP proxy whose client side can be cut, as a firewall, NAT or load balancer does.

:meth:`CuttableProxy.cut` resets every client connection (RST) and keeps the server side
open, so the server does not notice: its walsender goes on holding the slot, exactly as
after a network cut between walcast and a proxy in front of PostgreSQL.
"""

from __future__ import annotations

import socket
import struct
import threading
from contextlib import suppress


class CuttableProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; :meth:`cut` drops the clients."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []
        self._upstreams: list[socket.socket] = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._clients.append(client)
                self._upstreams.append(upstream)
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)

    def cut(self) -> None:
        """Reset every client connection; leave the server side open and silent."""
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            with suppress(OSError):
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()

    def close(self) -> None:
        """Stop accepting, close everything."""
        self._server.close()
        with self._lock:
            for sock in [*self._clients, *self._upstreams]:
                with suppress(OSError):
                    sock.close()

"""A TCP relay that fails the way networks do: frozen, dropped, or slow (issue 35).

:class:`FaultRelay` forwards ``127.0.0.1:<port>`` to a target (PostgreSQL; Kafka only for
its bootstrap connection, since a broker's metadata names its own advertised address).
Each accepted connection is a :class:`Link`; faults apply to one link or to the relay (every
link, present and future):

* :meth:`Link.freeze` / :meth:`FaultRelay.freeze`: nothing is forwarded either way and
  nothing is closed. The relay stops reading, so the kernel still acknowledges what fits in
  its buffers: TCP keepalives and ``tcp_user_timeout`` see a live peer, exactly as behind a
  hung proxy, and only a client-side bound notices. New connections are accepted while the
  relay is frozen (as a middlebox would) and carry nothing until :meth:`FaultRelay.thaw`.
* :meth:`Link.drop` / :meth:`FaultRelay.drop`: both sides reset (RST).
* :attr:`FaultRelay.delay`: seconds each chunk waits before it is forwarded.

:meth:`FaultRelay.link_of_backend` finds the link of a PostgreSQL backend (its
``pg_stat_activity.client_port`` is the relay's upstream port), so a test can freeze one
connection of walcast's (its side connection) and not another (its walsender).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from contextlib import suppress


class Link:
    """One relayed connection: the client's socket and the relay's upstream socket."""

    def __init__(self, relay: FaultRelay, client: socket.socket, upstream: socket.socket) -> None:
        self._relay = relay
        self.client = client
        self.upstream = upstream
        self.upstream_port: int = upstream.getsockname()[1]
        """The relay's local port towards the target (the server's view of the client)."""
        self.frozen = False
        self.closed = False

    def freeze(self) -> None:
        """Stop forwarding this link either way; close nothing."""
        self.frozen = True

    def thaw(self) -> None:
        """Forward again (what waited in the buffers goes on)."""
        self.frozen = False

    def drop(self) -> None:
        """Reset both sides."""
        self.closed = True
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()

    def held(self) -> bool:
        return self.frozen or self._relay.frozen

    def pipe(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy ``source`` to ``sink`` while the link lives, honouring freezes and delay."""
        with suppress(OSError, ValueError):
            while not self.closed:
                if self.held():
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select([source], [], [], 0.1)
                if not ready or self.held():
                    continue
                data = source.recv(65536)
                if not data:
                    break
                if self._relay.delay:
                    time.sleep(self._relay.delay)
                while self.held() and not self.closed:
                    time.sleep(0.05)
                sink.sendall(data)
        if not self.closed:  # one side ended: end the other (a FIN, as the peer sent)
            with suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


class FaultRelay:
    """Forwards ``127.0.0.1:<port>`` to ``target``; see the module docstring for faults."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.frozen = False
        self.delay = 0.0
        self._lock = threading.Lock()
        self.links: list[Link] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            link = Link(self, client, upstream)
            with self._lock:
                self.links.append(link)
            threading.Thread(target=link.pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=link.pipe, args=(upstream, client), daemon=True).start()

    def freeze(self) -> None:
        """Freeze every link, present and future."""
        self.frozen = True

    def thaw(self) -> None:
        """Forward again on every link (those frozen one by one stay frozen)."""
        self.frozen = False

    def drop(self) -> None:
        """Reset every link (new connections are accepted as before)."""
        with self._lock:
            links, self.links = self.links, []
        for link in links:
            link.drop()

    def link_of_backend(self, client_port: int) -> Link | None:
        """The link whose upstream port is a backend's ``pg_stat_activity.client_port``."""
        with self._lock:
            return next((x for x in self.links if x.upstream_port == client_port), None)

    def close(self) -> None:
        """Stop accepting; reset every link."""
        self.frozen = False
        self._server.close()
        self.drop()

"""A side connection: an ordinary (non-replication) connection beside the stream.

Front doors use it for catalog queries (:mod:`capture.replication.catalog`: primary keys of
REPLICA IDENTITY FULL tables, publication tables, slot metrics), walsender bookkeeping and
heartbeats. It is opened lazily through the one door
(:func:`capture.replication.connect.connect`, with walcast's session and its bounds),
dropped on any error and reopened on next use, so a failing side query never stops the
stream.

Invariants:

* No call waits longer than ``timeout`` seconds (``daemon.side_query_timeout`` in
  ``walcast run``, :data:`DEFAULT_TIMEOUT` elsewhere), whatever the network does: each
  query (and the connection attempt before it) runs in a short-lived daemon thread of its
  own, and the caller waits for it at most that long. A query still running then is
  abandoned: its socket is shut down (which wakes the thread inside libpq; it closes the
  connection and ends), the connection is forgotten and the next call opens a new one. The
  server's own bound on the same query is the session's ``statement_timeout``
  (:mod:`capture.replication.session`); this one also holds when the network between
  walcast and the server is frozen and nothing would ever answer.
* One query at a time: calls are serialised (a second caller waits for the first, within
  its own bound).
* One warning per trouble: the first failure (a refused or lost connection, a failed or
  abandoned query) after a success is one warning event, without the DSN; further
  failures are debug events until a query succeeds again (``side_connection_recovered``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Final, TypeVar

import psycopg
import structlog

from capture import dsn as dsn_util
from capture.errors import WalcastError
from capture.replication.connect import connect, libpq_message

log = structlog.get_logger("walcast.side")

T = TypeVar("T")

DEFAULT_TIMEOUT: Final = 15.0
"""Seconds a side query (connection attempt included) may take before it is abandoned."""


class _Call:
    """One query in its thread: the connection it uses and, once done, its outcome."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.conn: psycopg.Connection[Any] | None = None
        self.abandoned = False


class SideConnection:
    """A lazily opened autocommit connection whose failures are logged, not raised."""

    def __init__(self, dsn: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._dsn = dsn
        self.timeout = timeout
        """Seconds a call may take (see the module docstring)."""
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        """Held by a caller for the whole of its call: one query at a time."""
        self._state = threading.Lock()
        """Guards :attr:`_conn` and the abandoning of a call's socket."""
        self._troubled = False
        self.abandoned = 0
        """Queries abandoned after :attr:`timeout` (a frozen network, a hung server)."""

    def run(self, query: Callable[[psycopg.Connection[Any]], T]) -> T | None:
        """``query(connection)``, or None: unreachable, failed, or abandoned.

        None when the server cannot be reached, the query failed, or it did not finish
        within :attr:`timeout` seconds from this call (then it is abandoned).
        """
        deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=self.timeout):
            log.debug("side_query_skipped", detail="another side query is still running")
            return None
        try:
            call = _Call()
            threading.Thread(
                target=self._call, args=(call, query), name="walcast-side", daemon=True
            ).start()
            if call.done.wait(max(deadline - time.monotonic(), 0.0)):
                return call.result  # type: ignore[no-any-return]
            self._abandon(call)
            return None
        finally:
            self._lock.release()

    def _call(self, call: _Call, query: Callable[[psycopg.Connection[Any]], Any]) -> None:
        """The body of a call's thread: connect if needed, run ``query``, keep the outcome."""
        try:
            conn = self._connection(call)
            if conn is None:
                return
            try:
                call.result = query(conn)
            except psycopg.Error as exc:
                if not call.abandoned:
                    self._trouble("side_query_failed", error=self._scrub(exc))
                self._drop(call, conn)
                return
            if not call.abandoned and self._troubled:
                self._troubled = False
                log.info("side_connection_recovered", target=dsn_util.describe(self._dsn))
        finally:
            call.done.set()

    def _connection(self, call: _Call) -> psycopg.Connection[Any] | None:
        with self._state:
            conn = self._conn
            if conn is not None and not conn.closed:
                call.conn = conn
                return conn
        try:
            conn = connect(self._dsn)
        except WalcastError as exc:
            if not call.abandoned:
                self._trouble(
                    "side_connection_failed",
                    target=dsn_util.describe(self._dsn),
                    error=exc.one_line(),
                )
            return None
        with self._state:
            if call.abandoned:  # connected after its caller gave up: nobody wants it
                conn.close()
                return None
            self._conn = call.conn = conn
        return conn

    def _drop(self, call: _Call, conn: psycopg.Connection[Any]) -> None:
        """Forget and close ``conn`` after a failure of ``call`` (the thread's own)."""
        with self._state:
            if self._conn is conn:
                self._conn = None
            call.conn = None
        with suppress(Exception):
            conn.close()

    def _abandon(self, call: _Call) -> None:
        """Give up on ``call``: one warning, its socket shut down, its connection forgotten.

        Shutting the socket down (not closing it: the call's thread still owns the file
        descriptor) ends libpq's wait in that thread at once; it then closes the connection.
        """
        with self._state:
            call.abandoned = True
            conn = call.conn
            if conn is not None:
                if self._conn is conn:
                    self._conn = None
                _shut_down(conn)
        self.abandoned += 1
        self._trouble(
            "side_query_abandoned",
            target=dsn_util.describe(self._dsn),
            detail=f"a side query (heartbeat, metrics, catalog) got no answer within "
            f"{self.timeout:g} s (daemon.side_query_timeout); its connection was dropped and "
            "a new one is opened for the next; the stream goes on",
        )

    def _trouble(self, event: str, **fields: Any) -> None:
        """The first failure after a success is a warning; later ones are debug events."""
        if self._troubled:
            log.debug(event, **fields)
            return
        self._troubled = True
        log.warning(event, **fields)

    def _scrub(self, exc: BaseException) -> str:
        return libpq_message(dsn_util.scrub(str(exc), self._dsn)) or type(exc).__name__

    def close(self) -> None:
        """Close the connection (it reopens on next use); never waits on the network."""
        with self._state:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        if not self._lock.acquire(blocking=False):  # a call uses it: wake it, it closes
            _shut_down(conn)
            return
        try:
            conn.close()
        finally:
            self._lock.release()


def _shut_down(conn: psycopg.Connection[Any]) -> None:
    """Shut ``conn``'s socket down both ways without closing its file descriptor."""
    with suppress(Exception):
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()

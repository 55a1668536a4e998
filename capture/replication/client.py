"""The replication stream over psycopg 3: START_REPLICATION and CopyBoth traffic.

``START_REPLICATION … LOGICAL …`` runs through ``Connection.execute``; the CopyBoth data
then flows over the connection's libpq wrapper: ``pgconn.get_copy_data`` (non-blocking),
``put_copy_data``, ``flush`` and ``consume_input``, waiting on ``pgconn.socket``.

Acknowledgement invariant: the flushed LSN sent to the server only ever moves forward, and
only to a value the caller passed to :meth:`ReplicationStream.acknowledge`, i.e. a
position whose changes the caller has durably handed on. Status updates are sent every
``status_interval`` seconds, when the server asks for one, and on close.

Liveness: a server (or a network path) that hangs must not hang walcast. A status update
sent while the stream has been quiet for ``status_interval`` asks the server for a reply
(``replyRequested``): a live walsender answers at once with a keepalive, even on an idle
database and whatever its ``wal_sender_timeout``. When nothing at all (no data, no
keepalive) has arrived for ``receive_timeout`` seconds while walcast was reading, the
stream counts as lost (:class:`~capture.errors.ConnectionLostError`, retried); the
connection also uses TCP keepalives (:func:`capture.replication.connect.connect`), so a
peer that vanished is noticed by the kernel too.
"""

from __future__ import annotations

import re
import select
import struct
import time
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import pq, sql

from capture import dsn as dsn_util
from capture.errors import (
    AccessDeniedError,
    ConnectionLostError,
    SetupError,
    SlotInUseError,
    WalcastError,
)
from capture.lsn import format_lsn, parse_lsn
from capture.replication.connect import connect, libpq_message
from capture.replication.protocol import (
    Keepalive,
    XLogData,
    parse_copy_data,
    standby_status,
)
from capture.replication.session import Purpose
from capture.replication.setup import invalidated_slot_error

DEFAULT_STATUS_INTERVAL: Final = 10.0
FLUSH_TIMEOUT: Final = 60.0
"""Seconds a status update may wait for the socket when no ``receive_timeout`` is set."""
ACK_STATUS_INTERVAL: Final = 1.0
"""Minimum seconds between status updates sent because the acknowledged LSN moved."""
_XLOG_HEADER_UNPACK: Final = struct.Struct(">QQq").unpack_from
_TRANSIENT_CLASSES: Final = frozenset({"08", "40", "53", "57"})
"""SQLSTATE classes of server errors that a reconnect can outlive."""


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """pgoutput options for START_REPLICATION."""

    publications: tuple[str, ...]
    proto_version: int = 1
    binary: bool = False
    streaming: str | None = None
    """None (off), "on", or "parallel" (v4)."""
    messages: bool = False
    two_phase: bool = False

    def render(self, conn: psycopg.Connection[tuple[object, ...]]) -> sql.Composable:
        """The option list, every value a quoted literal."""
        pubs = ",".join(sql.Identifier(p).as_string(conn) for p in self.publications)
        options: list[tuple[str, str]] = [
            ("proto_version", str(self.proto_version)),
            ("publication_names", pubs),
        ]
        if self.binary:
            options.append(("binary", "true"))
        if self.streaming:
            options.append(("streaming", self.streaming))
        if self.messages:
            options.append(("messages", "true"))
        if self.two_phase:
            options.append(("two_phase", "true"))
        return sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.SQL(k), sql.Literal(v)) for k, v in options
        )


class ReplicationStream:
    """A running logical replication stream from one slot."""

    def __init__(
        self,
        dsn: str,
        slot: str,
        options: StreamOptions,
        *,
        start_lsn: int = 0,
        status_interval: float = DEFAULT_STATUS_INTERVAL,
        receive_timeout: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.options = options
        """What START_REPLICATION asks of pgoutput (publications, protocol version, modes)."""
        self.status_interval = status_interval
        """Seconds between two standby status updates (see the module docstring)."""
        self.receive_timeout = receive_timeout
        """Seconds without any message before the stream counts as lost (None: never)."""
        self.received_lsn = start_lsn
        """Highest WAL end seen in XLogData or keepalives."""
        self.acked_lsn = start_lsn
        """Highest LSN the caller acknowledged; the flushed LSN sent to the server."""
        self._sent_ack = -1
        self._last_status = 0.0
        self._conn = connect(dsn, purpose=Purpose.STREAM)
        self._pgconn = self._conn.pgconn
        self.backend_pid = self._conn.info.backend_pid
        """The walsender's process id on the server (to recognise it after a network cut)."""
        self.server = f"{self._conn.info.host}:{self._conn.info.port}"
        """The server streaming (``host:port``): with a multi-host DSN, the one libpq chose."""
        self.timeline, self.timeline_ends = self._timelines()
        """The server's timeline, and where each earlier timeline of its history ended (its
        switch point): after a failover, WAL past the end of the old timeline is not in this
        server's history."""
        self._last_heard = time.monotonic()
        self._start(start_lsn)
        self._last_heard = time.monotonic()

    def _timelines(self) -> tuple[int, dict[int, int]]:
        """``IDENTIFY_SYSTEM``'s timeline, and ``TIMELINE_HISTORY``'s switch points."""
        try:
            row = self._conn.execute("IDENTIFY_SYSTEM").fetchone()
            assert row is not None
            timeline = int(str(row[1]))
            ends: dict[int, int] = {}
            if timeline > 1:
                found = self._conn.execute(f"TIMELINE_HISTORY {timeline}").fetchone()
                content: object = found[1] if found is not None else b""
                text = (
                    bytes(content).decode()
                    if isinstance(content, bytes | bytearray | memoryview)
                    else str(content)
                )
                for line in text.splitlines():
                    parts = line.split()
                    if len(parts) >= 2 and parts[0].isdigit():
                        ends[int(parts[0])] = parse_lsn(parts[1])
        except psycopg.Error as exc:
            self._conn.close()
            raise self._lost(exc) from None
        return timeline, ends

    def _start(self, start_lsn: int) -> None:
        stmt = sql.SQL("START_REPLICATION SLOT {} LOGICAL {} ({})").format(
            sql.Identifier(self.slot),
            sql.SQL(format_lsn(start_lsn)),
            self.options.render(self._conn),
        )
        try:
            self._conn.execute(stmt)
        except psycopg.Error as exc:
            text = dsn_util.scrub(str(exc).strip(), self.dsn).splitlines()[0]
            detail = getattr(getattr(exc, "diag", None), "message_detail", None) or ""
            self._conn.close()
            if "cannot read from logical replication slot" in text or "invalidated" in detail:
                raise invalidated_slot_error(self.slot, None, detail) from None
            if "is active for PID" in text:
                found = re.search(r"is active for PID (\d+)", text)
                pid = int(found.group(1)) if found else 0
                raise SlotInUseError(self.slot, pid, detail=text) from None
            if "does not exist" in text:
                raise SetupError(
                    text, hint="create it (--create-slot / --create-publication) or fix the name"
                ) from None
            raise SetupError(f"START_REPLICATION on slot {self.slot!r} failed: {text}") from None
        if self._pgconn.status != pq.ConnStatus.OK:
            raise ConnectionLostError("replication connection closed right after start")

    # -- reading -------------------------------------------------------------------------

    def read_batch(self, timeout: float, limit: int = 1024) -> list[XLogData | Keepalive]:
        """Return the messages already received, at most ``limit``.

        Waits up to ``timeout`` seconds for the first one; returns an empty list after a
        quiet ``timeout``.

        Keepalives that request a reply are answered before they are returned. A due
        periodic status update is sent on every call.
        """
        pgconn = self._pgconn
        get = pgconn.get_copy_data
        unpack = _XLOG_HEADER_UNPACK
        xlog_data = XLogData
        batch: list[XLogData | Keepalive] = []
        append = batch.append
        deadline = time.monotonic() + timeout
        received = self.received_lsn
        try:
            while True:
                size, data = get(1)
                if size > 0:
                    if data[0] == 119 and size > 25:  # 'w', then the 24-byte header
                        start, end, clock = unpack(data, 1)
                        append(xlog_data(start, end, clock, bytes(data[25:])))
                        received = max(received, end)
                    else:
                        message = parse_copy_data(data)
                        append(message)
                        received = max(message.wal_end, received)
                        if isinstance(message, Keepalive) and message.reply_requested:
                            self.received_lsn = received
                            self.send_status()
                    if len(batch) >= limit:
                        break
                    continue
                if size == -1:
                    raise self._lost(None)
                if batch:
                    break
                self.maybe_send_status()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                ready, _, _ = select.select([pgconn.socket], [], [], min(remaining, 1.0))
                if ready:
                    pgconn.consume_input()
                else:  # the socket itself is silent (data read late is not silence)
                    self._check_heard()
        except psycopg.OperationalError as exc:
            raise self._lost(exc) from None
        self.received_lsn = received
        if batch:
            self._last_heard = time.monotonic()
        self.maybe_send_status()
        return batch

    def _check_heard(self) -> None:
        """Raise when the server has sent nothing for ``receive_timeout`` seconds."""
        limit = self.receive_timeout
        if limit is None:
            return
        silent = time.monotonic() - self._last_heard
        if silent >= limit:
            raise ConnectionLostError(
                f"replication stream from slot {self.slot!r} received nothing (not even a "
                f"keepalive) for {silent:.0f} s at {format_lsn(self.received_lsn)}: the server "
                "or the network hangs",
                hint="walcast drops the connection and reconnects; source.receive_timeout "
                f"sets the wait (now {limit:g} s)",
            )

    def _lost(self, exc: BaseException | None) -> WalcastError:
        """The error for a stream that ended: the server's own ErrorResponse when it sent one.

        A server error is terminal unless its SQLSTATE class says the server or the network
        went away (08 connection, 40 rollback, 53 resources, 57 operator intervention):
        a dropped publication, an invalidated slot or text the server cannot convert fail
        the same way on every retry. A connection that just broke is transient.
        """
        where = (
            f"replication stream from slot {self.slot!r} on {self.server} ended at "
            f"{format_lsn(self.received_lsn)}"
        )
        server = self._server_error() if exc is None else None
        if server is not None:
            sqlstate, text = server
            text = dsn_util.scrub(text, self.dsn)
            if sqlstate[:2] in _TRANSIENT_CLASSES:
                return ConnectionLostError(
                    f"{where}: the server said: {text}",
                    hint="walcast resumes from the slot's confirmed position on restart",
                )
            family = (
                AccessDeniedError if sqlstate[:2] == "28" or sqlstate == "42501" else SetupError
            )
            return family(
                f"{where}: the server said: {text} (SQLSTATE {sqlstate})",
                hint="fix the cause on the server, then start walcast again; the slot keeps "
                "every change not yet acknowledged",
            )
        detail = self._pgconn.get_error_message() if exc is None else str(exc)
        text = libpq_message(dsn_util.scrub(detail, self.dsn))
        return ConnectionLostError(
            f"{where}: {text or 'connection closed'}",
            hint="walcast resumes from the slot's confirmed position on restart",
        )

    def _server_error(self, timeout: float = 5.0) -> tuple[str, str] | None:
        """(SQLSTATE, primary message) of the ErrorResponse that ended the copy, if any."""
        pgconn = self._pgconn
        deadline = time.monotonic() + timeout
        try:
            while pgconn.is_busy() and time.monotonic() < deadline:
                select.select([pgconn.socket], [], [], 0.2)
                pgconn.consume_input()
            found: tuple[str, str] | None = None
            for _ in range(8):  # the copy's result, then NULL; never loop for ever
                result = pgconn.get_result()
                if result is None:
                    break
                if found is None and result.status == pq.ExecStatus.FATAL_ERROR:
                    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
                    primary = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
                    if primary:
                        found = (
                            (sqlstate or b"").decode("ascii", "replace"),
                            primary.decode("utf-8", "replace"),
                        )
        except psycopg.Error:
            return None
        return found

    # -- acknowledging ---------------------------------------------------------------------

    def acknowledge(self, lsn: int) -> None:
        """Record that everything up to ``lsn`` was handed on; never moves backwards."""
        self.acked_lsn = max(lsn, self.acked_lsn)

    def maybe_send_status(self) -> None:
        """Send a status update when the interval has passed or the acknowledgement moved.

        A moved acknowledgement is sent at most once per :data:`ACK_STATUS_INTERVAL`, so
        the slot releases WAL promptly without a status update per transaction.
        """
        now = time.monotonic()
        elapsed = now - self._last_status
        if elapsed >= self.status_interval:
            # Quiet for a while: ask for a reply, so a live server proves it is alive.
            self.send_status(reply=now - self._last_heard >= self.status_interval)
        elif self.acked_lsn != self._sent_ack and elapsed >= ACK_STATUS_INTERVAL:
            self.send_status()

    def send_status(self, *, reply: bool = False, timeout: float | None = None) -> None:
        """Send a standby status update with the acknowledged LSN as flushed/applied.

        The flush waits at most ``timeout`` seconds (default: ``receive_timeout``, else
        :data:`FLUSH_TIMEOUT`) for the socket to take the update: a socket that takes
        nothing for that long (a frozen network, a stopped server) ends the stream as lost
        (:class:`~capture.errors.ConnectionLostError`, retried), never holds the pump.
        """
        ack = self.acked_lsn
        payload = standby_status(max(self.received_lsn, ack), ack, ack, reply=reply)
        if timeout is None:
            timeout = self.receive_timeout if self.receive_timeout is not None else FLUSH_TIMEOUT
        deadline = time.monotonic() + timeout
        try:
            self._pgconn.put_copy_data(payload)
            while self._pgconn.flush() == 1:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectionLostError(
                        f"replication stream from slot {self.slot!r}: a status update could "
                        f"not be sent for {timeout:g} s at {format_lsn(self.received_lsn)}: "
                        "the server or the network hangs",
                        hint="walcast drops the connection and reconnects; "
                        "source.receive_timeout sets the wait",
                    )
                select.select([], [self._pgconn.socket], [], min(remaining, 1.0))
        except psycopg.OperationalError as exc:
            raise self._lost(exc) from None
        self._sent_ack = ack
        self._last_status = time.monotonic()

    def close(self, *, timeout: float = 5.0) -> None:
        """Send a final status update, end the copy, and disconnect.

        The server handles messages in order, so waiting for the end of the copy proves
        that it has processed the final acknowledgement before the socket closes.
        """
        pgconn = self._pgconn
        try:
            if pgconn.status == pq.ConnStatus.OK:
                self.send_status(timeout=timeout)
                pgconn.put_copy_end()
                pgconn.flush()
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    size, _ = pgconn.get_copy_data(1)
                    if size == -1:
                        break
                    if size == 0:
                        select.select([pgconn.socket], [], [], 0.2)
                        pgconn.consume_input()
        except (ConnectionLostError, psycopg.Error):
            pass
        finally:
            self._conn.close()

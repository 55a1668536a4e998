"""A fake PostgreSQL walsender: just enough of the wire protocol for ``walcast tail``.

A real server never sends a tuple with more columns than its Relation, or a commit time in
the year 146,000; to see what walcast does with such messages through its CLI, this server
answers walcast's pre-flight queries like a healthy PostgreSQL 15 and then streams the
pgoutput messages a test gives it. It records every standby status update, so that a test
can prove that nothing at or after a bad message was acknowledged.

Protocol covered: SSL/GSS requests (refused), trust authentication, simple and extended
queries (answered by matching the SQL text, every column as text unless typed), and
``IDENTIFY_SYSTEM`` (timeline 1), ``START_REPLICATION`` (CopyBoth with XLogData, CopyDone
on the client's CopyDone).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_TEXT, _INT4, _INT8, _BOOL = 25, 23, 20, 16
Row = Sequence[str | None]


@dataclass
class Answer:
    """Columns (name, type OID) and rows of one query's result."""

    columns: list[tuple[str, int]]
    rows: list[Row]


def _answer(sql: str, slot: str) -> Answer:
    if "current_setting('server_version_num')" in sql:
        names = ("version", "wal_level", "database", "encoding", "standby")
        row = ("150000", "logical", "fake", "UTF8", "false")
        return Answer([(n, _TEXT) for n in names], [row])
    if sql.strip().rstrip(";") == "IDENTIFY_SYSTEM":
        columns = [("systemid", _TEXT), ("timeline", _INT4), ("xlogpos", _TEXT), ("dbname", _TEXT)]
        return Answer(columns, [("7000000000000000001", "1", "0/100", "fake")])
    if "name = 'wal_sender_timeout'" in sql:
        return Answer([("setting", _INT8)], [("60000",)])
    if "FROM pg_publication WHERE" in sql:
        return Answer([("one", _INT4)], [("1",)])
    if "FROM pg_replication_slots s CROSS JOIN here" in sql:  # capture.replication.slots
        columns = [
            ("slot_name", _TEXT), ("slot_type", _TEXT), ("plugin", _TEXT), ("database", _TEXT),
            ("temporary", _BOOL), ("active_pid", _INT4), ("confirmed", _INT8),
            ("restart", _INT8), ("current", _INT8), ("wal_status", _TEXT), ("safe", _INT8),
            ("two_phase", _BOOL), ("write_lag", _TEXT), ("flush_lag", _TEXT),
            ("replay_lag", _TEXT), ("reply_time", _TEXT), ("failover", _BOOL),
            ("synced", _BOOL), ("reason", _TEXT), ("conflicting", _BOOL), ("standby", _BOOL),
        ]  # fmt: skip
        row = (
            slot, "logical", "pgoutput", "fake", "f", None, "256", "256", "512", "reserved",
            None, "f", None, None, None, None, None, None, None, None, "f",
        )  # fmt: skip
        return Answer(columns, [row])
    if "FROM pg_replication_slots WHERE slot_name" in sql and "plugin" in sql:
        columns = [
            ("slot_name", _TEXT), ("plugin", _TEXT), ("slot_type", _TEXT), ("database", _TEXT),
            ("active_pid", _INT4), ("confirmed_flush_lsn", _TEXT), ("two_phase", _BOOL),
        ]  # fmt: skip
        return Answer(columns, [(slot, "pgoutput", "logical", "fake", None, "0/100", "f")])
    if "FROM pg_replication_slots WHERE slot_name" in sql:
        return Answer([("one", _INT4)], [("1",)])
    if "attmissingval" in sql:  # capture.replication.catalog.catalog_columns: none known
        columns = [("attname", _TEXT), ("attnum", _INT4), ("atttypid", _TEXT),
                   ("atthasdef", _BOOL), ("attmissingval", _TEXT)]  # fmt: skip
        return Answer(columns, [])
    return Answer([], [])


@dataclass
class FakeWalsender:
    """Serves ``messages`` ((WAL start, pgoutput bytes)) to every START_REPLICATION."""

    messages: list[tuple[int, bytes]]
    slot: str = "fake_slot"
    flushed: list[int] = field(default_factory=list)
    """The flush LSN of every standby status update received, in order."""
    queries: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=fake dbname=fake sslmode=disable"

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # -- one connection

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._session(conn)
            except (ConnectionError, OSError, EOFError):
                return

    def _session(self, conn: socket.socket) -> None:
        while True:
            (length,) = struct.unpack(">i", _read(conn, 4))
            body = _read(conn, length - 4)
            (code,) = struct.unpack(">i", body[:4])
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                conn.sendall(b"N")
                continue
            break
        params = body[8:].split(b"\x00")
        settings = dict(zip(params[::2], params[1::2], strict=False))
        _send(conn, b"R", struct.pack(">i", 0))
        for key, value in (
            (b"server_version", b"15.0"), (b"server_encoding", b"UTF8"),
            (b"client_encoding", b"UTF8"), (b"DateStyle", b"ISO, MDY"),
            (b"integer_datetimes", b"on"), (b"standard_conforming_strings", b"on"),
            (b"TimeZone", b"UTC"),
        ):  # fmt: skip
            _send(conn, b"S", key + b"\x00" + value + b"\x00")
        _send(conn, b"K", struct.pack(">ii", 4242, 1))
        _send(conn, b"Z", b"I")
        replication = settings.get(b"replication") == b"database"
        pending_sql = ""
        while True:
            kind = _read(conn, 1)
            (length,) = struct.unpack(">i", _read(conn, 4))
            body = _read(conn, length - 4)
            if kind == b"X":
                return
            if kind == b"Q":
                sql = body.rstrip(b"\x00").decode()
                self.queries.append(sql)
                if replication and sql.startswith("START_REPLICATION"):
                    self._stream(conn)
                    return
                self._result(conn, _answer(sql, self.slot))
                _send(conn, b"Z", b"I")
            elif kind == b"P":
                name_end = body.index(b"\x00")
                pending_sql = body[name_end + 1 : body.index(b"\x00", name_end + 1)].decode()
                self.queries.append(pending_sql)
                _send(conn, b"1", b"")
            elif kind == b"B":
                _send(conn, b"2", b"")
            elif kind == b"D":
                answer = _answer(pending_sql, self.slot)
                if answer.columns:
                    _send(conn, b"T", _row_description(answer))
                else:
                    _send(conn, b"n", b"")
            elif kind == b"E":
                self._rows(conn, _answer(pending_sql, self.slot))
            elif kind == b"S":
                _send(conn, b"Z", b"I")

    def _result(self, conn: socket.socket, answer: Answer) -> None:
        if answer.columns:
            _send(conn, b"T", _row_description(answer))
        self._rows(conn, answer)

    def _rows(self, conn: socket.socket, answer: Answer) -> None:
        for row in answer.rows:
            parts = [struct.pack(">h", len(row))]
            for value in row:
                if value is None:
                    parts.append(struct.pack(">i", -1))
                else:
                    data = value.encode()
                    parts.append(struct.pack(">i", len(data)) + data)
            _send(conn, b"D", b"".join(parts))
        _send(conn, b"C", f"SELECT {len(answer.rows)}".encode() + b"\x00")

    def _stream(self, conn: socket.socket) -> None:
        _send(conn, b"W", struct.pack(">bh", 0, 0))
        for start, payload in self.messages:
            header = b"w" + struct.pack(">QQq", start, start + len(payload), 0)
            _send(conn, b"d", header + payload)
        while True:
            kind = _read(conn, 1)
            (length,) = struct.unpack(">i", _read(conn, 4))
            body = _read(conn, length - 4)
            if kind == b"d" and body[:1] == b"r":
                _written, flushed = struct.unpack(">QQ", body[1:17])
                self.flushed.append(flushed)
            elif kind in (b"c", b"X"):
                if kind == b"c":
                    _send(conn, b"c", b"")
                    _send(conn, b"C", b"COPY 0\x00")
                    _send(conn, b"Z", b"I")
                return


def _row_description(answer: Answer) -> bytes:
    parts = [struct.pack(">h", len(answer.columns))]
    for name, oid in answer.columns:
        parts.append(name.encode() + b"\x00" + struct.pack(">ihihih", 0, 0, oid, -1, -1, 0))
    return b"".join(parts)


def _send(conn: socket.socket, kind: bytes, body: bytes) -> None:
    conn.sendall(kind + struct.pack(">i", len(body) + 4) + body)


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data

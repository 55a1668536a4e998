"""Bytes to pgoutput messages, for protocol versions 1 to 4.

The decoder only turns bytes into :mod:`capture.pgoutput.messages` objects. It keeps
exactly one piece of protocol state, whether it is inside a streamed chunk (between
Stream Start and Stream Stop), because that decides whether row-level messages carry
an xid. Everything about relations and types is the caller's (:mod:`capture.relcache`).

Invariants:

* Every malformed input raises :class:`capture.errors.DecodeError` naming the message
  type and the byte offset of the failure; no other exception escapes ``decode``.
* A message must be consumed exactly: trailing bytes are an error.
* Timestamps must lie in years 1 to 9999 (what a datetime, and every output format, can
  represent); PostgreSQL's commit clock never leaves that range, so anything outside is
  corruption.
* Work is bounded by the input length (counts are checked against the bytes left before
  any loop runs), so hostile input cannot make the decoder hang or allocate without bound.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from capture.errors import DecodeError
from capture.pgoutput.messages import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    MessageType,
    Origin,
    Prepare,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    UnchangedToast,
    Update,
)

_I16: Final = struct.Struct(">h")
_I16_UNPACK: Final = _I16.unpack_from
_I32: Final = struct.Struct(">i")
_I32_UNPACK: Final = _I32.unpack_from
_U32: Final = struct.Struct(">I")
_U32_UNPACK: Final = _U32.unpack_from
_U64: Final = struct.Struct(">Q")
_BEGIN: Final = struct.Struct(">QqI")
_COMMIT: Final = struct.Struct(">BQQq")
_STREAM_COMMIT: Final = struct.Struct(">IBQQq")
_STREAM_ABORT: Final = struct.Struct(">II")
_STREAM_ABORT_PARALLEL: Final = struct.Struct(">IIQq")
_PREPARE_HEAD: Final = struct.Struct(">BQQqI")
_BEGIN_PREPARE_HEAD: Final = struct.Struct(">QQqI")
_ROLLBACK_PREPARED_HEAD: Final = struct.Struct(">BQQqqI")
_COLUMN_TAIL: Final = struct.Struct(">Ii")
_MESSAGE_HEAD: Final = struct.Struct(">BQ")

_PART_NEW: Final = ord("N")
_PART_KEY: Final = ord("K")
_PART_OLD: Final = ord("O")

_MIN_TS: Final = -63_082_281_600_000_000
"""0001-01-01 00:00:00 UTC in µs since 2000-01-01 (the earliest datetime)."""
_MAX_TS: Final = 252_455_615_999_999_999
"""9999-12-31 23:59:59.999999 UTC in µs since 2000-01-01 (the latest datetime)."""

_REPLICA_IDENTITIES: Final = {ord(r.value): r for r in ReplicaIdentity}

_ROW_MESSAGES: Final = frozenset(
    {
        MessageType.RELATION,
        MessageType.TYPE,
        MessageType.INSERT,
        MessageType.UPDATE,
        MessageType.DELETE,
        MessageType.TRUNCATE,
        MessageType.MESSAGE,
    }
)
"""Messages that carry an Int32 xid after the type byte inside a streamed chunk."""

MIN_VERSION_FOR: Final = {
    MessageType.STREAM_START: 2,
    MessageType.STREAM_STOP: 2,
    MessageType.STREAM_COMMIT: 2,
    MessageType.STREAM_ABORT: 2,
    MessageType.BEGIN_PREPARE: 3,
    MessageType.PREPARE: 3,
    MessageType.COMMIT_PREPARED: 3,
    MessageType.ROLLBACK_PREPARED: 3,
    MessageType.STREAM_PREPARE: 3,
}
"""The first protocol version in which each newer message type exists."""


class _Fail(Exception):  # noqa: N818 - internal control flow, converted to DecodeError
    """Raised by the readers with the offset and reason; never escapes this module."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason


def _need(buf: bytes, pos: int, size: int, what: str) -> None:
    if pos + size > len(buf):
        raise _Fail(pos, f"truncated: {what} needs {size} bytes, {max(len(buf) - pos, 0)} left")


def _timestamp(ts: int, pos: int, what: str) -> int:
    if not _MIN_TS <= ts <= _MAX_TS:
        raise _Fail(pos, f"{what} {ts} µs since 2000-01-01 is outside years 1 to 9999")
    return ts


def _string(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    end = buf.find(b"\x00", pos)
    if end < 0:
        raise _Fail(pos, f"truncated: {what} has no terminating NUL")
    try:
        return buf[pos:end].decode(), end + 1
    except UnicodeDecodeError as exc:
        raise _Fail(pos + exc.start, f"{what} is not valid UTF-8") from None


def _tuple(
    buf: bytes,
    pos: int,
    _unpack_i16: Callable[[bytes, int], tuple[int]] = _I16_UNPACK,
    _unpack_i32: Callable[[bytes, int], tuple[int]] = _I32_UNPACK,
    _unchanged: UnchangedToast = UNCHANGED_TOAST,
    _tuple_data: type[TupleData] = TupleData,
) -> tuple[TupleData, int]:
    """Parse TupleData at ``pos``; the hot path of decoding.

    Bounds are checked by the slicing/unpacking itself (IndexError, struct.error), which
    are turned into a failure at the current offset; only lengths need an explicit check.
    """
    start = pos
    size = len(buf)
    values: list[bytes | UnchangedToast | None] = []
    append = values.append
    special: list[tuple[int, int]] | None = None
    """(column, kind) of every column not sent as text; None while all are text."""
    i = -1
    try:
        (ncols,) = _unpack_i16(buf, pos)
        if ncols < 0:
            raise _Fail(pos, f"negative TupleData column count {ncols}")
        pos += 2
        for i in range(ncols):
            kind = buf[pos]
            pos += 1
            if kind != 116:  # not 't'
                if special is None:
                    special = []
                special.append((i, kind))
                if kind == 110:  # 'n'
                    append(None)
                    continue
                if kind == 117:  # 'u'
                    append(_unchanged)
                    continue
                if kind != 98:  # 'b'
                    raise _Fail(
                        pos - 1, f"unknown TupleData column kind 0x{kind:02x} in column {i}"
                    )
            (length,) = _unpack_i32(buf, pos)
            pos += 4
            end = pos + length
            if length < 0 or end > size:
                raise _Fail(pos - 4, f"column {i} length {length} exceeds the message")
            append(buf[pos:end])
            pos = end
    except (IndexError, struct.error):
        what = "column count" if i < 0 and pos == start else f"column {max(i, 0)}"
        raise _Fail(pos, f"truncated: TupleData {what}") from None
    return _tuple_data(_kinds(ncols, special), tuple(values)), pos


_MAX_COLUMNS: Final = 1664
"""MaxTupleAttributeNumber: no table has more columns."""
_TEXT_KINDS: Final[dict[int, bytes]] = {}


def all_text_kinds(ncols: int) -> bytes:
    """The kinds of a tuple of ``ncols`` columns all sent as text (``b"ttt…"``).

    For any column count a table can have, every such tuple the decoder builds holds this
    very object, so callers may recognise one with ``is``.
    """
    found = _TEXT_KINDS.get(ncols)
    if found is None:
        found = b"t" * ncols
        if ncols <= _MAX_COLUMNS:  # hostile counts must not grow the cache
            _TEXT_KINDS[ncols] = found
    return found


def _kinds(ncols: int, special: list[tuple[int, int]] | None) -> bytes:
    """The kind byte of every column: 't' except where ``special`` says otherwise."""
    if special is None:
        return _TEXT_KINDS.get(ncols) or all_text_kinds(ncols)
    kinds = bytearray(all_text_kinds(ncols))
    for index, kind in special:
        kinds[index] = kind
    return bytes(kinds)


class PgOutputDecoder:
    """Decode pgoutput messages of one replication stream.

    ``proto_version`` is the ``proto_version`` option given to START_REPLICATION; message
    types newer than it are rejected. ``streaming_parallel`` must be true when the stream
    was started with ``streaming 'parallel'`` (v4), because then Stream Abort carries an
    abort LSN and timestamp.
    """

    def __init__(self, proto_version: int = 1, *, streaming_parallel: bool = False) -> None:
        if not 1 <= proto_version <= 4:
            raise ValueError(f"pgoutput protocol version {proto_version} is not 1 to 4")
        self.proto_version = proto_version
        self.streaming_parallel = streaming_parallel
        self.in_stream = False
        """True between Stream Start and Stream Stop: row messages then carry an xid."""
        handlers: dict[int, Callable[[bytes, int, int | None], tuple[Message, int]]] = {
            MessageType.BEGIN: self._begin,
            MessageType.COMMIT: self._commit,
            MessageType.ORIGIN: self._origin,
            MessageType.RELATION: self._relation,
            MessageType.TYPE: self._type,
            MessageType.INSERT: self._insert,
            MessageType.UPDATE: self._update,
            MessageType.DELETE: self._delete,
            MessageType.TRUNCATE: self._truncate,
            MessageType.MESSAGE: self._message,
            MessageType.STREAM_START: self._stream_start,
            MessageType.STREAM_STOP: self._stream_stop,
            MessageType.STREAM_COMMIT: self._stream_commit,
            MessageType.STREAM_ABORT: self._stream_abort,
            MessageType.BEGIN_PREPARE: self._begin_prepare,
            MessageType.PREPARE: self._prepare,
            MessageType.STREAM_PREPARE: self._stream_prepare,
            MessageType.COMMIT_PREPARED: self._commit_prepared,
            MessageType.ROLLBACK_PREPARED: self._rollback_prepared,
        }
        self._handlers = {
            t: h
            for t, h in handlers.items()
            if MIN_VERSION_FOR.get(MessageType(t), 1) <= proto_version
        }
        """Handlers of the message types this protocol version has, by type byte."""

    def decode(self, data: bytes) -> Message:
        """Decode one whole pgoutput message (the payload of one XLogData)."""
        if not data:
            raise DecodeError("empty message", message_type="?", offset=0)
        type_byte = data[0]
        handler = self._handlers.get(type_byte)
        if handler is None:
            raise self._unexpected_type(type_byte)
        pos = 1
        xid: int | None = None
        try:
            if self.in_stream and type_byte in _ROW_MESSAGES:
                _need(data, pos, 4, "streamed xid")
                (xid,) = _U32.unpack_from(data, pos)
                pos += 4
            message, end = handler(data, pos, xid)
        except _Fail as fail:
            raise DecodeError(
                fail.reason, message_type=chr(type_byte), offset=fail.offset
            ) from None
        except struct.error as exc:
            raise DecodeError(
                f"truncated: {exc}", message_type=chr(type_byte), offset=pos
            ) from None
        if end != len(data):
            raise DecodeError(
                f"{len(data) - end} trailing bytes after the message",
                message_type=chr(type_byte),
                offset=end,
            )
        return message

    def _unexpected_type(self, type_byte: int) -> DecodeError:
        try:
            known = MessageType(type_byte)
        except ValueError:
            return DecodeError(
                f"unknown message type byte 0x{type_byte:02x}",
                message_type=chr(type_byte),
                offset=0,
            )
        return DecodeError(
            f"message type {known.name} needs protocol version {MIN_VERSION_FOR[known]}, "
            f"stream uses {self.proto_version}",
            message_type=chr(type_byte),
            offset=0,
        )

    # -- transaction framing --------------------------------------------------------------

    def _begin(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, _BEGIN.size, "Begin")
        final_lsn, ts, xid = _BEGIN.unpack_from(buf, pos)
        return Begin(final_lsn, _timestamp(ts, pos + 8, "commit time"), xid), pos + _BEGIN.size

    def _commit(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, _COMMIT.size, "Commit")
        flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(buf, pos)
        _timestamp(ts, pos + 17, "commit time")
        return Commit(flags, commit_lsn, end_lsn, ts), pos + _COMMIT.size

    def _origin(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 8, "Origin LSN")
        (lsn,) = _U64.unpack_from(buf, pos)
        name, pos = _string(buf, pos + 8, "origin name")
        return Origin(lsn, name), pos

    # -- catalog ----------------------------------------------------------------------------

    def _relation(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 4, "relation id")
        (relid,) = _U32.unpack_from(buf, pos)
        namespace, pos = _string(buf, pos + 4, "relation namespace")
        name, pos = _string(buf, pos, "relation name")
        _need(buf, pos, 3, "replica identity and column count")
        identity = _REPLICA_IDENTITIES.get(buf[pos])
        if identity is None:
            raise _Fail(pos, f"unknown replica identity 0x{buf[pos]:02x}")
        (ncols,) = _I16.unpack_from(buf, pos + 1)
        pos += 3
        if ncols < 0 or pos + ncols * 10 > len(buf):
            raise _Fail(pos - 2, f"column count {ncols} does not fit the message")
        columns = []
        for i in range(ncols):
            _need(buf, pos, 1, f"flags of column {i}")
            flags = buf[pos]
            colname, pos = _string(buf, pos + 1, f"name of column {i}")
            _need(buf, pos, 8, f"type of column {i}")
            type_oid, typmod = _COLUMN_TAIL.unpack_from(buf, pos)
            pos += 8
            columns.append(RelationColumn(flags, colname, type_oid, typmod))
        return Relation(xid, relid, namespace, name, identity, tuple(columns)), pos

    def _type(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 4, "type id")
        (oid,) = _U32.unpack_from(buf, pos)
        namespace, pos = _string(buf, pos + 4, "type namespace")
        name, pos = _string(buf, pos, "type name")
        return Type(xid, oid, namespace, name), pos

    # -- row changes --------------------------------------------------------------------------

    def _insert(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        if len(buf) < pos + 5:
            raise _Fail(pos, "truncated: Insert header needs 5 bytes")
        (relid,) = _U32_UNPACK(buf, pos)
        if buf[pos + 4] != 78:  # 'N'
            raise _Fail(pos + 4, f"expected 'N' before the new tuple, got 0x{buf[pos + 4]:02x}")
        new, pos = _tuple(buf, pos + 5)
        return Insert(xid, relid, new), pos

    def _old_part(self, buf: bytes, pos: int) -> tuple[TupleData | None, bool, int]:
        part = buf[pos]
        if part in (_PART_KEY, _PART_OLD):
            old, pos = _tuple(buf, pos + 1)
            return old, part == _PART_KEY, pos
        return None, False, pos

    def _update(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 5, "Update header")
        (relid,) = _U32.unpack_from(buf, pos)
        old, is_key, pos = self._old_part(buf, pos + 4)
        _need(buf, pos, 1, "'N' marker")
        if buf[pos] != _PART_NEW:
            raise _Fail(pos, f"expected 'K', 'O' or 'N' in Update, got 0x{buf[pos]:02x}")
        new, pos = _tuple(buf, pos + 1)
        return Update(xid, relid, old, is_key, new), pos

    def _delete(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 5, "Delete header")
        (relid,) = _U32.unpack_from(buf, pos)
        if buf[pos + 4] not in (_PART_KEY, _PART_OLD):
            raise _Fail(pos + 4, f"expected 'K' or 'O' in Delete, got 0x{buf[pos + 4]:02x}")
        old, is_key, pos = self._old_part(buf, pos + 4)
        return Delete(xid, relid, old, is_key), pos

    def _truncate(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 5, "Truncate header")
        (count,) = _I32.unpack_from(buf, pos)
        options = buf[pos + 4]
        pos += 5
        if count < 0 or pos + 4 * count > len(buf):
            raise _Fail(pos - 5, f"relation count {count} does not fit the message")
        relids = struct.unpack_from(f">{count}I", buf, pos)
        return Truncate(xid, options, relids), pos + 4 * count

    def _message(self, buf: bytes, pos: int, xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, _MESSAGE_HEAD.size, "Message header")
        flags, lsn = _MESSAGE_HEAD.unpack_from(buf, pos)
        prefix, pos = _string(buf, pos + _MESSAGE_HEAD.size, "message prefix")
        _need(buf, pos, 4, "message length")
        (length,) = _I32.unpack_from(buf, pos)
        pos += 4
        if length < 0 or pos + length > len(buf):
            raise _Fail(pos - 4, f"message length {length} exceeds the message")
        return LogicalMessage(xid, flags, lsn, prefix, buf[pos : pos + length]), pos + length

    # -- streaming (v2+) ----------------------------------------------------------------------

    def _stream_start(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, 5, "Stream Start")
        (xid,) = _U32.unpack_from(buf, pos)
        self.in_stream = True
        return StreamStart(xid, buf[pos + 4] == 1), pos + 5

    def _stream_stop(self, _buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        self.in_stream = False
        return StreamStop(), pos

    def _stream_commit(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, _STREAM_COMMIT.size, "Stream Commit")
        xid, flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT.unpack_from(buf, pos)
        _timestamp(ts, pos + 21, "commit time")
        return StreamCommit(xid, flags, commit_lsn, end_lsn, ts), pos + _STREAM_COMMIT.size

    def _stream_abort(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        if self.streaming_parallel:
            _need(buf, pos, _STREAM_ABORT_PARALLEL.size, "Stream Abort")
            xid, subxid, lsn, ts = _STREAM_ABORT_PARALLEL.unpack_from(buf, pos)
            _timestamp(ts, pos + 16, "abort time")
            return StreamAbort(xid, subxid, lsn, ts), pos + _STREAM_ABORT_PARALLEL.size
        _need(buf, pos, _STREAM_ABORT.size, "Stream Abort")
        xid, subxid = _STREAM_ABORT.unpack_from(buf, pos)
        return StreamAbort(xid, subxid), pos + _STREAM_ABORT.size

    # -- two-phase (v3+) --------------------------------------------------------------------

    def _begin_prepare(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, _BEGIN_PREPARE_HEAD.size, "Begin Prepare")
        lsn, end, ts, xid = _BEGIN_PREPARE_HEAD.unpack_from(buf, pos)
        _timestamp(ts, pos + 16, "prepare time")
        gid, pos = _string(buf, pos + _BEGIN_PREPARE_HEAD.size, "gid")
        return BeginPrepare(lsn, end, ts, xid, gid), pos

    def _prepare_fields(
        self, buf: bytes, pos: int
    ) -> tuple[tuple[int, int, int, int, int], str, int]:
        _need(buf, pos, _PREPARE_HEAD.size, "Prepare")
        head = _PREPARE_HEAD.unpack_from(buf, pos)
        _timestamp(head[3], pos + 17, "prepare or commit time")
        gid, pos = _string(buf, pos + _PREPARE_HEAD.size, "gid")
        return head, gid, pos

    def _prepare(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        (flags, lsn, end, ts, xid), gid, pos = self._prepare_fields(buf, pos)
        return Prepare(flags, lsn, end, ts, xid, gid), pos

    def _stream_prepare(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        (flags, lsn, end, ts, xid), gid, pos = self._prepare_fields(buf, pos)
        return StreamPrepare(flags, lsn, end, ts, xid, gid), pos

    def _commit_prepared(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        (flags, lsn, end, ts, xid), gid, pos = self._prepare_fields(buf, pos)
        return CommitPrepared(flags, lsn, end, ts, xid, gid), pos

    def _rollback_prepared(self, buf: bytes, pos: int, _xid: int | None) -> tuple[Message, int]:
        _need(buf, pos, _ROLLBACK_PREPARED_HEAD.size, "Rollback Prepared")
        flags, prep_end, rb_end, prep_ts, rb_ts, xid = _ROLLBACK_PREPARED_HEAD.unpack_from(buf, pos)
        _timestamp(prep_ts, pos + 17, "prepare time")
        _timestamp(rb_ts, pos + 25, "rollback time")
        gid, pos = _string(buf, pos + _ROLLBACK_PREPARED_HEAD.size, "gid")
        return RollbackPrepared(flags, prep_end, rb_end, prep_ts, rb_ts, xid, gid), pos

"""Build pgoutput wire bytes by hand, so the decoder is tested without a server.

Each function returns the bytes of one message exactly as the server lays them out
(PostgreSQL's ``proto.c``). ``xid`` adds the streamed-transaction xid after the type byte.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

Column = tuple[
    str, bytes | None
]  # (kind, value): ("t", b"1"), ("b", b"..."), ("n", None), ("u", None)


def _s(text: str) -> bytes:
    return text.encode() + b"\x00"


def _xid(xid: int | None) -> bytes:
    return b"" if xid is None else struct.pack(">I", xid)


def tuple_data(columns: Sequence[Column]) -> bytes:
    out = struct.pack(">h", len(columns))
    for kind, value in columns:
        out += kind.encode()
        if kind in ("t", "b"):
            assert value is not None
            out += struct.pack(">i", len(value)) + value
    return out


def begin(final_lsn: int, ts: int, xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", final_lsn, ts, xid)


def commit(commit_lsn: int, end_lsn: int, ts: int, flags: int = 0) -> bytes:
    return b"C" + struct.pack(">BQQq", flags, commit_lsn, end_lsn, ts)


def origin(lsn: int, name: str) -> bytes:
    return b"O" + struct.pack(">Q", lsn) + _s(name)


def relation(
    relid: int,
    namespace: str,
    name: str,
    columns: Sequence[tuple[int, str, int, int]],
    identity: str = "d",
    xid: int | None = None,
) -> bytes:
    out = b"R" + _xid(xid) + struct.pack(">I", relid) + _s(namespace) + _s(name)
    out += identity.encode() + struct.pack(">h", len(columns))
    for flags, colname, type_oid, typmod in columns:
        out += struct.pack(">B", flags) + _s(colname) + struct.pack(">Ii", type_oid, typmod)
    return out


def type_message(oid: int, namespace: str, name: str, xid: int | None = None) -> bytes:
    return b"Y" + _xid(xid) + struct.pack(">I", oid) + _s(namespace) + _s(name)


def insert(relid: int, new: Sequence[Column], xid: int | None = None) -> bytes:
    return b"I" + _xid(xid) + struct.pack(">I", relid) + b"N" + tuple_data(new)


def update(
    relid: int,
    new: Sequence[Column],
    old: Sequence[Column] | None = None,
    old_kind: str = "O",
    xid: int | None = None,
) -> bytes:
    out = b"U" + _xid(xid) + struct.pack(">I", relid)
    if old is not None:
        out += old_kind.encode() + tuple_data(old)
    return out + b"N" + tuple_data(new)


def delete(relid: int, old: Sequence[Column], old_kind: str = "K", xid: int | None = None) -> bytes:
    return b"D" + _xid(xid) + struct.pack(">I", relid) + old_kind.encode() + tuple_data(old)


def truncate(relids: Sequence[int], options: int = 0, xid: int | None = None) -> bytes:
    out = b"T" + _xid(xid) + struct.pack(">iB", len(relids), options)
    return out + b"".join(struct.pack(">I", r) for r in relids)


def message(
    prefix: str, content: bytes, lsn: int, transactional: bool = True, xid: int | None = None
) -> bytes:
    flags = 1 if transactional else 0
    return (
        b"M" + _xid(xid) + struct.pack(">BQ", flags, lsn) + _s(prefix)
        + struct.pack(">i", len(content)) + content
    )  # fmt: skip


def stream_start(xid: int, first: bool = True) -> bytes:
    return b"S" + struct.pack(">IB", xid, 1 if first else 0)


def stream_stop() -> bytes:
    return b"E"


def stream_commit(xid: int, commit_lsn: int, end_lsn: int, ts: int) -> bytes:
    return b"c" + struct.pack(">IBQQq", xid, 0, commit_lsn, end_lsn, ts)


def stream_abort(
    xid: int, subxid: int, abort_lsn: int | None = None, abort_ts: int | None = None
) -> bytes:
    out = b"A" + struct.pack(">II", xid, subxid)
    if abort_lsn is not None:
        out += struct.pack(">Qq", abort_lsn, abort_ts or 0)
    return out


def begin_prepare(prepare_lsn: int, end_lsn: int, ts: int, xid: int, gid: str) -> bytes:
    return b"b" + struct.pack(">QQqI", prepare_lsn, end_lsn, ts, xid) + _s(gid)


def _prepare_like(code: bytes, lsn: int, end_lsn: int, ts: int, xid: int, gid: str) -> bytes:
    return code + struct.pack(">BQQqI", 0, lsn, end_lsn, ts, xid) + _s(gid)


def prepare(prepare_lsn: int, end_lsn: int, ts: int, xid: int, gid: str) -> bytes:
    return _prepare_like(b"P", prepare_lsn, end_lsn, ts, xid, gid)


def stream_prepare(prepare_lsn: int, end_lsn: int, ts: int, xid: int, gid: str) -> bytes:
    return _prepare_like(b"p", prepare_lsn, end_lsn, ts, xid, gid)


def commit_prepared(commit_lsn: int, end_lsn: int, ts: int, xid: int, gid: str) -> bytes:
    return _prepare_like(b"K", commit_lsn, end_lsn, ts, xid, gid)


def rollback_prepared(
    prepare_end: int, rollback_end: int, prepare_ts: int, rollback_ts: int, xid: int, gid: str
) -> bytes:
    return (
        b"r" + struct.pack(">BQQqqI", 0, prepare_end, rollback_end, prepare_ts, rollback_ts, xid)
        + _s(gid)
    )  # fmt: skip

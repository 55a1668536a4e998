"""CopyBoth framing of the streaming replication protocol (server ↔ client).

Server to client: XLogData ``'w'`` (Int64 start, Int64 end, Int64 clock, payload) and
primary keepalive ``'k'`` (Int64 wal end, Int64 clock, Byte1 reply requested).
Client to server: standby status update ``'r'`` (Int64 written, Int64 flushed,
Int64 applied, Int64 clock, Byte1 reply now). Clocks are µs since 2000-01-01 UTC.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Final

from capture.errors import DecodeError
from capture.events import PG_EPOCH_US

_XLOG_HEADER: Final = struct.Struct(">QQq")
_KEEPALIVE: Final = struct.Struct(">QqB")
_STATUS: Final = struct.Struct(">cQQQqB")

XLOG_DATA: Final = ord("w")
KEEPALIVE: Final = ord("k")


def pg_now_us() -> int:
    """The current time in µs since 2000-01-01 UTC, as the protocol's clock fields expect."""
    return time.time_ns() // 1000 - PG_EPOCH_US


@dataclass(slots=True)
class XLogData:
    """One pgoutput message and where it sits in the WAL."""

    wal_start: int
    wal_end: int
    server_clock: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Keepalive:
    """The server's WAL end and whether it wants a status update now."""

    wal_end: int
    server_clock: int
    reply_requested: bool


def parse_copy_data(data: bytes | memoryview) -> XLogData | Keepalive:
    """Parse one CopyData message received during START_REPLICATION."""
    if not data:
        raise DecodeError("empty CopyData", message_type="?", offset=0)
    kind = data[0]
    if kind == XLOG_DATA:
        if len(data) < 1 + _XLOG_HEADER.size:
            raise DecodeError("truncated XLogData header", message_type="w", offset=1)
        start, end, clock = _XLOG_HEADER.unpack_from(data, 1)
        return XLogData(start, end, clock, bytes(data[1 + _XLOG_HEADER.size :]))
    if kind == KEEPALIVE:
        if len(data) != 1 + _KEEPALIVE.size:
            raise DecodeError(
                f"keepalive of {len(data)} bytes, expected {1 + _KEEPALIVE.size}",
                message_type="k",
                offset=1,
            )
        end, clock, reply = _KEEPALIVE.unpack_from(data, 1)
        return Keepalive(end, clock, bool(reply))
    raise DecodeError(f"unknown replication message 0x{kind:02x}", message_type=chr(kind), offset=0)


def standby_status(written: int, flushed: int, applied: int, *, reply: bool = False) -> bytes:
    """Build a standby status update."""
    return _STATUS.pack(b"r", written, flushed, applied, pg_now_us(), 1 if reply else 0)

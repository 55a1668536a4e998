"""CopyBoth framing: XLogData, keepalives and standby status updates."""

from __future__ import annotations

import struct
import time

import pytest

from capture.errors import DecodeError
from capture.replication.protocol import (
    Keepalive,
    XLogData,
    parse_copy_data,
    pg_now_us,
    standby_status,
)


def test_xlogdata() -> None:
    data = b"w" + struct.pack(">QQq", 0x100, 0x200, 77) + b"Bpayload"
    assert parse_copy_data(data) == XLogData(0x100, 0x200, 77, b"Bpayload")
    assert parse_copy_data(memoryview(data)) == XLogData(0x100, 0x200, 77, b"Bpayload")


@pytest.mark.parametrize("reply", [0, 1])
def test_keepalive(reply: int) -> None:
    data = b"k" + struct.pack(">QqB", 0x1_0000_0000, 5, reply)
    assert parse_copy_data(data) == Keepalive(0x1_0000_0000, 5, bool(reply))


@pytest.mark.parametrize(
    ("data", "type_char"),
    [(b"", "?"), (b"w\x00\x00", "w"), (b"k" + b"\x00" * 10, "k"), (b"x", "x")],
)
def test_malformed_copy_data(data: bytes, type_char: str) -> None:
    with pytest.raises(DecodeError) as info:
        parse_copy_data(data)
    assert info.value.message_type == type_char


def test_standby_status_layout() -> None:
    before = pg_now_us()
    data = standby_status(0x30, 0x20, 0x10, reply=True)
    kind, written, flushed, applied, clock, reply = struct.unpack(">cQQQqB", data)
    assert (kind, written, flushed, applied, reply) == (b"r", 0x30, 0x20, 0x10, 1)
    assert before <= clock <= pg_now_us()


def test_clock_is_microseconds_since_2000() -> None:
    expected = (time.time() - 946_684_800) * 1_000_000
    assert abs(pg_now_us() - expected) < 5_000_000

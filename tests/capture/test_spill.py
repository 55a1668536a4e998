from __future__ import annotations

from capture.spill import SpillBuffer


def test_stays_in_memory_under_the_limit() -> None:
    buf = SpillBuffer(memory_limit=10_000)
    records = [(7, i, f"payload {i}".encode()) for i in range(10)]
    for r in records:
        buf.append(*r)
    assert not buf.spilled
    assert list(buf) == records
    assert buf.count == 10


def test_spills_past_the_limit_and_reads_back_in_order_twice() -> None:
    buf = SpillBuffer(memory_limit=1_000)
    records = [(i % 3, i, bytes([i % 256]) * (i % 50)) for i in range(2_000)]
    for r in records:
        buf.append(*r)
    assert buf.spilled
    assert list(buf) == records
    buf.append(9, 9999, b"late")
    assert list(buf)[-1] == (9, 9999, b"late")
    assert list(buf)[:2000] == records
    buf.close()
    assert list(buf) == []

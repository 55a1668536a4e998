"""What a chunk's read snapshot sees, with 64-bit snapshot xids and 32-bit stream xids."""

from __future__ import annotations

from capture.snapshot.reader import ReadSnapshot


def test_visibility_follows_pg_current_snapshot() -> None:
    snap = ReadSnapshot.parse("100:110:103,105", "0/16B3748")
    assert snap.horizon_lsn == 0x16B3748
    assert snap.sees(99)
    assert snap.sees(104)
    assert not snap.sees(103)
    assert not snap.sees(105)
    assert not snap.sees(110)
    assert not snap.sees(200)


def test_visibility_across_an_xid_epoch() -> None:
    epoch = 1 << 32
    snap = ReadSnapshot.parse(f"{epoch - 10}:{epoch + 5}:{epoch + 2}", "0/1")
    assert snap.sees(0xFFFF_FFF0)  # epoch 0, after xmin
    assert snap.sees(1)  # epoch 1, before xmax
    assert not snap.sees(2)  # in progress
    assert not snap.sees(6)  # after xmax
    assert snap.sees(0xFFFF_FFF0 - 100)  # before xmin

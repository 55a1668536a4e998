"""The position ledger: acknowledgement follows delivery, in stream order, never backwards."""

from __future__ import annotations

import pytest

from capture.position import DeliveryFailedError, PositionLedger, Unit


def produce(ledger: PositionLedger, commit: int, end: int, count: int) -> Unit:
    unit = ledger.begin(commit, now=1.0)
    unit.outstanding += count
    ledger.commit(end)
    return unit


def test_ack_waits_for_every_message_and_every_earlier_unit() -> None:
    ledger = PositionLedger()
    first = produce(ledger, 0x10, 0x20, 2)
    second = produce(ledger, 0x30, 0x40, 1)
    assert ledger.advance() == 0
    second.delivered(None, None)  # a later transaction finishes first: not ackable yet
    assert ledger.advance() == 0
    first.delivered(None, None)
    assert ledger.advance() == 0
    first.delivered(None, None)
    assert ledger.advance(now=3.0) == 0x40
    assert ledger.latencies == [2.0, 2.0]
    assert ledger.pending == 0
    assert ledger.idle


def test_open_unit_blocks_ack_until_committed() -> None:
    ledger = PositionLedger()
    unit = ledger.begin(0x10)
    unit.outstanding += 1
    unit.delivered(None, None)
    assert ledger.advance() == 0
    assert not ledger.idle
    ledger.commit(0x20)
    assert ledger.advance() == 0x20


def test_failed_message_stops_acknowledgement_at_the_unit_before() -> None:
    ledger = PositionLedger()
    ok = produce(ledger, 0x10, 0x20, 1)
    bad = produce(ledger, 0x30, 0x40, 1)
    ok.delivered(None, None)
    bad.delivered("Broker: Message size too large", None)
    with pytest.raises(DeliveryFailedError, match="too large") as info:
        ledger.advance()
    assert info.value.unit is bad
    assert ledger.delivered_lsn == 0x20  # the good one before it was still passed
    with pytest.raises(DeliveryFailedError):
        ledger.advance()  # and it stays refused


def test_abandoned_unit_is_forgotten() -> None:
    ledger = PositionLedger()
    done = produce(ledger, 0x10, 0x20, 0)
    partial = ledger.begin(0x30)
    partial.outstanding += 3
    ledger.abandon_open()
    assert ledger.advance() == 0x20
    partial.delivered(None, None)  # late reports of the abandoned one are harmless
    assert ledger.advance() == 0x20
    assert done.closed


def test_checkpoints_pass_only_after_everything_before_them() -> None:
    ledger = PositionLedger()
    txn = produce(ledger, 0x10, 0x20, 1)
    ledger.checkpoint(0x50)
    ledger.checkpoint(0x60)  # coalesced with the one before
    assert ledger.advance() == 0
    assert ledger.pending == 1
    txn.delivered(None, None)
    assert ledger.advance() == 0x60
    assert ledger.latencies == []  # checkpoints are not transactions


def test_checkpoint_inside_an_open_unit_is_ignored() -> None:
    ledger = PositionLedger()
    unit = ledger.begin(0x10)
    ledger.checkpoint(0x99)
    ledger.commit(0x20)
    assert unit.outstanding == 0
    assert ledger.advance() == 0x20


def test_the_ack_limit_caps_the_acknowledgement() -> None:
    ledger = PositionLedger(ack_limit=lambda lsn: min(lsn, 0x15))
    produce(ledger, 0x10, 0x20, 0)
    assert ledger.advance() == 0x15
    assert ledger.delivered_lsn == 0x20
    ledger.set_ack_limit(None)
    assert ledger.advance() == 0x20


def test_acknowledgement_never_moves_backwards() -> None:
    ledger = PositionLedger()
    produce(ledger, 0x30, 0x40, 0)
    assert ledger.advance() == 0x40
    produce(ledger, 0x10, 0x20, 0)  # a transaction replayed after a reconnect
    assert ledger.advance() == 0x40


def test_on_delivered_runs_once_in_stream_order() -> None:
    ledger = PositionLedger()
    seen: list[str] = []
    first = produce(ledger, 0x10, 0x20, 1)
    first.on_delivered = lambda: seen.append("first")
    second = produce(ledger, 0x30, 0x40, 1)
    second.on_delivered = lambda: seen.append("second")
    second.delivered(None, None)
    ledger.advance()
    assert seen == []
    first.delivered(None, None)
    ledger.advance()
    ledger.advance()
    assert seen == ["first", "second"]


def test_oldest_pending_skips_checkpoints() -> None:
    ledger = PositionLedger()
    ledger.checkpoint(0x5)
    unit = ledger.begin(0x10, commit_ts=42)
    assert ledger.oldest_pending() is unit
    assert unit.commit_ts == 42

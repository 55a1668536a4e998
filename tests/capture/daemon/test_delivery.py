"""Acknowledgement follows Kafka's confirmations, in commit order."""

from __future__ import annotations

import pytest

from capture.daemon.delivery import DeliveryFailedError, DeliveryTracker


def produce(tracker: DeliveryTracker, commit: int, end: int, count: int):
    txn = tracker.begin(commit, now=1.0)
    txn.outstanding += count
    tracker.close(end)
    return txn


def test_ack_waits_for_every_message_and_every_earlier_transaction() -> None:
    tracker = DeliveryTracker()
    first = produce(tracker, 0x10, 0x20, 2)
    second = produce(tracker, 0x30, 0x40, 1)
    assert tracker.ackable() == 0
    second.delivered(None, None)  # a later transaction finishes first: not ackable yet
    assert tracker.ackable() == 0
    first.delivered(None, None)
    assert tracker.ackable() == 0
    first.delivered(None, None)
    assert tracker.ackable(now=3.0) == 0x40
    assert tracker.latencies == [2.0, 2.0]
    assert tracker.pending_transactions == 0


def test_open_transaction_blocks_ack_until_closed() -> None:
    tracker = DeliveryTracker()
    txn = tracker.begin(0x10, now=0)
    txn.outstanding += 1
    txn.delivered(None, None)
    assert tracker.ackable() == 0
    tracker.close(0x20)
    assert tracker.ackable() == 0x20


def test_failed_message_stops_acknowledgement() -> None:
    tracker = DeliveryTracker()
    ok = produce(tracker, 0x10, 0x20, 1)
    bad = produce(tracker, 0x30, 0x40, 1)
    ok.delivered(None, None)
    bad.delivered("Broker: Message size too large", None)
    with pytest.raises(DeliveryFailedError, match="too large") as info:
        tracker.ackable()
    assert info.value.transaction is bad
    assert tracker.acked_lsn == 0x20  # the good one before it was still acknowledged


def test_abandoned_transaction_is_forgotten() -> None:
    tracker = DeliveryTracker()
    done = produce(tracker, 0x10, 0x20, 0)
    partial = tracker.begin(0x30, now=0)
    partial.outstanding += 3
    tracker.abandon_open()
    assert tracker.ackable() == 0x20
    partial.delivered(None, None)  # late reports of the abandoned one are harmless
    assert tracker.ackable() == 0x20
    assert done.closed

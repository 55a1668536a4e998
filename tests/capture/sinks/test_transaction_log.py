"""The transaction-log reader the exactly-once tests use to tell markers on their way from
an acknowledgement ahead of Kafka's commit."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from capture.lsn import parse_lsn
from tests.capture.sinks.transaction_log import Commit, Sample, commits, unexplained

# The CI run that failed test_the_slot_is_never_confirmed_past_an_uncommitted_transaction:
# the slot confirmed at 0/9973B88 while the last stable offset stood at a message committed
# at 0/98EB068. Here that Kafka transaction holds four PostgreSQL transactions at offsets
# 100..4099 (the last ending at 0/9973B88), its marker takes 4100, the next begins at 4101.
FIRST, LAST_END, NEXT = parse_lsn("0/98EB068"), parse_lsn("0/9973B88"), parse_lsn("0/9973C00")
AT_OFFSET = {
    **{o: FIRST + (o - 100) // 1000 * 0x22000 for o in range(100, 4100)},
    **dict.fromkeys(range(4101, 5101), NEXT),
}


def test_a_commit_decided_before_the_slot_moved_and_not_yet_marked_explains_a_sample() -> None:
    sample = Sample(LAST_END, 100, confirmed_by=1_000, open_at=1_010)
    on_their_way = Commit(prepared_ms=995, completed_ms=1_030)
    assert unexplained([sample], AT_OFFSET, [Commit(900, 905), on_their_way]) == []


def test_without_such_a_commit_the_sample_is_a_violation() -> None:
    sample = Sample(LAST_END, 100, confirmed_by=1_000, open_at=1_010)
    decided_after_the_slot_moved = Commit(prepared_ms=1_001, completed_ms=1_030)
    marked_before_the_offsets_were_read = Commit(prepared_ms=990, completed_ms=1_009)
    for decided in ([], [decided_after_the_slot_moved], [marked_before_the_offsets_were_read]):
        assert unexplained([sample], AT_OFFSET, decided) == [sample]


def test_a_slot_confirmed_into_the_next_transaction_is_a_violation_all_the_same() -> None:
    on_their_way = Commit(prepared_ms=995, completed_ms=None)
    at_next = Sample(NEXT, 100, confirmed_by=1_000, open_at=1_010)
    past_next = Sample(NEXT + 1, 100, confirmed_by=1_000, open_at=1_010)
    assert unexplained([at_next, past_next], AT_OFFSET, [on_their_way]) == [past_next]
    last = {o: lsn for o, lsn in AT_OFFSET.items() if o < 4100}  # nothing after it yet
    assert unexplained([past_next], last, [on_their_way]) == []


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.integration
def test_each_commit_is_found_decided_before_its_answer_and_completed_after(
    kafka_bootstrap: str,
) -> None:
    tid = f"walcast-txn-log-test-{uuid.uuid4().hex}"
    topic = f"txn_log_{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    spans: list[tuple[int, int]] = []
    for n in range(3):
        producer.begin_transaction()
        producer.produce(topic, value=f"m{n}".encode())
        producer.flush(30)
        asked = _now_ms()
        producer.commit_transaction(30)
        spans.append((asked, _now_ms()))
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)

    found = commits(kafka_bootstrap, tid)

    assert len(found) == 3, found  # the aborted one is no commit
    for commit, (asked, answered) in zip(found, spans, strict=True):
        assert asked <= commit.prepared_ms <= answered  # decided before the answer
        assert commit.completed_ms is not None
        assert commit.completed_ms >= commit.prepared_ms
        assert commit.pending_markers(answered, commit.completed_ms)
        assert not commit.pending_markers(commit.prepared_ms - 1, commit.completed_ms)
        assert not commit.pending_markers(answered, commit.completed_ms + 1)
    assert commits(kafka_bootstrap, f"walcast-never-used-{uuid.uuid4().hex}") == []

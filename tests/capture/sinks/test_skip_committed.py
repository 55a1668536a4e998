"""Skipping what Kafka already has: replayed units up to the committed one are dropped."""

from __future__ import annotations

from collections.abc import Iterator

from capture.events import (
    ChangeEvent,
    LogicalMessageEvent,
    Op,
    StreamItem,
    TransactionBegin,
    TransactionCommit,
)
from capture.position import Checkpoint
from capture.skip_committed import SkipCommitted
from tests.support.events import event, make_table

TABLE = make_table("public", "items", [("id", "int4", True)])


class Batches:
    """A source yielding one scripted batch per poll, with an extra attribute to forward."""

    def __init__(self, *batches: list[StreamItem | Checkpoint]) -> None:
        self.batches = list(batches)
        self.acks: list[int] = []
        self.after_acknowledged = 0

    def poll(self, timeout: float) -> Iterator[StreamItem | Checkpoint]:
        if self.batches:
            yield from self.batches.pop(0)

    @property
    def finished(self) -> bool:
        return not self.batches

    def acknowledge(self, lsn: int) -> None:
        self.acks.append(lsn)

    def ack_limit(self, lsn: int) -> int:
        return lsn - 1

    def keep_alive(self) -> None:
        pass

    def close(self) -> None:
        pass

    def after_acknowledge(self) -> None:
        self.after_acknowledged += 1


def begin(commit_lsn: int) -> TransactionBegin:
    return TransactionBegin(commit_lsn, commit_lsn, 0, None)


def commit(commit_lsn: int) -> TransactionCommit:
    return TransactionCommit(commit_lsn, commit_lsn, commit_lsn + 8, 0, 1)


def change(commit_lsn: int, ordinal: int = 1) -> ChangeEvent:
    after = {"id": str(ordinal)}
    return event(Op.INSERT, TABLE, after=after, commit_lsn=commit_lsn, ordinal=ordinal)


def txn(commit_lsn: int, changes: int = 2) -> list[StreamItem | Checkpoint]:
    rows = [change(commit_lsn, i) for i in range(1, changes + 1)]
    return [begin(commit_lsn), *rows, commit(commit_lsn)]


def message(lsn: int, *, transactional: bool = False) -> LogicalMessageEvent:
    return LogicalMessageEvent(lsn, "app", b"x", transactional, None)


def shape(items: list[StreamItem | Checkpoint]) -> list[tuple[str, int]]:
    out = []
    for item in items:
        if isinstance(item, Checkpoint):
            out.append(("checkpoint", item.lsn))
        elif isinstance(item, TransactionBegin):
            out.append(("begin", item.commit_lsn))
        elif isinstance(item, TransactionCommit):
            out.append(("commit", item.commit_lsn))
        elif isinstance(item, ChangeEvent):
            out.append(("change", item.commit_lsn))
        else:
            assert isinstance(item, LogicalMessageEvent)
            out.append(("message", item.lsn))
    return out


def test_transactions_up_to_the_committed_one_become_checkpoints_at_their_end() -> None:
    source = SkipCommitted(Batches([*txn(0x100), *txn(0x200), *txn(0x300)]), 0x200)
    items = list(source.poll(0))
    assert shape(items) == [
        ("checkpoint", 0x108),
        ("checkpoint", 0x208),
        ("begin", 0x300),
        ("change", 0x300),
        ("change", 0x300),
        ("commit", 0x300),
    ]
    assert (source.skipped_transactions, source.skipped_changes) == (2, 4)


def test_a_skipped_transaction_may_span_polls() -> None:
    first = txn(0x100, changes=3)
    source = SkipCommitted(Batches(first[:2], first[2:], txn(0x200, changes=1)), 0x100)
    assert shape(list(source.poll(0))) == []
    assert shape(list(source.poll(0))) == [("checkpoint", 0x108)]
    assert shape(list(source.poll(0))) == [("begin", 0x200), ("change", 0x200), ("commit", 0x200)]


def test_once_past_the_committed_position_items_are_handed_through_untouched() -> None:
    later = txn(0x300)
    inner = Batches(txn(0x100), txn(0x200), later)
    source = SkipCommitted(inner, 0x100)
    list(source.poll(0))
    list(source.poll(0))
    batch = source.poll(0)
    assert not isinstance(batch, SkipCommitted)
    assert list(batch) == later


def test_non_transactional_messages_follow_the_same_rule() -> None:
    source = SkipCommitted(
        Batches([message(0x100), Checkpoint(0x110), message(0x200), *txn(0x300, changes=1)]),
        0x100,
    )
    assert shape(list(source.poll(0))) == [
        ("checkpoint", 0x110),
        ("message", 0x200),
        ("begin", 0x300),
        ("change", 0x300),
        ("commit", 0x300),
    ]


def test_a_transactional_message_goes_with_its_transaction() -> None:
    items = [begin(0x100), message(0x50, transactional=True), commit(0x100), *txn(0x200, 1)]
    shapes = shape(list(SkipCommitted(Batches(items), 0x100).poll(0)))
    assert ("message", 0x50) not in shapes
    assert shapes[0] == ("checkpoint", 0x108)


def test_nothing_committed_skips_nothing_and_the_source_is_forwarded() -> None:
    items = txn(0x100)
    inner = Batches(items)
    source = SkipCommitted(inner, None)
    assert list(source.poll(0)) == items
    source.acknowledge(0x108)
    source.after_acknowledge()  # a loading source's hook reaches it through the wrapper
    assert inner.acks == [0x108]
    assert inner.after_acknowledged == 1
    assert source.ack_limit(10) == 9
    assert source.finished

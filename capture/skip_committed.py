"""Skip what Kafka already has: the source wrapper of exactly-once ``walcast run``.

After a crash, the slot replays from its confirmed position, which may lie before what the
exactly-once sink (:mod:`capture.sinks.kafka_eos`) last committed to Kafka: the slot is
confirmed only after a Kafka commit, and the confirmation reaches the server at the next
status update. :class:`SkipCommitted` wraps the pump's source and drops the units of the
stream that Kafka already holds, so that a read_committed consumer sees each of them once.

The rule: units of the stream (PostgreSQL transactions, load chunks, non-transactional
logical messages) come in strictly increasing commit LSN order, and the offsets record says
the unit committed at ``last_commit_lsn`` and every unit before it are in Kafka
(:mod:`capture.state.offsets`). So:

* ``TransactionBegin`` with ``commit_lsn <= last_commit_lsn``: the transaction is dropped,
  its changes and messages too, and its ``TransactionCommit`` becomes a
  :class:`~capture.position.Checkpoint` at its end, so the slot advances past it;
* a non-transactional :class:`~capture.events.LogicalMessageEvent` at ``lsn <=
  last_commit_lsn`` is dropped (the source follows it with its own checkpoint);
* everything else passes unchanged; once a unit after ``last_commit_lsn`` has been seen,
  the wrapper hands the inner source's items through without looking at them.

Invariants:

* Nothing after ``last_commit_lsn`` is ever dropped (no loss); nothing at or before it
  reaches the encoders (no duplicate at read_committed).
* Items stay lazy: a skipped 10M-row transaction is read and dropped one change at a time.
* Every other attribute (``after_acknowledge`` of a loading source, ``inner``...) is the
  wrapped source's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import structlog

from capture.events import LogicalMessageEvent, TransactionBegin, TransactionCommit
from capture.interfaces import SourceWrapper
from capture.lsn import format_lsn
from capture.position import Checkpoint

if TYPE_CHECKING:
    from capture.events import StreamItem
    from capture.interfaces import Source

log = structlog.get_logger("walcast.skip")


class SkipCommitted(SourceWrapper["Source"]):
    """A source that drops the units up to ``last_commit_lsn`` (see the module docstring)."""

    def __init__(self, inner: Source, last_commit_lsn: int | None) -> None:
        super().__init__(inner)
        self.last_commit_lsn = last_commit_lsn
        self.skipped_transactions = 0
        self.skipped_changes = 0
        self._passing = last_commit_lsn is None
        """A unit after ``last_commit_lsn`` was seen: hand everything through."""
        self._skipping = False
        """Inside a transaction being dropped (it may span several polls)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- the Source interface -------------------------------------------------------------

    def poll(self, timeout: float) -> Iterable[StreamItem | Checkpoint]:
        """The inner source's items, minus what Kafka already has."""
        items = self.inner.poll(timeout)
        if self._passing:
            return items
        return self._skip(items)

    def _skip(self, items: Iterable[StreamItem | Checkpoint]) -> Iterator[StreamItem | Checkpoint]:
        last = self.last_commit_lsn
        assert last is not None
        iterator = iter(items)
        for item in iterator:
            kind = type(item)
            if self._skipping:
                if kind is TransactionCommit:
                    assert isinstance(item, TransactionCommit)
                    self._skipping = False
                    self.skipped_transactions += 1
                    yield Checkpoint(item.end_lsn)
                elif kind is not LogicalMessageEvent:
                    self.skipped_changes += 1
                continue
            if kind is TransactionBegin:
                assert isinstance(item, TransactionBegin)
                if item.commit_lsn <= last:
                    self._skipping = True
                    continue
                self._pass_from(item)
                yield item
                yield from iterator
                return
            if kind is LogicalMessageEvent:
                assert isinstance(item, LogicalMessageEvent)
                if not item.transactional and item.lsn <= last:
                    continue
            yield item

    def _pass_from(self, first: TransactionBegin) -> None:
        self._passing = True
        log.info(
            "replay_skipped",
            last_committed=format_lsn(self.last_commit_lsn or 0),
            first_new=format_lsn(first.commit_lsn),
            transactions=self.skipped_transactions,
            changes=self.skipped_changes,
            detail=f"the slot replayed {self.skipped_transactions} transaction(s) that Kafka "
            "already had (committed there before the slot was confirmed); not sent again"
            if self.skipped_transactions
            else "the slot resumed right after what Kafka has",
        )

    @property
    def finished(self) -> bool:
        """The wrapped source's."""
        return self.inner.finished

"""Which LSN may be acknowledged, given what Kafka has confirmed.

Every transaction's messages are counted as they are produced; Kafka's delivery reports
count them down. The slot may advance to a transaction's end LSN only when it and every
transaction before it (in commit order) are fully delivered: Kafka confirms messages of
different partitions out of order, so a later transaction can finish first.

Invariant: :meth:`DeliveryTracker.ackable` never returns an LSN past a transaction with a
message that is unconfirmed or failed. A failed delivery is kept as an error and never
counted as delivered: the daemon stops, and a restart replays from the last safe LSN.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, eq=False)
class TransactionDelivery:
    """Delivery state of one transaction's messages."""

    end_lsn: int = 0
    commit_lsn: int = 0
    outstanding: int = 0
    closed: bool = False
    """All of the transaction's messages have been produced (its commit was seen)."""
    failures: list[str] = field(default_factory=list)
    """What Kafka said about each failed message (topic, key, size, error)."""
    too_large: bool = False
    produced_at: float = 0.0

    def delivered(self, err: Any, msg: Any) -> None:
        """Delivery report callback (librdkafka calls it from ``poll``/``flush``)."""
        self.outstanding -= 1
        if err is not None:
            self.failures.append(_describe_failure(err, msg))
            self.too_large = self.too_large or _code(err) == _MSG_SIZE_TOO_LARGE


class DeliveryTracker:
    """Transactions in commit order, with their outstanding message counts."""

    def __init__(self) -> None:
        self._queue: deque[TransactionDelivery] = deque()
        self.current: TransactionDelivery | None = None
        self.acked_lsn = 0
        self.latencies: list[float] = []
        """Seconds from first produce to full delivery of each transaction acknowledged
        since the caller last cleared the list."""

    def begin(self, commit_lsn: int, now: float) -> TransactionDelivery:
        """Start counting a transaction's messages."""
        txn = TransactionDelivery(commit_lsn=commit_lsn, produced_at=now)
        self._queue.append(txn)
        self.current = txn
        return txn

    def close(self, end_lsn: int) -> None:
        """The current transaction's commit was seen and all its messages produced."""
        assert self.current is not None
        self.current.end_lsn = end_lsn
        self.current.closed = True
        self.current = None

    def abandon_open(self) -> None:
        """Forget the transaction being produced (the stream broke or stops mid-way).

        The server sends it again from the start, so its partial messages are duplicates;
        their delivery reports still arrive and are ignored.
        """
        if self.current is not None:
            self._queue.remove(self.current)
            self.current = None

    def ackable(self, now: float = 0.0) -> int:
        """Advance past fully delivered transactions; return the LSN safe to acknowledge.

        Never decreases: a transaction replayed after a reconnect may end before the
        newest acknowledged one.

        Raises :class:`DeliveryFailedError` when the oldest unacknowledged transaction has
        a failed message.
        """
        queue = self._queue
        while queue:
            head = queue[0]
            if head.failures:
                raise DeliveryFailedError(head)
            if not head.closed or head.outstanding > 0:
                break
            self.acked_lsn = max(self.acked_lsn, head.end_lsn)
            queue.popleft()
            if now:
                self.latencies.append(now - head.produced_at)
        return self.acked_lsn

    @property
    def pending_transactions(self) -> int:
        """Transactions produced but not yet fully delivered (or not yet closed)."""
        return len(self._queue)

    def oldest_pending(self) -> TransactionDelivery | None:
        """The transaction the acknowledgement waits for."""
        return self._queue[0] if self._queue else None


_MSG_SIZE_TOO_LARGE = 10  # librdkafka's RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE


def _code(err: Any) -> int | None:
    code = getattr(err, "code", None)
    return code() if callable(code) else None


def _describe_failure(err: Any, msg: Any) -> str:
    text = err.str() if hasattr(err, "str") else str(err)
    if msg is None:
        return text
    key = msg.key()
    key_text = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    size = len(msg.value() or b"")
    return f"{text} (topic {msg.topic()!r}, key {key_text!r}, {size} bytes)"


class DeliveryFailedError(Exception):
    """A message of ``transaction`` was permanently rejected by Kafka."""

    def __init__(self, transaction: TransactionDelivery) -> None:
        self.transaction = transaction
        super().__init__(transaction.failures[0])

"""The one owner of positions: what was received, what was delivered, what may be acknowledged.

Every front door (``tail``, ``run``, ``produce-test-stream``) hands its sink's progress to one
:class:`PositionLedger`; nothing else decides which LSN the slot may confirm. This is the role
Debezium's ``PostgresOffsetContext`` plays.

The ledger keeps, in stream order, one :class:`Unit` per unit that ends at a position:

* a committed transaction (``begin`` … ``commit(end_lsn)``), counting the messages the sink
  took for it (``outstanding``) until the sink reports them delivered;
* a load chunk (``begin`` at the chunk's watermark, ``commit`` at the same LSN);
* a *checkpoint*: a position the source vouches for with nothing open before it (a keepalive's
  WAL end on an idle stream, a non-transactional logical message). It has no messages, so it
  is delivered as soon as everything before it is.

Invariants:

* :meth:`PositionLedger.advance` returns the end of the newest unit that, together with every
  unit before it, is closed and fully delivered, capped by the source's ``ack_limit`` (pending
  prepared transactions), and it never decreases.
* A unit with a failed delivery is never passed: :meth:`advance` raises
  :class:`DeliveryFailedError` naming it, and the slot stays before it.
* A unit abandoned mid-way (the stream broke, or ``tail --max-events`` cut it) is forgotten:
  the server sends it again from its start, so its partial messages are detectable replays.
* Memory is one small record per unit in flight, never per message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

_MSG_SIZE_TOO_LARGE: Final = 10
"""librdkafka's RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A stream item: every change before ``lsn`` was emitted and nothing is open.

    Sources yield it between transactions (idle keepalives, non-transactional messages); the
    pump hands it to :meth:`PositionLedger.checkpoint`. Encoders never see it.
    """

    lsn: int


class DeliveryCount:
    """Delivery reports received, across units.

    How a sink tells a confirming Kafka from a silent one: the producer's queue length also
    counts client events (error callbacks, log lines), so it cannot.
    """

    __slots__ = ("reports",)

    def __init__(self) -> None:
        self.reports = 0


_UNCOUNTED: Final = DeliveryCount()
"""Where the reports of a unit no sink counts go."""


@dataclass(slots=True, eq=False)
class Unit:
    """Delivery state of one unit (transaction, load chunk or checkpoint) of the stream."""

    commit_lsn: int
    started_at: float = 0.0
    commit_ts: int = 0
    """Commit time (µs since 2000-01-01), for lag; 0 when unknown."""
    end_lsn: int = 0
    outstanding: int = 0
    """Messages the sink took for this unit and has not yet reported delivered."""
    closed: bool = False
    """Every message of the unit was handed to the sink (its commit was seen)."""
    failures: list[str] = field(default_factory=list)
    """What the sink said about each message it could not deliver."""
    too_large: bool = False
    """A failure was the broker's message-size limit."""
    on_delivered: Callable[[], None] | None = None
    """Called once, in stream order, when the ledger passes this unit (load progress)."""
    counter: DeliveryCount = _UNCOUNTED
    """The sink's count of delivery reports, which :meth:`delivered` increments."""

    def delivered(self, err: Any, msg: Any) -> None:
        """Delivery report (librdkafka calls it from ``poll``/``flush``; sinks call it too)."""
        self.outstanding -= 1
        self.counter.reports += 1
        if err is not None:
            self.failures.append(_describe_failure(err, msg))
            self.too_large = self.too_large or _code(err) == _MSG_SIZE_TOO_LARGE


class DeliveryFailedError(Exception):
    """A message of ``unit`` was permanently refused by the sink."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        super().__init__(unit.failures[0])


class PositionLedger:
    """Units of the stream in order, and the position that may be acknowledged."""

    def __init__(self, *, ack_limit: Callable[[int], int] | None = None) -> None:
        self._queue: deque[Unit] = deque()
        self.current: Unit | None = None
        """The unit whose messages are being produced, between begin and commit."""
        self.delivered_lsn = 0
        """End of the newest unit delivered together with all before it."""
        self.received_lsn = 0
        """Highest WAL position the source reported (for lag)."""
        self.latencies: list[float] = []
        """Seconds from begin to full delivery of each unit passed since the caller last
        cleared the list (checkpoints excluded)."""
        self._ack_limit = ack_limit
        self.highest_commit_lsn = 0
        """The highest commit LSN of a unit begun (its messages may be in Kafka)."""

    def set_ack_limit(self, ack_limit: Callable[[int], int] | None) -> None:
        """Cap acknowledgements with the source's ``ack_limit(lsn)`` (pending prepares)."""
        self._ack_limit = ack_limit

    # -- the stream, in order ------------------------------------------------------------

    def begin(self, commit_lsn: int, now: float = 0.0, commit_ts: int = 0) -> Unit:
        """Start a unit; the sink counts its messages on the returned position."""
        unit = Unit(commit_lsn=commit_lsn, started_at=now, commit_ts=commit_ts)
        self.highest_commit_lsn = max(self.highest_commit_lsn, commit_lsn)
        self._queue.append(unit)
        self.current = unit
        return unit

    def commit(self, end_lsn: int) -> Unit:
        """The current unit ended at ``end_lsn``: all its messages were handed to the sink."""
        unit = self.current
        assert unit is not None, "commit without begin"
        unit.end_lsn = end_lsn
        unit.closed = True
        self.current = None
        return unit

    def checkpoint(self, lsn: int) -> None:
        """The source vouches that nothing before ``lsn`` is open (see :class:`Checkpoint`)."""
        if self.current is not None:
            return
        tail = self._queue[-1] if self._queue else None
        if tail is not None and tail.commit_lsn == -1:
            tail.end_lsn = max(tail.end_lsn, lsn)  # coalesce consecutive checkpoints
            return
        self._queue.append(Unit(commit_lsn=-1, end_lsn=lsn, closed=True))

    def abandon_open(self) -> None:
        """Forget the unit being produced: the server sends it again from its start.

        Delivery reports of its partial messages may still arrive; they are ignored.
        """
        if self.current is not None:
            self._queue.remove(self.current)
            self.current = None

    # -- what may be acknowledged ------------------------------------------------------------

    def advance(self, now: float = 0.0) -> int:
        """Pass fully delivered units; return the LSN that is safe to acknowledge.

        Raises :class:`DeliveryFailedError` when the oldest unit not yet passed has a failed
        message.
        """
        queue = self._queue
        while queue:
            head = queue[0]
            if head.failures:
                raise DeliveryFailedError(head)
            if not head.closed or head.outstanding > 0:
                break
            queue.popleft()
            self.delivered_lsn = max(self.delivered_lsn, head.end_lsn)
            if head.commit_lsn != -1 and now:
                self.latencies.append(now - head.started_at)
            if head.on_delivered is not None:
                head.on_delivered()
        if self._ack_limit is None:
            return self.delivered_lsn
        return self._ack_limit(self.delivered_lsn)

    @property
    def idle(self) -> bool:
        """Nothing open and nothing waiting for delivery."""
        return self.current is None and not any(u.commit_lsn != -1 for u in self._queue)

    @property
    def pending(self) -> int:
        """Units (transactions and chunks) produced but not yet passed."""
        return sum(1 for u in self._queue if u.commit_lsn != -1)

    @property
    def waiting(self) -> bool:
        """Something was produced and not yet passed (safe to read from another thread)."""
        return len(self._queue) > 0

    def oldest_pending(self) -> Unit | None:
        """The unit acknowledgement waits for (checkpoints excluded)."""
        return next((u for u in self._queue if u.commit_lsn != -1), None)


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

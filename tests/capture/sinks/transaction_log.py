"""Kafka's transaction log (``__transaction_state``) as a test reads it: when each commit was
decided, and when its markers were all written.

Kafka answers a producer's ``commit_transaction`` as soon as the coordinator has appended
PrepareCommit to its log: from then on the transaction is committed (a coordinator that
fails over finishes it). The markers that make its messages visible at read_committed, and
move each partition's last stable offset past them, are written after that answer; the
coordinator appends CompleteCommit once every marker is written. So a partition's last
stable offset may still stand at the start of a transaction its producer has been told is
committed. A test comparing what walcast acknowledged with a last stable offset tells the two
apart with :func:`commits` and :func:`unexplained`.

The times are the log records' timestamps, which the coordinator sets when it appends them
(milliseconds, the broker's clock: the tests' brokers run on the test's machine).

Only what the tests need is decoded: the record key (version 0: the transactional id) and
the value's state, in both value versions Kafka writes (0, and 1, its first flexible
version; a later one fails the test with its number).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Final

from tests.capture.sinks.committed_reader import messages

TOPIC: Final = "__transaction_state"
PREPARE_COMMIT: Final = 2
"""``TransactionState.PREPARE_COMMIT``: the commit is decided."""
COMPLETE_COMMIT: Final = 4
"""``TransactionState.COMPLETE_COMMIT``: every partition holds the commit marker."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One committed transaction of a transactional id."""

    prepared_ms: int
    """When PrepareCommit was appended: before the producer's ``commit_transaction`` returned."""
    completed_ms: int | None
    """When CompleteCommit was appended: after every marker (None: not yet)."""

    def pending_markers(self, decided_by_ms: int, still_open_at_ms: int) -> bool:
        """Decided by ``decided_by_ms``; markers not all written at ``still_open_at_ms``."""
        return self.prepared_ms <= decided_by_ms and (
            self.completed_ms is None or self.completed_ms >= still_open_at_ms
        )


@dataclass(frozen=True, slots=True)
class Sample:
    """A slot's confirmed position, then its data partition's last stable offset, while a
    transaction was open there (the high watermark past it)."""

    confirmed: int
    """The slot's ``confirmed_flush_lsn``."""
    stable: int
    """The partition's last stable offset: the first offset of its open transaction."""
    confirmed_by: int
    """:func:`now_ms` once the confirmed position had been read."""
    open_at: int
    """:func:`now_ms` before the offsets were asked for."""


def now_ms() -> int:
    """The wall clock in ms, as a broker on this machine stamps its transaction log."""
    return time.time_ns() // 1_000_000


def unexplained(
    past: list[Sample], at_offset: dict[int, int], decided: list[Commit]
) -> list[Sample]:
    """The samples of ``past`` (the slot confirmed past the commit LSN of the message at
    ``stable``) that markers on their way do not explain.

    ``at_offset`` maps each data message's offset (read_uncommitted) to its commit LSN;
    ``decided`` is :func:`commits` of the producer. A sample is explained when a commit was
    decided by ``confirmed_by`` and not completed at ``open_at`` (one transactional id has
    one transaction at a time, so that is the one at ``stable``), and the slot was confirmed
    no further than that transaction: not past the first PostgreSQL transaction after it.
    """
    return [
        s
        for s in past
        if not (
            any(c.pending_markers(s.confirmed_by, s.open_at) for c in decided)
            and s.confirmed <= next_transaction_lsn(at_offset, s.stable)
        )
    ]


def next_transaction_lsn(at_offset: dict[int, int], stable: int) -> float:
    """Commit LSN of the first message after the Kafka transaction that begins at ``stable``.

    A transaction's messages take consecutive offsets and its marker the next one, so the
    first offset missing from ``at_offset`` (data messages only) ends it. Infinity when no
    message follows.
    """
    offset = stable
    while offset in at_offset:
        offset += 1
    later = [o for o in at_offset if o > offset]
    return at_offset[min(later)] if later else float("inf")


def commits(bootstrap: str, transactional_id: str, *, timeout: float = 60) -> list[Commit]:
    """The committed transactions of ``transactional_id`` the log still holds, in order."""
    states = _states(bootstrap, transactional_id, timeout)
    found: list[Commit] = []
    prepared: int | None = None
    for state, at_ms in states:
        if state == PREPARE_COMMIT:
            prepared = at_ms
        elif state == COMPLETE_COMMIT and prepared is not None:
            found.append(Commit(prepared, at_ms))
            prepared = None
    if prepared is not None:
        found.append(Commit(prepared, None))
    return found


def _states(bootstrap: str, transactional_id: str, timeout: float) -> list[tuple[int, int]]:
    """(state, append time in ms) of every record of ``transactional_id``, in log order (one
    transactional id lives in one partition)."""
    wanted = _key(transactional_id)
    return [
        (_state(value), message.timestamp()[1])
        for message in messages(bootstrap, [TOPIC], committed=False, timeout=timeout)
        if message.key() == wanted and (value := message.value()) is not None
    ]


def _key(transactional_id: str) -> bytes:
    """Key version 0: the transactional id as an int16-length string."""
    raw = transactional_id.encode()
    return struct.pack(">hh", 0, len(raw)) + raw


def _state(value: bytes) -> int:
    """The ``TransactionStatus`` of a value: after ProducerId, ProducerEpoch and the timeout."""
    (version,) = struct.unpack_from(">h", value, 0)
    assert version in (0, 1), f"{TOPIC} value version {version}: this test reads 0 and 1"
    # The state follows the version, ProducerId, ProducerEpoch and TransactionTimeoutMs
    # (2 + 8 + 2 + 4 bytes); version 1's tagged fields come last, after the fixed ones.
    (state,) = struct.unpack_from(">b", value, 16)
    return int(state)

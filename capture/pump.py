"""The pump: one path from a source of changes to a sink, for every front door.

::

    Source ──► (split key updates) ──► each Output's encoder ──► Sink
      ▲                                                           │
      └──── acknowledge ◄── PositionLedger ◄── delivery reports ◄─┘

``walcast tail`` (replication source → stream sink), ``walcast run`` (replication source →
Kafka sink) and ``walcast produce-test-stream`` (synthetic source → stream or Kafka sink) are
thin front doors that assemble these parts; the loop, the key-update split, the layout
announcements, the per-unit delivery accounting and the acknowledgement exist only here.

Invariants:

* Items are handled in stream order, one at a time, as the source yields them: a replayed
  10M-row transaction flows through without ever being a list.
* The source is acknowledged only with :meth:`PositionLedger.advance`, after the sink
  reported the messages delivered; never from anywhere else.
* A stop (``stop()``, or :class:`~capture.sinks.StopRequested` from a sink's wait) abandons
  the unit being produced; the server sends it again from its start after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from capture.consistency import explain
from capture.errors import WalcastError
from capture.events import (
    ChangeEvent,
    LogicalMessageEvent,
    StreamItem,
    TransactionBegin,
    TransactionCommit,
)
from capture.formats import format_class
from capture.interfaces import Output, Sink, Source, SourceWrapper, StopRequested
from capture.position import Checkpoint, DeliveryFailedError, PositionLedger
from capture.split import split_key_update

if TYPE_CHECKING:
    from capture.events import Table

__all__ = [
    "COMMIT_WAIT",
    "HEARTBEAT_PREFIX",
    "Output",
    "Pump",
    "Sink",
    "Source",
    "SourceWrapper",
    "StopRequested",
    "needs_transaction_sizes",
]

HEARTBEAT_PREFIX: Final = "walcast.heartbeat"
"""Prefix of walcast's own heartbeat logical messages: they advance the slot, nothing more."""
COMMIT_WAIT: Final = 2.0
"""With ``max_changes``: after the last wanted change, how long to wait for its commit."""


@runtime_checkable
class _Finishing(Protocol):
    """A source that writes records about what was delivered (load progress)."""

    def after_acknowledge(self) -> None:
        """Record what the last acknowledgement covered."""


def needs_transaction_sizes(formats: Iterable[str]) -> bool:
    """Whether any of ``formats`` states a transaction's size before its changes.

    The source then holds each transaction (spilling to disk) until it commits, so that
    ``TransactionBegin.change_count`` is known.
    """
    return any(format_class(f).needs_transaction_size for f in formats)


@dataclass(eq=False)
class Pump:
    """Moves items from ``source`` through ``outputs``' encoders into ``sink``."""

    source: Source
    sink: Sink
    outputs: list[Output]
    ledger: PositionLedger
    _: KW_ONLY
    split_key_updates: bool = False
    clock: Callable[[], float] = time.monotonic
    changes: int = field(default=0, init=False)
    """Row changes (and load rows) read from the source."""
    transactions: int = field(default=0, init=False)
    acked_lsn: int = field(default=0, init=False)
    """What this pump last acknowledged to its source."""
    _stop: Callable[[], bool] = field(default=lambda: False, init=False)
    _last_table: Table | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.ledger.set_ack_limit(self.source.ack_limit)
        self.sink.wait_hook = self._wait_tick

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        stop: Callable[[], bool],
        *,
        max_changes: int | None = None,
        after_batch: Callable[[], None] | None = None,
        poll_timeout: float = 0.2,
    ) -> None:
        """Move items until ``stop()``, the source finishes, or ``max_changes`` changes.

        With ``max_changes``, the transaction of the last wanted change is completed when its
        commit follows within :data:`COMMIT_WAIT`; a later change means the cut falls inside
        it, and it is abandoned (sent again by the next run).
        """
        self._stop = stop
        source, sink = self.source, self.sink
        cut_at: float | None = None
        self._last_table = None
        try:
            while not stop() and not source.finished:
                for item in source.poll(poll_timeout if cut_at is None else 0.2):
                    if cut_at is not None:
                        if type(item) is TransactionCommit:
                            self._handle(item)
                            return
                        if type(item) is ChangeEvent:
                            self.ledger.abandon_open()
                            return
                        if type(item) is not TransactionBegin:
                            self._handle(item)
                        continue
                    self._handle(item)
                    if max_changes is not None and self.changes >= max_changes:
                        if self.ledger.current is None:
                            return
                        cut_at = self.clock()
                sink.service(0)
                self.acknowledge()
                if after_batch is not None:
                    after_batch()
                if cut_at is not None and self.clock() - cut_at > COMMIT_WAIT:
                    self.ledger.abandon_open()
                    return
        except StopRequested:
            self.ledger.abandon_open()

    def _handle(self, item: StreamItem | Checkpoint) -> None:
        kind = type(item)
        outputs = self.outputs
        sink = self.sink
        if kind is ChangeEvent:
            assert isinstance(item, ChangeEvent)
            self.changes += 1
            unit = self.ledger.current
            if item.table is not self._last_table:
                self._last_table = item.table
                sink.announce(item.table)
            events = split_key_update(item) if self.split_key_updates else (item,)
            for event in events:
                for output in outputs:
                    try:
                        sink.send_change(output, event, unit)
                    except (WalcastError, StopRequested):
                        raise
                    except Exception as exc:  # an encoder failed: which value is at fault?
                        found = explain(event, exc)
                        if found is None:
                            raise  # every value fits its type: a bug of the encoder
                        raise found from None
        elif kind is TransactionBegin:
            assert isinstance(item, TransactionBegin)
            unit = self.ledger.begin(item.commit_lsn, self.clock(), item.commit_ts)
            sink.open_unit(unit)
            for output in outputs:
                sink.send(output, output.encoder.begin(item), unit)
        elif kind is TransactionCommit:
            assert isinstance(item, TransactionCommit)
            unit = self.ledger.current
            assert unit is not None, "commit without begin"
            for output in outputs:
                sink.send(output, output.encoder.commit(item), unit)
            sink.close_unit(unit)
            self.ledger.commit(item.end_lsn)
            self.transactions += 1
        elif kind is Checkpoint:
            assert isinstance(item, Checkpoint)
            self.ledger.checkpoint(item.lsn)
        else:
            assert isinstance(item, LogicalMessageEvent)
            self._logical_message(item)

    def _logical_message(self, item: LogicalMessageEvent) -> None:
        if item.prefix == HEARTBEAT_PREFIX:
            return
        encoded = [(o, o.encoder.logical_message(item)) for o in self.outputs]
        if not any(messages for _, messages in encoded):
            return
        unit = self.ledger.current
        own = unit is None
        if own:  # a non-transactional message is a unit of its own
            unit = self.ledger.begin(item.lsn, self.clock())
            self.sink.open_unit(unit)
        for output, messages in encoded:
            self.sink.send(output, messages, unit)
        if own:
            assert unit is not None
            self.sink.close_unit(unit)
            self.ledger.commit(item.lsn)

    # -- positions ---------------------------------------------------------------------------

    def acknowledge(self) -> None:
        """Acknowledge to the source what the ledger says is delivered."""
        try:
            lsn = self.ledger.advance(self.clock())
        except DeliveryFailedError as exc:
            raise self.sink.refused(exc.unit) from None
        if lsn > self.acked_lsn:
            self.acked_lsn = lsn
            self.source.acknowledge(lsn)

    def _wait_tick(self) -> None:
        """Called by the sink while it waits: acknowledge, keep the source alive, see stops."""
        self.acknowledge()
        self.source.keep_alive()
        if self._stop():
            raise StopRequested

    def finish(self, timeout: float) -> int:
        """Send what encoders still hold, deliver everything, acknowledge; return undelivered.

        The unit being produced, if any, is abandoned first (see the module docstring).
        """
        self.ledger.abandon_open()
        for output in self.outputs:
            self.sink.send(output, output.encoder.flush(), None)
        self._stop = lambda: False
        undelivered = self.sink.drain(timeout)
        self.acknowledge()
        if isinstance(self.source, _Finishing):
            self.source.after_acknowledge()  # records of what was just acknowledged
            undelivered = self.sink.drain(timeout)
        return undelivered

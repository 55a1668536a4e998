"""Where encoded messages go: the one interface every sink implements.

Sinks (:mod:`capture.sinks.stream` for stdout/files, :mod:`capture.sinks.kafka` for Kafka)
take the messages the pump encodes for each unit of the stream (a transaction, a load chunk)
and report their delivery on the unit's :class:`~capture.position.TxnPosition`; the
:class:`~capture.position.PositionLedger` turns that into the position the slot may confirm.

Invariants every sink keeps:

* a message counts as delivered only once it is durable where it went (flushed to the file
  descriptor; confirmed by Kafka); until then its unit holds the acknowledgement back;
* a wait inside the sink (a full queue, a layout that must land first) calls ``wait_hook``
  at least every half second, so the replication connection stays alive and a stop request
  is seen;
* memory is bounded: a sink holds at most what its client library queues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from capture.errors import WalcastError
    from capture.events import ChangeEvent, Table
    from capture.formats.base import EncodedMessage
    from capture.position import TxnPosition
    from capture.pump import Output


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """A stop was requested while a sink waited; the open unit is abandoned, not lost."""


class Sink(Protocol):
    """The destination of a pump."""

    wait_hook: Callable[[], None]
    """Called during the sink's own waits: keeps the source alive, acknowledges."""

    def open_unit(self, unit: TxnPosition) -> None:
        """A unit (transaction, load chunk) starts; its messages follow."""

    def close_unit(self, unit: TxnPosition) -> None:
        """The unit's last message was sent."""

    def send(
        self, output: Output, messages: list[EncodedMessage], unit: TxnPosition | None
    ) -> None:
        """Send ``output``'s messages; count them on ``unit`` (None: untracked, e.g. heartbeats)."""

    def send_change(self, output: Output, event: ChangeEvent, unit: TxnPosition | None) -> None:
        """Encode one change with ``output``'s encoder and send it (the hot path)."""

    def publish(self, topic: str, key: bytes, value: bytes) -> None:
        """Send a walcast record (load progress) to ``topic``, untracked (or drop it)."""

    def announce(self, table: Table) -> None:
        """The table's first change (under this layout) follows: publish its layout first."""

    def service(self, timeout: float) -> None:
        """Serve delivery reports and due flushes, waiting at most ``timeout`` seconds."""

    def drain(self, timeout: float) -> int:
        """Deliver everything sent, waiting at most ``timeout``; return what is undelivered."""

    def refused(self, unit: TxnPosition) -> WalcastError:
        """The error to stop with when ``unit`` has a message the destination refused."""

    def close(self) -> None:
        """Release the destination (after :meth:`drain`)."""

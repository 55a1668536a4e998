"""The parts the pump connects: where changes come from, where messages go, and as what.

:class:`Source` yields committed changes (a replication slot, a load, a synthetic shop),
:class:`Output` is one output format (its encoder and topic naming), :class:`Sink` is where
encoded messages go (stdout or a file, Kafka) and reports their delivery on each unit's
:class:`~capture.position.Unit`. :mod:`capture.pump` moves items from one to the
others; the sources (:mod:`capture.source`, :mod:`capture.snapshot`,
:mod:`capture.synthetic`) and the sinks (:mod:`capture.sinks`) implement these protocols and
import them from here, never from the pump, so no module imports back into the one that
imports it.

Invariants every sink keeps:

* a message counts as delivered only once it is durable where it went (flushed to the file
  descriptor; confirmed by Kafka); until then its unit holds the acknowledgement back;
* a wait inside the sink (a full queue, a layout that must land first) calls ``wait_hook``
  at least every half second, so the replication connection stays alive and a stop request
  is seen;
* memory is bounded: a sink holds at most what its client library queues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from capture.errors import WalcastError
    from capture.events import ChangeEvent, StreamItem, Table
    from capture.formats.base import EncodedMessage, Encoder
    from capture.position import Checkpoint, Unit


class Source(Protocol):
    """Where committed changes come from (a replication slot, a synthetic generator)."""

    def poll(self, timeout: float) -> Iterable[StreamItem | Checkpoint]:
        """The items ready now, in stream order, yielded lazily; waits up to ``timeout``."""

    def acknowledge(self, lsn: int) -> None:
        """Everything before ``lsn`` was delivered (the ledger decided it)."""

    def ack_limit(self, lsn: int) -> int:
        """The highest position at most ``lsn`` the source may confirm (pending prepares)."""

    def keep_alive(self) -> None:
        """Called during long waits: keep the connection alive (status updates)."""

    @property
    def finished(self) -> bool:
        """A finite source has yielded everything."""

    def close(self) -> None:
        """Send the last acknowledgement and disconnect."""


InnerT = TypeVar("InnerT", bound=Source)


class SourceWrapper(Generic[InnerT]):
    """A source that changes what ``inner`` yields; positions and the connection stay its.

    Acknowledgements, holds, keep-alives and ``close`` go to ``inner`` unchanged, so the
    wrapped source remains the only one that talks to the server about positions.
    """

    def __init__(self, inner: InnerT) -> None:
        self.inner = inner

    def acknowledge(self, lsn: int) -> None:
        """Forward to the wrapped source."""
        self.inner.acknowledge(lsn)

    def ack_limit(self, lsn: int) -> int:
        """Forward to the wrapped source."""
        return self.inner.ack_limit(lsn)

    def keep_alive(self) -> None:
        """Forward to the wrapped source."""
        self.inner.keep_alive()

    def close(self) -> None:
        """Forward to the wrapped source."""
        self.inner.close()


class TopicNames(Protocol):
    """How one output's messages find their topics (:class:`capture.sinks.topics.TopicNamer`).

    Named here, by what the pump and the sinks ask of it, so that this module imports no
    sink: an interface owns the types it names.
    """

    def topic(self, schema: str | None, table: str | None) -> str:
        """The topic of a table's messages, or of messages of no table (both None)."""

    def message_topic(self, kind: str, schema: str | None, table: str | None) -> str:
        """The topic of one message of ``kind`` (heartbeats may have a topic of their own)."""

    def check(self, tables: list[tuple[str, str]]) -> None:
        """Name every table's topic now, so that a collision stops the start, not the stream."""


@dataclass(slots=True)
class Output:
    """One output format: its encoder, and (for Kafka) how its topics are named."""

    format: str
    encoder: Encoder
    namer: TopicNames | None = None
    messages: int = 0
    """Messages sent since the counters were last read (kept off the hot path)."""
    bytes: int = 0


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """A stop was requested while a sink waited; the open unit is abandoned, not lost."""


class Sink(Protocol):
    """The destination of a pump."""

    wait_hook: Callable[[], None]
    """Called during the sink's own waits: keeps the source alive, acknowledges."""

    def open_unit(self, unit: Unit) -> None:
        """A unit (transaction, load chunk) starts; its messages follow."""

    def close_unit(self, unit: Unit) -> None:
        """The unit's last message was sent."""

    def send(self, output: Output, messages: list[EncodedMessage], unit: Unit | None) -> None:
        """Send ``output``'s messages; count them on ``unit`` (None: untracked, e.g. heartbeats)."""

    def send_change(self, output: Output, event: ChangeEvent, unit: Unit | None) -> None:
        """Encode one change with ``output``'s encoder and send it (the hot path)."""

    def publish(self, topic: str, key: bytes, value: bytes) -> None:
        """Send a walcast record (load progress) to ``topic``, untracked (or drop it)."""

    def announce(self, table: Table) -> None:
        """The table's first change (under this layout) follows: publish its layout first."""

    def service(self, timeout: float) -> None:
        """Serve delivery reports and due flushes, waiting at most ``timeout`` seconds."""

    def drain(self, timeout: float) -> int:
        """Deliver everything sent, waiting at most ``timeout``; return what is undelivered."""

    def refused(self, unit: Unit) -> WalcastError:
        """The error to stop with when ``unit`` has a message the destination refused."""

    def close(self) -> None:
        """Release the destination (after :meth:`drain`)."""

"""A sink that writes framed messages to a byte stream: stdout or a file.

``walcast tail`` and ``produce-test-stream`` print through it: JSON formats one document per
line, binary formats (DTS Avro) one base64 line per datum, IBM delimited its own records
(each encoder's ``frame_for_tail``).

Delivery: a unit's messages count as delivered once the stream was flushed after its last
message, so the slot is never acknowledged past output still sitting in a buffer. The
stream is flushed every ``flush_interval`` seconds, and on :meth:`StreamSink.drain`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO

from capture.errors import WalcastError
from capture.events import ChangeEvent, Table
from capture.formats.base import EncodedMessage
from capture.interfaces import Output
from capture.position import Unit

FLUSH_INTERVAL = 0.5
"""Seconds between flushes (each followed by an acknowledgement)."""


class StreamSink:
    """Writes every output's messages, framed for reading, to ``out``."""

    def __init__(
        self,
        out: IO[bytes],
        *,
        flush_interval: float = FLUSH_INTERVAL,
        close_out: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.write = out.write
        self.flush_interval = flush_interval
        self._close_out = close_out
        self._clock = clock
        self._last_flush = clock()
        self._unflushed: list[Unit] = []
        self.wait_hook: Callable[[], None] = lambda: None

    def open_unit(self, unit: Unit) -> None:
        """Nothing to do: units are counted when they close."""

    def close_unit(self, unit: Unit) -> None:
        """Hold the unit until the next flush has written its last message out."""
        unit.outstanding += 1
        self._unflushed.append(unit)

    def send(
        self,
        output: Output,
        messages: list[EncodedMessage],
        unit: Unit | None,  # noqa: ARG002 - delivery is counted per unit at flush
    ) -> None:
        """Write each message, framed."""
        frame = output.encoder.frame_for_tail
        for message in messages:
            self.write(frame(message))

    def send_change(self, output: Output, event: ChangeEvent, unit: Unit | None) -> None:  # noqa: ARG002
        """Write one change (the encoder's fast path)."""
        self.write(output.encoder.tail_lines(event))

    def publish(self, topic: str, key: bytes, value: bytes) -> None:
        """A stream has no topics: walcast's own records are not printed."""

    def announce(self, table: Table) -> None:
        """Nothing to publish: readers of a stream see the layout in each format's fields."""

    def service(self, timeout: float) -> None:  # noqa: ARG002 - never waits
        """Flush when the interval has passed."""
        if self._clock() - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self) -> None:
        """Write buffered output out; the units closed before are now delivered."""
        self.out.flush()
        self._last_flush = self._clock()
        for unit in self._unflushed:
            unit.outstanding -= 1
        self._unflushed.clear()

    def drain(self, timeout: float) -> int:  # noqa: ARG002 - a flush does not wait
        """Flush everything; nothing stays undelivered."""
        self.flush()
        return 0

    def refused(self, unit: Unit) -> WalcastError:
        """Writes do not fail per message (an OSError ends the command instead)."""
        return WalcastError(f"output refused a message: {unit.failures[0]}")

    def close(self) -> None:
        """Flush, and close a file the sink opened."""
        self.flush()
        if self._close_out:
            self.out.close()

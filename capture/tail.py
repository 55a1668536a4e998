"""``walcast tail``: print every committed row change as it happens, in any format.

JSON formats print one document per line, binary formats (DTS Avro) one base64 line
per datum, and IBM delimited its own record stream (see each format's module).

Acknowledgement: output is flushed before the slot is acknowledged, and only whole
transactions are acknowledged. When ``--max-events`` stops tail inside a transaction,
that transaction is sent again by the next run (its changes repeat with the same
commit LSN and ordinals).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Final

from capture.events import ChangeEvent, TransactionCommit
from capture.formats.base import Encoder
from capture.source import ChangeSource

FLUSH_INTERVAL: Final = 0.5
"""Seconds between output flushes (each followed by an acknowledgement)."""


def run_tail(
    source: ChangeSource,
    out: IO[bytes],
    encoder: Encoder,
    *,
    max_events: int | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print changes until ``max_events`` row changes or ``stop()``; return the count.

    Output is flushed, then the newest complete transaction acknowledged, every
    :data:`FLUSH_INTERVAL` seconds and at exit.
    """
    printed = 0
    pending_ack = 0
    last_flush = time.monotonic()
    write = out.write
    encode = encoder.encode
    frame = encoder.frame_for_tail
    lines = encoder.tail_lines
    try:
        while not stop():
            for item in source.poll(1.0):
                if type(item) is ChangeEvent:
                    write(lines(item))
                    printed += 1
                    if max_events is not None and printed >= max_events:
                        for message in encoder.flush():
                            write(frame(message))
                        return printed
                    continue
                for message in encode(item):
                    write(frame(message))
                if isinstance(item, TransactionCommit):
                    pending_ack = item.end_lsn
            now = time.monotonic()
            if now - last_flush >= FLUSH_INTERVAL:
                out.flush()
                if pending_ack:
                    source.acknowledge(pending_ack)
                last_flush = now
    finally:
        out.flush()
        if pending_ack:
            source.acknowledge(pending_ack)
    return printed

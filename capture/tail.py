"""``walcast tail``: print every committed row change as it happens, in any format.

JSON formats print one document per line, binary formats (DTS Avro) one base64 line
per datum, and IBM delimited its own record stream (see each format's module).

Acknowledgement: output is flushed before the slot is acknowledged, and only whole
transactions are acknowledged. When the ``--max-events``-th change is the last of its
transaction, tail waits (briefly) for the commit and acknowledges it; when it falls inside
a transaction, that transaction is sent again by the next run (its changes repeat with
the same commit LSN and ordinals, so the duplicates are detectable).
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
COMMIT_WAIT: Final = 2.0
"""After the last wanted change, how long to wait for its transaction's commit."""


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
    done = False
    done_at = 0.0
    try:
        while not stop() and not (done and time.monotonic() - done_at > COMMIT_WAIT):
            for item in source.poll(0.2 if done else 1.0):
                if type(item) is ChangeEvent:
                    if done:  # the cut falls inside a transaction: it will be replayed
                        return printed
                    write(lines(item))
                    printed += 1
                    if max_events is not None and printed >= max_events:
                        done, done_at = True, time.monotonic()
                    continue
                for message in encode(item):
                    write(frame(message))
                if isinstance(item, TransactionCommit):
                    pending_ack = item.end_lsn
                    if done:
                        return printed
            now = time.monotonic()
            if now - last_flush >= FLUSH_INTERVAL:
                out.flush()
                if pending_ack:
                    source.acknowledge(pending_ack)
                last_flush = now
    finally:
        if done:
            for message in encoder.flush():
                write(frame(message))
        out.flush()
        if pending_ack:
            source.acknowledge(pending_ack)
    return printed

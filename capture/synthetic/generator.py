"""The synthetic source: the shop's stream as a :class:`~capture.interfaces.Source`, with its clock.

Encoders that put a build time in their output (canal ``ts``, DataWorks ``systemTime``…)
read it from ``FormatOptions.clock``. Synthetic streams inject a :class:`SyntheticClock`
there, which the source sets to each transaction's commit time plus 1 ms before the
transaction's first item is handed on, so that every byte of a synthetic stream is
deterministic: the same ``(count, seed, tables)`` and settings give the same output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from capture.events import PG_EPOCH_US, StreamItem, TransactionBegin
from capture.formats.base import FormatOptions
from capture.formats.settings import FormatSettings
from capture.synthetic.shop import generate
from capture.synthetic.tables import DATABASE, SERVER, SOURCE_VERSION

BATCH: Final = 4096
"""Items handed on per :meth:`SyntheticSource.poll`."""


class SyntheticClock:
    """A wall clock that reads the current synthetic transaction's commit time + 1 ms."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        """Unix seconds."""
        return self.now

    def at_commit(self, commit_ts: int) -> None:
        """Read ``commit_ts`` (µs since 2000-01-01) plus 1 ms from now on."""
        self.now = (commit_ts + PG_EPOCH_US + 1000) / 1e6


def format_options(
    settings: FormatSettings | None = None,
    clock: SyntheticClock | None = None,
    **extra: Any,
) -> FormatOptions:
    """The fixed, deterministic format options of synthetic streams."""
    return FormatOptions(
        source_name="walcast",
        source_version=SOURCE_VERSION,
        database=DATABASE,
        server=SERVER,
        settings=settings,
        clock=clock if clock is not None else SyntheticClock(),
        **extra,
    )


def advance_clock(options: FormatOptions, item: StreamItem) -> None:
    """Set a synthetic clock in ``options`` to ``item``'s transaction, if it begins one."""
    clock = options.clock
    if type(item) is TransactionBegin and isinstance(clock, SyntheticClock):
        clock.at_commit(item.commit_ts)


class SyntheticSource:
    """``count`` synthetic changes as a finite pump source; acknowledgements are no-ops."""

    def __init__(self, count: int, seed: int = 0, tables: int = 4) -> None:
        self.clock = SyntheticClock()
        self._items: Iterator[StreamItem] = generate(count, seed, tables)
        self._finished = False
        self.acknowledged = 0

    def options(self, settings: FormatSettings | None = None, **extra: Any) -> FormatOptions:
        """Format options whose clock this source drives."""
        return format_options(settings, self.clock, **extra)

    @property
    def finished(self) -> bool:
        """Every item was handed on."""
        return self._finished

    def poll(self, timeout: float) -> Iterator[StreamItem]:  # noqa: ARG002 - never waits
        """The next items of the stream (the clock follows each transaction)."""
        clock = self.clock
        for _ in range(BATCH):
            item = next(self._items, None)
            if item is None:
                self._finished = True
                return
            if type(item) is TransactionBegin:
                clock.at_commit(item.commit_ts)
            yield item

    def acknowledge(self, lsn: int) -> None:
        """Record the acknowledged position (for tests)."""
        self.acknowledged = lsn

    def ack_limit(self, lsn: int) -> int:
        """Nothing is held."""
        return lsn

    def keep_alive(self) -> None:
        """Nothing to keep alive."""

    def close(self) -> None:
        """Nothing to release."""

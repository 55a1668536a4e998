"""Line up the readers' output with PostgreSQL's changes and list every difference."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tests.readers.reference import RefChange

MAX_SHOWN = 15


def effective_after(change: RefChange) -> dict[str, str | None]:
    """The new row as PostgreSQL defines it: an unchanged TOAST value equals its old value,
    which is known when the old row was sent whole (REPLICA IDENTITY FULL)."""
    after = dict(change.after or {})
    for name in change.unchanged_toast:
        if change.table.full and change.before is not None and name in change.before:
            after[name] = change.before[name]
    return after


class Mismatches:
    """Differences found, each one line naming the message, what was read and what was due."""

    def __init__(self, reader: str, label: str) -> None:
        self.reader = reader
        self.label = label
        self.items: list[str] = []

    def add(self, index: int, change: RefChange | None, what: str, got: Any, want: Any) -> None:
        where = f"message {index}"
        if change is not None:
            where += f" ({change.op} {change.table.name}, xid {change.xid})"
        self.items.append(f"{where}: {what}: reader understood {got!r}, PostgreSQL had {want!r}")

    def check(self, index: int, change: RefChange | None, what: str, got: Any, want: Any) -> None:
        if got != want:
            self.add(index, change, what, got, want)

    def assert_none(self) -> None:
        if self.items:
            shown = "\n".join(self.items[:MAX_SHOWN])
            raise AssertionError(
                f"{self.reader} on {self.label}: {len(self.items)} differences, first:\n{shown}"
            )


def pair(
    changes: Iterable[RefChange],
    results: list[dict[str, Any]],
    keep: Callable[[dict[str, Any]], bool] = lambda _: True,
) -> list[tuple[int, RefChange, dict[str, Any]]]:
    """(message index, change, reader output) in order; ``keep`` drops non-change messages
    (heartbeats). The counts must agree."""
    kept = [(i, r) for i, r in enumerate(results) if keep(r)]
    wanted = list(changes)
    assert len(kept) == len(wanted), (
        f"{len(kept)} change messages read for {len(wanted)} changes of PostgreSQL"
    )
    return [(i, c, r) for (i, r), c in zip(kept, wanted, strict=True)]

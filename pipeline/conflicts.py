"""Two writers of one table: which failures are a lost race, and how a step is retried.

materialize and ``walcast spark maintain`` may write one table at the same time (a
compaction beside a running job is what users do). Delta Lake and Iceberg both commit
optimistically: the second commit that overlaps the first fails, with one of the errors
:func:`is_conflict` knows, and nothing of it is written. Such a step is run again
(:func:`retry_conflicts`) on the table as the winner left it.

Invariants:

* Only a step that committed nothing when it failed is retried, and every step walcast
  retries is idempotent on top of that: a materialize step is skipped once its batch
  committed (Delta's ``txnAppId``/``txnVersion``, the Iceberg store's snapshot summary), a
  compaction or an expiry only works on what is there.
* Any other failure is raised at once; after :data:`ATTEMPTS` lost races the last
  conflict is raised (the job stops with it, one line, and a restart replays the batch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

ATTEMPTS = 5
"""How many times a step runs before its last conflict is raised."""

CONFLICT_MARKERS = (
    # Delta Lake (io.delta.exceptions.*, and their error classes)
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "DELTA_CONCURRENT_APPEND",
    "DELTA_CONCURRENT_DELETE_READ",
    "DELTA_CONCURRENT_DELETE_DELETE",
    "DELTA_CONCURRENT_TRANSACTION",
    "DELTA_METADATA_CHANGED",
    # Apache Iceberg: a commit whose base changed under it, or whose files another removed
    "CommitFailedException",
    "Found conflicting files",
    "Found new conflicting",
    "Missing required files to delete",
    "Cannot commit, found new",
)
"""Texts that name a lost race in the errors Delta Lake and Iceberg raise (the class name
of Delta's exceptions, Iceberg's ``ValidationException`` messages of concurrent writes)."""


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` says another writer committed first (nothing of this step was)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in CONFLICT_MARKERS)


def retry_conflicts(
    what: str,
    step: Callable[[], T],
    *,
    attempts: int = ATTEMPTS,
    pause: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``step``; when another writer wins the race, run it again (up to ``attempts``).

    ``what`` names the table and the step in the warning each retry logs.
    """
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except Exception as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            log.warning(
                "%s: another writer committed first (%s); trying again (%d of %d)",
                what,
                type(exc).__name__,
                attempt + 1,
                attempts,
            )
            sleep(pause * attempt)
    raise AssertionError("unreachable")  # pragma: no cover

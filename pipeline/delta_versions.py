"""The changes each Delta version of a state table holds: reads as of an LSN, no history.

materialize's Delta store (:func:`pipeline.stores.apply_delta`) writes each batch of a
table in one commit (two with a TRUNCATE), and records in that commit's ``userMetadata``
(Delta's ``commitInfo``; :func:`commit_metadata`) the range of the batch's changes of the
table: their first and last commit LSN and commit time, and the batch id. The record is
part of the commit itself, so it cannot drift from the table: a version exists with its
record or not at all (a replayed batch, skipped by ``txnAppId``/``txnVersion``, commits
nothing).

:func:`version_as_of` turns an LSN (or a commit time) into the version that holds the
source exactly as of that point, or a one-line :class:`~pipeline.errors.AsOfError`.

Invariants and decisions:

* **Exact or refused.** With the recorded commits in version order, the table after
  commit ``i`` is the source as of ``X`` exactly when every change applied up to ``i``
  is at or before ``X`` and every change applied after it is after ``X``. A point inside
  one batch's range (the batch applied changes on both sides of it at once) has no
  version; it is refused, naming the nearest readable points and ``--history`` (which
  reads any LSN). The same rule with commit times answers ``as_of_time``.
* **The range that exists** is from the first recorded change to the last one, as in
  :mod:`pipeline.asof`: before it the table's content is unknown to walcast (or was
  written by a walcast that recorded nothing), after it materialize may not have read.
* Commits without a walcast record (the table's creation, ``ADD COLUMNS``, the Change
  Data Feed switch, a user's own write) hold no change of the source; they neither start
  nor end a range.
* A batch whose changes carry no commit LSN (a Debezium connector's own topics) records
  nothing: such a table has no LSN to read at.
* Versions removed by Delta's log cleanup (``delta.logRetentionDuration``) are no longer
  listed, so the range starts later; data files removed by ``VACUUM`` make an old version
  unreadable (Delta's own error).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capture.errors import lsn_text
from pipeline.errors import AsOfError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
"""The session setting whose value Delta writes into the next commits' ``userMetadata``."""
RECORD_KEY = "walcast"
"""The key of walcast's record in a commit's ``userMetadata`` (a JSON object)."""


def utc_time(micros: int) -> dt.datetime:
    """A time in microseconds since the epoch (as recorded) as a UTC datetime."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


def time_text(micros: int) -> str:
    """A time in microseconds since the epoch as ISO 8601 text (UTC)."""
    return utc_time(micros).isoformat()


@dataclass(frozen=True, slots=True)
class BatchRange:
    """The changes of one table that one batch applied: first and last position."""

    first_lsn: int
    last_lsn: int
    first_time: int
    """Commit times as microseconds since the epoch (UTC)."""
    last_time: int


@dataclass(frozen=True, slots=True)
class RecordedCommit:
    """A Delta version of a state table and the range of changes its commit applied."""

    version: int
    batch_id: int
    changes: BatchRange


def commit_metadata(batch_id: int, changes: BatchRange) -> str:
    """The ``userMetadata`` text of a commit that applies ``changes`` of batch ``batch_id``."""
    record = {
        "batch": batch_id,
        "first_lsn": changes.first_lsn,
        "last_lsn": changes.last_lsn,
        "first_time_us": changes.first_time,
        "last_time_us": changes.last_time,
    }
    return json.dumps({RECORD_KEY: record}, separators=(",", ":"))


def parse_commit_metadata(version: int, text: str | None) -> RecordedCommit | None:
    """The walcast record in a commit's ``userMetadata``; None when the commit has none."""
    if not text:
        return None
    try:
        record = json.loads(text).get(RECORD_KEY)
    except (ValueError, AttributeError):
        return None  # a user's own metadata
    if not isinstance(record, dict):
        return None
    return RecordedCommit(
        version,
        int(record["batch"]),
        BatchRange(
            int(record["first_lsn"]),
            int(record["last_lsn"]),
            int(record["first_time_us"]),
            int(record["last_time_us"]),
        ),
    )


def recorded_commits(spark: SparkSession, path: str) -> list[RecordedCommit]:
    """The commits of the Delta table at ``path`` that carry walcast's record, in order."""
    from delta.tables import DeltaTable  # noqa: PLC0415

    rows = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
    found = (parse_commit_metadata(int(r["version"]), r["userMetadata"]) for r in rows)
    return sorted((c for c in found if c is not None), key=lambda c: c.version)


@dataclass(frozen=True, slots=True)
class Readable:
    """The points a version holds exactly: ``low <= X < high`` (high None: up to ``low``)."""

    version: int
    low: int
    high: int | None


def readable_spans(commits: list[RecordedCommit], *, by_time: bool = False) -> list[Readable]:
    """Per recorded commit after which the table is exact, the points it holds.

    The table after commit ``i`` holds ``X`` exactly when the largest position applied up
    to ``i`` is ``<= X`` and the smallest applied after it is ``> X`` (module doc). The
    last span ends at the last change (``high`` None: only ``X == low``).
    """

    def first(c: RecordedCommit) -> int:
        return c.changes.first_time if by_time else c.changes.first_lsn

    def last(c: RecordedCommit) -> int:
        return c.changes.last_time if by_time else c.changes.last_lsn

    after: list[int | None] = [None] * len(commits)
    for i in range(len(commits) - 2, -1, -1):
        later = after[i + 1]
        after[i] = first(commits[i + 1]) if later is None else min(later, first(commits[i + 1]))
    spans: list[Readable] = []
    upto: int | None = None
    for i, commit in enumerate(commits):
        upto = last(commit) if upto is None else max(upto, last(commit))
        high = after[i]
        if high is None or upto < high:
            spans.append(Readable(commit.version, upto, high))
    return spans


def version_as_of(
    commits: list[RecordedCommit], point: int, label: str, *, by_time: bool = False
) -> int:
    """The version of the table that holds the source exactly as of ``point``.

    ``point`` is an LSN, or with ``by_time`` a commit time in microseconds. Raises
    :class:`~pipeline.errors.AsOfError` (one line) when no recorded version holds it.
    """
    show = time_text if by_time else lsn_text
    flag = "--as-of-time" if by_time else "--as-of-lsn"
    if not commits:
        raise AsOfError(
            f"{label}: no version of it records the changes it holds (materialized before "
            "walcast recorded them, or from changes without a commit LSN)",
            hint="materialize it with --history to read it as of an LSN",
        )
    spans = readable_spans(commits, by_time=by_time)
    first = min(c.changes.first_time if by_time else c.changes.first_lsn for c in commits)
    last = spans[-1].low
    if not first <= point <= last:
        raise AsOfError(
            f"{flag} {show(point)}: {label}'s versions cover {show(first)} to {show(last)}, "
            "its first and last change",
            hint="read a point inside that range",
        )
    below = [s for s in spans if s.low <= point]
    if below and (below[-1].high is None or point < below[-1].high):
        return below[-1].version
    above = [s for s in spans if s.low > point]
    near = " or ".join(show(s.low) for s in [*below[-1:], *above[:1]])
    raise AsOfError(
        f"{flag} {show(point)}: one batch of {label} applied changes on both sides of it at "
        f"once, so no version of the table holds it; the nearest points that one does: {near}",
        hint="materialize with --history to read the table as of any point",
    )

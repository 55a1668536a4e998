"""Which Delta version holds the source as of a point (:mod:`pipeline.delta_versions`),
on hand-made commit records: no Spark."""

from __future__ import annotations

import pytest

from pipeline.delta_versions import (
    BatchRange,
    RecordedCommit,
    commit_metadata,
    parse_commit_metadata,
    readable_spans,
    version_as_of,
)
from pipeline.errors import AsOfError


def commit(version: int, first: int, last: int) -> RecordedCommit:
    return RecordedCommit(version, version, BatchRange(first, last, first * 10, last * 10))


COMMITS = [commit(1, 100, 200), commit(3, 300, 400), commit(4, 350, 500), commit(6, 600, 600)]
"""Version 2 and 5 hold no record (an ADD COLUMNS, say); 3 and 4 overlap (a reload's rows
positioned before changes the previous batch applied)."""


def test_the_metadata_round_trips_and_foreign_metadata_is_no_record() -> None:
    record = commit(7, 1, 2)
    assert parse_commit_metadata(7, commit_metadata(7, record.changes)) == record
    for foreign in (None, "", "a note", '{"team": "x"}', "[1]"):
        assert parse_commit_metadata(1, foreign) is None


def test_spans_are_the_points_between_batches() -> None:
    spans = [(s.version, s.low, s.high) for s in readable_spans(COMMITS)]
    # after 3: 400 applied, but 4 applies 350 -> no span; after 4: [500, 600)
    assert spans == [(1, 200, 300), (4, 500, 600), (6, 600, None)]
    by_time = [(s.version, s.low, s.high) for s in readable_spans(COMMITS, by_time=True)]
    assert by_time == [(1, 2000, 3000), (4, 5000, 6000), (6, 6000, None)]


@pytest.mark.parametrize(("point", "version"), [(200, 1), (299, 1), (500, 4), (599, 4), (600, 6)])
def test_a_point_between_batches_reads_the_version_before_it(point: int, version: int) -> None:
    assert version_as_of(COMMITS, point, "public.t") == version


@pytest.mark.parametrize(
    ("point", "near"),
    [(100, "0/C8"), (150, "0/C8"), (300, "0/C8 or 0/1F4"), (450, "0/C8 or 0/1F4")],
)
def test_a_point_inside_a_batch_names_the_nearest_readable_points(point: int, near: str) -> None:
    with pytest.raises(AsOfError, match=rf"one batch of public\.t .* that one does: {near}$"):
        version_as_of(COMMITS, point, "public.t")


def test_outside_the_range_and_without_records_is_one_line() -> None:
    for point in (99, 601):
        with pytest.raises(AsOfError, match=r"public\.t's versions cover 0/64 to 0/258, its"):
            version_as_of(COMMITS, point, "public.t")
    with pytest.raises(AsOfError, match=r"no version of it records the changes"):
        version_as_of([], 5, "public.t")
    with pytest.raises(AsOfError, match=r"--as-of-time 1970-01-01T00:00:00.000099\+00:00"):
        version_as_of(COMMITS, 99, "public.t", by_time=True)

"""Sequencing across micro-batches (pipeline/sequencing.py), through normalize_frame."""

from __future__ import annotations

import pytest

from pipeline.formats import parser_for
from pipeline.local_frames import local_rows
from pipeline.normalize import normalize_frame
from pipeline.sequencing import WRITTEN
from tests.pipeline.conftest import encoded, layouts, records

pytestmark = pytest.mark.integration


def _batch(spark, parser, values, first_offset: int, state):
    frame = records(spark, values)
    frame = frame.withColumn("offset", frame["offset"] + first_offset)
    return normalize_frame(frame, parser, layouts(spark), state, persist=True)


def test_a_pending_before_half_whose_after_never_comes_is_quarantined(spark) -> None:
    """A DataWorks before half ends batch 1 (carried in the state); batch 2 starts with
    another message: the carried half is an orphan in batch 2's quarantine, with its own
    Kafka position and raw value, and the tally counts it."""
    messages = [(m.key, m.value) for m in encoded("dataworks", 40, seed=5)]
    cut = next(i for i, (_, v) in enumerate(messages) if b'"UPDATE_BEFOR"' in v)
    assert b'"UPDATE_AFTER"' in messages[cut + 1][1]
    parser = parser_for("dataworks")

    first = _batch(spark, parser, messages[: cut + 1], 0, None)
    assert first.quarantine.count() == 0
    written_first = first.changes.count()
    state = local_rows(spark, first.state.collect(), first.state.schema)
    assert [r["pending_offset"] for r in state.collect()] == [cut]
    first.release()

    # the after half is lost: batch 2 starts one message later
    second = _batch(spark, parser, messages[cut + 2 :], cut + 2, state)
    orphans = [r.asDict() for r in second.quarantine.collect()]
    assert [(q["reason"], q["kafka_offset"]) for q in orphans] == [("orphan", cut)]
    assert orphans[0]["kafka_value"] == messages[cut][1]
    tally = {r[0]: r[1] for r in second.tally.collect()}
    written_second = second.changes.count()
    assert tally == {WRITTEN: written_second, "orphan": 1}
    assert [r["pending_key"] for r in second.state.collect()] == [None]
    # the offsets read are batch 2's own, not the carried half's
    assert [(r["first"], r["last"]) for r in second.offsets.collect()] == [
        (cut + 2, len(messages) - 1)
    ]
    second.release()
    # one change per message, a split update's two halves giving one, the broken one none
    halves = sum(1 for _, v in messages if b'"UPDATE_BEFOR"' in v)
    assert written_first + written_second == len(messages) - halves - 1

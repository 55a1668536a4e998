"""pipeline.local_frames: driver-side values as DataFrames, without Python workers."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

pytestmark = pytest.mark.integration  # needs pyspark

SCHEMA = (
    "key binary, value binary, n int, big long, d double, amount decimal(38,6), "
    "text string, flag boolean, day date, at timestamp, at_ntz timestamp_ntz, "
    "names array<string>, props map<string,int>, "
    "headers array<struct<key:string,value:binary>>"
)
ROWS = [
    (
        b"k\x00\xff", b"", 2**31 - 1, -(2**63), float("nan"),
        Decimal("-12345678901234567890.123456"),
        "ünïcode \u0000 'q'", True, dt.date(1, 1, 1),
        dt.datetime(2999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(1970, 1, 1),  # noqa: DTZ001 - timestamp_ntz has no zone
        ["a", None, ""], {"x": 1, "y": None},
        [("walcast.xid", b"\x01"), ("h", None)],
    ),
    (None,) * 14,
    (
        b"x" * 100_000, b"v", 0, 0, float("-inf"), Decimal("0.000001"), "", False,
        dt.date(9999, 12, 31), dt.datetime(1900, 3, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 2, 29, 12),  # noqa: DTZ001
        [], {}, [],
    ),
]  # fmt: skip


def _runs_python(frame) -> bool:
    """Whether reading ``frame`` runs a ``PythonRDD`` (an RDD computed by Python workers)."""
    lineage = frame._jdf.queryExecution().toRdd().toDebugString()
    return " PythonRDD[" in lineage


def test_local_rows_equal_create_data_frame_without_python_workers(spark) -> None:
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    made = local_rows(spark, ROWS, SCHEMA)
    reference = spark.createDataFrame(ROWS, SCHEMA)
    assert made.schema == reference.schema
    got, expected = made.collect(), reference.collect()
    assert len(got) == len(ROWS)
    assert repr(got) == repr(expected)  # repr: NaN equals nothing, not even itself
    # PySpark's own frame reads its rows through a Python map; this one does not
    assert _runs_python(reference)
    assert not _runs_python(made)


def test_local_rows_of_many_rows_keep_their_order_and_count(spark) -> None:
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    rows = [(i, str(i)) for i in range(5000)]
    made = local_rows(spark, rows, "n long, s string")
    assert [tuple(r) for r in made.collect()] == rows


def test_no_rows_and_local_empty_give_the_schema(spark) -> None:
    from pipeline.local_frames import local_empty, local_rows  # noqa: PLC0415

    for frame in (local_rows(spark, [], SCHEMA), local_empty(spark, SCHEMA)):
        assert frame.schema == spark.createDataFrame([], SCHEMA).schema
        assert frame.count() == 0
        assert not _runs_python(frame)

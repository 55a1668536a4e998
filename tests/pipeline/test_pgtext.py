"""pipeline.pgtext: value texts built by Spark expressions equal PostgreSQL's output."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration  # needs pyspark


@pytest.mark.parametrize(
    ("epoch_us", "expected"),
    [
        (32_503_679_999_999_999, "2999-12-31 23:59:59.999999+00"),  # past 2**53 µs
        (253_402_300_799_999_999, "9999-12-31 23:59:59.999999+00"),
        (-62_135_596_800_000_000, "0001-01-01 00:00:00+00"),
        (-1, "1969-12-31 23:59:59.999999+00"),
        (1_714_673_849_000_001, "2024-05-02 18:17:29.000001+00"),
        (0, "1970-01-01 00:00:00+00"),
    ],
)
def test_timestamp_text_is_exact_for_every_year(spark, epoch_us: int, expected: str) -> None:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    from pipeline import pgtext  # noqa: PLC0415
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    df = local_rows(spark, [(epoch_us,)], "us long")
    (row,) = df.select(pgtext.timestamp_text(F.col("us"), with_zone=True).alias("t")).collect()
    assert row.t == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-01 09:00:00.224671", "2024-03-01 09:00:00.224671+00"),
        ("2024-03-01 09:00:00+00", "2024-03-01 09:00:00+00"),
        ("2024-03-01 09:00:00-05:30", "2024-03-01 09:00:00-05:30"),
        ("0044-03-15 12:00:00 BC", "0044-03-15 12:00:00+00 BC"),
        ("infinity", "infinity"),
        ("-infinity", "-infinity"),
    ],
)
def test_timestamptz_with_offset(spark, text: str, expected: str) -> None:
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    from pipeline import pgtext  # noqa: PLC0415
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    df = local_rows(spark, [(text,)], "t string")
    (row,) = df.select(pgtext.timestamptz_with_offset(F.col("t")).alias("t")).collect()
    assert row.t == expected

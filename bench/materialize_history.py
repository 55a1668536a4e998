"""Materialize rows/s with and without ``--history`` (Delta Lake), on the same changes.

    python bench/materialize_history.py [--changes 200000] [--keys 20000] [--batches 4]

Builds a normalized change table of one keyed table (``bench.items (id bigint primary
key, v bigint, note text)``): every key inserted once, then updated, five changes per
transaction, a key change and a delete every 1,000 changes; written as ``--batches``
files, read one file per batch. Then runs the materialize job twice on it, into fresh
directories: without and with ``--history``, and prints the rows/s of each (the job's
own summary: changes applied / wall time, JVM already started) and the machine's load
average (on a shared machine it says more about the figures than they do).
"""

# ruff: noqa: N812
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.materialize import MaterializeJob
from pipeline.model import NORMALIZED
from pipeline.session import SessionOptions, build_session


def changes(spark: SparkSession, count: int, keys: int) -> DataFrame:
    """``count`` normalized changes of ``bench.items`` over ``keys`` keys."""
    n = F.col("id")
    key = (n % keys).cast("string")
    first = n < keys
    moved = ~first & (n % 1000 == 7)
    deleted = ~first & (n % 1000 == 501)
    op = F.when(first, "insert").when(deleted, "delete").otherwise("update")
    after = F.create_map(
        F.lit("id"),
        F.when(moved, (n + 10_000_000).cast("string")).otherwise(key),
        F.lit("v"),
        n.cast("string"),
        F.lit("note"),
        F.concat(F.lit("note "), n.cast("string")),
    )
    before = F.when(moved | deleted, F.create_map(F.lit("id"), key))
    lsn = (n / 5).cast("long") * 100 + 1_000_000
    frame = spark.range(count).select(
        F.lit("bench").alias("format"),
        F.lit("bench").alias("schema"),
        F.lit("items").alias("table"),
        op.alias("op"),
        lsn.alias("commit_lsn_num"),
        (F.lit(1_700_000_000) + n / 5).cast("long").cast("timestamp").alias("commit_time"),
        (n % 5 + 1).alias("ordinal"),
        F.array(F.lit("id")).alias("primary_key"),
        before.alias("before"),
        F.when(~deleted, after).alias("after"),
        F.create_map(
            F.lit("id"), F.lit("int8"), F.lit("v"), F.lit("int8"), F.lit("note"), F.lit("text")
        ).alias("column_types"),
        F.lit("bench").alias("kafka_topic"),
        F.lit(0).alias("kafka_partition"),
        n.alias("kafka_offset"),
        F.lit(0).alias("record_index"),
        F.lit("2023-11-14").cast("date").alias("commit_date"),
    )
    return frame.select(
        *[
            F.col(f.name).cast(f.dataType)
            if f.name in frame.columns
            else F.lit(None).cast(f.dataType).alias(f.name)
            for f in NORMALIZED.fields
        ]
    )


def write_changes(spark: SparkSession, path: str, count: int, keys: int, files: int) -> None:
    """:func:`changes` written to ``path`` as ``files`` Parquet files, in offset order."""
    changes(spark, count, keys).orderBy("kafka_offset").repartitionByRange(
        files, "kafka_offset"
    ).write.mode("overwrite").parquet(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    spark = build_session(SessionOptions(app_name="bench-history", use_delta=True))
    work = Path(tempfile.mkdtemp(prefix="walcast-bench-history-"))
    try:
        normalized = str(work / "changes")
        write_changes(spark, normalized, args.changes, args.keys, args.batches)
        lines: list[str] = []
        for history in (False, True):
            name = "history" if history else "current"
            job = MaterializeJob(
                normalized=normalized,
                state=str(work / f"state-{name}"),
                checkpoint=str(work / f"ckpt-{name}"),
                use_delta=True,
                typed=True,
                history=history,
                available_now=True,
                max_files_per_trigger=1,
                report=lines.append,
            )
            started = time.monotonic()
            job.run(spark)
            seconds = time.monotonic() - started
            rate = job.totals.changes / seconds
            print(
                f"materialize {'with' if history else 'without'} --history: "
                f"{job.totals.changes:,} changes in {job.totals.batches} batches, "
                f"{seconds:.1f} s, {rate:,.0f} rows/s"
            )
        print(f"load average (1, 5, 15 min): {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

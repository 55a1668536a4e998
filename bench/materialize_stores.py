"""Materialize rows/s per store (Delta, Iceberg, Parquet) on the same changes, and a
batch's time after many small batches, with and without ``walcast spark maintain``.

    python bench/materialize_stores.py [--changes 100000] [--keys 10000] [--batches 4]
        [--stores delta,iceberg,parquet] [--small-batches 100] [--json PATH]

Part 1, **rows/s**: the normalized changes of :func:`bench.materialize_history.changes`
(one keyed table: every key inserted, then updated, five changes per transaction, a key
change and a delete every 1,000 changes), written as ``--batches`` files and read one
file per batch, materialized into each store in turn (fresh directories, one Spark
session: the JVM is warm for every store but the first, so the first store named pays
the warm-up; the order is the one given). The figure is the job's changes / wall time.

Part 2, **after many batches**: for Delta and Iceberg (Parquet writes each table whole
per batch: it has nothing to compact), ``--small-batches`` batches of 50 changes each
(one file each), then one more batch of the same size timed as it finds the table, then
``maintain`` (compaction; expiry with the minimum retention of 1 hour, which removes
nothing this young: the files a small-batch run leaves are what compaction is for), then
one more batch timed again. Each line says the table's data files before and after.

The load average at the start and the end is printed and written: on a shared machine it
says more about the figures than they do.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import SparkSession

from bench.kit.figures import Recorder, add_json_option
from bench.materialize_history import write_changes
from pipeline.iceberg_store import catalog_for, table_name
from pipeline.maintain import MaintainOptions, maintain
from pipeline.materialize import MaterializeJob, read_table
from pipeline.session import SessionOptions, build_session

STORES = ("delta", "iceberg", "parquet")
SMALL_BATCH = 50
"""Changes per batch in part 2."""


def _job(normalized: str, state: str, checkpoint: str, store: str) -> MaterializeJob:
    return MaterializeJob(
        normalized=normalized,
        state=state,
        checkpoint=checkpoint,
        use_delta=store == "delta",
        store="iceberg" if store == "iceberg" else None,
        typed=True,
        available_now=True,
        max_files_per_trigger=1,
        report=lambda _line: None,
    )


def _data_files(spark: SparkSession, state: str, store: str) -> int:
    if store == "iceberg":
        name = table_name(catalog_for(spark, state), "bench", "items")
        return int(spark.sql(f"SELECT count(*) FROM {name}.files").first()[0])  # type: ignore[index]
    return len(read_table(spark, state, "bench", "items").inputFiles())


def rows_per_second(spark: SparkSession, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 1: every store on the same changes."""
    normalized = str(work / "changes")
    write_changes(spark, normalized, args.changes, args.keys, args.batches)
    figures: dict[str, Any] = {}
    for store in args.stores:
        job = _job(normalized, str(work / f"state-{store}"), str(work / f"ckpt-{store}"), store)
        started = time.monotonic()
        job.run(spark)
        seconds = time.monotonic() - started
        rate = job.totals.changes / seconds
        figures[store] = {
            "changes": job.totals.changes,
            "batches": job.totals.batches,
            "seconds": round(seconds, 1),
            "rows_per_s": round(rate),
        }
        print(
            f"{store}: {job.totals.changes:,} changes in {job.totals.batches} batches, "
            f"{seconds:.1f} s, {rate:,.0f} rows/s",
            flush=True,
        )
    return figures


def after_many_batches(spark: SparkSession, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Part 2: one batch's time after ``--small-batches``, then after ``maintain``.

    The changes are written as ``--small-batches + 2`` files into a staging directory and
    moved into the job's input as it goes: all but two, one run (a batch per file); one
    more, a timed run; ``maintain``; the last, a timed run (each timed run is one batch,
    its query's start included, the same before and after)."""
    figures: dict[str, Any] = {}
    total = args.small_batches + 2
    count = SMALL_BATCH * total
    for store in [s for s in args.stores if s != "parquet"]:
        base = work / f"many-{store}"
        staging, normalized = base / "staging", base / "changes"
        write_changes(spark, str(staging), count, max(count // 4, 1), total)
        files = sorted(staging.glob("part-*.parquet"))
        normalized.mkdir(parents=True)
        state, checkpoint = str(base / "state"), str(base / "ckpt")

        where = (spark, normalized, state, checkpoint, store)
        build = _run_files(*where, files[:-2])
        files_before = _data_files(spark, state, store)
        before = _run_files(*where, files[-2:-1])
        lines = maintain(spark, state, MaintainOptions(retain_hours=1.0), report=lambda _line: None)
        files_after = _data_files(spark, state, store)
        after = _run_files(*where, files[-1:])
        figures[store] = {
            "small_batches": len(files) - 2,
            "build_seconds": round(build, 1),
            "files_before_maintain": files_before,
            "batch_seconds_before_maintain": round(before, 1),
            "files_after_maintain": files_after,
            "batch_seconds_after_maintain": round(after, 1),
            "maintain": lines,
        }
        print(
            f"{store}: {len(files) - 2} batches of {SMALL_BATCH} changes in {build:.1f} s; "
            f"then one batch: {before:.1f} s on {files_before} data files, "
            f"{after:.1f} s after maintain ({files_after} files)",
            flush=True,
        )
    return figures


def _run_files(
    spark: SparkSession,
    normalized: Path,
    state: str,
    checkpoint: str,
    store: str,
    files: list[Path],
) -> float:
    """Move ``files`` into the job's input, run the job on them; its seconds."""
    for path in files:
        path.rename(normalized / path.name)
    job = _job(str(normalized), state, checkpoint, store)
    started = time.monotonic()
    job.run(spark)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument(
        "--stores",
        type=lambda text: [s.strip() for s in text.split(",") if s.strip()],
        default=list(STORES),
    )
    parser.add_argument("--small-batches", type=int, default=100)
    add_json_option(parser)
    args = parser.parse_args()
    unknown = [s for s in args.stores if s not in STORES]
    if unknown:
        parser.error(f"--stores: {', '.join(unknown)}: not one of {', '.join(STORES)}")
    recorder = Recorder("materialize_stores", args)
    os.environ["TZ"] = "UTC"
    time.tzset()
    spark = build_session(
        SessionOptions(app_name="bench-stores", use_delta=True, iceberg="iceberg" in args.stores)
    )
    work = Path(tempfile.mkdtemp(prefix="walcast-bench-stores-"))
    try:
        figures = {"rows_per_s": rows_per_second(spark, work, args)}
        if args.small_batches > 0:
            figures["after_many_batches"] = after_many_batches(spark, work, args)
        print(f"load average (1, 5, 15 min): {os.getloadavg()}")
        recorder.write(figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The initial load: walcast's rows/s into Kafka (confirmed) against COPY TO STDOUT.

Measures, in one run, on one table of ``--rows`` rows (bigint key, text, int, timestamptz):

1. ``COPY (SELECT * FROM t) TO STDOUT`` read by psycopg and thrown away (the reference);
2. for each ``--workers`` value, ``walcast run --create-slot --snapshot initial-only`` with
   that many readers: from the daemon's start to its exit, which comes once Kafka confirmed
   every row (start-up and the slot's creation included).

Usage: eval "$(scripts/local-services start all)"; python bench/snapshot.py
       [--rows 5000000] [--workers 1,2,4] [--format json] [--chunk-rows 50000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent


def copy_rate(dsn: str, table: str, rows: int) -> float:
    start = time.monotonic()
    with (
        psycopg.connect(dsn) as conn,
        conn.cursor().copy(f"COPY (SELECT * FROM {table}) TO STDOUT") as copy,
    ):
        for _ in copy:
            pass
    return rows / (time.monotonic() - start)


def walcast_rate(args: argparse.Namespace, dsn: str, table: str, workers: int) -> float:
    tag = uuid.uuid4().hex[:6]
    slot, pub = f"bench_load_{tag}", f"bench_load_pub_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    command = [
        sys.executable, "-m", "capture", "run", "--dsn", dsn, "--slot", slot,
        "--publication", pub, "--create-slot", "--snapshot", "initial-only",
        "--snapshot-workers", str(workers), "--snapshot-chunk-rows", str(args.chunk_rows),
        "--bootstrap-servers", os.environ["WALCAST_TEST_KAFKA"], "--format", args.format,
        "--topic", f"bench_load_{tag}" + ".{format}.{table}",
        "--schema-topic", f"bench_load_{tag}.schemas", "--metrics-port", "0",
    ]  # fmt: skip
    try:
        start = time.monotonic()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - start
        if done.returncode != 0:
            sys.exit(f"walcast run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
    return args.rows / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--format", default="json")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    args = parser.parse_args()
    dsn = os.environ["WALCAST_TEST_DSN"]
    table = f"bench_load_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text, n int, t timestamptz)")
        start = time.monotonic()
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'value ' || g, g % 1000, "
            "timestamptz '2024-01-01' + g * interval '1 second' "
            "FROM generate_series(1, %s) g",
            (args.rows,),
        )
        conn.execute(f"VACUUM ANALYZE {table}")
        print(f"loaded {args.rows:,} rows in {time.monotonic() - start:.1f} s", file=sys.stderr)
    try:
        reference = copy_rate(dsn, table, args.rows)
        print(f"rows: {args.rows:,}, format {args.format}, chunks of {args.chunk_rows:,}")
        print(f"COPY TO STDOUT (psycopg, discarded): {reference:12,.0f} rows/s")
        for workers in (int(w) for w in args.workers.split(",")):
            rate = walcast_rate(args, dsn, table, workers)
            print(
                f"walcast run --snapshot initial-only, {workers} worker(s): "
                f"{rate:10,.0f} rows/s   ratio {rate / reference:.2f}"
            )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

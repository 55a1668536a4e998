"""Peak memory of `walcast tail` for ONE huge transaction, per format, streaming on and off.

One transaction inserts ``--rows`` rows (default 10,000,000) into a four-column table
(bigint key, text, numeric(12,2), timestamptz). One slot per run is created before it, at
the same WAL position; then, one run at a time, ``walcast tail --format F --streaming S
--max-events ROWS`` drains its slot to /dev/null. The peak resident set size of that child
process is read from ``wait4``'s rusage (``ru_maxrss``, the kernel's high-water mark of
the process's RSS), and a baseline run (the same command on a one-row transaction) shows
the fixed cost of the interpreter and its imports.

Memory must not grow with the transaction: the goal is a peak under 150 MiB for every
format, streaming on (the server streams the transaction in chunks that walcast holds in a
spill buffer, in memory up to 64 MiB, then on disk) and off (the server sends it after the
commit; formats that state a transaction's size up front hold it the same way).

Usage: eval "$(scripts/local-services start pg)"
       flock /tmp/walcast-heavy.lock python bench/big_transaction.py [--rows 10000000]
           [--formats json,canal,...] [--streaming on,off]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.kit.figures import Recorder, add_json_option

REPO = Path(__file__).resolve().parent.parent
FORMATS = ("json", "canal", "shareplex", "dataworks", "qlik", "ibm", "dts-avro")
GOAL_MIB = 150.0


@dataclass
class Run:
    """One ``walcast tail`` run and what it cost."""

    label: str
    streaming: str
    rows: int
    seconds: float
    peak_mib: float
    exit_code: int
    error: str


def tail(dsn: str, slot: str, pub: str, fmt: str, streaming: str, rows: int) -> Run:
    """Run ``walcast tail`` to the end of the transaction; measure its peak RSS."""
    command = [
        sys.executable, "-m", "capture", "tail", "--dsn", dsn, "--slot", slot,
        "--publication", pub, "--format", fmt, "--streaming", streaming,
        "--max-events", str(rows),
    ]  # fmt: skip
    with tempfile.TemporaryFile() as stderr, Path(os.devnull).open("wb") as devnull:
        started = time.monotonic()
        child = subprocess.Popen(command, stdout=devnull, stderr=stderr, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        error = stderr.read().decode(errors="replace").strip()
    return Run(fmt, streaming, rows, seconds, usage.ru_maxrss / 1024, child.returncode, error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--streaming", default="on,off")
    add_json_option(parser)
    args = parser.parse_args()
    recorder = Recorder("big_transaction", args)
    dsn = os.environ["WALCAST_TEST_DSN"]
    formats = [f for f in args.formats.split(",") if f]
    modes = [m for m in args.streaming.split(",") if m]
    tag = uuid.uuid4().hex[:6]
    table, pub = f"bench_big_{tag}", f"bench_big_pub_{tag}"
    runs = [(f, m, f"bench_big_{tag}_{i}") for i, (f, m) in enumerate(
        (f, m) for m in modes for f in formats
    )]  # fmt: skip
    baseline_slot = f"bench_big_{tag}_base"
    results: list[Run] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text, amount numeric(12,2), "
            "created timestamptz)"
        )
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (baseline_slot,))
        conn.execute(f"INSERT INTO {table} VALUES (0, 'baseline', 0, now())")
        for _, _, slot in runs:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        started = time.monotonic()
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'customer ' || g, (g %% 100000) / 100.0, "
            "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' "
            "FROM generate_series(1, %s::bigint) g",
            (args.rows,),
        )
        print(
            f"one transaction of {args.rows:,} rows committed in "
            f"{time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )
    try:
        base = tail(dsn, baseline_slot, pub, "json", "on", 1)
        base.label, base.rows = "baseline (1 row, json)", 1
        results.append(base)
        print(_row(base), file=sys.stderr)
        for fmt, mode, slot in runs:
            run = tail(dsn, slot, pub, fmt, mode, args.rows)
            results.append(run)
            print(_row(run), file=sys.stderr)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for slot in [baseline_slot, *(s for _, _, s in runs)]:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (slot,),
                )
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    print(f"peak RSS of `walcast tail` for one transaction of {args.rows:,} rows")
    print(f"{'format':<24} {'streaming':<9} {'peak RSS':>10} {'seconds':>9} {'rows/s':>10}  goal")
    failed = False
    for run in results:
        ok = run.exit_code == 0 and run.peak_mib < GOAL_MIB
        failed |= not ok
        print(_row(run) + ("  ok" if ok else f"  OVER {GOAL_MIB:.0f} MiB or failed"))
        if run.exit_code != 0:
            print(f"    exit {run.exit_code}: {run.error[-300:]}")
    recorder.write({
        "goal_mib": GOAL_MIB,
        "runs": [
            {
                "label": run.label, "streaming": run.streaming, "rows": run.rows,
                "seconds": run.seconds, "peak_mib": run.peak_mib, "exit_code": run.exit_code,
                "rows_per_s": run.rows / run.seconds if run.seconds else None,
            }
            for run in results
        ],
    })  # fmt: skip
    return 1 if failed else 0


def _row(run: Run) -> str:
    rate = run.rows / run.seconds if run.seconds else 0.0
    return (
        f"{run.label:<24} {run.streaming:<9} {run.peak_mib:>6.1f} MiB {run.seconds:>9.1f} "
        f"{rate:>10,.0f}"
    )


if __name__ == "__main__":
    sys.exit(main())

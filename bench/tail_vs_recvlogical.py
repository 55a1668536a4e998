"""Drain 1M small row changes with `walcast tail` and with `pg_recvlogical`, same WAL.

Two slots (pgoutput for walcast, test_decoding for pg_recvlogical... no: pg_recvlogical
also reads pgoutput here, so both sides decode the same plugin output) are created at
the same WAL position, 1M single-row inserts are committed in batches, then each
consumer drains its slot to /dev/null while we time it. Prints rows/s for both and the
ratio walcast / pg_recvlogical.

Usage: eval "$(scripts/local-services start pg)"; python bench/tail_vs_recvlogical.py
       [--rows 1000000] [--rows-per-txn 1000] [--binary] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.kit.figures import Recorder, add_json_option

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-per-txn", type=int, default=1000)
    parser.add_argument("--binary", action="store_true")
    add_json_option(parser)
    args = parser.parse_args()
    recorder = Recorder("tail_vs_recvlogical", args)
    dsn = os.environ["WALCAST_TEST_DSN"]
    pg_bin = Path(os.environ.get("WALCAST_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
    tag = uuid.uuid4().hex[:6]
    table, pub = f"bench_{tag}", f"bench_pub_{tag}"
    slot_w, slot_r = f"bench_w_{tag}", f"bench_r_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, val text, n integer)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        for slot in (slot_w, slot_r):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        start = time.monotonic()
        for lo in range(1, args.rows + 1, args.rows_per_txn):
            hi = min(lo + args.rows_per_txn - 1, args.rows)
            conn.execute(
                f"INSERT INTO {table} SELECT g, 'value ' || g, g %% 100 "
                "FROM generate_series(%s::int, %s::int) g",
                (lo, hi),
            )
        print(f"loaded {args.rows} rows in {time.monotonic() - start:.1f}s", file=sys.stderr)
        end_lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    try:
        # pg_recvlogical: stops at --endpos; same plugin and options as walcast (text, v1).
        cmd = [
            str(pg_bin / "pg_recvlogical"), "-d", dsn, "--slot", slot_r, "--start",
            "--endpos", end_lsn, "-f", "/dev/null", "--no-loop",
            "-o", "proto_version=1", "-o", f"publication_names={pub}",
        ]  # fmt: skip
        if args.binary:
            cmd += ["-o", "binary=true"]
        t0 = time.monotonic()
        subprocess.run(cmd, check=True)
        recv = time.monotonic() - t0
        walcast = [
            sys.executable, "-m", "capture", "tail", "--dsn", dsn, "--slot", slot_w,
            "--publication", pub, "--max-events", str(args.rows), "--proto-version", "1",
        ]  # fmt: skip
        if args.binary:
            walcast.append("--binary")
        t0 = time.monotonic()
        with Path(os.devnull).open("wb") as devnull:
            subprocess.run(walcast, check=True, stdout=devnull, cwd=REPO)
        ours = time.monotonic() - t0
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for slot in (slot_w, slot_r):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"DROP PUBLICATION {pub}")
            conn.execute(f"DROP TABLE {table}")
    rate_recv, rate_ours = args.rows / recv, args.rows / ours
    print(f"rows:            {args.rows} ({args.rows_per_txn} per transaction)")
    print(f"pg_recvlogical:  {recv:7.2f} s  {rate_recv:10,.0f} rows/s")
    print(f"walcast tail:    {ours:7.2f} s  {rate_ours:10,.0f} rows/s")
    print(f"ratio walcast/pg_recvlogical: {rate_ours / rate_recv:.2f}")
    recorder.write({
        "pg_recvlogical": {"seconds": recv, "rows_per_s": rate_recv},
        "walcast_tail": {"seconds": ours, "rows_per_s": rate_ours},
        "ratio": rate_ours / rate_recv,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

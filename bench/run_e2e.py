"""End to end: PostgreSQL commit → `walcast run` → delivered in Kafka.

Measures, in one run:

1. throughput: N rows committed (in transactions of --rows-per-txn) before the daemon
   starts; time from daemon start until the slot is acknowledged past the last commit,
   i.e. until Kafka confirmed every message (rows/s);
2. pg_recvlogical draining an identical slot (created at the same WAL position) to
   /dev/null, for comparison (rows/s);
3. commit-to-delivery latency at a fixed offered rate: single-row transactions at --rate
   rows/s for --seconds, with the daemon running; a consumer reads each message and takes
   now minus the commit time carried in the message (p50, p99).

Usage: eval "$(scripts/local-services start all)"; python bench/run_e2e.py
       [--rows 1000000] [--rows-per-txn 1000] [--format json] [--rate 2000] [--seconds 15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import orjson
import psycopg
from confluent_kafka import Consumer

REPO = Path(__file__).resolve().parent.parent


def wal_lsn(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT pg_current_wal_flush_lsn() - '0/0'").fetchone()[0])


def confirmed(conn: psycopg.Connection, slot: str) -> int:
    row = conn.execute(
        "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return int(row[0])


def start_daemon(
    dsn: str, slot: str, pub: str, bootstrap: str, prefix: str, fmt: str, log: Path
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "capture", "run", "--dsn", dsn, "--slot", slot,
        "--publication", pub, "--bootstrap-servers", bootstrap, "--format", fmt,
        "--topic", prefix + ".{table}", "--metrics-port", "0", "--heartbeat-interval", "1",
        "--schema-topic", prefix + ".schemas",
    ]  # fmt: skip
    handle = log.open("wb")
    return subprocess.Popen(command, stdout=handle, stderr=handle, cwd=REPO)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-per-txn", type=int, default=1000)
    parser.add_argument("--format", default="json")
    parser.add_argument("--rate", type=int, default=2000, help="offered rows/s for latency")
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    dsn = os.environ["WALCAST_TEST_DSN"]
    bootstrap = os.environ["WALCAST_TEST_KAFKA"]
    pg_bin = Path(os.environ.get("WALCAST_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
    tag = uuid.uuid4().hex[:6]
    table, pub = f"e2e_{tag}", f"e2e_pub_{tag}"
    slot_w, slot_r = f"e2e_w_{tag}", f"e2e_r_{tag}"
    topic = f"bench_{tag}"
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"walcast-bench-{tag}"
    logs.mkdir(parents=True)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, val text, n integer)")
    conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    for slot in (slot_w, slot_r):
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        t0 = time.monotonic()
        for lo in range(1, args.rows + 1, args.rows_per_txn):
            hi = min(lo + args.rows_per_txn - 1, args.rows)
            conn.execute(
                f"INSERT INTO {table} SELECT g, 'value ' || g, g %% 100 "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                (lo, hi),
            )
        conn.execute("SET synchronous_commit = on")
        conn.execute("SELECT pg_logical_emit_message(false, 'bench', '')")
        end = wal_lsn(conn)
        print(f"loaded {args.rows} rows in {time.monotonic() - t0:.1f}s", file=sys.stderr)

        # 1. walcast run: slot → Kafka, until every message is confirmed.
        t0 = time.monotonic()
        daemon = start_daemon(dsn, slot_w, pub, bootstrap, topic, args.format, logs / "run.log")
        while confirmed(conn, slot_w) < end:
            if daemon.poll() is not None:
                sys.exit(f"walcast run exited; see {logs / 'run.log'}")
            time.sleep(0.05)
        ours = time.monotonic() - t0

        # 2. pg_recvlogical on the identical slot.
        t0 = time.monotonic()
        subprocess.run(
            [
                str(pg_bin / "pg_recvlogical"),
                "-d",
                dsn,
                "--slot",
                slot_r,
                "--start",
                "--endpos",
                f"{end >> 32:X}/{end & 0xFFFFFFFF:X}",
                "-f",
                "/dev/null",
                "--no-loop",
                "-o",
                "proto_version=1",
                "-o",
                f"publication_names={pub}",
            ],
            check=True,
        )
        recv = time.monotonic() - t0

        # 3. Latency at a fixed offered rate, daemon still running.
        latencies: list[float] = []
        stop = threading.Event()
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{tag}",
                "auto.offset.reset": "latest",
                "fetch.wait.max.ms": 10,
            }
        )
        consumer.subscribe([f"{topic}.{table}"])
        while not consumer.assignment():
            consumer.poll(0.2)

        def consume() -> None:
            while not stop.is_set():
                message = consumer.poll(0.1)
                if message is None or message.error():
                    continue
                event = orjson.loads(message.value())
                if int(event["after"]["id"]) <= args.rows:
                    continue
                committed = dt.datetime.fromisoformat(event["commit_time"]).timestamp()
                latencies.append(time.time() - committed)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        sent = 0
        t0 = time.monotonic()
        interval = 1.0 / args.rate
        while time.monotonic() - t0 < args.seconds:
            conn.execute(f"INSERT INTO {table} VALUES (%s, 'live', 0)", (args.rows + sent + 1,))
            sent += 1
            lag = t0 + sent * interval - time.monotonic()
            if lag > 0:
                time.sleep(lag)
        offered = sent / (time.monotonic() - t0)
        deadline = time.monotonic() + 30
        while len(latencies) < sent and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        reader.join()
        consumer.close()
        daemon.terminate()
        daemon.wait(timeout=120)
    finally:
        for slot in (slot_w, slot_r):
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (slot,),
            )
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    latencies.sort()
    print(f"format: {args.format}, rows: {args.rows} ({args.rows_per_txn} per transaction)")
    print(f"walcast run → Kafka (confirmed): {ours:7.2f} s  {args.rows / ours:10,.0f} rows/s")
    print(f"pg_recvlogical → /dev/null:     {recv:7.2f} s  {args.rows / recv:10,.0f} rows/s")
    print(f"ratio walcast/pg_recvlogical: {recv / ours:.2f}")
    if latencies:
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        print(
            f"latency at {offered:,.0f} rows/s offered ({len(latencies)}/{sent} received): "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms (commit → consumer)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

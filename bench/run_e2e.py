"""End to end: PostgreSQL commit → `walcast run` → delivered in Kafka, in both delivery modes.

Measures, in one run, over the same rows:

1. throughput of the default (at-least-once) daemon: N rows committed (in transactions of
   --rows-per-txn) before the daemon starts; time from daemon start until the slot is
   acknowledged past the last commit, i.e. until Kafka confirmed every message (rows/s);
2. the same for ``walcast run --exactly-once`` on a second slot created at the same WAL
   position (the same rows): until the slot is acknowledged past the last commit, i.e. until
   every Kafka transaction holding them committed; then the ratio exactly-once/at-least-once;
3. pg_recvlogical draining a third identical slot to /dev/null, for comparison (rows/s);
4. commit-to-visible latency at a fixed offered rate, for each mode in turn: single-row
   transactions at --rate rows/s for --seconds with that daemon running; a consumer
   (read_committed for exactly-once) takes now minus the commit time carried in the
   message (p50, p99).

Usage: eval "$(scripts/local-services start all)"
       flock /tmp/walcast-heavy.lock python bench/run_e2e.py
       [--rows 1000000] [--rows-per-txn 1000] [--format json[,canal,...]] [--rate 2000]
       [--seconds 15] [--profile DIR] [--checkout DIR] [--modes at-least-once]
       [--no-latency]

``--format a,b`` runs one daemon writing every format listed (``--format a --format b``).
``--profile DIR`` runs the at-least-once daemon of step 1 under py-spy (``pip install
py-spy``; samples of the thread holding the GIL) into ``DIR/stream.txt`` (collapsed stacks,
one per thread); a profiled run is slower than an unprofiled one.
``--checkout DIR`` runs the daemon of another checkout (a ``git worktree`` of an older
commit; its tree first on ``sys.path``, this interpreter): ``bench/compare_commits.py``
uses it to run two commits alternating. ``--modes`` limits step 1-2 to the modes listed,
``--no-latency`` skips step 4. The machine's load average is printed beside the figures:
on a shared machine compare ratios of one session only, never wall times across sessions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import psycopg
from confluent_kafka import Consumer

from bench.kit.figures import Recorder, add_json_option

REPO = Path(__file__).resolve().parent.parent
MODES = {"at-least-once": [], "exactly-once": ["--exactly-once"]}


def wal_lsn(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT pg_current_wal_flush_lsn() - '0/0'").fetchone()[0])


def confirmed(conn: psycopg.Connection, slot: str) -> int:
    row = conn.execute(
        "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return int(row[0])


@dataclass
class Run:
    """One delivery mode: its slot, topic prefix and daemon."""

    mode: str
    slot: str
    prefix: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    seconds: float = 0.0
    latencies: tuple[float, float, int, int, float] | None = None
    """p50 ms, p99 ms, received, sent, offered rows/s."""

    def start(
        self,
        dsn: str,
        pub: str,
        bootstrap: str,
        fmt: str,
        profile: Path | None = None,
        checkout: Path = REPO,
    ) -> None:
        formats = [arg for name in fmt.split(",") for arg in ("--format", name)]
        topic = self.prefix + (".{format}.{table}" if "," in fmt else ".{table}")
        command = [
            sys.executable, "-m", "capture", "run", "--dsn", dsn, "--slot", self.slot,
            "--publication", pub, "--bootstrap-servers", bootstrap, *formats,
            "--topic", topic, "--metrics-port", "0",
            "--heartbeat-interval", "1", "--schema-topic", self.prefix + ".schemas",
            *MODES[self.mode],
        ]  # fmt: skip
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            command = ["py-spy", "record", "--format", "raw", "--threads", "--gil", "-r", "250",
                       "-o", str(profile / "stream.txt"), "--", *command]  # fmt: skip
        handle = self.log.open("ab")
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        self.process = subprocess.Popen(
            command, stdout=handle, stderr=handle, cwd=checkout, env=env
        )

    def wait_until(self, conn: psycopg.Connection, end: int) -> None:
        assert self.process is not None
        while confirmed(conn, self.slot) < end:
            if self.process.poll() is not None:
                sys.exit(f"walcast run ({self.mode}) exited; see {self.log}")
            time.sleep(0.05)

    def stop(self) -> None:
        assert self.process is not None
        pid = self.process.pid
        # Under py-spy the daemon is py-spy's child: stop the daemon, py-spy then writes its
        # profile and exits with the daemon's status.
        children = Path(f"/proc/{pid}/task/{pid}/children")
        targets = [int(c) for c in children.read_text().split()] if children.exists() else []
        for target in targets or [pid]:
            os.kill(target, signal.SIGTERM)
        if self.process.wait(timeout=120) != 0:
            sys.exit(f"walcast run ({self.mode}) did not stop cleanly; see {self.log}")


def measure_latency(
    conn: psycopg.Connection, run: Run, table: str, bootstrap: str, args: argparse.Namespace
) -> None:
    """Offer single-row transactions at --rate with ``run``'s daemon caught up and running."""
    first_id = int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0]) + 1
    latencies: list[float] = []
    stop = threading.Event()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
        }
    )
    single = "," not in args.format
    consumer.subscribe([f"{run.prefix}.{table}" if single else f"{run.prefix}.json.{table}"])
    while not consumer.assignment():
        consumer.poll(0.2)

    def consume() -> None:
        while not stop.is_set():
            message = consumer.poll(0.1)
            if message is None or message.error():
                continue
            event = orjson.loads(message.value())
            if int(event["after"]["id"]) < first_id:
                continue
            committed = dt.datetime.fromisoformat(event["commit_time"]).timestamp()
            latencies.append(time.time() - committed)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    sent = 0
    t0 = time.monotonic()
    interval = 1.0 / args.rate
    while time.monotonic() - t0 < args.seconds:
        conn.execute(f"INSERT INTO {table} VALUES (%s, 'live', 0)", (first_id + sent,))
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
    latencies.sort()
    if latencies:
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        run.latencies = (p50, p99, len(latencies), sent, offered)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rows-per-txn", type=int, default=1000)
    parser.add_argument("--format", default="json")
    parser.add_argument("--rate", type=int, default=2000, help="offered rows/s for latency")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the stream run")
    parser.add_argument(
        "--checkout", type=Path, default=REPO, help="run the daemon of this checkout"
    )
    parser.add_argument("--modes", default=",".join(MODES), help="delivery modes to run")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency step")
    add_json_option(parser)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    recorder = Recorder("run_e2e", args, repo=checkout)
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    load_before = os.getloadavg()
    dsn = os.environ["WALCAST_TEST_DSN"]
    bootstrap = os.environ["WALCAST_TEST_KAFKA"]
    pg_bin = Path(os.environ.get("WALCAST_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
    tag = uuid.uuid4().hex[:6]
    table, pub = f"e2e_{tag}", f"e2e_pub_{tag}"
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"walcast-bench-{tag}"
    logs.mkdir(parents=True)
    runs = [
        Run(mode, f"e2e_{name}_{tag}", f"bench_{name}_{tag}", logs / f"{name}.log")
        for mode, name in (("at-least-once", "alo"), ("exactly-once", "eos"))
        if mode in modes
    ]
    slot_r = f"e2e_r_{tag}"
    slots = [r.slot for r in runs] + [slot_r]
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, val text, n integer)")
    conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    for slot in slots:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        t0 = time.monotonic()
        for lo in range(1, args.rows + 1, args.rows_per_txn):
            hi = min(lo + args.rows_per_txn - 1, args.rows)
            if hi == args.rows:
                # The last commit waits for its flush (the server may run with
                # synchronous_commit off): the flush position below is past every row.
                conn.execute("SET synchronous_commit = on")
            conn.execute(
                f"INSERT INTO {table} SELECT g, 'value ' || g, g %% 100 "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                (lo, hi),
            )
        conn.execute("SELECT pg_logical_emit_message(false, 'bench', '')")
        end = wal_lsn(conn)
        print(f"loaded {args.rows} rows in {time.monotonic() - t0:.1f}s", file=sys.stderr)

        # 1, 2. Each mode from its own slot, one after the other: slot → Kafka, confirmed.
        for run in runs:
            t0 = time.monotonic()
            profile = args.profile if run.mode == "at-least-once" else None
            run.start(dsn, pub, bootstrap, args.format, profile, checkout)
            run.wait_until(conn, end)
            run.seconds = time.monotonic() - t0
            run.stop()
            print(f"{run.mode}: {run.seconds:.1f}s", file=sys.stderr)

        # 3. pg_recvlogical on the third identical slot.
        t0 = time.monotonic()
        subprocess.run(
            [
                str(pg_bin / "pg_recvlogical"), "-d", dsn, "--slot", slot_r, "--start",
                "--endpos", f"{end >> 32:X}/{end & 0xFFFFFFFF:X}", "-f", "/dev/null",
                "--no-loop", "-o", "proto_version=1", "-o", f"publication_names={pub}",
            ],
            check=True,
        )  # fmt: skip
        recv = time.monotonic() - t0
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot_r,))

        # 4. Latency at a fixed offered rate, each daemon in turn, once it caught up (read
        # from the json output: its commit_time).
        latency = "json" in args.format.split(",") and not args.no_latency
        for run in runs if latency else []:
            run.start(dsn, pub, bootstrap, args.format, checkout=checkout)
            run.wait_until(conn, wal_lsn(conn))
            measure_latency(conn, run, table, bootstrap, args)
            run.stop()
    finally:
        for run in runs:
            if run.process is not None and run.process.poll() is None:
                run.process.kill()
        for slot in slots:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (slot,),
            )
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    by_mode = {run.mode: run for run in runs}
    load_after = os.getloadavg()
    print(f"format: {args.format}, rows: {args.rows} ({args.rows_per_txn} per transaction)")
    print(f"checkout: {checkout}")
    print(
        f"load average: {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end "
        f"({os.cpu_count()} CPUs)"
    )
    for run in runs:
        print(
            f"walcast run {run.mode + ':':15} {run.seconds:7.2f} s  "
            f"{args.rows / run.seconds:10,.0f} rows/s  (until the slot is confirmed past the end)"
        )
    print(f"pg_recvlogical → /dev/null:     {recv:7.2f} s  {args.rows / recv:10,.0f} rows/s")
    if "at-least-once" in by_mode:
        alo = by_mode["at-least-once"]
        print(f"ratio at-least-once/pg_recvlogical: {recv / alo.seconds:.3f}")
        if "exactly-once" in by_mode:
            eos = by_mode["exactly-once"]
            print(f"ratio exactly-once/at-least-once:   {alo.seconds / eos.seconds:.2f}")
    elif "exactly-once" in by_mode:
        print(f"ratio exactly-once/pg_recvlogical:  {recv / by_mode['exactly-once'].seconds:.3f}")
    for run in runs:
        if run.latencies is not None:
            p50, p99, received, sent, offered = run.latencies
            print(
                f"latency {run.mode} at {offered:,.0f} rows/s offered ({received}/{sent} "
                f"received): p50 {p50:.1f} ms, p99 {p99:.1f} ms (commit → read_committed consumer)"
            )
    figures: dict[str, object] = {
        "pg_recvlogical": {"seconds": recv, "rows_per_s": args.rows / recv},
    }
    for run in runs:
        mode: dict[str, object] = {
            "seconds": run.seconds, "rows_per_s": args.rows / run.seconds,
            "ratio_to_pg_recvlogical": recv / run.seconds,
        }  # fmt: skip
        if run.latencies is not None:
            p50, p99, received, sent, offered = run.latencies
            mode["latency"] = {
                "p50_ms": p50, "p99_ms": p99, "received": received, "sent": sent,
                "offered_rows_per_s": offered,
            }  # fmt: skip
        figures[run.mode] = mode
    recorder.write(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU time per streamed change of `walcast run`, for one or more checkouts, alternating.

Wall-clock throughput on a shared machine measures the machine's load as much as walcast;
CPU time spent by the daemon's own process depends far less on it. For each checkout and
round this runs the real daemon (``python -m capture run`` from that checkout, the same
flags as ``bench/run_e2e.py``'s at-least-once run) twice over the same WAL:

* a **big** run from a slot created before ``--rows`` rows (in transactions of
  ``--rows-per-txn``) and a small tail of ``--tail`` rows;
* a **small** run from a slot created after the big rows, so it streams the tail only.

Each run is stopped once its slot is confirmed past the end (every message delivered by
Kafka); its CPU time is read from ``/proc`` just before the stop (the shutdown is not
counted). The per-change figures are ``(big - small) / rows``, so start-up, connection and
the first layouts cancel out:

* ``main µs``: the daemon's main thread (the pump: read, decode, assemble, encode, produce
  call, delivery callbacks; the thread that holds the GIL);
* ``process µs``: every thread of the process (librdkafka's included).

Checkouts run in turn (A, B, C, A, B, C, …), so a change of the machine's load hits every
checkout alike; the median over rounds is printed. Usage::

    eval "$(scripts/local-services start all)"
    git worktree add /tmp/wt-old <commit>
    flock /tmp/walcast-heavy.lock .venv/bin/python bench/cpu_per_change.py /tmp/wt-old . \
        [--rows 100000] [--rows-per-txn 1000] [--rounds 2] [--format json]

Every checkout runs with this interpreter (the same venv) and its own tree first on
``sys.path``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from confluent_kafka.admin import AdminClient

from bench.kit.figures import Recorder, add_json_option, commit

REPO = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def wal_lsn(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    row = conn.execute("SELECT pg_current_wal_flush_lsn() - '0/0'").fetchone()
    assert row is not None
    return int(str(row[0]))


def confirmed(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> int:
    row = conn.execute(
        "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    assert row is not None, f"slot {slot} is gone"
    return int(str(row[0]))


def process_cpu(pid: int) -> float:
    """utime + stime of every thread of ``pid`` (exited threads included), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def main_thread_cpu(pid: int) -> float:
    """CPU time of ``pid``'s main thread (schedstat, nanoseconds), seconds."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


@dataclass
class Checkout:
    """One tree to measure, and its figures per round."""

    path: Path
    label: str
    main: list[float] = field(default_factory=list)
    process: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def callgrind_totals(out: Path, pid: int) -> tuple[float, float]:
    """(main thread, all threads) instructions of callgrind's per-thread files of ``pid``."""
    counts: dict[int, int] = {}
    for path in out.parent.glob(f"{out.name}.{pid}*"):
        thread = int(path.name.rsplit("-", 1)[1]) if "-" in path.name else 1
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                counts[thread] = int(line.split()[1])
    return float(counts.get(1, 0)), float(sum(counts.values()))


def run_daemon(
    checkout: Path,
    conn: psycopg.Connection[tuple[object, ...]],
    slot: str,
    end: int,
    args: argparse.Namespace,
    log: Path,
) -> tuple[float, float, float]:
    """Stream ``slot`` with ``checkout``'s daemon until confirmed past ``end``.

    Returns (main thread, process, wall s from start): CPU seconds, or with ``--callgrind``
    instructions counted from the pump's start.
    """
    prefix = f"cpc_{slot}"
    daemon = [sys.executable, "-m", "capture"]
    out = log.parent / "callgrind.out"
    if args.callgrind:
        daemon = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
            f"--callgrind-out-file={out}.%p", sys.executable,
            str(REPO / "bench" / "_instrumented_daemon.py"),
        ]  # fmt: skip
    command = [
        *daemon, "run", "--dsn", args.dsn, "--slot", slot,
        "--publication", args.pub, "--bootstrap-servers", args.bootstrap,
        "--format", args.format, "--topic", prefix + ".{table}", "--metrics-port", "0",
        "--heartbeat-interval", str(args.heartbeat_interval), "--schema-topic",
        prefix + ".schemas",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if confirmed(conn, slot) >= end:
        sys.exit(f"slot {slot} is already confirmed past the end: nothing to measure")
    t0 = time.monotonic()
    with log.open("ab") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=handle, cwd=checkout, env=env)
    try:
        while confirmed(conn, slot) < end:
            if process.poll() is not None:
                sys.exit(f"walcast run exited early; see {log}")
            time.sleep(0.02)
        wall = time.monotonic() - t0
        if args.callgrind:
            subprocess.run(
                ["callgrind_control", "-i", "off", str(process.pid)],
                stdout=subprocess.DEVNULL,
                check=False,
            )
        else:
            main, total = main_thread_cpu(process.pid), process_cpu(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if args.callgrind:
        main, total = callgrind_totals(out, process.pid)
    AdminClient({"bootstrap.servers": args.bootstrap}).delete_topics(
        [f"{prefix}.{args.table}", f"{prefix}.schemas", f"{prefix}.json"]
    )
    return main, total, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rows-per-txn", type=int, default=1000)
    parser.add_argument("--tail", type=int, default=2000, help="rows both runs stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--format", default="json")
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="count instructions under valgrind (load-independent; about 50x slower)",
    )
    add_json_option(parser)
    args = parser.parse_args()
    recorder = Recorder("cpu_per_change", args)
    unit = "instr/change" if args.callgrind else "µs/change"
    args.dsn = os.environ["WALCAST_TEST_DSN"]
    args.bootstrap = os.environ["WALCAST_TEST_KAFKA"]
    tag = uuid.uuid4().hex[:6]
    args.table, args.pub = f"cpc_{tag}", f"cpc_pub_{tag}"
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"walcast-cpc-{tag}"
    logs.mkdir(parents=True)
    checkouts = [Checkout(p.resolve(), str(p)) for p in args.checkouts]
    for checkout in checkouts:  # byte-compile first: a first run must not pay for it
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(checkout.path / "capture")], check=True
        )
    runs = [(r, i) for r in range(args.rounds) for i in range(len(checkouts))]
    big = {run: f"cpc_b{run[0]}_{run[1]}_{tag}" for run in runs}
    small = {run: f"cpc_s{run[0]}_{run[1]}_{tag}" for run in runs}
    conn = psycopg.connect(args.dsn, autocommit=True)
    conn.execute(f"CREATE TABLE {args.table} (id bigint PRIMARY KEY, val text, n integer)")
    conn.execute(f"CREATE PUBLICATION {args.pub} FOR TABLE {args.table}")

    def insert(lo: int, count: int) -> None:
        for first in range(lo, lo + count, args.rows_per_txn):
            last = min(first + args.rows_per_txn - 1, lo + count - 1)
            conn.execute(
                f"INSERT INTO {args.table} SELECT g, 'value ' || g, g %% 100 "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                (first, last),
            )

    slots = [*big.values(), *small.values()]
    try:
        for slot in big.values():
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        insert(1, args.rows)
        for slot in small.values():
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        # The tail's last commit waits for its flush (the server may run with
        # synchronous_commit off), so the flush position below is past every row.
        conn.execute("SET synchronous_commit = on")
        insert(args.rows + 1, args.tail)
        conn.execute("SELECT pg_logical_emit_message(false, 'bench', '')")
        end = wal_lsn(conn)
        for rnd, index in runs:
            checkout = checkouts[index]
            log = logs / f"{index}.log"
            load = os.getloadavg()[0]
            b_main, b_total, b_wall = run_daemon(
                checkout.path, conn, big[rnd, index], end, args, log
            )
            s_main, s_total, _ = run_daemon(checkout.path, conn, small[rnd, index], end, args, log)
            scale = 1.0 if args.callgrind else 1e6  # instructions, or µs
            main_us = (b_main - s_main) / args.rows * scale
            total_us = (b_total - s_total) / args.rows * scale
            checkout.main.append(main_us)
            checkout.process.append(total_us)
            checkout.wall.append(b_wall)
            print(
                f"round {rnd + 1} {checkout.label}: main {main_us:8.2f} {unit}, process "
                f"{total_us:8.2f} {unit} (big run {b_wall:.1f} s wall, load {load:.1f}; "
                f"big {b_main:.4g}/{b_total:.4g}, small {s_main:.4g}/{s_total:.4g})",
                flush=True,
            )
    finally:
        for slot in slots:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (slot,),
            )
        conn.execute(f"DROP PUBLICATION IF EXISTS {args.pub}")
        conn.execute(f"DROP TABLE IF EXISTS {args.table}")
    print(f"format {args.format}, {args.rows} rows ({args.rows_per_txn} per transaction)")
    print(f"{'checkout':40} {'main ' + unit:>18} {'process ' + unit:>21}")
    for checkout in checkouts:
        print(
            f"{checkout.label:40} {statistics.median(checkout.main):18.2f} "
            f"{statistics.median(checkout.process):21.2f}   "
            f"(rounds: {', '.join(f'{m:.2f}' for m in checkout.main)})"
        )
    recorder.write({
        "unit": "instructions per change" if args.callgrind else "microseconds per change",
        "checkouts": [
            {
                "label": checkout.label, "commit": commit(checkout.path),
                "main": checkout.main, "process": checkout.process, "big_run_wall_s": checkout.wall,
                "median_main": statistics.median(checkout.main),
                "median_process": statistics.median(checkout.process),
            }
            for checkout in checkouts
        ],
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

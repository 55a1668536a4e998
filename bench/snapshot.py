"""The initial load: walcast's rows/s into Kafka (confirmed) against COPY TO STDOUT.

Measures, in one run, on one table of ``--rows`` rows (bigint key, text, int, timestamptz):

1. ``COPY (SELECT * FROM t) TO STDOUT`` read by psycopg and thrown away (the reference);
2. the Kafka ceiling: a bare confluent-kafka producer, with walcast's producer settings,
   sending ``--ceiling-messages`` pre-built messages of a loaded row's size, with walcast's
   three headers, and waiting for every delivery report (no reading, no encoding: what no
   load through one Python producer can beat on this machine);
3. for each ``--workers`` value, ``walcast run --create-slot --snapshot initial-only`` with
   that many readers: from the daemon's start to its exit, which comes once Kafka confirmed
   every row (start-up and the slot's creation included), and the peak WAL its slot
   retained meanwhile (sampled every 0.5 s; ``--writes`` adds a concurrent writer so that
   there is WAL to retain).

Usage: eval "$(scripts/local-services start all)"; python bench/snapshot.py
       [--rows 5000000] [--workers 1,2,4] [--format json] [--chunk-rows 50000]
       [--writes 2000] [--ceiling-messages 2000000] [--profile DIR]

``--profile DIR`` runs each ``walcast run`` under py-spy (``pip install py-spy``, samples of the
thread holding the GIL: where the CPU time of the Python threads goes) and writes
its samples to ``DIR/load-<workers>w.txt`` (collapsed stacks, one per thread: read them with
``flamegraph.pl`` or speedscope); the rates of a profiled run are lower than without it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.kit.figures import Recorder, add_json_option

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


def producer_ceiling(bootstrap: str, count: int, value: bytes) -> float:
    """Messages/s of a bare producer (walcast's settings), every delivery confirmed."""
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    from capture.config.model import DaemonConfig  # noqa: PLC0415
    from capture.source import SourceConfig  # noqa: PLC0415

    topic = f"bench_ceiling_{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    source = SourceConfig(dsn="", slot="s", publications=["p"])
    config = DaemonConfig(source=source, bootstrap_servers=bootstrap, outputs=[])
    producer = Producer(config.producer_settings())
    confirmed = 0

    def delivered(err: object, _msg: object) -> None:
        nonlocal confirmed
        confirmed += err is None

    headers = [("walcast.commit_lsn", b"1/5C333047"), ("walcast.xid", b"0")]
    start = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    b"public.bench:[%d]" % i,
                    on_delivery=delivered,
                    headers=[*headers, ("walcast.ordinal", b"%d" % (i % 50_000))],
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.monotonic() - start
    admin.delete_topics([topic])
    if confirmed != count:
        sys.exit(f"the ceiling run confirmed {confirmed} of {count} messages")
    return count / elapsed


def write_while(stop: threading.Event, dsn: str, table: str, rows: int, per_second: int) -> None:
    """Update random rows, one transaction of 100 every 100 / ``per_second`` seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(100 / per_second):
            conn.execute(
                f"UPDATE {table} SET n = n + 1 WHERE id IN "
                "(SELECT 1 + (random() * (%s - 1))::bigint FROM generate_series(1, 100))",
                (rows,),
            )


def walcast_rate(args: argparse.Namespace, dsn: str, table: str, workers: int) -> tuple[float, int]:
    """Rows/s of one load, and the peak WAL (bytes) its slot retained meanwhile."""
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
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        out = Path(args.profile) / f"load-{workers}w.txt"
        command = ["py-spy", "record", "--format", "raw", "--threads", "--gil", "-r", "250",
                   "-o", str(out), "--", *command]  # fmt: skip
    retained = 0
    stop = threading.Event()
    writer = threading.Thread(
        target=write_while, args=(stop, dsn, table, args.rows, args.writes), daemon=True
    )
    try:
        if args.writes:
            writer.start()
        start = time.monotonic()
        with (
            subprocess.Popen(
                command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            ) as process,
            psycopg.connect(dsn, autocommit=True) as conn,
        ):
            while process.poll() is None:  # the slot's WAL retention, sampled while loading
                row = conn.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint "
                    "FROM pg_replication_slots WHERE slot_name = %s",
                    (slot,),
                ).fetchone()
                if row is not None and row[0] is not None:
                    retained = max(retained, int(row[0]))
                time.sleep(0.5)
            stderr = process.stderr.read() if process.stderr else ""
        elapsed = time.monotonic() - start
        if process.returncode != 0:
            sys.exit(f"walcast run failed ({process.returncode}):\n{stderr[-3000:]}")
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
    return args.rows / elapsed, retained


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--format", default="json")
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument(
        "--writes", type=int, default=2000, help="rows updated per second during each load"
    )
    parser.add_argument(
        "--ceiling-messages",
        type=int,
        default=2_000_000,
        help="messages of the bare-producer ceiling run (0: skip it)",
    )
    parser.add_argument("--profile", metavar="DIR", help="record each load with py-spy into DIR")
    add_json_option(parser)
    args = parser.parse_args()
    recorder = Recorder("snapshot", args)
    loads: list[dict[str, float]] = []
    figures: dict[str, object] = {"loads": loads}
    if "WALCAST_TEST_DSN" not in os.environ or "WALCAST_TEST_KAFKA" not in os.environ:
        sys.exit('start the services first: eval "$(scripts/local-services start all)"')
    dsn = os.environ["WALCAST_TEST_DSN"]
    table = f"bench_load_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text, n int, t timestamptz)")
        start = time.monotonic()
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'value ' || g, g %% 1000, "
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
        figures["copy_rows_per_s"] = reference
        if args.ceiling_messages:
            value = (
                b'{"op":"snapshot","table":"public.bench","after":{"id":"2500000","v":"value '
                b'2500000","n":"0","t":"2024-01-29 22:26:40+00"}}'
            )
            ceiling = producer_ceiling(
                os.environ["WALCAST_TEST_KAFKA"], args.ceiling_messages, value
            )
            print(
                f"Kafka ceiling (bare producer, {len(value)}-byte messages, confirmed): "
                f"{ceiling:10,.0f} msgs/s ratio {ceiling / reference:.2f}"
            )
            figures["kafka_ceiling_msgs_per_s"] = ceiling
        for workers in (int(w) for w in args.workers.split(",")):
            rate, retained = walcast_rate(args, dsn, table, workers)
            versus = f"   {rate / ceiling:.2f}x the Kafka ceiling" if args.ceiling_messages else ""
            print(
                f"walcast run --snapshot initial-only, {workers} worker(s): "
                f"{rate:10,.0f} rows/s   ratio {rate / reference:.2f}{versus}   "
                f"peak WAL retained {retained / 2**20:.1f} MiB"
            )
            loads.append({
                "workers": workers, "rows_per_s": rate, "ratio_to_copy": rate / reference,
                "peak_wal_retained_bytes": retained,
            })  # fmt: skip
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")
    recorder.write(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

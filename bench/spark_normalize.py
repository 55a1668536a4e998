"""Spark throughput per format, beside the daemon's: normalize and materialize rows/s.

    python bench/spark_normalize.py [--count 1000000] [--formats canal,ibm,...]
        [--bootstrap HOST:PORT] [--tables 8] [--max-offsets-per-trigger N]
        [--stores delta,parquet] [--daemon-rows 300000]

For each format:

1. produces ``--count`` synthetic changes (``capture.teststream``, the same stream as
   ``walcast produce-test-stream``) to a fresh topic (layout records to
   ``<topic>.layouts``), then times ``NormalizeJob(available_now=True)`` from start to
   end and counts the normalized rows written (rows/s);
2. times ``MaterializeJob(available_now=True)`` over those normalized rows, once per
   store in ``--stores`` (changes folded per second);
3. a reference in the same session: the same topic copied by Spark's Kafka source to
   Parquet as it is (topic, partition, offset, value: no parsing), available-now, so
   normalize's own work shows as the ratio ``normalize:raw`` (the JVM is warm by then);
4. ``walcast run``'s rate for the same format on the same machine (at-least-once,
   ``--daemon-rows`` single-table inserts committed before it starts, timed until the
   slot is acknowledged past them: ``bench/run_e2e.py``'s measure), needs PostgreSQL
   (``$WALCAST_TEST_DSN``); the table's last column is normalize rows/s over it.

The Spark session is the jobs' own (``local[2]``); JVM start-up is in the first format's
time. Kafka: ``--bootstrap``, else ``$WALCAST_TEST_KAFKA``, else
``scripts/local-services start kafka``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from capture.formats import encoder_for  # noqa: E402
from capture.formats.layout import layout_record  # noqa: E402
from capture.synthetic import build_tables, format_options, generate, table_specs  # noqa: E402
from capture.teststream import produce  # noqa: E402
from pipeline.formats import FORMAT_NAMES  # noqa: E402
from pipeline.materialize import MaterializeJob  # noqa: E402
from pipeline.model import NORMALIZED  # noqa: E402
from pipeline.normalize import NormalizeJob  # noqa: E402
from pipeline.quarantine import QUARANTINE  # noqa: E402
from pipeline.session import SessionOptions, build_session  # noqa: E402

SETTINGS = {"canal": {"canal.walcast_keys": "true"}}


def kafka_bootstrap(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("WALCAST_TEST_KAFKA"):
        return os.environ["WALCAST_TEST_KAFKA"]
    done = subprocess.run(
        [str(REPO / "scripts" / "local-services"), "start", "kafka"],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in done.stdout.splitlines():
        if line.startswith("export WALCAST_TEST_KAFKA="):
            return shlex.split(line.partition("=")[2])[0]
    raise SystemExit("no Kafka: pass --bootstrap")


def fill_topic(bootstrap: str, topic: str, fmt: str, count: int, tables: int) -> tuple[int, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in (topic, f"{topic}.layouts"):
        for future in admin.create_topics([NewTopic(name, 2 if name == topic else 1, 1)]).values():
            future.result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 2_000_000,
            "message.max.bytes": 2_000_000,
        }
    )
    for table in build_tables(table_specs(tables)):
        producer.produce(
            f"{topic}.layouts",
            key=table.qualified_name.encode(),
            value=json.dumps(layout_record(table)).encode(),
        )
    started = time.perf_counter()
    sent = 0

    def send(message) -> None:  # noqa: ANN001
        nonlocal sent
        while True:
            try:
                producer.produce(topic, key=message.key, value=message.value)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        if sent % 10_000 == 0:
            producer.poll(0)

    encoder = encoder_for(fmt, format_options(SETTINGS.get(fmt, {})))
    produce(encoder, generate(count, 1, tables), send)
    producer.flush(120)
    return sent, time.perf_counter() - started


def daemon_rates(formats: list[str], rows: int) -> dict[str, float]:
    """``walcast run`` rows/s per format over the same committed rows (one slot each)."""
    import psycopg  # noqa: PLC0415

    sys.path.insert(0, str(REPO / "bench"))
    from run_e2e import Run, wal_lsn  # noqa: PLC0415

    dsn = os.environ.get("WALCAST_TEST_DSN")
    bootstrap = os.environ.get("WALCAST_TEST_KAFKA")
    if not rows or not dsn or not bootstrap:
        print("daemon rate not measured (--daemon-rows 0, or no $WALCAST_TEST_DSN)", flush=True)
        return {}
    tag = uuid.uuid4().hex[:6]
    table, pub = f"bench_rate_{tag}", f"bench_rate_pub_{tag}"
    logs = Path(tempfile.mkdtemp(prefix=f"walcast-bench-{tag}-"))
    runs = {
        fmt: Run("at-least-once", f"bench_{fmt.replace('-', '_')}_{tag}", f"rate_{tag}.{fmt}",
                 logs / f"{fmt}.log")
        for fmt in formats
    }  # fmt: skip
    out: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, val text, n integer)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        try:
            for run in runs.values():
                conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (run.slot,)
                )
            for lo in range(1, rows + 1, 1000):
                conn.execute(
                    f"INSERT INTO {table} SELECT g, 'value ' || g, g %% 100 "
                    "FROM generate_series(%s::bigint, %s::bigint) g",
                    (lo, min(lo + 999, rows)),
                )
            conn.execute("SELECT pg_logical_emit_message(false, 'bench', '')")
            end = wal_lsn(conn)
            for fmt, run in runs.items():
                started = time.monotonic()
                run.start(dsn, pub, bootstrap, fmt)
                run.wait_until(conn, end)
                out[fmt] = rows / (time.monotonic() - started)
                run.stop()
                print(json.dumps({"format": fmt, "daemon_rows_per_s": round(out[fmt])}), flush=True)
        finally:
            for run in runs.values():
                if run.process is not None and run.process.poll() is None:
                    run.process.kill()
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND NOT active",
                    (run.slot,),
                )
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    return out


def time_raw_copy(spark, bootstrap: str, topic: str, work: str) -> float:  # noqa: ANN001
    """Seconds to copy ``topic`` to Parquet unparsed with Spark's Kafka source (the reference)."""
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("topic", "partition", "offset", "CAST(value AS string) AS value")
        .writeStream.format("parquet")
        .option("path", f"{work}/raw")
        .option("checkpointLocation", f"{work}/ckpt-raw")
        .trigger(availableNow=True)
    )
    started = time.perf_counter()
    query.start().awaitTermination()
    return time.perf_counter() - started


def time_materialize(spark, bootstrap: str, layouts: str, work: str, store: str) -> float:  # noqa: ANN001
    """Seconds of one available-now materialize run of ``work``'s normalized changes."""
    job = MaterializeJob(
        normalized=f"{work}/changes",
        state=f"{work}/state-{store}",
        checkpoint=f"{work}/ckpt-materialize-{store}",
        bootstrap=bootstrap,
        layout_topic=layouts,
        use_delta=store == "delta",
        available_now=True,
    )
    started = time.perf_counter()
    job.run(spark)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--formats", default=",".join(FORMAT_NAMES))
    parser.add_argument("--bootstrap")
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--stores", default="delta,parquet")
    parser.add_argument("--daemon-rows", type=int, default=300_000)
    args = parser.parse_args()
    bootstrap = kafka_bootstrap(args.bootstrap)
    formats = args.formats.split(",")
    stores = [s for s in args.stores.split(",") if s]
    daemon = daemon_rates(formats, args.daemon_rows)
    spark = build_session(SessionOptions(shuffle_partitions=4, extra={"spark.driver.memory": "8g"}))
    results = []
    for fmt in formats:
        topic = f"bench-{fmt}-{uuid.uuid4().hex[:8]}"
        messages, fill_s = fill_topic(bootstrap, topic, fmt, args.count, args.tables)
        with tempfile.TemporaryDirectory(prefix="walcast-bench-") as work:
            job = NormalizeJob(
                bootstrap=bootstrap,
                topics=[topic],
                format=fmt,
                output=f"{work}/changes",
                checkpoint=f"{work}/ckpt",
                layout_topic=f"{topic}.layouts",
                available_now=True,
                max_offsets_per_trigger=args.max_offsets_per_trigger,
                report=lambda _line: None,
            )
            started = time.perf_counter()
            job.run(spark)
            elapsed = time.perf_counter() - started
            rows = spark.read.schema(NORMALIZED).parquet(f"{work}/changes").count()
            rejected = spark.read.schema(QUARANTINE).parquet(f"{work}/changes_quarantine").count()
            raw_s = time_raw_copy(spark, bootstrap, topic, work)
            folded = {
                store: rows / time_materialize(spark, bootstrap, f"{topic}.layouts", work, store)
                for store in stores
            }
        result = {
            "format": fmt,
            "changes": args.count,
            "messages": messages,
            "rows": rows,
            "quarantined": rejected,
            "seconds": round(elapsed, 1),
            "rows_per_s": round(rows / elapsed),
            "raw_copy_messages_per_s": round(messages / raw_s),
            "produce_seconds": round(fill_s, 1),
            **{f"materialize_{store}_rows_per_s": round(rate) for store, rate in folded.items()},
            "daemon_rows_per_s": round(daemon[fmt]) if fmt in daemon else None,
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    heads = ["format", "rows", "normalize s", "normalize/s", "raw copy msgs/s", "normalize:raw"]
    heads += [f"{store}/s" for store in stores] + ["daemon/s", "normalize:daemon"]
    print(" | ".join(heads))
    for r in results:
        cells = [r["format"], f"{r['rows']:,}", f"{r['seconds']}", f"{r['rows_per_s']:,}"]
        raw = r["raw_copy_messages_per_s"]
        cells += [f"{raw:,}", f"{r['rows_per_s'] * r['messages'] / r['rows'] / raw:.2f}"]
        cells += [f"{r[f'materialize_{store}_rows_per_s']:,}" for store in stores]
        rate = r["daemon_rows_per_s"]
        cells += [f"{rate:,}", f"{r['rows_per_s'] / rate:.2f}"] if rate else ["-", "-"]
        print(" | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())

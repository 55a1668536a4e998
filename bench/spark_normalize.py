"""Normalize throughput per format: rows/s of the Spark normalize job on local[2].

    python bench/spark_normalize.py [--count 1000000] [--formats canal,ibm,...]
        [--bootstrap HOST:PORT] [--tables 8] [--max-offsets-per-trigger N]

For each format: produces ``--count`` synthetic changes (``capture.teststream``, the
same stream as ``walcast produce-test-stream``) to a fresh topic (layout records to
``<topic>.layouts``), then times ``NormalizeJob(available_now=True)`` from start to
end and counts the normalized rows written. Kafka: ``--bootstrap``, else
``$WALCAST_TEST_KAFKA``, else ``scripts/local-services start kafka``.
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--formats", default=",".join(FORMAT_NAMES))
    parser.add_argument("--bootstrap")
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--max-offsets-per-trigger", type=int)
    args = parser.parse_args()
    bootstrap = kafka_bootstrap(args.bootstrap)
    spark = build_session(SessionOptions(shuffle_partitions=4, extra={"spark.driver.memory": "8g"}))
    results = []
    for fmt in args.formats.split(","):
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
        result = {
            "format": fmt,
            "changes": args.count,
            "messages": messages,
            "rows": rows,
            "quarantined": rejected,
            "seconds": round(elapsed, 1),
            "rows_per_s": round(rows / elapsed),
            "produce_seconds": round(fill_s, 1),
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    print(f"{'format':<10} {'rows':>10} {'seconds':>8} {'rows/s':>9}")
    for r in results:
        print(f"{r['format']:<10} {r['rows']:>10} {r['seconds']:>8} {r['rows_per_s']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

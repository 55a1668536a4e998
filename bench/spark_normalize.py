"""Spark normalize per format against a minimal job over the same topic, and the steady state.

    flock /tmp/walcast-heavy.lock python bench/spark_normalize.py [--count 300000]
        [--formats canal,ibm,...] [--repeat 2] [--steady-count 1000000]
        [--steady-batch 200000] [--daemon-rows 300000] [--stores delta,parquet]
        [--bootstrap HOST:PORT] [--tables 8] [--driver-memory 2g] [--event-log DIR]

For each format:

1. produces ``--count`` synthetic changes (``capture.synthetic``, the stream of
   ``walcast produce-test-stream``) to a fresh two-partition topic, with walcast's Kafka
   headers (``walcast.source``, ``walcast.commit_lsn``, ``walcast.xid``,
   ``walcast.ordinal``) and the layout records (with their source) on ``<topic>.layouts``,
   as ``walcast run`` writes them;
2. times, each in a fresh process (its own JVM; Python and JVM start-up included), the
   **minimal job** and **normalize** over that topic, ``--repeat`` times in turn (minimal,
   normalize, minimal, normalize …), and prints each pair's ratio minimal/normalize (the
   issue's goal: >= 0.6). The minimal job reads the topic with the same Kafka source and
   options, parses only the format (``from_json`` of its top-level fields with normalize's
   own schema and an explode of the rows; DTS ``from_avro``; IBM the quote-aware record and
   field split normalize uses) and writes Parquet partitioned by ``schema``, ``table``,
   ``commit_date`` with Spark's file sink (available-now), so the difference is what
   normalize does beyond reading the format: layouts, canonical values, sequencing,
   quarantine, state, its two sinks;
3. with ``--steady-count N``: a second topic of N changes, normalized in one fresh process
   in batches of about ``--steady-batch`` changes (``maxOffsetsPerTrigger``, in messages,
   available-now): the rate of every batch after the first (the first pays for the JVM's
   warm-up), rows/s;
4. with ``--stores``: materialize (fresh process each) over the first normalize's output,
   rows/s of the job itself;
5. ``walcast run``'s rate for the same format on the same machine (``--daemon-rows``
   single-table inserts committed before it starts, timed until the slot is acknowledged
   past them: ``bench/run_e2e.py``'s measure; needs ``$WALCAST_TEST_DSN``), beside the
   steady rate.

Both jobs run with the same session (``local[2]``, the CLI's settings, ``--driver-memory``).
Kafka: ``--bootstrap``, else ``$WALCAST_TEST_KAFKA``, else ``scripts/local-services start
kafka``. The machine is shared: compare ratios taken in the same run, never absolute
seconds of different runs.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SETTINGS = {"canal": {"canal.walcast_keys": "true"}}
SOURCE_SLOT = "seed-1"


# ------------------------------------------------------------------ producing


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
    """``count`` changes of ``fmt`` to ``topic`` (2 partitions), layouts to ``<topic>.layouts``.

    Messages carry walcast's headers and layouts their source, as ``walcast run`` writes.
    """
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    from capture.formats import encoder_for, parse_settings  # noqa: PLC0415
    from capture.formats.layout import layout_record  # noqa: PLC0415
    from capture.state.identity import SOURCE_HEADER, SYNTHETIC_SYSTEM, SourceIdentity  # noqa: PLC0415
    from capture.synthetic import build_tables, format_options, generate, table_specs  # noqa: PLC0415
    from capture.synthetic.tables import DATABASE  # noqa: PLC0415
    from capture.teststream import produce  # noqa: PLC0415

    source = SourceIdentity(SYNTHETIC_SYSTEM, DATABASE, SOURCE_SLOT)
    source_header = (SOURCE_HEADER, source.key.encode())
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
        record = layout_record(table)
        record["source"] = source.key
        producer.produce(
            f"{topic}.layouts",
            key=source.record_key(table.qualified_name).encode(),
            value=json.dumps(record).encode(),
        )
    started = time.perf_counter()
    sent = 0

    def send(message) -> None:  # noqa: ANN001
        nonlocal sent
        headers = [*message.kafka_headers(), source_header]
        while True:
            try:
                producer.produce(topic, key=message.key, value=message.value, headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        if sent % 10_000 == 0:
            producer.poll(0)

    encoder = encoder_for(fmt, format_options(parse_settings(fmt, SETTINGS.get(fmt, {}))))
    produce(encoder, generate(count, 1, tables), send)
    producer.flush(120)
    return sent, time.perf_counter() - started


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(topics).values():
        with contextlib.suppress(Exception):  # best effort clean-up
            future.result(30)


# ------------------------------------------------------------------ the daemon's rate


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


# ------------------------------------------------------------------ the child processes


def child_session(task: dict[str, Any]):  # noqa: ANN201
    """The session ``walcast spark normalize`` builds (``local[2]``, Spark's log off)."""
    from pipeline.session import SessionOptions, build_session  # noqa: PLC0415

    os.environ.setdefault("WALCAST_SPARK_LOG_LEVEL", "OFF")
    extra = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.ansi.enabled": "false",
        "spark.driver.memory": task["driver_memory"],
    }
    if task.get("event_log"):  # the SQL metrics of every stage, for the profile
        Path(task["event_log"]).mkdir(parents=True, exist_ok=True)
        extra |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": task["event_log"]}
    return build_session(
        SessionOptions(master="local[2]", app_name=f"bench-{task['kind']}", extra=extra)
    )


def minimal_frame(records, fmt: str):  # noqa: ANN001, ANN201
    """``records`` parsed as ``fmt`` and nothing more: top-level fields, rows exploded.

    Columns: the format's top-level fields (a row of ``data`` instead of the array where a
    message holds several), the Kafka position, and ``schema``, ``table``, ``commit_date``.
    """
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.schemas import struct_from_schema  # noqa: PLC0415

    text = F.col("value").cast("string")
    position = [F.col("topic"), F.col("partition"), F.col("offset")]

    def after_dot(column: str) -> F.Column:
        return F.expr(f"substring({column}, length(substring_index({column}, '.', 1)) + 2)")

    if fmt == "canal":
        j = records.select(
            *position, F.from_json(text, struct_from_schema("canal.schema.json")).alias("j")
        )
        rows = j.select(*position, "j.*").select(
            "*", F.posexplode_outer("data").alias("record_index", "row")
        )
        return rows.drop("data").withColumns(
            {
                "schema": F.col("database"),
                "commit_date": F.to_date(F.timestamp_millis(F.col("es"))),
            }
        )
    if fmt == "shareplex":
        j = records.select(
            *position, F.from_json(text, struct_from_schema("shareplex.schema.json")).alias("j")
        ).select(*position, "j.*")
        return j.withColumns(
            {
                "schema": F.substring_index("meta.table", ".", 1),
                "table": after_dot("meta.table"),
                "commit_date": F.to_date(F.substring("meta.time", 1, 10)),
            }
        )
    if fmt == "dataworks":
        j = records.select(
            *position, F.from_json(text, struct_from_schema("dataworks.schema.json")).alias("j")
        ).select(*position, F.col("j.schema").alias("dw_schema"), "j.payload", "j.version")
        source = F.col("dw_schema.source")
        return j.withColumns(
            {
                "schema": F.coalesce(source["schemaName"], source["dbName"]),
                "table": source["tableName"],
                "commit_date": F.to_date(F.timestamp_millis(F.col("payload.timestamp.eventTime"))),
            }
        )
    if fmt == "qlik":
        schema = struct_from_schema("qlik.schema.json", defs_override={"message": "data"})
        key = F.col("key").cast("string")
        j = records.select(*position, key.alias("_key"), F.from_json(text, schema).alias("j"))
        return j.select(*position, "_key", "j.*").withColumns(
            {
                "schema": F.regexp_extract("_key", r"^(.+?)\.(.+?)(?::\[.*)?$", 1),
                "table": F.regexp_extract("_key", r"^(.+?)\.(.+?)(?::\[.*)?$", 2),
                "commit_date": F.to_date(F.substring("message.headers.timestamp", 1, 10)),
            }
        )
    if fmt == "dts-avro":
        from pyspark.sql.avro.functions import from_avro  # noqa: PLC0415

        from pipeline.formats.dts_avro.decode import record_schema  # noqa: PLC0415

        r = records.select(
            *position,
            from_avro(
                F.col("value"),
                record_schema(),
                {"mode": "PERMISSIVE", "enableStableIdentifiersForUnionType": "true"},
            ).alias("r"),
        ).select(*position, "r.*")
        parts = F.split("objectName", r"\.", 3)
        return r.withColumns(
            {
                "schema": F.element_at(parts, -2),
                "table": F.element_at(parts, -1),
                "commit_date": F.to_date(F.timestamp_seconds(F.col("sourceTimestamp"))),
            }
        )
    if fmt == "ibm":
        parser = parser_for("ibm")
        rows = records.select(
            *position,
            F.posexplode_outer(F.regexp_extract_all(text, F.lit(parser.record_pattern), 0)).alias(
                "record_index", "record"
            ),
        ).where(F.col("record") != "")
        fields = rows.withColumn(
            "fields",
            F.regexp_extract_all(
                F.concat(F.lit(parser.cd), F.col("record")), F.lit(parser.field_pattern), 1
            ),
        )
        return fields.drop("record").withColumns(
            {
                "schema": F.element_at("fields", 5),
                "table": F.element_at("fields", 6),
                "commit_date": F.to_date(
                    F.substring(F.translate(F.element_at("fields", 10), parser.q, ""), 1, 10)
                ),
            }
        )
    raise ValueError(fmt)


def run_minimal(spark, task: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN001
    from pipeline import kafka  # noqa: PLC0415

    stream = kafka.read_stream(
        spark,
        task["bootstrap"],
        [task["topic"]],
        options={"kafka.isolation.level": "read_committed"},
        min_partitions=4 * spark.sparkContext.defaultParallelism,
    )
    query = (
        minimal_frame(stream, task["format"])
        .writeStream.format("parquet")
        .partitionBy("schema", "table", "commit_date")
        .option("path", f"{task['work']}/minimal")
        .option("checkpointLocation", f"{task['work']}/ckpt-minimal")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = spark.read.parquet(f"{task['work']}/minimal").count()
    return {"rows": rows}


def run_normalize(spark, task: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN001
    from pipeline.model import NORMALIZED  # noqa: PLC0415
    from pipeline.normalize import NormalizeJob  # noqa: PLC0415
    from pipeline.quarantine import QUARANTINE  # noqa: PLC0415

    marks: list[tuple[float, int]] = []
    job: NormalizeJob

    def report(line: str) -> None:
        if line.startswith("walcast spark normalize: batch"):
            marks.append((time.monotonic(), job.totals.rows))

    job = NormalizeJob(
        bootstrap=task["bootstrap"],
        topics=[task["topic"]],
        format=task["format"],
        output=f"{task['work']}/changes",
        checkpoint=f"{task['work']}/ckpt",
        layout_topic=f"{task['topic']}.layouts",
        available_now=True,
        max_offsets_per_trigger=task.get("batch"),
        report=report,
    )
    job.run(spark)
    written = spark.read.schema(NORMALIZED).parquet(f"{task['work']}/changes").count()
    quarantined = (
        spark.read.schema(QUARANTINE).parquet(f"{task['work']}/changes_quarantine").count()
    )
    out: dict[str, Any] = {"rows": written, "quarantined": quarantined, "batches": len(marks)}
    while len(marks) >= 2 and marks[-1][1] == marks[-2][1]:
        marks.pop()  # available-now's last, empty batch
    if len(marks) >= 2:
        (t0, r0), (t1, r1) = marks[0], marks[-1]
        out["steady_rows_per_s"] = (r1 - r0) / (t1 - t0)
        out["batch_rows_per_s"] = [
            round((b - a) / (tb - ta)) for (ta, a), (tb, b) in itertools.pairwise(marks)
        ]
    return out


def run_materialize(spark, task: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN001
    from pipeline.materialize import MaterializeJob  # noqa: PLC0415
    from pipeline.model import NORMALIZED  # noqa: PLC0415

    store = task["store"]
    rows = spark.read.schema(NORMALIZED).parquet(f"{task['work']}/changes").count()
    job = MaterializeJob(
        normalized=f"{task['work']}/changes",
        state=f"{task['work']}/state-{store}",
        checkpoint=f"{task['work']}/ckpt-materialize-{store}",
        bootstrap=task["bootstrap"],
        layout_topic=f"{task['topic']}.layouts",
        use_delta=store == "delta",
        available_now=True,
    )
    started = time.perf_counter()
    job.run(spark)
    return {"rows": rows, "job_seconds": time.perf_counter() - started}


def child(task: dict[str, Any]) -> int:
    from pipeline.cli import quiet_python_loggers  # noqa: PLC0415

    quiet_python_loggers()
    spark = child_session(task)
    run = {"minimal": run_minimal, "normalize": run_normalize, "materialize": run_materialize}
    result = run[task["kind"]](spark, task)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def in_fresh_process(task: dict[str, Any]) -> dict[str, Any]:
    """Run ``task`` in a new Python process (a new JVM); its result and wall seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(task)],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not results:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-5000:])
        raise SystemExit(f"{task['kind']} {task['format']}: exit {done.returncode}")
    return {**json.loads(results[-1].removeprefix("RESULT ")), "seconds": seconds}


# ------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--formats", default="canal,shareplex,dataworks,qlik,ibm,dts-avro")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steady-count", type=int, default=0)
    parser.add_argument("--steady-batch", type=int, default=200_000)
    parser.add_argument("--bootstrap")
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--stores", default="")
    parser.add_argument("--daemon-rows", type=int, default=300_000)
    parser.add_argument("--event-log", help="a directory: Spark's event log of every job")
    from bench.kit.figures import Recorder, add_json_option  # noqa: PLC0415

    add_json_option(parser)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    recorder = Recorder("spark_normalize", args)
    bootstrap = kafka_bootstrap(args.bootstrap)
    formats = args.formats.split(",")
    stores = [s for s in args.stores.split(",") if s]
    commit = (
        os.environ.get("WALCAST_BENCH_COMMIT")
        or subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    )
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "commit": commit,
                "cores": os.cpu_count(),
                "load": os.getloadavg()[0],
                "count": args.count,
            }
        ),
        flush=True,
    )
    daemon = daemon_rates(formats, args.daemon_rows)
    results = []
    for fmt in formats:
        topic = f"bench-{fmt}-{uuid.uuid4().hex[:8]}"
        messages, fill_s = fill_topic(bootstrap, topic, fmt, args.count, args.tables)
        base = {"bootstrap": bootstrap, "topic": topic, "format": fmt}
        base["driver_memory"] = args.driver_memory
        if args.event_log:
            base["event_log"] = str(Path(args.event_log).resolve())
        pairs = []
        folded: dict[str, float] = {}
        with tempfile.TemporaryDirectory(prefix="walcast-bench-") as work:
            for attempt in range(args.repeat):
                minimal = in_fresh_process(
                    {**base, "kind": "minimal", "work": f"{work}/m{attempt}"}
                )
                normal = in_fresh_process(
                    {**base, "kind": "normalize", "work": f"{work}/n{attempt}"}
                )
                pairs.append((minimal, normal))
                print(
                    json.dumps(
                        {
                            "format": fmt,
                            "attempt": attempt,
                            "minimal_s": round(minimal["seconds"], 1),
                            "minimal_rows": minimal["rows"],
                            "normalize_s": round(normal["seconds"], 1),
                            "normalize_rows": normal["rows"],
                            "quarantined": normal["quarantined"],
                            "ratio": round(minimal["seconds"] / normal["seconds"], 2),
                        }
                    ),
                    flush=True,
                )
            for store in stores:
                task = {**base, "kind": "materialize", "store": store, "work": f"{work}/n0"}
                done = in_fresh_process(task)
                folded[store] = done["rows"] / done["job_seconds"]
        delete_topics(bootstrap, [topic, f"{topic}.layouts"])
        steady: dict[str, Any] = {}
        if args.steady_count:
            steady_topic = f"bench-steady-{fmt}-{uuid.uuid4().hex[:8]}"
            sent, _ = fill_topic(bootstrap, steady_topic, fmt, args.steady_count, args.tables)
            # --steady-batch counts changes: IBM packs a transaction's changes in a message
            batch = max(1, round(args.steady_batch * sent / args.steady_count))
            with tempfile.TemporaryDirectory(prefix="walcast-bench-") as work:
                task = {**base, "topic": steady_topic, "kind": "normalize", "work": work}
                steady = in_fresh_process({**task, "batch": batch})
            delete_topics(bootstrap, [steady_topic, f"{steady_topic}.layouts"])
            print(json.dumps({"format": fmt, "steady": steady}), flush=True)
        ratios = [m["seconds"] / n["seconds"] for m, n in pairs]
        result = {
            "format": fmt,
            "changes": args.count,
            "messages": messages,
            "produce_seconds": round(fill_s, 1),
            "minimal_s": [round(m["seconds"], 1) for m, _ in pairs],
            "normalize_s": [round(n["seconds"], 1) for _, n in pairs],
            "ratios": [round(r, 2) for r in ratios],
            "rows": pairs[0][1]["rows"],
            "steady_rows_per_s": round(steady.get("steady_rows_per_s") or 0) or None,
            "steady_batches": steady.get("batch_rows_per_s"),
            **{f"materialize_{store}_rows_per_s": round(rate) for store, rate in folded.items()},
            "daemon_rows_per_s": round(daemon[fmt]) if fmt in daemon else None,
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    heads = ["format", "rows", "minimal s", "normalize s", "minimal:normalize"]
    heads += ["steady rows/s", "daemon rows/s", "steady:daemon"]
    heads += [f"{store}/s" for store in stores]
    print(" | ".join(heads))
    for r in results:
        cells = [r["format"], f"{r['rows']:,}"]
        cells += [
            ", ".join(f"{s}" for s in r["minimal_s"]),
            ", ".join(f"{s}" for s in r["normalize_s"]),
        ]
        each = ", ".join(f"{x:.2f}" for x in r["ratios"])
        cells += [f"{statistics.median(r['ratios']):.2f} ({each})"]
        steady_rate, rate = r["steady_rows_per_s"], r["daemon_rows_per_s"]
        cells += [f"{steady_rate:,}" if steady_rate else "-", f"{rate:,}" if rate else "-"]
        cells += [f"{steady_rate / rate:.2f}" if steady_rate and rate else "-"]
        cells += [f"{r[f'materialize_{store}_rows_per_s']:,}" for store in stores]
        print(" | ".join(cells))
    recorder.write({"formats": results, "daemon_rows_per_s": daemon})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``walcast spark normalize …`` / ``walcast spark materialize …``.

:func:`add_parser` registers the ``spark`` subcommand on the ``walcast`` CLI (the lead
wires it into ``capture/cli.py``); each sub-subcommand sets ``func`` to a function of
the parsed arguments returning the exit code. The same arguments work with
``spark-submit pipeline/jobs/normalize.py …`` (see :mod:`pipeline.jobs`).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from capture.errors import ConfigError
from capture.flags import int_at_least

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.materialize import MaterializeJob
    from pipeline.normalize import NormalizeJob


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag}: {item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process everything available, then stop (Trigger.AvailableNow)",
    )
    parser.add_argument(
        "--processing-time",
        metavar="INTERVAL",
        help="micro-batch interval, e.g. '10 seconds' (default: as fast as possible)",
    )
    parser.add_argument(
        "--master", default=None, help="Spark master (default local[2]; ignored under spark-submit)"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting (repeatable)",
    )


def add_normalize_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``normalize`` (shared with the spark-submit entry point)."""
    from pipeline.formats import FORMAT_NAMES  # noqa: PLC0415

    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--topic", action="append", help="data topic (repeatable)")
    topics.add_argument(
        "--topic-pattern",
        metavar="REGEX",
        help="read every topic whose whole name matches (Spark's subscribePattern)",
    )
    parser.add_argument("--format", required=True, choices=FORMAT_NAMES, help="the topics' format")
    parser.add_argument("--output", required=True, help="normalized change table (Parquet dir)")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    parser.add_argument("--quarantine", help="quarantine table (default: <output>_quarantine)")
    parser.add_argument(
        "--layout-topic",
        help="compacted topic with walcast's layout records (default: walcast.schemas, "
        "where walcast run writes them; read only if it exists; '' for none)",
    )
    parser.add_argument(
        "--read-committed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read at isolation.level=read_committed (default; what walcast run "
        "--exactly-once needs, harmless otherwise)",
    )
    parser.add_argument(
        "--kafka-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="fail with one line when no broker answers within this time (default 30)",
    )
    parser.add_argument(
        "--max-quarantine-ratio",
        type=float,
        default=0.5,
        metavar="RATIO",
        help="fail when more than this share of the messages is malformed, on the first "
        "batch or over the run (default 0.5: a wrong --format)",
    )
    parser.add_argument(
        "--parser-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="format parser option, e.g. column_delimiter=';' for ibm (repeatable)",
    )
    parser.add_argument("--starting-offsets", default="earliest", help="earliest|latest|JSON")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="cap records per batch")
    parser.add_argument(
        "--min-partitions",
        type=int_at_least(0),
        help="read each batch with at least N tasks, splitting large Kafka partitions "
        "(default: 4 x Spark's default parallelism, so every core parses a one-partition "
        "topic; 0: one task per Kafka partition)",
    )
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option of the Kafka source, e.g. kafka.security.protocol=SSL (repeatable)",
    )
    _common(parser)


def add_materialize_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``materialize`` (shared with the spark-submit entry point)."""
    parser.add_argument("--input", required=True, help="normalized change table (Parquet dir)")
    parser.add_argument("--output", required=True, help="root of the current-state tables")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    parser.add_argument("--bootstrap-servers", help="Kafka, to read layouts for column types")
    parser.add_argument(
        "--layout-topic",
        help="layout topic (with --bootstrap-servers; default walcast.schemas, if it exists)",
    )
    parser.add_argument(
        "--kafka-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --bootstrap-servers: fail with one line when no broker answers within "
        "this time (default 30)",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--delta", dest="delta", action="store_true", default=None, help="use Delta Lake"
    )
    store.add_argument("--parquet", dest="delta", action="store_false", help="use Parquet")
    parser.add_argument(
        "--text", action="store_true", help="keep every column as PostgreSQL text (exact)"
    )
    parser.add_argument("--max-files-per-trigger", type=int, help="cap files per batch")
    _common(parser)


def session_from_args(
    args: argparse.Namespace, app_name: str, *, use_delta: bool | None = None
) -> SparkSession:
    """Build the Spark session the arguments ask for."""
    from pipeline.session import SessionOptions, build_session  # noqa: PLC0415

    # The terminal gets walcast's lines (one per batch, a summary, an error in one line),
    # not Spark's log and progress bars: WALCAST_SPARK_LOG_LEVEL=WARN brings them back.
    os.environ.setdefault("WALCAST_SPARK_LOG_LEVEL", "OFF")
    options = SessionOptions(
        master=args.master or "local[2]",
        app_name=app_name,
        use_delta=use_delta,
        extra={"spark.ui.showConsoleProgress": "false", **_pairs(args.conf, "--conf")},
    )
    return build_session(options)


def normalize_job(args: argparse.Namespace) -> NormalizeJob:
    """The normalize job the arguments describe (the CLI's and spark-submit's one mapping)."""
    from pipeline.normalize import NormalizeJob  # noqa: PLC0415

    if not 0 < args.max_quarantine_ratio <= 1:
        raise ConfigError(f"--max-quarantine-ratio: {args.max_quarantine_ratio:g} is not in (0, 1]")
    if args.kafka_timeout <= 0:
        raise ConfigError(f"--kafka-timeout: {args.kafka_timeout:g} must be positive")
    return NormalizeJob(
        bootstrap=args.bootstrap_servers,
        topics=args.topic or [],
        topic_pattern=args.topic_pattern,
        format=args.format,
        output=args.output,
        checkpoint=args.checkpoint,
        quarantine=args.quarantine,
        layout_topic=args.layout_topic,
        parser_options=_pairs(args.parser_option, "--parser-option"),
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        min_partitions=args.min_partitions,
        available_now=args.available_now,
        processing_time=args.processing_time,
        kafka_options=_pairs(args.kafka_option, "--kafka-option"),
        read_committed=args.read_committed,
        kafka_timeout=args.kafka_timeout,
        max_quarantine_ratio=args.max_quarantine_ratio,
    )


def materialize_job(args: argparse.Namespace) -> MaterializeJob:
    """The materialize job the arguments describe (the CLI's and spark-submit's mapping)."""
    from pipeline.materialize import MaterializeJob  # noqa: PLC0415

    if args.kafka_timeout <= 0:
        raise ConfigError(f"--kafka-timeout: {args.kafka_timeout:g} must be positive")
    return MaterializeJob(
        normalized=args.input,
        state=args.output,
        checkpoint=args.checkpoint,
        bootstrap=args.bootstrap_servers,
        layout_topic=args.layout_topic,
        use_delta=args.delta,
        typed=not args.text,
        available_now=args.available_now,
        processing_time=args.processing_time,
        max_files_per_trigger=args.max_files_per_trigger,
        kafka_timeout=args.kafka_timeout,
    )


def quiet_python_loggers() -> None:
    """Keep pyspark's and py4j's Python log lines off the terminal (errors are one line)."""
    for name in ("py4j", "pyspark", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def run_normalize(args: argparse.Namespace) -> int:
    """Run the normalize job from parsed arguments."""
    job = normalize_job(args)
    job.check()  # a missing topic or a dead broker: one line, before any JVM starts
    quiet_python_loggers()
    spark = session_from_args(args, "walcast-normalize")
    job.run(spark)  # the session is the process's (getOrCreate): not stopped here
    return 0


def check_local_input(path: str) -> None:
    """ConfigError when ``--input`` is a local directory that does not exist (no JVM needed).

    Other file systems (``s3a://``, ``hdfs://``) are left to Spark, whose error is one line.
    """
    local = path.removeprefix("file://")
    if "://" in local:
        return
    if not Path(local).is_dir():
        raise ConfigError(
            f"--input {path}: no such directory",
            hint="give the --output of walcast spark normalize (run it first)",
        )


def run_materialize(args: argparse.Namespace) -> int:
    """Run the materialize job from parsed arguments."""
    check_local_input(args.input)
    job = materialize_job(args)
    job.check()  # a dead broker: one line, before any JVM starts
    quiet_python_loggers()
    spark = session_from_args(args, "walcast-materialize", use_delta=args.delta)
    job.run(spark)  # the session is the process's (getOrCreate): not stopped here
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``spark normalize`` and ``spark materialize``."""
    spark = subparsers.add_parser("spark", help="Spark jobs: normalize and materialize CDC topics")
    jobs = spark.add_subparsers(dest="spark_job", required=True, metavar="JOB")
    normalize = jobs.add_parser(
        "normalize", help="Kafka topics of one format -> normalized change table (Parquet)"
    )
    add_normalize_arguments(normalize)
    normalize.set_defaults(func=run_normalize)
    materialize = jobs.add_parser(
        "materialize", help="normalized change table -> current-state tables (Delta or Parquet)"
    )
    add_materialize_arguments(materialize)
    materialize.set_defaults(func=run_materialize)

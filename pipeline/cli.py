"""``walcast spark normalize …`` / ``walcast spark materialize …``.

:func:`add_parser` registers the ``spark`` subcommand on the ``walcast`` CLI (the lead
wires it into ``capture/cli.py``); each sub-subcommand sets ``func`` to a function of
the parsed arguments returning the exit code. The same arguments work with
``spark-submit pipeline/jobs/normalize.py …`` (see :mod:`pipeline.jobs`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"walcast: error: {flag}: {item!r} is not KEY=VALUE")
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
    parser.add_argument("--topic", action="append", required=True, help="data topic (repeatable)")
    parser.add_argument("--format", required=True, choices=FORMAT_NAMES, help="the topics' format")
    parser.add_argument("--output", required=True, help="normalized change table (Parquet dir)")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory")
    parser.add_argument("--quarantine", help="quarantine table (default: <output>_quarantine)")
    parser.add_argument(
        "--layout-topic",
        help="compacted topic with walcast's layout records (default: <first topic>.layouts; "
        "'' for none)",
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
    parser.add_argument("--layout-topic", help="layout topic (needs --bootstrap-servers)")
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


def session_from_args(args: argparse.Namespace, app_name: str, *, use_delta: bool | None = None):  # noqa: ANN201
    """Build the Spark session the arguments ask for."""
    from pipeline.session import SessionOptions, build_session  # noqa: PLC0415

    options = SessionOptions(
        master=args.master or "local[2]",
        app_name=app_name,
        use_delta=use_delta,
        extra=_pairs(args.conf, "--conf"),
    )
    return build_session(options)


def run_normalize(args: argparse.Namespace) -> int:
    """Run the normalize job from parsed arguments."""
    from pipeline.normalize import NormalizeJob  # noqa: PLC0415

    spark = session_from_args(args, "walcast-normalize")
    NormalizeJob(
        bootstrap=args.bootstrap_servers,
        topics=args.topic,
        format=args.format,
        output=args.output,
        checkpoint=args.checkpoint,
        quarantine=args.quarantine,
        layout_topic=args.layout_topic,
        parser_options=_pairs(args.parser_option, "--parser-option"),
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
        processing_time=args.processing_time,
        kafka_options=_pairs(args.kafka_option, "--kafka-option"),
    ).run(spark)
    return 0


def run_materialize(args: argparse.Namespace) -> int:
    """Run the materialize job from parsed arguments."""
    from pipeline.materialize import MaterializeJob  # noqa: PLC0415

    spark = session_from_args(args, "walcast-materialize", use_delta=args.delta)
    MaterializeJob(
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
    ).run(spark)
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

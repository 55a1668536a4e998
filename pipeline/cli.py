"""``walcast spark normalize …`` / ``walcast spark materialize …`` / ``walcast spark show …``.

:func:`add_parser` registers the ``spark`` subcommand on the ``walcast`` CLI (the lead
wires it into ``capture/cli.py``); each sub-subcommand sets ``func`` to a function of
the parsed arguments returning the exit code. The same arguments work with
``spark-submit pipeline/jobs/normalize.py …`` (see :mod:`pipeline.jobs`).

``--help`` of ``spark``, ``spark normalize`` and ``spark materialize`` is
:data:`SPARK_DESCRIPTION`, :data:`NORMALIZE_DESCRIPTION` and
:data:`MATERIALIZE_DESCRIPTION` with their examples, written for the terminal; each flag's
help names its default. Where the current-state tables go when neither ``--delta`` nor
``--parquet`` is given is decided when the session starts (Delta Lake when delta-spark and
its jar are installed, else Parquet); the help says so rather than naming one.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from capture.errors import ConfigError
from capture.flags import add_command, int_at_least

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.materialize import MaterializeJob
    from pipeline.normalize import NormalizeJob


SPARK_DESCRIPTION: Final = """\
Run the Spark jobs that turn the Kafka topics walcast writes back into tables:
normalize reads the topics of one format into a normalized change table, and
materialize folds that table into one current-state table per source table.
show prints a table (now or as of an LSN), maintain compacts the tables and
removes old versions' files. Each has its own --help. They need the spark extra
(pip install 'walcast[spark]') and a Java runtime; Spark runs locally
(--master local[2]) unless --master says otherwise."""
"""What ``walcast spark --help`` says."""

SPARK_EXAMPLES: Final = (
    (
        "walcast spark normalize --bootstrap-servers localhost:9092 \\\n"
        "    --topic-pattern 'walcast[.]canal[.].*' --format canal \\\n"
        "    --output /data/changes --checkpoint /data/ckpt/normalize --available-now"
    ),
    (
        "walcast spark materialize --input /data/changes --output /data/tables \\\n"
        "    --checkpoint /data/ckpt/materialize --available-now"
    ),
)

NORMALIZE_DESCRIPTION: Final = """\
Read Kafka topics of one output format of walcast (or of the vendor's own
producer) and write each change as one row of a normalized change table:
Parquet files under --output, partitioned by schema, table and commit date,
with each change's source position. A message that cannot be parsed goes to
the quarantine table instead, with the reason. The job runs until stopped, or
with --available-now until everything available is written; a restarted job
resumes from its --checkpoint, so no change is skipped or written twice.

Before Spark starts, the brokers are asked for the topics: a topic that does
not exist, a --topic-pattern that matches none (exit 2), or no broker
answering within --kafka-timeout seconds (exit 4) is one line. More than
--max-quarantine-ratio of the messages malformed stops the job with one line
naming --format (exit 5). One line per batch says what was written."""
"""What ``walcast spark normalize --help`` says."""

NORMALIZE_EXAMPLES: Final = (
    (
        "walcast spark normalize --bootstrap-servers localhost:9092 \\\n"
        "    --topic walcast.canal.shop.orders --format canal \\\n"
        "    --output /data/changes --checkpoint /data/ckpt/normalize --available-now"
    ),
    (
        "walcast spark normalize --bootstrap-servers localhost:9092 \\\n"
        "    --topic-pattern 'walcast[.]ibm[.].*' --format ibm \\\n"
        "    --output /data/changes --checkpoint /data/ckpt/normalize \\\n"
        "    --processing-time '10 seconds'"
    ),
)

MATERIALIZE_DESCRIPTION: Final = """\
Fold a normalized change table (the --output of walcast spark normalize) into
one current-state table per source table, equal to the source table as of the
last change read, in <output>/source-<database>.<slot>.<system id>/<schema>/
<table>. Each batch is applied once, also after a restart from --checkpoint.

The tables are Delta Lake tables (one MERGE per table and batch) when
delta-spark and its jar are installed, else Parquet; --store delta|parquet|
iceberg chooses (--delta and --parquet still work). Iceberg tables go to a
Hadoop catalog whose warehouse is --output, or to the Spark catalog
"walcast" when --conf spark.sql.catalog.walcast=... configures one. Column
types come from the layouts walcast publishes on Kafka (with
--bootstrap-servers), else from the changes; --text keeps every column as
PostgreSQL's text. Every row ends with the commit LSN, commit time and
operation of the change that last wrote it (_walcast_commit_lsn, …).

--history (Delta Lake or Iceberg) also keeps, per table, one row per version
of each source row in <schema>/_walcast_history/<table> (valid from/to
commit LSN and time), which walcast spark show --as-of-lsn reads;
--change-data-feed turns Delta's Change Data Feed on for the tables. An
--input directory that does not exist, --history with --parquet,
--change-data-feed with --parquet or iceberg,
an --output Iceberg cannot write (exit 2), or no broker answering within
--kafka-timeout seconds (exit 4) is one line, before Spark starts; so is an
Iceberg catalog that does not answer, once Spark has started (exit 2)."""
"""What ``walcast spark materialize --help`` says."""

MATERIALIZE_EXAMPLES: Final = (
    (
        "walcast spark materialize --input /data/changes --output /data/tables \\\n"
        "    --checkpoint /data/ckpt/materialize --available-now"
    ),
    (
        "walcast spark materialize --input /data/changes --output /data/tables \\\n"
        "    --checkpoint /data/ckpt/materialize --parquet \\\n"
        "    --bootstrap-servers localhost:9092"
    ),
    (
        "walcast spark materialize --input /data/changes --output /data/tables \\\n"
        "    --checkpoint /data/ckpt/materialize --delta --history --change-data-feed"
    ),
    (
        "walcast spark materialize --input /data/changes --output /data/lake \\\n"
        "    --checkpoint /data/ckpt/materialize --store iceberg"
    ),
)

SHOW_DESCRIPTION: Final = """\
Print a table materialized by walcast spark materialize, one JSON object per
row on standard output (timestamps in UTC): as it is now, or with
--as-of-lsn / --as-of-time as the source had it then, read from the table's
history (materialize --history, Delta Lake or Iceberg), or from a Delta
table's versions (exact between two batches); or, with --schema-history, the
table's layout changes at the source, each at the LSN of its first change. A
point before the table's first change or after its last one, inside one batch
of a table without a history, a malformed LSN or time, or a Parquet or Iceberg
table without a history is one line naming what exists (exit 2)."""
"""What ``walcast spark show --help`` says."""

SHOW_EXAMPLES: Final = (
    "walcast spark show --tables /data/tables --table shop.orders \\\n    --as-of-lsn 0/16B3748",
    (
        "walcast spark show --tables /data/tables --table shop.orders \\\n"
        "    --as-of-time 2026-11-29T06:30:00Z"
    ),
)

MAINTAIN_DESCRIPTION: Final = """\
Keep the tables of walcast spark materialize fast: compact each table's small
files (Delta OPTIMIZE, Iceberg rewrite_data_files) and remove the files of
versions older than --retain-hours (Delta VACUUM, Iceberg expire_snapshots),
for every table under --tables (each source's copy and the history tables), or
those named with --table. Safe to run beside a running materialize: when both
write one table at once, the one that loses the race runs again. Reads as of a
point older than the retention may no longer find a Delta version (a history
table keeps every version). Parquet tables need nothing (each batch writes the
table whole). A --table that is not there or a --retain-hours under 1 is one
line (exit 2)."""
"""What ``walcast spark maintain --help`` says."""

MAINTAIN_EXAMPLES: Final = (
    "walcast spark maintain --tables /data/tables",
    "walcast spark maintain --tables /data/tables --table shop.orders \\\n    --retain-hours 24",
)


def _pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag}: {item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


def _add_checkpoint(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint``, the same for both jobs (each job its own directory)."""
    parser.add_argument(
        "--checkpoint",
        required=True,
        metavar="DIR",
        help="directory where the job keeps its progress (required; one per job)",
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process everything available, then stop (default: run until stopped)",
    )
    parser.add_argument(
        "--processing-time",
        metavar="INTERVAL",
        help="start a batch every INTERVAL, e.g. '10 seconds' (default: each batch as "
        "soon as the previous one ends)",
    )
    parser.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master (default local[2]; ignored under spark-submit)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark setting, e.g. spark.driver.memory=4g (repeatable; default: none)",
    )


def add_normalize_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``normalize`` (shared with the spark-submit entry point)."""
    from pipeline.formats import FORMAT_NAMES  # noqa: PLC0415

    parser.add_argument(
        "--bootstrap-servers",
        required=True,
        metavar="HOST:PORT[,...]",
        help="Kafka brokers to read from (required)",
    )
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="topic to read (repeatable; this or --topic-pattern is required)",
    )
    topics.add_argument(
        "--topic-pattern",
        metavar="REGEX",
        help="read every topic whose whole name matches this Java regular expression, "
        "also topics created later",
    )
    parser.add_argument(
        "--format", required=True, choices=FORMAT_NAMES, help="the topics' format (required)"
    )
    parser.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="directory of the normalized change table, Parquet (required)",
    )
    _add_checkpoint(parser)
    parser.add_argument(
        "--quarantine",
        metavar="DIR",
        help="directory of the quarantine table (default: <output>_quarantine)",
    )
    parser.add_argument(
        "--layout-topic",
        metavar="TOPIC",
        help="compacted topic with walcast's table layouts (default: walcast.schemas, "
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
        help="option of the format's parser, e.g. column_delimiter=';' for ibm, "
        "bytea=hex for canal (repeatable; default: the format's defaults)",
    )
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        metavar="earliest|latest|JSON",
        help="where a new job starts in each partition: earliest, latest, or Spark's JSON "
        "of offsets per topic and partition (default earliest; a restarted job resumes "
        "from its checkpoint)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        metavar="N",
        help="read at most N messages per batch (default: no limit)",
    )
    parser.add_argument(
        "--min-partitions",
        type=int_at_least(0),
        metavar="N",
        help="read each batch with at least N tasks, splitting large Kafka partitions "
        "(default: 4 x Spark's default parallelism, so every core parses a one-partition "
        "topic; 0: one task per Kafka partition)",
    )
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option of Spark's Kafka source, e.g. kafka.security.protocol=SSL (repeatable; "
        "default: none)",
    )
    _common(parser)


def add_materialize_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``materialize`` (shared with the spark-submit entry point)."""
    parser.add_argument(
        "--input",
        required=True,
        metavar="DIR",
        help="directory of the normalized change table: the --output of walcast spark "
        "normalize (required)",
    )
    parser.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="root directory of the current-state tables (required)",
    )
    _add_checkpoint(parser)
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help="Kafka brokers to read the table layouts from, for exact column types "
        "(default: none; types then come from the changes)",
    )
    parser.add_argument(
        "--layout-topic",
        metavar="TOPIC",
        help="topic of the table layouts, with --bootstrap-servers (default "
        "walcast.schemas, read only if it exists)",
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
        "--delta",
        dest="delta",
        action="store_true",
        default=None,
        help="write Delta Lake tables (default when delta-spark and its jar are installed)",
    )
    store.add_argument(
        "--parquet",
        dest="delta",
        action="store_false",
        help="write Parquet tables (default when Delta Lake is not installed)",
    )
    store.add_argument(
        "--store",
        choices=STORES,
        help="where the tables go: delta, parquet or iceberg (Apache Iceberg, MERGE INTO; "
        "default: delta when delta-spark and its jar are installed, else parquet)",
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="keep every column as PostgreSQL's text, exactly as the source shows it "
        "(default: typed columns)",
    )
    parser.add_argument(
        "--max-files-per-trigger",
        type=int,
        metavar="N",
        help="read at most N files of the change table per batch (default: no limit)",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="also keep each table's history, one row per version of each source row, "
        "in <schema>/_walcast_history/<table> (Delta Lake or Iceberg; default: current "
        "state only)",
    )
    parser.add_argument(
        "--history-columns",
        metavar="COL[,COL...]",
        help="with --history: only a change of these columns opens a new version, the "
        "others update the open one in place (default: every column)",
    )
    parser.add_argument(
        "--partition-by",
        action="append",
        metavar="SCHEMA.TABLE=FIELD[,FIELD...]",
        help="partition the state table of SCHEMA.TABLE, when materialize creates it, by "
        "these columns, or (--store iceberg) Iceberg transforms of them: years(c), "
        "months(c), days(c), hours(c), bucket(N, c); repeat for other tables (default: "
        "unpartitioned; Delta or Iceberg only; a table that exists with another "
        "partitioning is refused)",
    )
    parser.add_argument(
        "--change-data-feed",
        action="store_true",
        help="turn Delta's Change Data Feed on for the state tables "
        "(delta.enableChangeDataFeed; Delta Lake only; default: off)",
    )
    _common(parser)


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``show``."""
    _tables_argument(parser)
    parser.add_argument(
        "--table",
        required=True,
        metavar="SCHEMA.TABLE",
        help="the source table to show (required)",
    )
    parser.add_argument(
        "--source",
        metavar="SYSTEMID/DATABASE/SLOT",
        help="which source's copy, when several sources have the table (default: the one)",
    )
    point = parser.add_mutually_exclusive_group()
    point.add_argument(
        "--as-of-lsn",
        metavar="X/Y",
        help="the table as of this LSN: every transaction committed at or before it (default: now)",
    )
    point.add_argument(
        "--as-of-time",
        metavar="TIME",
        help="the table as of the last commit at or before this ISO 8601 time, UTC when "
        "no zone is given (default: now)",
    )
    point.add_argument(
        "--schema-history",
        action="store_true",
        help="the table's layout changes at the source (added, dropped, renamed, retyped "
        "columns), each with the LSN of its first change, instead of its rows",
    )
    _session_arguments(parser, "spark.driver.memory=4g")


def _tables_argument(parser: argparse.ArgumentParser) -> None:
    """``--tables``: the root of materialize's tables (``show``, ``maintain``)."""
    parser.add_argument(
        "--tables",
        required=True,
        metavar="DIR",
        help="root directory of the tables: the --output of walcast spark materialize (required)",
    )


def _session_arguments(parser: argparse.ArgumentParser, conf_example: str) -> None:
    """``--master`` and ``--conf`` of a command that runs once (``show``, ``maintain``)."""
    parser.add_argument(
        "--master",
        default=None,
        metavar="URL",
        help="Spark master (default local[2])",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"Spark setting, e.g. {conf_example} (repeatable; default: none)",
    )


def _schema_table(name: str) -> tuple[str, str]:
    """``--table SCHEMA.TABLE`` split in two (ConfigError, one line, when it is not)."""
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        raise ConfigError(f"--table {name!r}: expected SCHEMA.TABLE, e.g. public.orders")
    return schema, table


def _local_tables_dir(tables: str) -> Path | None:
    """``--tables`` as a local directory, or None on another file system (left to Spark).

    Another file system: ``s3a://``…. ConfigError (one line) when it is a local directory
    that does not exist.
    """
    local = tables.removeprefix("file://")
    if "://" in local:
        return None
    if not Path(local).is_dir():
        raise ConfigError(
            f"--tables {tables}: no such directory",
            hint="give the --output of walcast spark materialize",
        )
    return Path(local)


def session_from_args(
    args: argparse.Namespace,
    app_name: str,
    *,
    use_delta: bool | None = None,
    iceberg: bool = False,
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
        iceberg=iceberg,
        extra={"spark.ui.showConsoleProgress": "false", **_pairs(args.conf, "--conf")},
    )
    return build_session(options)


class _Job(Protocol):
    """A Spark job of :mod:`pipeline` (normalize, materialize)."""

    def run(self, spark: SparkSession) -> None:
        """Run the job in ``spark`` until it ends."""


def run_submitted(
    name: str,
    description: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    build: Callable[[argparse.Namespace], _Job],
    argv: list[str] | None,
) -> int:
    """Run a ``spark-submit`` entry point (:mod:`pipeline.jobs`).

    Parses ``argv``, sets each ``--conf`` on the active session, runs the job ``build``
    makes of the arguments.
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog=f"{name}.py", description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName(f"walcast-{name}").getOrCreate()
    for item in args.conf:
        key, _, value = item.partition("=")
        spark.conf.set(key, value)
    build(args).run(spark)
    return 0


def _job_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The job fields both jobs take from the same flags, once ``--kafka-timeout`` is checked.

    ConfigError unless ``--kafka-timeout`` is positive. Each key is a field of both
    :class:`~pipeline.normalize.NormalizeJob` and :class:`~pipeline.materialize.MaterializeJob`.
    """
    if args.kafka_timeout <= 0:
        raise ConfigError(f"--kafka-timeout: {args.kafka_timeout:g} must be positive")
    return {
        "bootstrap": args.bootstrap_servers,
        "checkpoint": args.checkpoint,
        "layout_topic": args.layout_topic,
        "available_now": args.available_now,
        "processing_time": args.processing_time,
        "kafka_timeout": args.kafka_timeout,
    }


def normalize_job(args: argparse.Namespace) -> NormalizeJob:
    """The normalize job the arguments describe (the CLI's and spark-submit's one mapping)."""
    from pipeline.normalize import NormalizeJob  # noqa: PLC0415

    if not 0 < args.max_quarantine_ratio <= 1:
        raise ConfigError(f"--max-quarantine-ratio: {args.max_quarantine_ratio:g} is not in (0, 1]")
    return NormalizeJob(
        **_job_kwargs(args),
        topics=args.topic or [],
        topic_pattern=args.topic_pattern,
        format=args.format,
        output=args.output,
        quarantine=args.quarantine,
        parser_options=_pairs(args.parser_option, "--parser-option"),
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        min_partitions=args.min_partitions,
        kafka_options=_pairs(args.kafka_option, "--kafka-option"),
        read_committed=args.read_committed,
        max_quarantine_ratio=args.max_quarantine_ratio,
    )


def materialize_job(args: argparse.Namespace) -> MaterializeJob:
    """The materialize job the arguments describe (the CLI's and spark-submit's mapping)."""
    from pipeline.history_store import PARQUET_REFUSAL  # noqa: PLC0415
    from pipeline.iceberg_store import refuse_unsupported  # noqa: PLC0415
    from pipeline.materialize import MaterializeJob  # noqa: PLC0415
    from pipeline.partitioning import check_store, parse_partition_by  # noqa: PLC0415

    store = store_choice(args)
    if store == "iceberg":
        refuse_unsupported(change_data_feed=args.change_data_feed)
    partition_by = parse_partition_by(args.partition_by)
    # no store named: Delta when installed, else Parquet (refused when the session says so)
    check_store(partition_by, store or "delta")
    if args.history and store == "parquet":
        raise ConfigError(PARQUET_REFUSAL, hint="drop --parquet, or use --store iceberg")
    if args.change_data_feed and store == "parquet":
        raise ConfigError(
            "--change-data-feed is Delta Lake's: Parquet tables have no change feed",
            hint="drop --parquet",
        )
    columns = None
    if args.history_columns is not None:
        if not args.history:
            raise ConfigError("--history-columns needs --history")
        columns = tuple(c.strip() for c in args.history_columns.split(",") if c.strip())
        if not columns:
            raise ConfigError("--history-columns: name at least one column")
    return MaterializeJob(
        **_job_kwargs(args),
        normalized=args.input,
        state=args.output,
        use_delta={"delta": True, "parquet": False, "iceberg": False}.get(store or ""),
        store=store,
        typed=not args.text,
        max_files_per_trigger=args.max_files_per_trigger,
        history=args.history,
        history_columns=columns,
        change_data_feed=args.change_data_feed,
        partition_by=partition_by,
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


STORES: Final = ("delta", "parquet", "iceberg")
"""The stores ``--store`` names."""


def store_choice(args: argparse.Namespace) -> str | None:
    """The store the arguments ask for (``--store``, ``--delta``, ``--parquet``; None: auto)."""
    if getattr(args, "store", None):
        return str(args.store)
    return {True: "delta", False: "parquet"}.get(args.delta)


def _conf_names_catalog(args: argparse.Namespace) -> bool:
    """Whether ``--conf`` configures the Spark catalog ``walcast`` (a user's Iceberg catalog)."""
    from pipeline.iceberg_store import CATALOG_SETTING  # noqa: PLC0415

    return any(item.partition("=")[0].strip() == CATALOG_SETTING for item in args.conf)


def check_warehouse(path: str) -> None:
    """ConfigError when ``--output``, the Iceberg Hadoop catalog's warehouse, cannot be written.

    Checked for a local directory before any JVM starts (created when missing, and a probe
    file written and removed); other file systems are left to Spark.
    """
    local = path.removeprefix("file://").removeprefix("file:")
    if "://" in local:
        return
    try:
        Path(local).mkdir(parents=True, exist_ok=True)
        probe = Path(local) / f".walcast-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"--output {path}: the Iceberg warehouse cannot be written there "
            f"({exc.strerror or exc})",
            hint="give a directory this user can create and write",
        ) from None


def run_materialize(args: argparse.Namespace) -> int:
    """Run the materialize job from parsed arguments."""
    check_local_input(args.input)
    job = materialize_job(args)
    if job.store == "iceberg" and not _conf_names_catalog(args):
        check_warehouse(args.output)
    job.check()  # a dead broker: one line, before any JVM starts
    quiet_python_loggers()
    spark = session_from_args(
        args, "walcast-materialize", use_delta=job.use_delta, iceberg=job.store == "iceberg"
    )
    job.run(spark)  # the session is the process's (getOrCreate): not stopped here
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print a materialized table (now, or as of an LSN or a time) as JSON lines."""
    from pipeline.asof import parse_as_of_lsn, parse_as_of_time  # noqa: PLC0415

    schema, table = _schema_table(args.table)
    lsn = parse_as_of_lsn(args.as_of_lsn) if args.as_of_lsn is not None else None
    when = parse_as_of_time(args.as_of_time) if args.as_of_time is not None else None
    local = _local_tables_dir(args.tables)
    if args.schema_history and local is not None:
        from pipeline.schema_history import SCHEMA_HISTORY_DIR, no_history  # noqa: PLC0415

        if not (local / SCHEMA_HISTORY_DIR).is_dir():  # said before Spark starts
            raise no_history(f"{schema}.{table}", args.tables)
    quiet_python_loggers()
    iceberg = not args.schema_history and _iceberg_table(local, schema, table)
    spark = session_from_args(args, "walcast-show", iceberg=iceberg)
    from pipeline.errors import spark_errors  # noqa: PLC0415
    from pipeline.show import print_schema_history, print_table  # noqa: PLC0415

    with spark_errors("show"):
        if args.schema_history:
            print_schema_history(spark, args.tables, schema, table, args.source)
        else:
            print_table(
                spark, args.tables, schema, table, args.source, as_of_lsn=lsn, as_of_time=when
            )
    return 0


def _iceberg_table(local: Path | None, schema: str, table: str) -> bool:
    """Whether ``schema.table`` under ``local`` is an Iceberg table (then Spark needs its jars).

    Any source's copy, or its history; a remote root (None) may hold one.
    """
    from pipeline.tables import HISTORY_DIR, ICEBERG_HINT, SOURCE_DIR_PREFIX  # noqa: PLC0415

    if local is None:
        return True
    places = [f"{schema}/{table}", f"{schema}/{HISTORY_DIR}/{table}"]
    return any(
        any(local.glob(f"{prefix}{place}/{ICEBERG_HINT}"))
        for place in places
        for prefix in ("", f"{SOURCE_DIR_PREFIX}*/")
    )


def add_maintain_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``maintain``."""
    from pipeline.maintain import DEFAULT_RETAIN_HOURS  # noqa: PLC0415

    _tables_argument(parser)
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="SCHEMA.TABLE",
        help="only this table, every source's copy and its history (repeatable; default: all)",
    )
    parser.add_argument(
        "--retain-hours",
        type=float,
        default=DEFAULT_RETAIN_HOURS,
        metavar="HOURS",
        help=f"keep the files of versions this recent (default {DEFAULT_RETAIN_HOURS:g}, "
        "7 days; at least 1)",
    )
    parser.add_argument(
        "--no-compact",
        dest="compact",
        action="store_false",
        help="do not compact files (default: compact)",
    )
    parser.add_argument(
        "--no-expire",
        dest="expire",
        action="store_false",
        help="do not remove old versions' files (default: remove)",
    )
    _session_arguments(parser, "spark.sql.catalog.walcast.uri=…")


def run_maintain(args: argparse.Namespace) -> int:
    """Compact and expire the materialized tables."""
    from pipeline.maintain import MaintainOptions, maintain  # noqa: PLC0415
    from pipeline.tables import ICEBERG_HINT  # noqa: PLC0415

    options = MaintainOptions(args.compact, args.expire, args.retain_hours)  # checks
    for name in args.table:
        _schema_table(name)
    local = _local_tables_dir(args.tables)
    # Iceberg's jars only when a table needs them (a remote root may hold any)
    iceberg = local is None or any(local.glob(f"**/{ICEBERG_HINT}"))
    quiet_python_loggers()
    spark = session_from_args(args, "walcast-maintain", use_delta=True, iceberg=iceberg)
    from pipeline.errors import spark_errors  # noqa: PLC0415

    with spark_errors("maintain"):
        lines = maintain(spark, args.tables, options, only=args.table)
    if not lines:
        print(f"walcast spark maintain: no table under {args.tables}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``spark normalize``, ``spark materialize`` and ``spark show``."""
    spark = add_command(
        subparsers,
        "spark",
        "Spark jobs: normalize and materialize CDC topics",
        SPARK_DESCRIPTION,
        SPARK_EXAMPLES,
    )
    jobs = spark.add_subparsers(dest="spark_job", required=True, metavar="JOB")
    normalize = add_command(
        jobs,
        "normalize",
        "Kafka topics of one format -> normalized change table (Parquet)",
        NORMALIZE_DESCRIPTION,
        NORMALIZE_EXAMPLES,
    )
    add_normalize_arguments(normalize)
    normalize.set_defaults(func=run_normalize)
    materialize = add_command(
        jobs,
        "materialize",
        "normalized change table -> current-state tables (Delta or Parquet)",
        MATERIALIZE_DESCRIPTION,
        MATERIALIZE_EXAMPLES,
    )
    add_materialize_arguments(materialize)
    materialize.set_defaults(func=run_materialize)
    show = add_command(
        jobs,
        "show",
        "print a materialized table, now or as of an LSN or a time (JSON lines)",
        SHOW_DESCRIPTION,
        SHOW_EXAMPLES,
    )
    add_show_arguments(show)
    show.set_defaults(func=run_show)
    maintain = add_command(
        jobs,
        "maintain",
        "compact the materialized tables and remove old versions' files",
        MAINTAIN_DESCRIPTION,
        MAINTAIN_EXAMPLES,
    )
    add_maintain_arguments(maintain)
    maintain.set_defaults(func=run_maintain)

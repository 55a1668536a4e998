"""The ``walcast`` command line.

Every user error ends as one line on stderr (``walcast: error: …``) and a non-zero exit
code from :class:`~capture.errors.WalcastError`; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

import structlog

from capture import __version__
from capture import logging as walcast_logging
from capture.errors import ConfigError, WalcastError
from capture.flags import format_settings, int_at_least, key_values, settings_by_format
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, MODES, SnapshotMode
from capture.lsn import parse_lsn

_positive_int = int_at_least(1)


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("source")
    group.add_argument(
        "--dsn",
        help="libpq connection string or URI (default: $WALCAST_DSN; keep passwords in "
        "$PGPASSWORD or ~/.pgpass: a command line is visible to every user)",
    )
    group.add_argument("--slot", required=True, help="logical replication slot (pgoutput)")
    group.add_argument(
        "--publication",
        required=True,
        action="append",
        help="publication name; repeat for several",
    )
    group.add_argument("--create-slot", action="store_true", help="create the slot if missing")
    group.add_argument(
        "--create-publication",
        action="store_true",
        help="create the publication if missing (FOR ALL TABLES unless --publish-tables)",
    )
    group.add_argument(
        "--publish-tables",
        default="",
        help="comma-separated schema.table list for --create-publication",
    )
    group.add_argument(
        "--proto-version",
        type=int,
        choices=(1, 2, 3, 4),
        help="pgoutput protocol version (default: the highest the server supports)",
    )
    group.add_argument(
        "--binary",
        action="store_true",
        help="ask for binary column values (decoded client-side; default text, which is "
        "exactly PostgreSQL's own rendering)",
    )
    group.add_argument(
        "--streaming",
        choices=("on", "off", "parallel"),
        help="stream in-progress transactions (default: on where the protocol allows)",
    )
    group.add_argument(
        "--messages",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="receive pg_logical_emit_message records (default: on for PostgreSQL 14+)",
    )
    group.add_argument(
        "--two-phase",
        action="store_true",
        help="decode prepared transactions at PREPARE (v3+; slot must be created with it)",
    )
    group.add_argument("--start-lsn", default="0/0", help="start position X/Y (default: slot's)")
    group.add_argument(
        "--status-interval", type=float, default=10.0, help="seconds between status updates"
    )
    group.add_argument("--spill-dir", help="directory for held transactions that spill to disk")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, like every other walcast error."""

    def error(self, message: str) -> NoReturn:
        """Print ``walcast …: error: <message> (see --help)`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="walcast",
        description="PostgreSQL logical replication to vendor CDC formats.",
    )
    parser.add_argument("--version", action="version", version=f"walcast {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("WALCAST_LOG_LEVEL"),
        help="log level (default: warning for tail, info for run)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tail = commands.add_parser(
        "tail", help="print committed row changes as they happen", description=__doc__
    )
    _add_source_arguments(tail)
    tail.add_argument(
        "--format",
        default="json",
        help="output format: json, canal, shareplex, dataworks, qlik, ibm, dts-avro",
    )
    tail.add_argument(
        "--format-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="format setting, e.g. ibm.column_delimiter=';' (repeatable)",
    )
    tail.add_argument(
        "--max-events", type=_positive_int, help="exit 0 after printing this many row changes"
    )
    _add_snapshot_arguments(tail)
    from capture import teststream  # noqa: PLC0415 - keeps import time of other commands low

    teststream.add_parser(commands)
    from capture import consume  # noqa: PLC0415

    consume.add_parser(commands)
    from capture import slot, status  # noqa: PLC0415

    status.add_parser(commands)
    slot.add_parser(commands)
    from capture.snapshot import requests as snapshot_requests  # noqa: PLC0415

    snapshot_requests.add_parser(commands)
    _add_spark_parser(commands)
    run = commands.add_parser(
        "run",
        help="stream the slot into Kafka in one or more formats (the daemon)",
        description="Stream a replication slot into Kafka. Settings come from --config "
        "(TOML), then WALCAST__<SECTION>__<KEY> environment variables, then these flags.",
    )
    run.add_argument("--config", help="TOML configuration file")
    run.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective settings as TOML (secrets redacted) and exit",
    )
    run.add_argument(
        "--dsn",
        help="libpq connection string (source.dsn; default: $WALCAST_DSN); keep the password "
        "out of it (source.password_env/_file, $PGPASSWORD, ~/.pgpass)",
    )
    run.add_argument("--slot", help="replication slot (source.slot)")
    run.add_argument("--publication", action="append", help="publication (repeatable)")
    run.add_argument("--create-slot", action="store_true", default=None)
    run.add_argument(
        "--failover-slot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--create-slot creates a failover slot (source.failover_slot; default: where the "
        "server supports it, PostgreSQL 17+ on a primary)",
    )
    run.add_argument(
        "--receive-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds without any message from the server before the connection counts as "
        "lost and is retried (source.receive_timeout; default: a little above the "
        "server's wal_sender_timeout)",
    )
    run.add_argument("--create-publication", action="store_true", default=None)
    run.add_argument("--publish-tables", help="schema.table list for --create-publication")
    run.add_argument("--bootstrap-servers", help="Kafka bootstrap servers")
    run.add_argument(
        "--format",
        action="append",
        help="output format (repeatable; replaces the file's [[outputs]])",
    )
    run.add_argument("--topic", help="topic template for --format outputs")
    run.add_argument("--transaction-topic", help="topic template for messages of no table")
    run.add_argument("--metrics-port", type=int, help="port of /metrics and /healthz (0: off)")
    run.add_argument("--heartbeat-interval", type=float, help="seconds between heartbeats")
    run.add_argument(
        "--split-key-updates",
        action="store_true",
        default=None,
        help="send an UPDATE that changes the key as DELETE + INSERT",
    )
    run.add_argument("--schema-topic", help="topic for table layouts ('' disables)")
    run.add_argument(
        "--exactly-once",
        action="store_true",
        default=None,
        help="write in Kafka transactions: read_committed consumers see every change once, "
        "across crashes (kafka.exactly_once; slower than the default at-least-once)",
    )
    _add_snapshot_arguments(run)
    run.add_argument(
        "--producer-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka producer setting, e.g. compression.type=zstd (repeatable)",
    )
    run.add_argument(
        "--format-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="format setting for --format outputs, e.g. ibm.max_message_size=500000; "
        "each goes to the format its prefix names",
    )
    return parser


def _add_snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("initial load")
    group.add_argument(
        "--snapshot",
        choices=MODES,
        help="load the published tables' existing rows first (initial), or only that "
        "(initial-only), or not (never); default (auto): initial when the slot is created "
        "now, else never",
    )
    group.add_argument(
        "--snapshot-workers",
        type=_positive_int,
        help=f"tables are read in key-range chunks by this many connections (default "
        f"{DEFAULT_WORKERS})",
    )
    group.add_argument(
        "--snapshot-chunk-rows",
        type=_positive_int,
        help=f"rows per chunk (default {DEFAULT_CHUNK_ROWS})",
    )


def _add_spark_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``walcast spark normalize|materialize``: the Spark jobs (needs the ``spark`` extra)."""
    try:
        from pipeline.cli import add_parser  # noqa: PLC0415 - optional dependency
    except ImportError:
        spark = commands.add_parser("spark", help="Spark jobs (pip install 'walcast[spark]')")
        spark.set_defaults(func=_spark_missing)
        return
    add_parser(commands)


def _spark_missing(_args: argparse.Namespace) -> int:
    raise ConfigError(
        "spark: the Spark jobs need the spark extra",
        hint="pip install 'walcast[spark]' (pyspark and delta-spark)",
    )


def _run_cli_values(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    outputs = None
    if args.format_option and not args.format:
        raise ConfigError("--format-option: only applies to outputs given with --format")
    if args.format:
        settings = settings_by_format(args.format_option, args.format)
        outputs = [
            {
                k: v
                for k, v in (
                    ("format", f),
                    ("topic", args.topic),
                    ("transaction_topic", args.transaction_topic),
                    ("settings", settings[f]),
                )
                if v is not None
            }
            for f in args.format
        ]
    return {
        "source": {
            "dsn": args.dsn,
            "slot": args.slot,
            "publications": args.publication,
            "create_slot": args.create_slot,
            "failover_slot": args.failover_slot,
            "create_publication": args.create_publication,
            "publish_tables": args.publish_tables,
            "receive_timeout": args.receive_timeout,
            "snapshot": args.snapshot,
            "snapshot_workers": args.snapshot_workers,
            "snapshot_chunk_rows": args.snapshot_chunk_rows,
        },
        "kafka": {
            "bootstrap_servers": args.bootstrap_servers,
            "producer": key_values(args.producer_option, "--producer-option") or None,
            "exactly_once": args.exactly_once,
        },
        "daemon": {
            "metrics_port": args.metrics_port,
            "heartbeat_interval": args.heartbeat_interval,
            "split_key_updates": args.split_key_updates,
            "schema_topic": args.schema_topic,
        },
        "outputs": {"list": outputs},
    }


def cmd_run(args: argparse.Namespace) -> int:
    """Run ``walcast run``."""
    from capture import dsn as dsn_util  # noqa: PLC0415
    from capture.daemon import config as daemon_config  # noqa: PLC0415
    from capture.daemon.runner import Daemon  # noqa: PLC0415

    environ = dict(os.environ)
    if dsn_util.has_password(args.dsn):  # the flag only: the environment is not visible
        structlog.get_logger("walcast.cli").warning(
            "password_in_command_line",
            detail=dsn_util.command_line_warning("source.password_env or source.password_file"),
        )
    if args.dsn is None and "WALCAST_DSN" in environ:
        args.dsn = environ["WALCAST_DSN"]
    config = daemon_config.load(args.config, _run_cli_values(args), environ)
    if args.print_config:
        from capture.daemon.render import render_toml  # noqa: PLC0415

        sys.stdout.write(render_toml(config))
        return 0
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop.handle)
    signal.signal(signal.SIGINT, stop.handle)
    return Daemon(config, stop).run()


def _source_config(args: argparse.Namespace) -> object:
    from capture import dsn as dsn_util  # noqa: PLC0415 - keeps --help fast
    from capture.source import SourceConfig  # noqa: PLC0415

    dsn_util.warn_password_in_flag(args.dsn)
    dsn = args.dsn or os.environ.get("WALCAST_DSN")
    if not dsn:
        raise ConfigError("--dsn: no connection string given (or set $WALCAST_DSN)")
    publications = [p.strip() for arg in args.publication for p in arg.split(",") if p.strip()]
    return SourceConfig(
        dsn=dsn,
        slot=args.slot,
        publications=publications,
        create_slot=args.create_slot,
        create_publication=args.create_publication,
        publish_tables=[t.strip() for t in args.publish_tables.split(",") if t.strip()],
        proto_version=args.proto_version,
        binary=args.binary,
        streaming=args.streaming,
        messages=args.messages,
        two_phase=args.two_phase,
        start_lsn=parse_lsn(args.start_lsn, setting="--start-lsn"),
        status_interval=args.status_interval,
        spill_dir=args.spill_dir,
    )


class _Stop:
    """Set by SIGTERM/SIGINT so loops end cleanly (flush, acknowledge, exit 0)."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.requested = True


def cmd_tail(args: argparse.Namespace) -> int:
    """Run ``walcast tail``."""
    from capture.formats import format_class  # noqa: PLC0415
    from capture.source import SourceConfig  # noqa: PLC0415
    from capture.tail import run_tail  # noqa: PLC0415

    format_class(args.format)  # an unknown format fails before any connection
    settings = format_settings(args.format_option, args.format)
    config = _source_config(args)
    assert isinstance(config, SourceConfig)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop.handle)
    signal.signal(signal.SIGINT, stop.handle)
    sys.stdout.flush()
    out = io.BufferedWriter(io.FileIO(sys.stdout.fileno(), "w", closefd=False), 1 << 20)
    from capture.snapshot import LoadSettings  # noqa: PLC0415

    load = LoadSettings(
        workers=args.snapshot_workers or DEFAULT_WORKERS,
        chunk_rows=args.snapshot_chunk_rows or DEFAULT_CHUNK_ROWS,
    )
    run_tail(
        config,
        args.format,
        settings,
        out,
        max_events=args.max_events,
        stop=stop,
        load=load,
        snapshot=SnapshotMode(args.snapshot or SnapshotMode.AUTO),
    )
    return 0


COMMANDS = {"tail": cmd_tail, "run": cmd_run}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``walcast`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    walcast_logging.configure(args.log_level or ("info" if args.command == "run" else "warning"))
    try:
        handler = getattr(args, "func", None) or COMMANDS[args.command]
        return int(handler(args))
    except WalcastError as exc:
        print(f"walcast: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); nothing more to print, nothing to ack.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

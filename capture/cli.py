"""The ``walcast`` command line: the parser of every subcommand, and ``tail`` and ``run``.

Every user error ends as one line on stderr (``walcast: error: …``, several for a
configuration with several problems, one per problem) and a non-zero exit code from
:class:`~capture.errors.WalcastError`; tracebacks are for bugs only.

Help is written for the terminal (see :mod:`capture.flags`): each command's description
and examples are text here or in the command's own module (``run``'s in
:mod:`capture.config.arguments`), never a module docstring.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any, Final, NoReturn

import structlog

from capture import __version__
from capture import logging as walcast_logging
from capture.config.arguments import add_load_arguments, flag_values
from capture.config.arguments import add_parser as add_run_parser
from capture.errors import ConfigError, WalcastError
from capture.flags import DSN_HELP, add_command, examples_epilog, format_settings, int_at_least
from capture.formats import FORMAT_NAMES
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, SnapshotMode
from capture.lsn import parse_lsn

_positive_int = int_at_least(1)

DESCRIPTION: Final = """\
walcast streams PostgreSQL's logical replication (pgoutput) in the change
formats of other CDC tools: to the terminal (tail) or into Kafka (run). The
other commands look at slots, publications, topics and loads.

An error is one line on stderr starting with "walcast: error:" (with a hint
on what to do) and a non-zero exit code. Each command has its own --help."""
"""What ``walcast --help`` says walcast does."""

EXAMPLES: Final = (
    (
        'walcast tail --dsn "host=db dbname=app user=cdc" --slot walcast \\\n'
        "    --publication walcast --create-slot --create-publication"
    ),
    "walcast run --config walcast.toml",
    'walcast status --dsn "host=db dbname=app user=cdc"',
    "walcast run --help",
)

TAIL_HELP: Final = "print committed row changes on stdout as they happen"
"""The line ``walcast --help`` shows for ``tail``."""

TAIL_DESCRIPTION: Final = """\
Print every committed row change of the published tables on stdout as it
happens, in one output format (--format). JSON formats print one document per
line, DTS Avro one base64 line per record, IBM delimited its own records.
Load progress, warnings and errors go to stderr.

Changes come from a logical replication slot (pgoutput): whole transactions,
in commit order, after their commit. tail acknowledges the slot only after the
output was flushed, and only whole transactions; a change printed again by a
later run (after --max-events stopped inside a transaction) carries the same
commit LSN and ordinal.

--snapshot initial prints the tables' existing rows first (the default when
tail creates the slot); tail does not resume an interrupted load, walcast run
does. Ctrl-C or SIGTERM ends tail cleanly (exit 0)."""
"""What ``walcast tail --help`` says the command does."""

TAIL_EXAMPLES: Final = (
    (
        'walcast tail --dsn "host=db dbname=app user=cdc" --slot walcast \\\n'
        "    --publication walcast --create-slot --create-publication"
    ),
    "walcast tail --slot walcast --publication shop --format canal --max-events 5",
    (
        "walcast tail --slot walcast --publication walcast --snapshot initial \\\n"
        "    --format ibm --format-option 'ibm.column_delimiter=;'"
    ),
)


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("source")
    group.add_argument("--dsn", help=DSN_HELP)
    group.add_argument(
        "--slot",
        required=True,
        metavar="NAME",
        help="logical replication slot to read (pgoutput); required",
    )
    group.add_argument(
        "--publication",
        required=True,
        action="append",
        metavar="NAME",
        help="publication to stream; repeat (or comma-separate) for several; required",
    )
    group.add_argument(
        "--create-slot",
        action="store_true",
        help="create the slot if it does not exist (default: the slot must exist)",
    )
    group.add_argument(
        "--create-publication",
        action="store_true",
        help="create missing publications: FOR ALL TABLES, or the tables of "
        "--publish-tables (default: they must exist)",
    )
    group.add_argument(
        "--publish-tables",
        default="",
        metavar="TABLES",
        help="comma-separated schema.table list a publication created by "
        "--create-publication gets (default: all tables)",
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
        help="ask for binary column values, decoded here to the same text (default: text, "
        "PostgreSQL's own rendering)",
    )
    group.add_argument(
        "--streaming",
        choices=("on", "off", "parallel"),
        help="stream in-progress transactions to walcast, which still prints them only at "
        "their commit (default: on where the protocol allows)",
    )
    group.add_argument(
        "--messages",
        action=argparse.BooleanOptionalAction,
        help="receive pg_logical_emit_message records (default: on for PostgreSQL 14+)",
    )
    group.add_argument(
        "--two-phase",
        action="store_true",
        help="decode prepared transactions at PREPARE (protocol 3+; the slot must be "
        "created with it)",
    )
    group.add_argument(
        "--start-lsn",
        default="0/0",
        metavar="LSN",
        help="start position X/Y (default: 0/0, the slot's confirmed position)",
    )
    group.add_argument(
        "--status-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between status updates to the server (default: 10)",
    )
    group.add_argument(
        "--spill-dir",
        metavar="DIR",
        help="directory for held transactions that spill to disk (default: the system's "
        "temporary directory)",
    )


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, like every other walcast error."""

    def error(self, message: str) -> NoReturn:
        """Print ``walcast …: error: <message> (see --help)`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="walcast",
        description=DESCRIPTION,
        epilog=examples_epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"walcast {__version__}")
    walcast_logging.add_log_level_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tail = add_command(commands, "tail", TAIL_HELP, TAIL_DESCRIPTION, TAIL_EXAMPLES)
    _add_source_arguments(tail)
    output = tail.add_argument_group("output")
    output.add_argument(
        "--format",
        default="json",
        help="output format: " + ", ".join(FORMAT_NAMES) + " (default: json)",
    )
    output.add_argument(
        "--format-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="format setting, e.g. ibm.column_delimiter=';' (the key's prefix names the "
        "format; repeatable)",
    )
    output.add_argument(
        "--max-events",
        type=_positive_int,
        metavar="N",
        help="exit 0 after printing this many row changes (default: until stopped)",
    )
    add_load_arguments(tail)
    add_run_parser(commands)
    from capture import teststream  # noqa: PLC0415 - keeps import time of other commands low

    teststream.add_parser(commands)
    from capture import consume  # noqa: PLC0415

    consume.add_parser(commands)
    from capture import slot, status  # noqa: PLC0415

    status.add_parser(commands)
    slot.add_parser(commands)
    from capture import snapshot_command  # noqa: PLC0415

    snapshot_command.add_parser(commands)
    _add_spark_parser(commands)
    return parser


SPARK_MISSING_DESCRIPTION: Final = """\
The Spark jobs (spark normalize, spark materialize) read walcast's topics into
normalized and current-state tables. They need the spark extra, which is not
installed here: pip install 'walcast[spark]' (pyspark and delta-spark)."""
"""What ``walcast spark --help`` says when the Spark jobs are not installed."""


def _add_spark_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``walcast spark normalize|materialize``: the Spark jobs (needs the ``spark`` extra)."""
    try:
        from pipeline.cli import add_parser  # noqa: PLC0415 - optional dependency
    except ImportError:
        spark = add_command(
            commands,
            "spark",
            "Spark jobs (pip install 'walcast[spark]')",
            SPARK_MISSING_DESCRIPTION,
            ("pip install 'walcast[spark]' && walcast spark --help",),
        )
        spark.set_defaults(func=_spark_missing)
        return
    add_parser(commands)


def _spark_missing(_args: argparse.Namespace) -> int:
    raise ConfigError(
        "spark: the Spark jobs need the spark extra",
        hint="pip install 'walcast[spark]' (pyspark and delta-spark)",
    )


def _run_cli_values(args: argparse.Namespace) -> dict[str, Any]:
    """What ``walcast run``'s flags give the settings (see :func:`flag_values`)."""
    return flag_values(args)


def cmd_run(args: argparse.Namespace) -> int:
    """Run ``walcast run``."""
    from capture import dsn as dsn_util  # noqa: PLC0415
    from capture.config import reading  # noqa: PLC0415
    from capture.daemon.runner import Daemon  # noqa: PLC0415
    from capture.errors import InvalidSettingsError  # noqa: PLC0415

    if dsn_util.has_password(args.dsn):  # the flag only: the environment is not visible
        structlog.get_logger("walcast.cli").warning(
            "password_in_command_line",
            detail=dsn_util.command_line_warning("source.password_env or source.password_file"),
        )
    parsed = reading.parse(args.config, _run_cli_values(args), dict(os.environ))
    if args.print_config:
        from capture.config import render  # noqa: PLC0415

        if parsed.problems:
            sys.stdout.write(render.render_parsed(parsed))
            sys.stdout.flush()
            raise InvalidSettingsError(parsed.problems)
        sys.stdout.write(render.render_toml(parsed.config()))
        return 0
    config = parsed.config()
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
        for line in exc.lines():
            print(f"walcast: error: {line}", file=sys.stderr)
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

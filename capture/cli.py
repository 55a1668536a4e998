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

from capture import __version__
from capture import logging as walcast_logging
from capture.errors import ConfigError, WalcastError
from capture.lsn import parse_lsn


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("source")
    group.add_argument(
        "--dsn",
        default=os.environ.get("WALCAST_DSN"),
        help="libpq connection string or URI (default: $WALCAST_DSN; keep passwords in "
        "$PGPASSWORD or ~/.pgpass)",
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="walcast",
        description="PostgreSQL logical replication to vendor CDC formats.",
    )
    parser.add_argument("--version", action="version", version=f"walcast {__version__}")
    parser.add_argument(
        "--log-level", default=os.environ.get("WALCAST_LOG_LEVEL", "warning"), help="log level"
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
    return parser


def _source_config(args: argparse.Namespace) -> object:
    from capture.source import SourceConfig  # noqa: PLC0415 - keeps --help fast

    if not args.dsn:
        raise ConfigError("--dsn: no connection string given (or set $WALCAST_DSN)")
    publications = [p.strip() for arg in args.publication for p in arg.split(",") if p.strip()]
    return SourceConfig(
        dsn=args.dsn,
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


def _format_settings(pairs: list[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--format-option: {pair!r} is not KEY=VALUE")
        settings[key.strip()] = value
    return settings


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
    from capture.source import ChangeSource, SourceConfig  # noqa: PLC0415
    from capture.tail import run_tail  # noqa: PLC0415

    encoder_class = format_class(args.format)
    settings = _format_settings(args.format_option)
    config = _source_config(args)
    assert isinstance(config, SourceConfig)
    config.hold_transactions = encoder_class.needs_transaction_size
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop.handle)
    signal.signal(signal.SIGINT, stop.handle)
    source = ChangeSource(config)
    try:
        encoder = encoder_class(source.format_options(settings))
        sys.stdout.flush()
        out = io.BufferedWriter(io.FileIO(sys.stdout.fileno(), "w", closefd=False), 1 << 20)
        run_tail(source, out, encoder, max_events=args.max_events, stop=stop)
    finally:
        source.close()
    return 0


COMMANDS = {"tail": cmd_tail}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``walcast`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    walcast_logging.configure(args.log_level)
    try:
        return COMMANDS[args.command](args)
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

"""``walcast run``'s flags and ``--help``, and what the flags give the settings.

Every flag of ``run`` but ``--config`` and ``--print-config`` sets one setting of
:mod:`capture.config.settings` (its :attr:`~capture.config.settings.Setting.flag`): the help
of each names that setting and states its default from the table, and
:func:`flag_values` reads each flag back by the same table, so a flag cannot drift from
its setting (tests/capture/test_cli_run.py checks both directions).

Switches (``--create-slot``, ``--exactly-once`` …) have a ``--no-`` form, so a flag can turn
off what the file turned on (a flag always wins over the file, issue 25.6). Not given, a
flag is None: the file's or the environment's value (or the default) holds.

Imports stay light (no psycopg, no Kafka client): ``walcast --help`` builds this parser.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from capture.config.settings import BY_NAME, OUTPUT_BY_KEY, SETTINGS, Kind, Setting
from capture.flags import add_command, int_at_least
from capture.formats import FORMAT_NAMES
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, MODES

HELP: Final = "stream a replication slot into Kafka in one or more formats (the daemon)"
"""The line ``walcast --help`` shows for this command."""

DESCRIPTION: Final = """\
Stream a logical replication slot into Kafka, in one or more output formats at
once, until stopped. SIGTERM or Ctrl-C: deliver what is in flight, acknowledge
it, exit 0. The slot advances only past what Kafka has confirmed, so nothing is
lost; after a crash the server sends again what was not confirmed.

Settings come from a TOML file (--config; walcast.example.toml lists every
one), then WALCAST__<SECTION>__<KEY> environment variables, then these flags:
a flag always wins. Required: --dsn, --slot, --publication, --bootstrap-servers
and --format, or the same settings in the file or the environment. Every
problem in the settings is reported at once, one error line each, named as you
gave it; --print-config shows the settings walcast would run with.

PostgreSQL: walcast stops with one error line when it has not reached the
server within --connect-timeout seconds of its start (0: it keeps trying);
once connected, it reconnects for as long as it runs. Kafka: walcast waits for
brokers that do not answer; one error line names them after
kafka.connect_timeout seconds (default 30), then one a minute while they stay
down. Logs are JSON events on stderr; /metrics and /healthz on
127.0.0.1:9187."""
"""What ``walcast run --help`` says the command does."""

EXAMPLES: Final = (
    "walcast run --config walcast.toml",
    (
        'walcast run --dsn "host=db dbname=app user=cdc" --slot walcast \\\n'
        "    --publication walcast --create-slot --bootstrap-servers broker:9092 \\\n"
        "    --format canal --format dts-avro"
    ),
    "walcast run --config walcast.toml --exactly-once --print-config",
)

_positive_int = int_at_least(1)


def _default(name: str) -> str:
    """``default: X`` of setting ``name``, as the help states it."""
    setting = BY_NAME.get(name) or OUTPUT_BY_KEY[name.partition(".")[2]]
    default = setting.default
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return f"default: {default}"


def _about(name: str, text: str, default: str | None = None) -> str:
    """A flag's help: ``text (name; default)``."""
    shown = default if default is not None else _default(name)
    return f"{text} ({name}; {shown})"


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add ``walcast run`` to the CLI and return its parser."""
    run = add_command(commands, "run", HELP, DESCRIPTION, EXAMPLES)
    run.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of settings (default: none; walcast.example.toml shows every key)",
    )
    run.add_argument(
        "--print-config",
        action="store_true",
        help="print the settings walcast would run with, as TOML (secrets redacted), and "
        "exit; when some are missing or wrong, print the others, mark those, and exit 2",
    )
    source = run.add_argument_group("PostgreSQL")
    source.add_argument(
        "--dsn",
        help="libpq connection string or URI of the source database (source.dsn; default: "
        "$WALCAST_DSN); keep the password out of it: source.password_env or "
        "source.password_file, $PGPASSWORD or ~/.pgpass",
    )
    source.add_argument(
        "--slot", metavar="NAME", help="logical replication slot to stream (source.slot)"
    )
    source.add_argument(
        "--publication",
        metavar="NAME",
        action="append",
        help="publication to stream; repeat (or comma-separate) for several (source.publications)",
    )
    source.add_argument(
        "--create-slot",
        action=argparse.BooleanOptionalAction,
        help=_about("source.create_slot", "create the slot if it does not exist", "default: no"),
    )
    source.add_argument(
        "--failover-slot",
        action=argparse.BooleanOptionalAction,
        help="whether --create-slot creates a failover slot (source.failover_slot; default: "
        "where the server supports it, PostgreSQL 17+ on a primary)",
    )
    source.add_argument(
        "--create-publication",
        action=argparse.BooleanOptionalAction,
        help=_about(
            "source.create_publication",
            "create missing publications: FOR ALL TABLES, or the tables of --publish-tables",
            "default: no",
        ),
    )
    source.add_argument(
        "--publish-tables",
        metavar="TABLES",
        help=_about(
            "source.publish_tables",
            "comma-separated schema.table list a publication created by --create-publication gets",
            "default: all tables",
        ),
    )
    source.add_argument(
        "--connect-timeout",
        type=float,
        metavar="SECONDS",
        help=_about(
            "source.connect_timeout",
            "seconds walcast keeps trying to reach PostgreSQL at its start before it stops "
            "with one error line; 0: for ever (once connected, it always reconnects)",
        ),
    )
    source.add_argument(
        "--receive-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds without any message from the server before the connection counts as "
        "lost and is retried (source.receive_timeout; default: a little above the "
        "server's wal_sender_timeout)",
    )
    kafka = run.add_argument_group("Kafka")
    kafka.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka brokers, comma-separated (kafka.bootstrap_servers)",
    )
    kafka.add_argument(
        "--exactly-once",
        action=argparse.BooleanOptionalAction,
        help=_about(
            "kafka.exactly_once",
            "write in Kafka transactions: read_committed consumers see every change once, "
            "across crashes; slower than at-least-once",
            "default: no, at-least-once",
        ),
    )
    kafka.add_argument(
        "--producer-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka producer setting, e.g. compression.type=zstd; repeatable; each "
        "wins over the same key of the file's [kafka.producer] (kafka.producer)",
    )
    outputs = run.add_argument_group("outputs")
    outputs.add_argument(
        "--format",
        action="append",
        help="output format: " + ", ".join(FORMAT_NAMES) + "; repeat for several; replaces "
        "the file's [[outputs]] (outputs.format)",
    )
    outputs.add_argument(
        "--topic",
        metavar="TEMPLATE",
        help=_about(
            "outputs.topic",
            "topic of row changes, with {format}, {database}, {schema}, {table}; for every "
            "output, those of the file too",
        ),
    )
    outputs.add_argument(
        "--transaction-topic",
        metavar="TEMPLATE",
        help=_about(
            "outputs.transaction_topic",
            "topic of messages of no single table (transaction markers, heartbeats); for "
            "every output, those of the file too",
        ),
    )
    outputs.add_argument(
        "--format-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="format setting, e.g. ibm.max_message_size=500000; the key's prefix names the "
        "format, and it applies to the outputs of that format (given with --format, or "
        "else in the file); repeatable (outputs.settings)",
    )
    outputs.add_argument(
        "--schema-topic",
        metavar="TOPIC",
        help=_about("daemon.schema_topic", "compacted topic of table layouts; '' disables it"),
    )
    outputs.add_argument(
        "--split-key-updates",
        action=argparse.BooleanOptionalAction,
        help=_about(
            "daemon.split_key_updates",
            "send an UPDATE that changes the key as DELETE + INSERT",
            "default: no",
        ),
    )
    daemon = run.add_argument_group("daemon")
    daemon.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help=_about("daemon.metrics_port", "port of /metrics and /healthz; 0 turns them off"),
    )
    daemon.add_argument(
        "--heartbeat-interval",
        type=float,
        metavar="SECONDS",
        help=_about(
            "daemon.heartbeat_interval",
            "seconds between heartbeats (the slot advances on a quiet database); 0 turns them off",
        ),
    )
    add_load_arguments(run, settings=True)
    return run


def add_load_arguments(parser: argparse.ArgumentParser, *, settings: bool = False) -> None:
    """The initial-load flags (``run`` and ``tail`` share them).

    ``settings``: each flag's help names the setting it sets, as ``run``'s flags do.
    """

    def named(key: str) -> str:
        return f"source.{key}; " if settings else ""

    group = parser.add_argument_group("initial load")
    group.add_argument(
        "--snapshot",
        choices=MODES,
        help="load the published tables' existing rows first (initial), or only that "
        f"(initial-only), or not (never) ({named('snapshot')}default: auto, initial when "
        "the slot is created now, else never)",
    )
    group.add_argument(
        "--snapshot-workers",
        type=_positive_int,
        metavar="N",
        help="tables are read in key-range chunks by this many connections "
        f"({named('snapshot_workers')}default: {DEFAULT_WORKERS})",
    )
    group.add_argument(
        "--snapshot-chunk-rows",
        type=_positive_int,
        metavar="ROWS",
        help=f"rows per chunk ({named('snapshot_chunk_rows')}default: {DEFAULT_CHUNK_ROWS})",
    )


def dest(flag: str) -> str:
    """The argparse destination of ``flag`` (``--bootstrap-servers``: bootstrap_servers)."""
    return flag.removeprefix("--").replace("-", "_")


FLAGGED: Final[tuple[Setting, ...]] = tuple(
    s for s in SETTINGS if s.flag is not None and s.kind is not Kind.TABLE
)
"""The scalar and list settings a flag of ``run`` sets."""


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """What ``run``'s flags give the settings, as :func:`capture.config.model.parse` takes it.

    Each section maps its keys to the flag's value (None: not given); lists are joined with
    commas (``--publication a --publication b,c`` is three publications); the outputs and
    the producer settings are passed as given, to be merged with the file's there.
    """
    values: dict[str, Any] = {"source": {}, "kafka": {}, "daemon": {}}
    for setting in FLAGGED:
        assert setting.flag is not None
        value = getattr(args, dest(setting.flag))
        if setting.kind is Kind.LIST and isinstance(value, list):
            value = ",".join(value)
        values[setting.section][setting.key] = value
    values["producer_options"] = list(args.producer_option)
    values["outputs"] = {
        "formats": args.format,
        "topic": args.topic,
        "transaction_topic": args.transaction_topic,
        "format_options": list(args.format_option),
    }
    return values

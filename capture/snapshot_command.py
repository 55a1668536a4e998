"""``walcast snapshot``: ask the running daemons of a database to load tables again.

``walcast snapshot --dsn … --table schema.table [--table …]`` asks a running daemon to load
tables again without stopping the stream (to repair a topic, or after adding a table to the
publication). It checks each table exists and is published, then writes a
``walcast.snapshot.request`` logical message; every daemon streaming a slot of the database
sees it in its stream, in order, and loads the tables its publications hold
(:mod:`capture.snapshot.assigner` reads it there).

``walcast snapshot --help`` is :data:`DESCRIPTION` and :data:`EXAMPLES`, written for the
terminal.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any, Final

import orjson
import psycopg

from capture import dsn as dsn_util
from capture.errors import ConfigError, SetupError
from capture.flags import DSN_HELP, add_command
from capture.replication import catalog
from capture.replication.connect import connect
from capture.snapshot.assigner import REQUEST_PREFIX

HELP: Final = "ask running daemons to load tables again, without stopping the stream"
"""The line ``walcast --help`` shows for this command."""

DESCRIPTION: Final = """\
Ask the running walcast run daemons of a database to load tables again,
without stopping their stream: to repair a topic, or after adding a table to a
publication. The rows are sent to the tables' usual topics, in each format's
full-load form, in order with the changes around them.

Each --table must exist and be in a publication (each --publication, or any).
The request is then written into the database's WAL (a logical message), so
every daemon streaming a slot of this database sees it in its stream and loads
the tables its publications hold; with --slot, only the daemon on that slot
does. Follow the load in the daemon's log (snapshot_chunk events) or metrics.
Needs PostgreSQL 14 or newer."""
"""What ``walcast snapshot --help`` says the command does."""

EXAMPLES: Final = (
    'walcast snapshot --dsn "host=db dbname=app user=cdc" --table shop.orders',
    (
        'export WALCAST_DSN="host=db dbname=app user=cdc"\n'
        "walcast snapshot --table shop.orders --table shop.customers --slot walcast"
    ),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``walcast snapshot`` to the CLI (``args.func`` runs it)."""
    parser = add_command(subparsers, "snapshot", HELP, DESCRIPTION, EXAMPLES)
    parser.add_argument("--dsn", help=DSN_HELP)
    parser.add_argument(
        "--table",
        action="append",
        required=True,
        metavar="SCHEMA.TABLE",
        help="table to load, as schema.table (repeatable; required)",
    )
    parser.add_argument(
        "--publication",
        action="append",
        metavar="NAME",
        help="check that the tables are in this publication (repeatable; default: in any "
        "publication of the database)",
    )
    parser.add_argument(
        "--slot",
        metavar="NAME",
        help="only the daemon streaming this slot loads them (default: every daemon of the "
        "database)",
    )
    parser.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    """Run ``walcast snapshot``."""
    import os  # noqa: PLC0415

    dsn_util.warn_password_in_flag(args.dsn)
    dsn = args.dsn or os.environ.get("WALCAST_DSN")
    if not dsn:
        raise ConfigError("--dsn: no connection string given (or set $WALCAST_DSN)")
    tables = [t.strip() for t in args.table]
    with connect(dsn) as conn:
        published = _published(conn, args.publication)
        for name in tables:
            if "." not in name:
                raise ConfigError(f"--table {name!r}: give it as schema.table")
            if catalog.resolve_table(conn, name) is None:
                raise ConfigError(
                    f"--table {name}: no such table on {dsn_util.describe(dsn)}",
                    hint="check the schema and table names (unquoted, case-sensitive)",
                )
            if name not in published:
                where = (
                    f"publication(s) {', '.join(args.publication)}"
                    if args.publication
                    else "any publication"
                )
                raise ConfigError(
                    f"--table {name}: not in {where}; walcast streams only published tables",
                    hint=f"ALTER PUBLICATION <name> ADD TABLE {name}; then ask again",
                )
        request = uuid.uuid4().hex[:12]
        content = orjson.dumps({"id": request, "tables": tables, "slot": args.slot})
        try:
            conn.execute("SELECT pg_logical_emit_message(false, %s, %s)", (REQUEST_PREFIX, content))
        except psycopg.Error as exc:
            raise SetupError(
                f"cannot write the load request: {dsn_util.scrub(str(exc), dsn).strip()}",
                hint="the role needs EXECUTE on pg_logical_emit_message (superuser or "
                "pg_write_server_files is not needed; a REPLICATION role has it by default)",
            ) from None
    target = f"the daemon on slot {args.slot}" if args.slot else "every daemon of this database"
    print(
        f"walcast: asked {target} to load {len(tables)} table(s) (request {request}); "
        "follow it in the daemon's log (snapshot_chunk events) or its metrics",
        file=sys.stderr,
    )
    return 0


def _published(conn: psycopg.Connection[Any], publications: list[str] | None) -> set[str]:
    if publications:
        known = {
            str(r[0])
            for r in conn.execute(
                "SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)", (publications,)
            ).fetchall()
        }
        missing = [p for p in publications if p not in known]
        if missing:
            raise ConfigError(f"--publication {missing[0]}: no such publication")
        names = publications
    else:
        names = [str(r[0]) for r in conn.execute("SELECT pubname FROM pg_publication").fetchall()]
    return {t.qualified_name for t in catalog.publication_tables(conn, names)}

"""``walcast slot drop``: remove a replication slot, on purpose and only when idle.

A slot retains WAL until it is dropped; an abandoned one fills the server's disk. Dropping
is irreversible (the slot's position is gone; a new slot starts at the current WAL), so:

* without ``--yes`` the command drops nothing: it prints one line saying which slot (its
  plugin, database, confirmed position and retained WAL) would be dropped and how to
  confirm, and exits 1 (not 0: nothing happened);
* an active slot (a walsender streams from it) is refused with one line naming the pid:
  stop its consumer first (walcast itself never terminates another backend);
* a missing slot, a bad DSN or a missing privilege are one line each, exit non-zero.

``--help`` (of ``walcast slot`` and ``walcast slot drop``) is :data:`SLOT_DESCRIPTION` and
:data:`DROP_DESCRIPTION` with their examples, written for the terminal.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from capture.errors import ConfigError, SetupError, lsn_text
from capture.flags import add_command
from capture.status import add_dsn_argument, dsn_from, human_bytes, named_slot

SLOT_DESCRIPTION: Final = """\
Manage the replication slots of a PostgreSQL database. A slot keeps WAL on the
server until its consumer confirms it, so an abandoned slot fills the server's
disk; walcast status lists the slots with the WAL each one retains.
"walcast slot drop --help" tells more."""
"""What ``walcast slot --help`` says."""

DROP_DESCRIPTION: Final = """\
Drop a replication slot, on purpose and only when no consumer streams from it.
Dropping is irreversible: the slot's position is gone, and a new slot starts at
the current WAL position (changes made in between are never streamed).

  * Without --yes nothing is dropped: one line says which slot would be dropped
    (plugin, database, confirmed position, retained WAL), and the exit code
    is 1.
  * A slot that a consumer streams from is refused with one line naming the
    process id: stop that consumer first (walcast never ends another process's
    connection).
  * A missing slot, a bad connection string or a missing privilege is one line
    and a non-zero exit."""
"""What ``walcast slot drop --help`` says."""

DROP_EXAMPLES: Final = (
    'walcast slot drop --dsn "host=db dbname=app user=cdc" --slot walcast',
    'walcast slot drop --dsn "host=db dbname=app user=cdc" --slot walcast --yes',
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``walcast slot drop`` to the CLI (``args.func`` runs it)."""
    slot = add_command(
        subparsers, "slot", "manage replication slots (drop)", SLOT_DESCRIPTION, DROP_EXAMPLES
    )
    actions = slot.add_subparsers(dest="slot_command", required=True, metavar="ACTION")
    drop = add_command(
        actions,
        "drop",
        "drop a replication slot (needs --yes; refuses an active slot)",
        DROP_DESCRIPTION,
        DROP_EXAMPLES,
    )
    add_dsn_argument(drop)
    drop.add_argument("--slot", required=True, metavar="NAME", help="the slot to drop")
    drop.add_argument(
        "--yes",
        action="store_true",
        help="really drop it (irreversible; default: only say what would be dropped, exit 1)",
    )
    drop.set_defaults(func=command_drop)


def command_drop(args: argparse.Namespace) -> int:
    """Run ``walcast slot drop``."""
    import psycopg  # noqa: PLC0415
    from psycopg import errors as pg_errors  # noqa: PLC0415

    from capture.replication.connect import connect  # noqa: PLC0415

    dsn = dsn_from(args)
    name = str(args.slot)
    with connect(dsn) as conn:
        slot = named_slot(conn, name)
        if slot.active_pid is not None:
            raise SetupError(
                f"slot {name} is active (pid {slot.active_pid} streams from it); stop its "
                "consumer first, then drop it"
            )
        where = f"{slot.plugin or 'physical'}, database {slot.database or '-'}"
        position = lsn_text(slot.confirmed_flush_lsn or slot.restart_lsn or 0)
        if not args.yes:
            print(
                f"walcast: would drop slot {name} ({where}, confirmed up to {position}, "
                f"retaining {human_bytes(slot.wal_retained)} of WAL); add --yes to drop it",
                file=sys.stderr,
            )
            return 1
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        except pg_errors.ObjectInUse as exc:
            raise SetupError(
                f"slot {name} became active meanwhile ({_first_line(exc, dsn)}); stop its "
                "consumer first"
            ) from None
        except pg_errors.UndefinedObject:
            raise ConfigError(
                f"--slot {name}: no such replication slot (dropped meanwhile)"
            ) from None
        except psycopg.Error as exc:
            raise SetupError(
                f"cannot drop slot {name}: {_first_line(exc, dsn)}",
                hint="dropping a slot needs the REPLICATION attribute or superuser",
            ) from None
    print(
        f"walcast: dropped slot {name} ({where}, was confirmed up to {position})", file=sys.stderr
    )
    return 0


def _first_line(exc: BaseException, dsn: str) -> str:
    from capture import dsn as dsn_util  # noqa: PLC0415 - imports psycopg

    text = dsn_util.scrub(str(exc), dsn).strip()
    return text.splitlines()[0] if text else type(exc).__name__

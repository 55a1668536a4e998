"""``walcast slot drop``: remove a replication slot, on purpose and only when idle.

A slot retains WAL until it is dropped; an abandoned one fills the server's disk. Dropping
is irreversible (the slot's position is gone; a new slot starts at the current WAL), so:

* without ``--yes`` the command drops nothing: it prints one line saying which slot (its
  plugin, database, confirmed position and retained WAL) would be dropped and how to
  confirm, and exits 1 (not 0: nothing happened);
* an active slot (a walsender streams from it) is refused with one line naming the pid:
  stop its consumer first (walcast itself never terminates another backend);
* a missing slot, a bad DSN or a missing privilege are one line each, exit non-zero.
"""

from __future__ import annotations

import argparse
import sys

from capture.errors import ConfigError, SetupError, lsn_text
from capture.flags import add_command
from capture.status import add_dsn_argument, dsn_from, human_bytes, named_slot


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``walcast slot drop`` to the CLI (``args.func`` runs it)."""
    slot = subparsers.add_parser(
        "slot", help="manage replication slots (drop)", description=__doc__
    )
    actions = slot.add_subparsers(dest="slot_command", required=True, metavar="ACTION")
    drop = add_command(
        actions, "drop", "drop a replication slot (needs --yes; refuses an active slot)", __doc__
    )
    add_dsn_argument(drop)
    drop.add_argument("--slot", required=True, help="the slot to drop")
    drop.add_argument("--yes", action="store_true", help="really drop it (irreversible)")
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

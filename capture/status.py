"""``walcast status``: what a replication slot and its publications look like right now.

Per slot (``--slot S``, repeatable; default: every logical slot of the DSN's database):
output plugin, the walsender streaming from it (pid) and when its consumer last replied, the
confirmed flush LSN, the lag in bytes (current WAL position minus confirmed flush) and in
time, the WAL the slot retains, the risk that ``max_slot_wal_keep_size`` invalidates it, and
whether it survives a failover to a standby (:func:`failover_readiness`: a failover slot of
PostgreSQL 17+ with ``synchronized_standby_slots`` naming a streaming standby; on a standby,
a synchronized copy; before 17, never).

Lag in time comes from the consumer's last standby status update, as
``pg_stat_replication`` measures it (``replay_lag``, else ``flush_lag``, else
``write_lag``): it exists only while the slot is active, and PostgreSQL clears it a while
after an idle consumer caught up. Otherwise it is reported as unknown, never guessed.

Publications: a slot does not record which publications its consumer asks for (that is
chosen at ``START_REPLICATION``), so status shows the publications named with
``--publication`` (repeatable), and by default every publication of the database. For each
table: its replica identity and primary key, and a note when PostgreSQL will refuse its
UPDATEs or DELETEs (no key and identity DEFAULT, or identity NOTHING).

``--json`` prints one JSON object (``slots`` and ``publications``, LSNs as ``X/Y`` text,
sizes in bytes, lag time in seconds or null) for scripts and monitoring. Only reads the
catalog (:mod:`capture.replication.catalog`); never changes anything.

The server's ``wal_level`` is part of the report (``wal_level`` in ``--json``). When it is
not ``logical`` (``replica`` or ``minimal``), no logical slot can exist or be created, so
the text starts with one line saying so and what to do (``ALTER SYSTEM SET wal_level =
logical`` and a restart) before the (empty) slot list: "no slots" is never left to
explain itself. status still exits 0 then: it reports the server as it is, as it does for
a lost slot; a check that must fail reads ``wal_level`` from ``--json``.

The daemon's last progress: the server keeps when a consumer last replied
(``pg_stat_replication.reply_time``, shown per slot) but not when a slot's confirmed
position last moved, so that comes from the daemon itself: ``--health-url`` reads a
``walcast run``'s ``/healthz`` (at most :data:`HEALTH_TIMEOUT` seconds) and shows its
verdict, the seconds since it last received or had confirmed anything
(``seconds_without_progress``), its received and confirmed positions and, when it is not
healthy, why (``daemon`` in ``--json``). A daemon that does not answer is reported as
unreachable, with the reason; status still exits 0.

``--help`` is :data:`DESCRIPTION` and :data:`EXAMPLES`, written for the terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from capture.errors import ConfigError, SetupError, lsn_text
from capture.flags import DSN_HELP, add_command

if TYPE_CHECKING:  # psycopg loads only when a command runs (keeps `walcast --help` fast)
    import psycopg

    from capture.replication.catalog import PublishedTable
    from capture.replication.slots import SlotStatus


HEALTH_TIMEOUT: Final = 5.0
"""Seconds ``--health-url`` waits for the daemon's answer."""

HELP: Final = "show replication slots (lag, retained WAL, risk) and published tables"
"""The line ``walcast --help`` shows for this command."""

DESCRIPTION: Final = """\
Show the replication slots of a PostgreSQL database and the tables its
publications hold. Only reads the server's catalog; never changes anything.

For each logical slot of the database (or each --slot): its plugin, whether a
consumer streams from it (pid, last reply), the confirmed flush position, the
lag in bytes and in time, the WAL it retains, the risk that
max_slot_wal_keep_size invalidates it (ok, unbounded, at-risk or lost), and
whether it survives a failover to a standby (ready, at-risk, not-ready, synced,
not-synced; unsupported before PostgreSQL 17). Lag in time is PostgreSQL's own
measure from the consumer's last reply, so it is unknown while no consumer is
connected.

For each publication (every one of the database, or each --publication): its
tables with their replica identity and primary key, and a note on each table
whose UPDATEs or DELETEs PostgreSQL will refuse.

When the server's wal_level is not logical, the first line says so and how to
change it (no logical slot can exist until then).

--health-url URL also reads a running walcast run's /healthz (for example
http://127.0.0.1:9187/healthz) and shows the daemon's last progress: healthy or
not and why, the seconds since it last received or had confirmed anything, and
its received and confirmed positions (the server does not record when a slot's
confirmed position last moved). A daemon that does not answer within 5 s is
shown as unreachable.

--json prints the same as one JSON object (positions as X/Y, sizes in bytes,
lag in seconds or null), for scripts and monitoring."""
"""What ``walcast status --help`` says the command does."""

EXAMPLES: Final = (
    'walcast status --dsn "host=db dbname=app user=cdc"',
    'walcast status --dsn "host=db dbname=app user=cdc" --slot walcast --json',
    'WALCAST_DSN="host=db dbname=app user=cdc" walcast status --publication walcast',
    "walcast status --slot walcast --health-url http://localhost:9187/healthz",
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``walcast status`` to the CLI (``args.func`` runs it)."""
    parser = add_command(subparsers, "status", HELP, DESCRIPTION, EXAMPLES)
    add_dsn_argument(parser)
    parser.add_argument(
        "--slot",
        action="append",
        metavar="NAME",
        help="show only this slot (repeatable; default: every logical slot of the database)",
    )
    parser.add_argument(
        "--publication",
        action="append",
        metavar="NAME",
        help="show this publication's tables (repeatable; default: every publication of "
        "the database)",
    )
    parser.add_argument(
        "--health-url",
        metavar="URL",
        help="also show a running walcast run's last progress, read from its /healthz "
        "(e.g. http://127.0.0.1:9187/healthz)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(func=command)


def add_dsn_argument(parser: argparse.ArgumentParser) -> None:
    """``--dsn`` as ``status`` and ``slot`` take it (default ``$WALCAST_DSN``)."""
    parser.add_argument("--dsn", help=DSN_HELP)


def dsn_from(args: argparse.Namespace) -> str:
    """The DSN of ``--dsn`` or ``$WALCAST_DSN``; a ConfigError when there is none.

    A password in the ``--dsn`` flag gets one warning line (:mod:`capture.dsn`).
    """
    from capture import dsn as dsn_util  # noqa: PLC0415 - imports psycopg

    dsn_util.warn_password_in_flag(args.dsn)
    dsn = str(args.dsn or os.environ.get("WALCAST_DSN") or "")
    if not dsn:
        raise ConfigError("--dsn: no connection string given (or set $WALCAST_DSN)")
    dsn_util.parse(dsn)
    return dsn


def command(args: argparse.Namespace) -> int:
    """Run ``walcast status``."""
    import orjson  # noqa: PLC0415
    import psycopg  # noqa: PLC0415

    from capture import dsn as dsn_util  # noqa: PLC0415
    from capture.replication.connect import connect  # noqa: PLC0415

    dsn = dsn_from(args)
    url = args.health_url
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"--health-url: {url!r} is not an http(s) URL",
            hint="give the daemon's /healthz, e.g. http://127.0.0.1:9187/healthz",
        )
    with connect(dsn) as conn:
        try:
            report = gather(conn, args.slot or [], args.publication or [])
        except psycopg.Error as exc:
            raise SetupError(
                f"cannot read the catalog on {dsn_util.describe(dsn)}: "
                f"{dsn_util.scrub(str(exc), dsn).strip().splitlines()[0]}"
            ) from None
    if url is not None:
        report["daemon"] = read_health(url)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render(report))
    return 0


def read_health(url: str, timeout: float = HEALTH_TIMEOUT) -> dict[str, Any]:
    """What the daemon's ``/healthz`` at ``url`` says (the report's ``daemon``).

    ``reachable`` False with ``error`` (one line) when it did not answer in ``timeout``
    seconds or answered something else than walcast's JSON.
    """
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    import orjson  # noqa: PLC0415

    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:  # noqa: S310 - http(s) only
            code, raw = int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:
        code, raw = exc.code, exc.read()
    except (OSError, ValueError) as exc:  # URLError, refused, timed out
        reason = getattr(exc, "reason", None) or exc
        return {"url": url, "reachable": False, "error": str(reason).strip().splitlines()[0]}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or "healthy" not in body:
        return {
            "url": url,
            "reachable": False,
            "error": f"HTTP {code}, not a walcast /healthz answer",
        }
    report: dict[str, Any] = {"url": url, "reachable": True, "http_status": code}
    report["healthy"] = bool(body["healthy"])
    for key in (
        "status",
        "slot",
        "seconds_without_progress",
        "seconds_without_delivery",
        "received_lsn",
        "acked_lsn",
        "detail",
    ):
        report[key] = body.get(key)
    return report


# -- gathering -----------------------------------------------------------------------------


def named_slot(conn: psycopg.Connection[Any], name: str) -> SlotStatus:
    """The status of slot ``name``; a ConfigError listing the server's slots if there is none."""
    from capture.replication import slots  # noqa: PLC0415

    found = slots.slot_status(conn, name)
    if not found:
        known = slots.slot_names(conn)
        raise ConfigError(
            f"--slot {name}: no such replication slot",
            hint=f"slots on this server: {', '.join(known)}" if known else "there are none",
        )
    return found[0]


def gather(
    conn: psycopg.Connection[Any], slot_names: Sequence[str], publication_names: Sequence[str]
) -> dict[str, Any]:
    """The status report (the ``--json`` object) of the slots and publications named.

    No slot names: every logical slot of the database; no publication names: every
    publication.
    """
    from capture.replication import catalog, slots  # noqa: PLC0415

    found = [] if slot_names else slots.slot_status(conn)
    for name in dict.fromkeys(slot_names):
        found.append(named_slot(conn, name))
    pubs = catalog.publications(conn, publication_names)
    missing = sorted(set(publication_names) - {p.name for p in pubs})
    if missing:
        known_pubs = [p.name for p in catalog.publications(conn)]
        raise ConfigError(
            f"--publication {missing[0]}: no such publication in this database",
            hint=f"publications here: {', '.join(known_pubs)}" if known_pubs else "there are none",
        )
    keep = catalog.max_slot_wal_keep_size(conn)
    database = conn.execute("SELECT current_database()").fetchone()
    standbys = [
        name.strip().strip('"')
        for name in (catalog.setting(conn, "synchronized_standby_slots") or "").split(",")
        if name.strip()
    ]
    guards = {name: bool(named and named[0].active) for name in standbys
              for named in [slots.slot_status(conn, name)]}  # fmt: skip
    version = conn.info.server_version
    return {
        "database": str(database[0]) if database else None,
        "server_version": version,
        "wal_level": catalog.setting(conn, "wal_level"),
        "max_slot_wal_keep_size": keep,
        "synchronized_standby_slots": standbys,
        "slots": [_slot(s, keep, failover_readiness(s, version, guards)) for s in found],
        "publications": [
            {
                "publication": p.name,
                "all_tables": p.all_tables,
                "operations": list(p.operations),
                "tables": [
                    _table(t, p.operations) for t in catalog.publication_tables(conn, [p.name])
                ],
            }
            for p in pubs
        ],
    }


def _lsn(value: int | None) -> str | None:
    return None if value is None else lsn_text(value)


def lag_seconds(slot: SlotStatus) -> tuple[float | None, str | None]:
    """The slot's lag in time and the ``pg_stat_replication`` column it comes from."""
    for column in ("replay_lag", "flush_lag", "write_lag"):
        value: float | None = getattr(slot, column)
        if value is not None:
            return value, column
    return None, None


def wal_risk(slot: SlotStatus, keep: int | None) -> tuple[str, str]:
    """``(level, one line)`` of the risk that the slot loses WAL it needs.

    Levels: ``lost`` (invalidated), ``at-risk`` (past ``max_slot_wal_keep_size``),
    ``unbounded`` (no limit: a stalled consumer can fill the disk), ``ok``, ``unknown``.
    """
    if slot.wal_status == "lost" or (slot.wal_status is not None and slot.restart_lsn is None):
        return "lost", (
            "the server removed WAL this slot needs; it cannot stream again (drop it, "
            "create a new one and load the tables again)"
        )
    if slot.wal_status == "unreserved":
        return "at-risk", (
            "retained WAL is past max_slot_wal_keep_size; the next checkpoint invalidates "
            "the slot unless its consumer catches up"
        )
    if slot.wal_status is None:
        return (
            "unknown",
            "PostgreSQL before 13 does not report it; the slot keeps WAL without limit",
        )
    if keep is None:
        return "unbounded", (
            "max_slot_wal_keep_size = -1: while the consumer is stopped, retained WAL grows "
            "until the disk is full"
        )
    safe = slot.safe_wal_size
    left = f"{human_bytes(safe)} more WAL" if safe is not None else "more WAL"
    return "ok", f"{left} before max_slot_wal_keep_size ({human_bytes(keep)}) invalidates it"


def failover_readiness(
    slot: SlotStatus, server_version: int, guards: dict[str, bool]
) -> tuple[str, str]:
    """``(level, one line)``: does the slot survive a failover to a standby.

    ``guards`` are the physical slots ``synchronized_standby_slots`` names (on a primary),
    each with whether a standby streams from it. Levels: ``ready``, ``at-risk`` (a failover
    slot whose standby is not guaranteed to have what walcast received), ``not-ready`` (not
    a failover slot), ``synced``/``not-synced`` (on a standby), ``unsupported`` (before 17).
    """
    if slot.slot_type != "logical":
        return "-", "a physical slot"
    if server_version < 170000:
        return "unsupported", (
            "PostgreSQL before 17 keeps no copy of a logical slot on standbys: a failover "
            "loses it (after a promotion: walcast run --create-slot on the new primary, which "
            "loads the tables again)"
        )
    if slot.in_recovery:
        if slot.synced:
            return "synced", (
                "a synchronized copy of the primary's failover slot: walcast streams on from "
                "it once this standby is promoted"
            )
        return "not-synced", (
            "not a synchronized copy (sync_replication_slots = on and the primary's slot a "
            "failover slot are needed)"
        )
    if not slot.failover:
        return "not-ready", (
            "not a failover slot: a failover loses it (create it with walcast run --create-slot, "
            "or ALTER_REPLICATION_SLOT ... (FAILOVER true))"
        )
    if not guards:
        return "at-risk", (
            "a failover slot, but synchronized_standby_slots names no standby: walcast may "
            "receive changes a promoted standby never had"
        )
    down = sorted(name for name, active in guards.items() if not active)
    if down:
        return "at-risk", (
            f"a failover slot; synchronized_standby_slots names {', '.join(down)}, which no "
            "standby streams from now (walcast waits for it)"
        )
    return "ready", (
        f"a failover slot; standby slot(s) {', '.join(sorted(guards))} confirm every change "
        "before walcast receives it"
    )


def _slot(slot: SlotStatus, keep: int | None, failover: tuple[str, str]) -> dict[str, Any]:
    seconds, source = lag_seconds(slot)
    level, detail = wal_risk(slot, keep)
    return {
        "slot": slot.name,
        "slot_type": slot.slot_type,
        "plugin": slot.plugin,
        "database": slot.database,
        "temporary": slot.temporary,
        "two_phase": slot.two_phase,
        "active": slot.active,
        "active_pid": slot.active_pid,
        "last_reply": slot.reply_time.isoformat() if slot.reply_time else None,
        "current_lsn": _lsn(slot.current_lsn),
        "confirmed_flush_lsn": _lsn(slot.confirmed_flush_lsn),
        "restart_lsn": _lsn(slot.restart_lsn),
        "lag_bytes": slot.lag_bytes,
        "lag_seconds": seconds,
        "lag_seconds_from": source,
        "wal_retained_bytes": slot.wal_retained,
        "wal_status": slot.wal_status,
        "safe_wal_size": slot.safe_wal_size,
        "wal_risk": level,
        "wal_risk_detail": detail,
        "failover": slot.failover,
        "synced": slot.synced,
        "failover_readiness": failover[0],
        "failover_detail": failover[1],
    }


def table_note(table: PublishedTable, operations: Sequence[str]) -> str | None:
    """Why PostgreSQL refuses some changes of ``table``, or None when it does not."""
    from capture.replication.catalog import refused_changes  # noqa: PLC0415

    return refused_changes(table, operations)


def _table(table: PublishedTable, operations: Sequence[str]) -> dict[str, Any]:
    return {
        "table": table.qualified_name,
        "replica_identity": table.replica_identity,
        "primary_key": list(table.primary_key),
        "note": table_note(table, operations),
    }


# -- rendering -----------------------------------------------------------------------------


def human_bytes(count: int | None) -> str:
    """``1536`` as ``1.5 KiB`` (binary units, as PostgreSQL's pg_size_pretty)."""
    if count is None:
        return "unknown"
    size = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{count} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError  # pragma: no cover


def _ago(when: str | None) -> str:
    if when is None:
        return "no reply yet"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(when)).total_seconds()
    return f"last reply {max(seconds, 0):.1f} s ago"


def wal_level_problem(wal_level: str | None) -> str | None:
    """The line saying that ``wal_level`` rules out logical replication, or None if it does not.

    None for ``logical``, and for an unknown level (a report of a server that did not say).
    """
    if wal_level is None or wal_level == "logical":
        return None
    return (
        f"wal_level is {wal_level!r} on this server: logical replication needs "
        "wal_level=logical (hint: ALTER SYSTEM SET wal_level = logical; then restart "
        "PostgreSQL)"
    )


def render_daemon(daemon: dict[str, Any]) -> list[str]:
    """The lines of ``--health-url``'s report."""
    if not daemon["reachable"]:
        return [f"daemon at {daemon['url']}: unreachable ({daemon['error']})"]
    verdict = "healthy" if daemon["healthy"] else "NOT healthy"
    status = f", {daemon['status']}" if daemon["status"] else ""
    lines = [f"daemon at {daemon['url']}: {verdict} (HTTP {daemon['http_status']}{status})"]
    quiet = daemon["seconds_without_progress"]
    progress = "unknown (no session yet)" if quiet is None else f"{quiet:.1f} s ago"
    if daemon["received_lsn"] or daemon["acked_lsn"]:
        progress += (
            f"; received up to {daemon['received_lsn'] or '-'}, "
            f"confirmed {daemon['acked_lsn'] or '-'}"
        )
    lines.append(f"  {'last progress':<16}{progress}")
    if daemon["detail"]:
        lines.append(f"  {'why':<16}{daemon['detail']}")
    return lines


def render(report: dict[str, Any]) -> str:
    """The human form of a status report."""
    lines: list[str] = []
    problem = wal_level_problem(report.get("wal_level"))
    if problem:
        lines += [problem, ""]
    daemon = report.get("daemon")
    if daemon is not None:
        lines += [*render_daemon(daemon), ""]
    slots = report["slots"]
    if not slots:
        none_yet = " (none can exist until wal_level is logical)" if problem else ""
        lines.append(f"no logical replication slots in database {report['database']}{none_yet}")
    for s in slots:
        plugin = s["plugin"] or "physical"
        lines.append(f"slot {s['slot']} ({plugin}, database {s['database'] or '-'})")
        state = (
            f"active, pid {s['active_pid']} ({_ago(s['last_reply'])})"
            if s["active"]
            else "inactive (no consumer connected)"
        )
        if s["lag_seconds"] is not None:
            lag_time = f"{s['lag_seconds']:.3f} s ({s['lag_seconds_from']})"
        elif s["active"]:
            lag_time = "time unknown (no recent measurement; caught up or no reply yet)"
        else:
            lag_time = "time unknown (slot inactive)"
        rows = [
            ("state", state),
            ("confirmed flush", s["confirmed_flush_lsn"] or "-"),
            ("restart LSN", s["restart_lsn"] or "-"),
            ("lag", f"{human_bytes(s['lag_bytes'])} behind {s['current_lsn']}; {lag_time}"),
            ("WAL retained", human_bytes(s["wal_retained_bytes"])),
            ("WAL risk", f"{s['wal_risk']}: {s['wal_risk_detail']}"),
            ("failover", f"{s['failover_readiness']}: {s['failover_detail']}"),
        ]
        lines += [f"  {name:<16}{value}" for name, value in rows]
        lines.append("")
    if slots:
        lines.pop()
    for pub in report["publications"]:
        scope = "FOR ALL TABLES, " if pub["all_tables"] else ""
        tables = pub["tables"]
        plural = "s" if len(tables) != 1 else ""
        operations = ", ".join(pub["operations"])
        lines += [
            "",
            f"publication {pub['publication']} ({scope}{operations}; {len(tables)} table{plural})",
        ]
        if tables:
            width = max(5, *(len(t["table"]) for t in tables)) + 2
            lines.append(f"  {'table':<{width}}{'replica identity':<18}primary key")
            for t in tables:
                key = ", ".join(t["primary_key"]) or "-"
                note = f"   ! {t['note']}" if t["note"] else ""
                lines.append(f"  {t['table']:<{width}}{t['replica_identity']:<18}{key}{note}")
    if not report["publications"]:
        lines += ["", "no publications in this database"]
    return "\n".join(lines) + "\n"

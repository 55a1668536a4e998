"""Slot facts: the one place that asks the server about replication slots and its identity.

Everything walcast needs to know about a slot (whether it exists, who streams from it,
where it is confirmed, how much WAL it holds, whether it survives a failover, whether it
was invalidated) comes from :func:`slot_status`, the only query of ``pg_replication_slots``
in ``capture/``; the server's identity comes from :func:`identify_system`, the replication
protocol's ``IDENTIFY_SYSTEM`` (any role that may stream may run it, unlike
``pg_control_system()``).

Columns that a server version lacks are NULL in the result, never an error: ``wal_status``
and ``safe_wal_size`` appeared in PostgreSQL 13, ``two_phase`` in 14, ``conflicting`` in 16,
``failover``, ``synced`` and ``invalidation_reason`` in 17.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from capture import dsn as dsn_util
from capture.errors import ConnectionLostError
from capture.replication.connect import connect, libpq_message
from capture.replication.session import Purpose
from capture.state.identity import SourceIdentity


@dataclass(frozen=True, slots=True)
class SlotStatus:
    """A replication slot as ``pg_replication_slots`` and ``pg_stat_replication`` see it."""

    name: str
    slot_type: str
    """``logical`` or ``physical``."""
    plugin: str | None
    """Output plugin (``pgoutput``); None for a physical slot."""
    database: str | None
    temporary: bool
    active_pid: int | None
    """The walsender streaming from the slot, or None when nobody is."""
    confirmed_flush_lsn: int | None
    """What the consumer has confirmed (logical slots only)."""
    restart_lsn: int | None
    """The oldest WAL the slot still needs; None once the slot is lost."""
    current_lsn: int
    """The server's current WAL position (its replay position on a standby)."""
    wal_status: str | None
    """``reserved``, ``extended``, ``unreserved`` or ``lost`` (PostgreSQL 13+)."""
    safe_wal_size: int | None
    """Bytes of WAL that can still be written before the slot is invalidated (PostgreSQL
    13+; None when ``max_slot_wal_keep_size`` is -1, unlimited)."""
    two_phase: bool | None
    write_lag: float | None
    flush_lag: float | None
    replay_lag: float | None
    """Seconds, from ``pg_stat_replication`` while the slot is active (None otherwise, and
    a while after the consumer caught up with an idle server)."""
    reply_time: datetime | None
    """When the consumer last sent a status update (while active; PostgreSQL 12+)."""
    failover: bool | None = None
    """The slot is synchronized to standbys (PostgreSQL 17+; None before)."""
    synced: bool | None = None
    """On a standby: the slot is a synchronized copy of the primary's (PostgreSQL 17+)."""
    invalidation_reason: str | None = None
    """Why the server invalidated the slot (``wal_removed``, ``rows_removed``,
    ``wal_level_insufficient``, …; PostgreSQL 17+), or None."""
    conflicting: bool | None = None
    """A logical slot on a standby invalidated by a conflict with recovery (16+)."""
    in_recovery: bool = False
    """The server is a standby."""

    @property
    def active(self) -> bool:
        """Whether a walsender streams from the slot now."""
        return self.active_pid is not None

    @property
    def lag_bytes(self) -> int | None:
        """WAL written since the consumer's confirmed position (None: not a logical slot)."""
        if self.confirmed_flush_lsn is None:
            return None
        return max(self.current_lsn - self.confirmed_flush_lsn, 0)

    @property
    def wal_retained(self) -> int | None:
        """Bytes of WAL the server keeps for the slot (None once it is lost)."""
        if self.restart_lsn is None:
            return None
        return max(self.current_lsn - self.restart_lsn, 0)

    @property
    def invalidated(self) -> bool:
        """The server invalidated the slot: it can no longer be streamed from."""
        return (
            self.wal_status == "lost"
            or self.invalidation_reason is not None
            or bool(self.conflicting)
        )


def _lsn(column: str) -> sql.Composable:
    return sql.SQL("({} - '0/0'::pg_lsn)::int8").format(sql.SQL(column))


def slot_status(
    conn: psycopg.Connection[Any], slot: str | None = None, *, every_kind: bool = False
) -> list[SlotStatus]:
    """The status of slot ``slot``, or of every logical slot of the connected database.

    ``every_kind`` (without ``slot``): every slot of the server, physical ones and other
    databases' included. Empty when ``slot`` does not exist.
    """
    version = conn.info.server_version
    null = sql.SQL("NULL")

    def since(column: str, first: int) -> sql.Composable:
        return sql.SQL(column) if version >= first else null

    query = sql.SQL(
        "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
        "  ELSE pg_current_wal_lsn() END AS lsn, pg_is_in_recovery() AS standby) "
        "SELECT s.slot_name, s.slot_type, s.plugin, s.database, s.temporary, s.active_pid, "
        "{confirmed}, {restart}, (here.lsn - '0/0'::pg_lsn)::int8, {wal_status}, "
        "{safe}, {two_phase}, extract(epoch FROM r.write_lag)::float8, "
        "extract(epoch FROM r.flush_lag)::float8, extract(epoch FROM r.replay_lag)::float8, "
        "{reply_time}, {failover}, {synced}, {reason}, {conflicting}, here.standby "
        "FROM pg_replication_slots s CROSS JOIN here "
        "LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid "
        "WHERE CASE WHEN %(slot)s::text IS NOT NULL THEN s.slot_name = %(slot)s "
        "  WHEN %(every)s THEN true "
        "  ELSE s.slot_type = 'logical' AND s.database = current_database() END "
        "ORDER BY s.slot_name"
    ).format(
        confirmed=_lsn("s.confirmed_flush_lsn"),
        restart=_lsn("s.restart_lsn"),
        wal_status=since("s.wal_status", 130000),
        safe=since("s.safe_wal_size", 130000),
        two_phase=since("s.two_phase", 140000),
        reply_time=since("r.reply_time", 120000),
        failover=since("s.failover", 170000),
        synced=since("s.synced", 170000),
        reason=since("s.invalidation_reason", 170000),
        conflicting=since("s.conflicting", 160000),
    )
    rows = conn.execute(query, {"slot": slot, "every": every_kind}).fetchall()
    return [
        SlotStatus(
            name=str(r[0]),
            slot_type=str(r[1]),
            plugin=_text(r[2]),
            database=_text(r[3]),
            temporary=bool(r[4]),
            active_pid=_int(r[5]),
            confirmed_flush_lsn=_int(r[6]),
            restart_lsn=_int(r[7]),
            current_lsn=int(str(r[8])),
            wal_status=_text(r[9]),
            safe_wal_size=_int(r[10]),
            two_phase=_bool(r[11]),
            write_lag=_float(r[12]),
            flush_lag=_float(r[13]),
            replay_lag=_float(r[14]),
            reply_time=r[15] if isinstance(r[15], datetime) else None,
            failover=_bool(r[16]),
            synced=_bool(r[17]),
            invalidation_reason=_text(r[18]),
            conflicting=_bool(r[19]),
            in_recovery=bool(r[20]),
        )
        for r in rows
    ]


def find_slot(conn: psycopg.Connection[Any], name: str) -> SlotStatus | None:
    """Slot ``name`` (of any database or kind), or None when it does not exist."""
    found = slot_status(conn, name)
    return found[0] if found else None


def slot_names(conn: psycopg.Connection[Any]) -> list[str]:
    """Every replication slot of the server, by name."""
    return [s.name for s in slot_status(conn, every_kind=True)]


def wal_retained(conn: psycopg.Connection[Any], slot: str) -> int | None:
    """Bytes of WAL the server keeps for ``slot`` (None: no such slot, or it is lost)."""
    found = find_slot(conn, slot)
    return None if found is None else found.wal_retained


# -- the server's identity -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SystemIdentity:
    """What ``IDENTIFY_SYSTEM`` says of the server a replication connection reached."""

    system_identifier: str
    """The cluster's ``pg_control`` system identifier (the same on its physical standbys)."""
    timeline: int
    xlogpos: int
    """The server's current WAL flush position (its replay position on a standby)."""
    database: str


def identify_system(dsn: str) -> SystemIdentity:
    """``IDENTIFY_SYSTEM`` on a short replication connection to ``dsn``.

    Raises :class:`~capture.errors.ConnectionLostError` (retried) when the server cannot be
    reached; a refused role is :func:`~capture.replication.connect.connect`'s terminal error.
    """
    from capture.lsn import parse_lsn  # noqa: PLC0415 - keeps this module's imports small

    try:
        with connect(dsn, purpose=Purpose.STREAM) as conn:
            row = conn.execute("IDENTIFY_SYSTEM").fetchone()
    except psycopg.Error as exc:
        text = libpq_message(dsn_util.scrub(str(exc), dsn))
        raise ConnectionLostError(
            f"cannot identify the server {dsn_util.describe(dsn)}: {text or type(exc).__name__}",
            hint="walcast retries",
        ) from None
    assert row is not None
    return SystemIdentity(str(row[0]), int(str(row[1])), parse_lsn(str(row[2])), str(row[3]))


def source_identity(dsn: str, slot: str) -> SourceIdentity:
    """The identity of ``slot`` on the server ``dsn`` points at (``IDENTIFY_SYSTEM``).

    Raises :class:`~capture.errors.ConnectionLostError` (retried) when the server cannot be
    reached.
    """
    system = identify_system(dsn)
    return SourceIdentity(system.system_identifier, system.database, slot)


def slot_holder(dsn: str, slot: str) -> int | None:
    """The pid of the process streaming ``slot`` now (None: nobody, or no such slot)."""
    with connect(dsn) as conn:
        found = find_slot(conn, slot)
    return found.active_pid if found is not None else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _float(value: object) -> float | None:
    return None if value is None else float(str(value))


def _bool(value: object) -> bool | None:
    return None if value is None else bool(value)

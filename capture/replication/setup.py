"""Checks and set-up before streaming: server version, wal_level, slot and publication.

Every problem a user can cause becomes a :class:`~capture.errors.SetupError` (or a
:class:`~capture.errors.ConnectionLostError` when the server cannot be reached) whose
message names the slot, publication or setting, with a hint on how to fix it. SQL runs
on an ordinary (non-replication) connection; identifiers are always quoted with
:mod:`psycopg.sql`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

import psycopg
import structlog
from psycopg import sql

from capture import dsn as dsn_util
from capture.errors import (
    AccessDeniedError,
    ConfigError,
    ConnectionLostError,
    SetupError,
    SlotInUseError,
)
from capture.replication import catalog
from capture.replication.connect import connect, connection_error, format_version
from capture.replication.slots import SlotStatus, find_slot

if TYPE_CHECKING:
    from capture.replication.side import SideConnection

log = structlog.get_logger("walcast.setup")

T = TypeVar("T")

MIN_SERVER_FOR_PROTO: Final = {1: 100000, 2: 140000, 3: 150000, 4: 160000}
"""server_version_num needed for each pgoutput protocol version."""


def highest_proto_version(server_version: int) -> int:
    """The newest pgoutput protocol version ``server_version`` supports."""
    return max(v for v, need in MIN_SERVER_FOR_PROTO.items() if server_version >= need)


def resolve_failover(requested: bool | None, server: ServerInfo) -> bool:
    """Whether a slot walcast creates is a failover slot (``source.failover_slot``).

    Unset: yes where the server can (PostgreSQL 17+) and is a primary (a standby cannot
    create a failover slot). ``true`` on an older server is a ConfigError: a failover would
    lose the slot, which the user asked to avoid.
    """
    if requested is None:
        return server.version_num >= 170000 and not server.in_recovery
    if requested and server.version_num < 170000:
        raise ConfigError(
            f"source.failover_slot: failover slots need PostgreSQL 17 or newer; the server is "
            f"{format_version(server.version_num)}",
            hint="leave source.failover_slot unset (or false); on 13-16 a failover loses the "
            "slot: create it on the promoted primary and load again (see the README)",
        )
    return requested


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the checks learned about the server."""

    version_num: int
    wal_level: str
    database: str
    in_recovery: bool = False
    """The server is a standby (logical decoding there needs PostgreSQL 16+)."""


class Preflight:
    """Run the checks walcast needs before START_REPLICATION, on an ordinary connection."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = connect(dsn)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def __enter__(self) -> Preflight:  # noqa: PYI034 - Preflight is final
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _query(
        self, doing: str, query: str, params: tuple[object, ...] = ()
    ) -> list[tuple[object, ...]]:
        """Run ``query``; a failure becomes a walcast error (see :meth:`_call`)."""
        return self._call(doing, lambda: self.conn.execute(query, params).fetchall())

    def _call(self, doing: str, call: Callable[[], T]) -> T:
        """``call()``; a failure becomes a walcast error saying what was being done.

        A missing privilege is an :class:`~capture.errors.AccessDeniedError` naming the role
        and the privilege; a broken connection a ConnectionLostError; anything else a
        SetupError with the server's message.
        """
        try:
            return call()
        except psycopg.errors.InsufficientPrivilege as exc:
            user = self.conn.info.user
            text = _first_line(exc, self.dsn)
            replication = "replication" in text
            raise AccessDeniedError(
                f"role {user!r} may not {doing}: {text}",
                hint=f"ALTER ROLE {user} WITH REPLICATION"
                if replication
                else f"have the owner or a superuser grant {user!r} the privilege, or {doing} "
                "as a role that has it",
            ) from None
        except psycopg.errors.ConfigurationLimitExceeded as exc:
            raise self._limit_error(doing, exc) from None
        except psycopg.OperationalError as exc:
            raise connection_error(exc, self.dsn) from None
        except psycopg.Error as exc:
            raise SetupError(f"cannot {doing}: {_first_line(exc, self.dsn)}") from None

    def _limit_error(self, doing: str, exc: psycopg.Error) -> SetupError:
        """A server limit hit while ``doing``: one line naming the setting and its value.

        The only limit walcast's set-up can reach is ``max_replication_slots`` (creating a
        slot when all are in use); its value is read back on the same connection.
        """
        text = _first_line(exc, self.dsn)
        if "replication slots" not in text:
            return SetupError(f"cannot {doing}: {text}")
        try:
            row = self.conn.execute("SHOW max_replication_slots").fetchone()
            value = str(row[0]) if row else "?"
        except psycopg.Error:
            value = "?"
        return slots_exhausted(doing, value)

    def server(self) -> ServerInfo:
        """Version, wal_level and database; raises unless wal_level is logical.

        Text reaches walcast in UTF-8 whatever the database encoding (the walsender converts
        it, see :mod:`capture.replication.session`). SQL_ASCII declares no encoding: the
        server then only checks that each text is valid UTF-8, and ends the stream with
        ``invalid byte sequence for encoding "UTF8"`` at the first one that is not, which
        walcast reports as a terminal error; a warning says so at start.
        """
        (row,) = self._query(
            "read the server settings",
            "SELECT current_setting('server_version_num'), current_setting('wal_level'), "
            "current_database(), current_setting('server_encoding'), "
            "pg_is_in_recovery()::text",
        )
        version, wal_level, database, encoding, standby = (_text(v) for v in row)
        if encoding == "SQL_ASCII":
            log.info(
                "sql_ascii_database",
                database=database,
                detail="server_encoding is SQL_ASCII: text is read as UTF-8, and a value that "
                "is not valid UTF-8 stops the stream with the server's error",
            )
        if wal_level != "logical":
            raise SetupError(
                f"wal_level is {wal_level!r} on {dsn_util.describe(self.dsn)}; logical "
                "replication needs wal_level=logical",
                hint="ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
            )
        return ServerInfo(int(version), wal_level, database, standby in ("true", "t"))

    def unprotected_standby_slots(self) -> list[str]:
        """Physical slots of a 17+ primary that ``synchronized_standby_slots`` leaves out.

        A standby streaming through one may hold a synced copy of a failover slot, yet the
        logical walsender does not wait for it. Empty when the setting names every physical
        slot, or there is none (no standby a failover could go to).
        """
        rows = self._query(
            "read synchronized_standby_slots",
            "SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'physical' "
            "AND slot_name <> ALL (string_to_array(replace(coalesce(current_setting("
            "'synchronized_standby_slots', true), ''), ' ', ''), ',')) ORDER BY 1",
        )
        return [_text(r[0]) for r in rows]

    def wal_sender_timeout(self) -> float:
        """The server's ``wal_sender_timeout`` in seconds (0: disabled)."""
        (row,) = self._query(
            "read wal_sender_timeout",
            "SELECT setting::int8 FROM pg_settings WHERE name = 'wal_sender_timeout'",
        )
        return int(str(row[0])) / 1000

    def check_proto_version(self, server: ServerInfo, proto_version: int) -> None:
        """Raise if the server is too old for ``proto_version``."""
        need = MIN_SERVER_FOR_PROTO.get(proto_version)
        if need is None:
            raise SetupError(
                f"--proto-version {proto_version} does not exist; pgoutput has versions 1 to 4"
            )
        if server.version_num < need:
            raise SetupError(
                f"--proto-version {proto_version} needs PostgreSQL {format_version(need)} or "
                f"newer; the server is {format_version(server.version_num)}",
                hint=f"use --proto-version {highest_proto_version(server.version_num)} or omit it",
            )

    def slot(self, name: str) -> SlotStatus | None:
        """The slot called ``name``, or None."""
        return self._call(f"read replication slot {name!r}", lambda: find_slot(self.conn, name))

    def ensure_slot(
        self,
        name: str,
        server: ServerInfo,
        *,
        create: bool,
        two_phase: bool = False,
        failover: bool = False,
    ) -> SlotStatus:
        """Check (or create, with ``create``) a pgoutput slot usable from this database.

        A created slot is a failover slot with ``failover`` (PostgreSQL 17+: standbys with
        ``sync_replication_slots`` keep a copy that a promoted standby streams on from).
        """
        info = self.slot(name)
        if info is None:
            if not create:
                raise SetupError(
                    f"replication slot {name!r} does not exist",
                    hint="pass --create-slot, or SELECT pg_create_logical_replication_slot"
                    f"('{name}', 'pgoutput')",
                )
            if server.version_num >= 170000:
                self._query(
                    f"create replication slot {name!r}",
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s, %s)",
                    (name, two_phase, failover),
                )
            elif server.version_num >= 140000:
                self._query(
                    f"create replication slot {name!r}",
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                    (name, two_phase),
                )
            else:  # no two_phase argument before 14 (and --two-phase is refused there)
                self._query(
                    f"create replication slot {name!r}",
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                    (name,),
                )
            log.info("slot_created", slot=name, two_phase=two_phase, failover=failover)
            info = self.slot(name)
            assert info is not None
        if info.slot_type != "logical":
            raise SetupError(f"replication slot {name!r} is a physical slot, not a logical one")
        if info.plugin != "pgoutput":
            raise SetupError(
                f"replication slot {name!r} uses output plugin {info.plugin!r}; walcast needs "
                "'pgoutput'",
                hint="create a new slot for walcast, e.g. with --create-slot and another --slot",
            )
        if info.database != server.database:
            raise SetupError(
                f"replication slot {name!r} belongs to database {info.database!r}, but --dsn "
                f"connects to {server.database!r}",
                hint="point --dsn at the slot's database",
            )
        if info.invalidated:
            raise invalidated_slot_error(name, info)
        if info.active_pid is not None:
            raise SlotInUseError(name, info.active_pid)
        return info

    def ensure_publication(self, name: str, *, create: bool, tables: list[str] | None) -> None:
        """Check (or create, with ``create``) the publication ``name``."""
        if self._query(
            f"read publication {name!r}", "SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)
        ):
            return
        if not create:
            raise SetupError(
                f"publication {name!r} does not exist",
                hint=f"pass --create-publication, or CREATE PUBLICATION {name} FOR ALL TABLES",
            )
        self._check_publishable(name, tables or None)
        if tables:
            targets = sql.SQL(", ").join(sql.Identifier(*t.split(".", 1)) for t in tables)
            stmt = sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(name), targets
            )
        else:
            stmt = sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(name))
        try:
            self.conn.execute(stmt)
        except psycopg.OperationalError as exc:
            raise connection_error(exc, self.dsn) from None
        except psycopg.Error as exc:
            family = (
                AccessDeniedError
                if isinstance(exc, psycopg.errors.InsufficientPrivilege)
                else SetupError
            )
            raise family(
                f"cannot create publication {name!r} as role {self.conn.info.user!r}: "
                f"{_first_line(exc, self.dsn)}",
                hint="FOR ALL TABLES needs a superuser, FOR TABLE the tables' owner; list "
                "tables with --publish-tables, or create the publication as such a role",
            ) from None

    def _check_publishable(self, name: str, tables: list[str] | None) -> None:
        """Refuse to publish a table whose UPDATEs and DELETEs PostgreSQL would then refuse.

        A publication publishes updates and deletes by default; a published table without a
        replica identity (no primary key under REPLICA IDENTITY DEFAULT, or NOTHING) then
        makes the server refuse the application's own UPDATE and DELETE statements. A
        capture tool must never do that, so nothing is created and one line names every
        such table and the fixes.
        """
        found, missing = self._call(
            f"read the tables to publish in {name!r}",
            lambda: catalog.tables_to_publish(self.conn, tables),
        )
        if missing:
            raise SetupError(
                f"--publish-tables: no table {missing[0]!r} in database "
                f"{self.conn.info.dbname!r}; nothing was created",
                hint="give tables as schema.table (unquoted, case-sensitive)",
            )
        blocked = [
            (t, note)
            for t in found
            if (note := catalog.refused_changes(t, ("update", "delete"))) is not None
        ]
        if not blocked:
            return
        shown = "; ".join(f"{t.qualified_name} ({note})" for t, note in blocked[:5])
        more = f"; and {len(blocked) - 5} more" if len(blocked) > 5 else ""
        first = blocked[0][0].qualified_name
        leave_out = "leave them out of --publish-tables" if tables else "list only the "
        raise SetupError(
            f"--create-publication: publishing {len(blocked)} table(s) would make PostgreSQL "
            f"refuse the application's UPDATE and DELETE on them: {shown}{more}; publication "
            f"{name!r} was not created",
            hint=f"ALTER TABLE {first} REPLICA IDENTITY FULL, or give it a primary key, or "
            + (leave_out if tables else leave_out + "tables to publish with --publish-tables"),
        )

    def publication_tables_without_full_identity(self, publication: str) -> list[str]:
        """Published tables whose REPLICA IDENTITY is not FULL (no complete before image)."""
        return tables_without_full_identity(self.conn, publication)


_INVALIDATION_REASONS: Final = {
    "wal_removed": "the WAL it needed was removed (max_slot_wal_keep_size)",
    "rows_removed": "rows it needed were removed (a conflict on a standby)",
    "wal_level_insufficient": "wal_level on the primary fell below logical",
    "idle_timeout": "it was inactive longer than idle_replication_slot_timeout",
}


def slots_exhausted(doing: str, limit: object) -> SetupError:
    """``doing`` (creating a slot) failed: every slot ``max_replication_slots`` allows is used."""
    return SetupError(
        f"cannot {doing}: all replication slots are in use (max_replication_slots = {limit})",
        hint="drop a slot no longer used (SELECT slot_name, active FROM pg_replication_slots; "
        "SELECT pg_drop_replication_slot('...')), or raise max_replication_slots "
        "(postgresql.conf, then a restart)",
    )


def invalidated_slot_error(name: str, slot: SlotStatus | None, detail: str = "") -> SetupError:
    """The one-line error for a slot the server invalidated: the reason, what it means, the fix.

    ``detail`` is the server's own words when it refused to stream (its DETAIL line).
    """
    reason = detail
    if slot is not None and slot.invalidation_reason:
        reason = _INVALIDATION_REASONS.get(slot.invalidation_reason, slot.invalidation_reason)
    elif slot is not None and slot.wal_status == "lost" and not reason:
        reason = "the WAL it needed was removed (max_slot_wal_keep_size)"
    elif slot is not None and slot.conflicting and not reason:
        reason = "a conflict with recovery on this standby"
    position = ""
    if slot is not None and slot.confirmed_flush_lsn is not None:
        from capture.lsn import format_lsn  # noqa: PLC0415

        position = f" after {format_lsn(slot.confirmed_flush_lsn)}"
    return SetupError(
        f"replication slot {name!r} was invalidated by the server"
        + (f": {reason.rstrip('.')}" if reason else "")
        + f"; the changes made{position} since can no longer be streamed",
        hint=f"drop it (walcast slot drop --slot {name} --yes), create it again "
        "(--create-slot) and load the tables again (--snapshot initial, the default for a "
        "slot walcast creates); raise max_slot_wal_keep_size if WAL was removed",
    )


def _first_line(exc: BaseException, dsn: str) -> str:
    """The first line of a psycopg error's message, without secrets."""
    lines = dsn_util.scrub(str(exc), dsn).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _text(value: object) -> str:
    """A setting as text, also when the connection returns bytes (SQL_ASCII)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def tables_without_full_identity(conn: psycopg.Connection[Any], publication: str) -> list[str]:
    """Tables of ``publication`` whose REPLICA IDENTITY is not FULL, as ``schema.table``."""
    rows = conn.execute(
        "SELECT format('%%I.%%I', p.schemaname, p.tablename) FROM pg_publication_tables p "
        "JOIN pg_class c ON c.oid = format('%%I.%%I', p.schemaname, p.tablename)::regclass "
        "WHERE p.pubname = %s AND c.relreplident <> 'f' ORDER BY 1",
        (publication,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def array_element(conn: psycopg.Connection[Any], array_oid: int) -> tuple[int, str, str] | None:
    """``(typelem, namespace, name)`` of array type ``array_oid``'s element, or None.

    The element is named as pgoutput's Type message names a type: a domain (over a domain
    ...) by its base type, pg_catalog as ``""``.
    """
    row = conn.execute(
        "WITH RECURSIVE base(elem, cur) AS ("
        "  SELECT typelem, typelem FROM pg_type WHERE oid = %s AND typelem <> 0"
        "  UNION ALL SELECT b.elem, t.typbasetype FROM base b JOIN pg_type t ON t.oid = b.cur"
        "  WHERE t.typtype = 'd') "
        "SELECT b.elem::int8, n.nspname, t.typname FROM base b "
        "JOIN pg_type t ON t.oid = b.cur JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE t.typtype <> 'd'",
        (array_oid,),
    ).fetchone()
    if row is None:
        return None
    namespace = str(row[1])
    return int(str(row[0])), "" if namespace == "pg_catalog" else namespace, str(row[2])


def element_resolver(
    side: SideConnection, dsn: str
) -> Callable[[int], tuple[int, str, str] | None]:
    """:data:`capture.relcache.ElementResolver` over ``side`` (queries run once per array type).

    A failed query raises ConnectionLostError (the stream restarts and asks again), so an
    array is never rendered from a guess because the catalog was unreachable.
    """

    def resolve(array_oid: int) -> tuple[int, str, str] | None:
        found = side.run(lambda conn: (array_element(conn, array_oid),))
        if found is None:
            raise ConnectionLostError(
                f"cannot look up the element type of array type OID {array_oid} "
                f"({dsn_util.describe(dsn)})",
                hint="walcast retries; check that the server accepts ordinary connections",
            )
        return found[0]

    return resolve

"""Checks and set-up before streaming: server version, wal_level, slot and publication.

Every problem a user can cause becomes a :class:`~capture.errors.SetupError` (or a
:class:`~capture.errors.ConnectionLostError` when the server cannot be reached) whose
message names the slot, publication or setting, with a hint on how to fix it. SQL runs
on an ordinary (non-replication) connection; identifiers are always quoted with
:mod:`psycopg.sql`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql

from capture import dsn as dsn_util
from capture.errors import ConnectionLostError, SetupError

MIN_SERVER_FOR_PROTO: Final = {1: 100000, 2: 140000, 3: 150000, 4: 160000}
"""server_version_num needed for each pgoutput protocol version."""


def highest_proto_version(server_version: int) -> int:
    """The newest pgoutput protocol version ``server_version`` supports."""
    return max(v for v, need in MIN_SERVER_FOR_PROTO.items() if server_version >= need)


def _format_version(num: int) -> str:
    return f"{num // 10000}.{num % 10000}" if num >= 100000 else str(num)


def connect(dsn: str, *, replication: bool = False) -> psycopg.Connection[tuple[object, ...]]:
    """Open an autocommit connection (a walsender one with ``replication``).

    Failures become one-line errors that name the target without its password.
    """
    dsn_util.parse(dsn)
    target = dsn_util.describe(dsn)
    extra = {"replication": "database"} if replication else {}
    try:
        return psycopg.connect(
            dsn_util.with_session_options(dsn, **extra), autocommit=True, connect_timeout=10
        )
    except psycopg.OperationalError as exc:
        text = dsn_util.scrub(str(exc).strip(), dsn)
        last = text.splitlines()[-1] if text else "unknown error"
        if "must be superuser or replication role" in text or (
            "permission denied to start WAL sender" in text
        ):
            user = dsn_util.parse(dsn).get("user", "the connecting role")
            raise SetupError(
                f"role {user!r} may not open a replication connection ({target})",
                hint=f"ALTER ROLE {user} WITH REPLICATION, and allow 'replication' in pg_hba.conf",
            ) from None
        if "no pg_hba.conf entry for replication" in text:
            raise SetupError(
                f"pg_hba.conf does not allow replication connections ({target})",
                hint="add a 'host replication <user> <address> <method>' line and reload",
            ) from None
        raise ConnectionLostError(
            f"cannot connect to PostgreSQL ({target}): {last}",
            hint="check --dsn (host, port, dbname, user) and that the server is running",
        ) from None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the checks learned about the server."""

    version_num: int
    wal_level: str
    database: str


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """A logical replication slot as ``pg_replication_slots`` reports it."""

    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active_pid: int | None
    confirmed_flush_lsn: str | None
    two_phase: bool


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

    def server(self) -> ServerInfo:
        """Version, wal_level and database; raises unless wal_level is logical."""
        row = self.conn.execute(
            "SELECT current_setting('server_version_num')::int, current_setting('wal_level'), "
            "current_database()"
        ).fetchone()
        assert row is not None
        version, wal_level, database = int(str(row[0])), str(row[1]), str(row[2])
        if wal_level != "logical":
            raise SetupError(
                f"wal_level is {wal_level!r} on {dsn_util.describe(self.dsn)}; logical "
                "replication needs wal_level=logical",
                hint="ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
            )
        return ServerInfo(version, wal_level, database)

    def check_proto_version(self, server: ServerInfo, proto_version: int) -> None:
        """Raise if the server is too old for ``proto_version``."""
        need = MIN_SERVER_FOR_PROTO.get(proto_version)
        if need is None:
            raise SetupError(
                f"--proto-version {proto_version} does not exist; pgoutput has versions 1 to 4"
            )
        if server.version_num < need:
            raise SetupError(
                f"--proto-version {proto_version} needs PostgreSQL {_format_version(need)} or "
                f"newer; the server is {_format_version(server.version_num)}",
                hint=f"use --proto-version {highest_proto_version(server.version_num)} or omit it",
            )

    def slot(self, name: str) -> SlotInfo | None:
        """The slot called ``name``, or None."""
        row = self.conn.execute(
            "SELECT slot_name, plugin, slot_type, database, active_pid, "
            "confirmed_flush_lsn::text, two_phase FROM pg_replication_slots WHERE slot_name = %s",
            (name,),
        ).fetchone()
        if row is None:
            return None
        return SlotInfo(
            str(row[0]),
            None if row[1] is None else str(row[1]),
            str(row[2]),
            None if row[3] is None else str(row[3]),
            None if row[4] is None else int(str(row[4])),
            None if row[5] is None else str(row[5]),
            bool(row[6]),
        )

    def ensure_slot(
        self, name: str, server: ServerInfo, *, create: bool, two_phase: bool = False
    ) -> SlotInfo:
        """Check (or create, with ``create``) a pgoutput slot usable from this database."""
        info = self.slot(name)
        if info is None:
            if not create:
                raise SetupError(
                    f"replication slot {name!r} does not exist",
                    hint="pass --create-slot, or SELECT pg_create_logical_replication_slot"
                    f"('{name}', 'pgoutput')",
                )
            self.conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                (name, two_phase),
            )
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
        if info.active_pid is not None:
            raise SetupError(
                f"replication slot {name!r} is in use by another process (PID {info.active_pid})",
                hint="stop the other consumer, or use a different --slot",
            )
        return info

    def ensure_publication(self, name: str, *, create: bool, tables: list[str] | None) -> None:
        """Check (or create, with ``create``) the publication ``name``."""
        exists = self.conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)
        ).fetchone()
        if exists is not None:
            return
        if not create:
            raise SetupError(
                f"publication {name!r} does not exist",
                hint=f"pass --create-publication, or CREATE PUBLICATION {name} FOR ALL TABLES",
            )
        if tables:
            targets = sql.SQL(", ").join(sql.Identifier(*t.split(".", 1)) for t in tables)
            stmt = sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(name), targets
            )
        else:
            stmt = sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(name))
        try:
            self.conn.execute(stmt)
        except psycopg.Error as exc:
            raise SetupError(
                f"cannot create publication {name!r}: {str(exc).strip().splitlines()[0]}",
                hint="FOR ALL TABLES needs a superuser; list tables with --publish-tables",
            ) from None

    def publication_tables_without_full_identity(self, publication: str) -> list[str]:
        """Published tables whose REPLICA IDENTITY is not FULL (no complete before image)."""
        return tables_without_full_identity(self.conn, publication)


def tables_without_full_identity(conn: psycopg.Connection[Any], publication: str) -> list[str]:
    """Tables of ``publication`` whose REPLICA IDENTITY is not FULL, as ``schema.table``."""
    rows = conn.execute(
        "SELECT format('%%I.%%I', p.schemaname, p.tablename) FROM pg_publication_tables p "
        "JOIN pg_class c ON c.oid = format('%%I.%%I', p.schemaname, p.tablename)::regclass "
        "WHERE p.pubname = %s AND c.relreplident <> 'f' ORDER BY 1",
        (publication,),
    ).fetchall()
    return [str(r[0]) for r in rows]

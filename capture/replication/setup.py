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
from typing import TYPE_CHECKING, Any, Final

import psycopg
import structlog
from psycopg import sql

from capture import dsn as dsn_util
from capture.errors import AccessDeniedError, ConnectionLostError, SetupError, WalcastError

if TYPE_CHECKING:
    from capture.replication.side import SideConnection

log = structlog.get_logger("walcast.setup")

MIN_SERVER_FOR_PROTO: Final = {1: 100000, 2: 140000, 3: 150000, 4: 160000}
"""server_version_num needed for each pgoutput protocol version."""


def highest_proto_version(server_version: int) -> int:
    """The newest pgoutput protocol version ``server_version`` supports."""
    return max(v for v, need in MIN_SERVER_FOR_PROTO.items() if server_version >= need)


def _format_version(num: int) -> str:
    return f"{num // 10000}.{num % 10000}" if num >= 100000 else str(num)


_REFUSALS: Final = (
    ("password authentication failed", "the server refused the password of role {user}",
     "fix the password (in --dsn, $PGPASSWORD or ~/.pgpass); retrying cannot help"),
    ("no password supplied", "the server wants a password for role {user} and none was given",
     "put it in $PGPASSWORD or ~/.pgpass (or password= in --dsn)"),
    ("authentication failed", "the server refused to authenticate role {user}",
     "check the authentication method for this role in pg_hba.conf"),
    ("no pg_hba.conf entry", "pg_hba.conf has no entry for role {user} from this host",
     "add a 'host' line (a 'host replication' one for the stream) to pg_hba.conf and reload"),
    ("pg_hba.conf rejects", "pg_hba.conf rejects role {user} from this host",
     "change the matching pg_hba.conf line and reload"),
    ("must be superuser or replication role",
     "role {user} may not open a replication connection (it lacks the REPLICATION attribute)",
     "ALTER ROLE {user} WITH REPLICATION, and allow 'replication' in pg_hba.conf"),
    ("permission denied to start WAL sender",
     "role {user} may not open a replication connection (it lacks the REPLICATION attribute)",
     "ALTER ROLE {user} WITH REPLICATION, and allow 'replication' in pg_hba.conf"),
    ("is not permitted to log in", "role {user} may not log in (NOLOGIN)",
     "ALTER ROLE {user} WITH LOGIN"),
    ("permission denied for database", "role {user} may not connect to this database",
     "GRANT CONNECT ON DATABASE ... TO {user}"),
    ("does not exist", "{detail}", "fix user= or dbname= in --dsn"),
    ("does not support SSL", "{detail}", "change sslmode in --dsn, or enable SSL on the server"),
    ("certificate", "{detail}", "check the sslmode/sslrootcert/sslcert settings of --dsn"),
)  # fmt: skip
"""Connection failures that need a human (message fragment, message, hint): terminal
:class:`~capture.errors.AccessDeniedError`. Everything else (refused, timed out, reset,
the server starting up or shutting down, too many connections) is a transient
:class:`~capture.errors.ConnectionLostError`."""


def connect(dsn: str, *, replication: bool = False) -> psycopg.Connection[tuple[object, ...]]:
    """Open an autocommit connection (a walsender one with ``replication``).

    Failures become one-line errors that name the target without its password: a refusal
    (credentials, role, privilege, pg_hba.conf, database) is terminal, anything else is a
    lost connection, retried.
    """
    dsn_util.parse(dsn)
    extra = {"replication": "database"} if replication else {}
    try:
        return psycopg.connect(
            dsn_util.with_session_options(dsn, **extra), autocommit=True, connect_timeout=10
        )
    except psycopg.OperationalError as exc:
        raise connection_error(exc, dsn) from None


def connection_error(exc: BaseException, dsn: str) -> WalcastError:
    """The walcast error for a failed connection attempt to ``dsn`` (see :data:`_REFUSALS`)."""
    target = dsn_util.describe(dsn)
    text = dsn_util.scrub(str(exc).strip(), dsn)
    detail = _server_detail(text)
    user = repr(dsn_util.parse(dsn).get("user") or "(the OS user)")
    for fragment, message, hint in _REFUSALS:
        if fragment in text:
            bare = user.strip("'")
            return AccessDeniedError(
                message.format(user=user, detail=detail) + f" ({target})",
                hint=hint.format(user=bare),
            )
    return ConnectionLostError(
        f"cannot connect to PostgreSQL ({target}): {detail}",
        hint="check --dsn (host, port, dbname, user) and that the server is running",
    )


def _server_detail(text: str) -> str:
    """The server's or libpq's own words from a psycopg connection error, on one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    first = lines[0]
    for marker in ("FATAL:  ", "ERROR:  ", "failed: "):
        if marker in first:
            first = first.rsplit(marker, 1)[1]
            break
    hint = next((line for line in lines[1:] if not line.startswith("DETAIL")), "")
    return f"{first} ({hint})" if hint and hint.startswith("Is the server") else first


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

    def _query(
        self, doing: str, query: str, params: tuple[object, ...] = ()
    ) -> list[tuple[object, ...]]:
        """Run ``query``; a failure becomes a walcast error saying what was being done.

        A missing privilege is an :class:`~capture.errors.AccessDeniedError` naming the role
        and the privilege; a broken connection a ConnectionLostError; anything else a
        SetupError with the server's message.
        """
        try:
            return self.conn.execute(query, params).fetchall()
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
        except psycopg.OperationalError as exc:
            raise connection_error(exc, self.dsn) from None
        except psycopg.Error as exc:
            raise SetupError(f"cannot {doing}: {_first_line(exc, self.dsn)}") from None

    def server(self) -> ServerInfo:
        """Version, wal_level and database; raises unless wal_level is logical.

        Text reaches walcast in UTF-8 whatever the database encoding (the walsender converts
        it, see :data:`capture.dsn.SESSION_OPTIONS`). SQL_ASCII declares no encoding: the
        server then only checks that each text is valid UTF-8, and ends the stream with
        ``invalid byte sequence for encoding "UTF8"`` at the first one that is not, which
        walcast reports as a terminal error; a warning says so at start.
        """
        (row,) = self._query(
            "read the server settings",
            "SELECT current_setting('server_version_num'), current_setting('wal_level'), "
            "current_database(), current_setting('server_encoding')",
        )
        version, wal_level, database, encoding = (_text(v) for v in row)
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
        return ServerInfo(int(version), wal_level, database)

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
        rows = self._query(
            f"read replication slot {name!r}",
            "SELECT slot_name, plugin, slot_type, database, active_pid, "
            "confirmed_flush_lsn::text, two_phase FROM pg_replication_slots WHERE slot_name = %s",
            (name,),
        )
        if not rows:
            return None
        row = rows[0]
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
            self._query(
                f"create replication slot {name!r}",
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
        if self._query(
            f"read publication {name!r}", "SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)
        ):
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

    def publication_tables_without_full_identity(self, publication: str) -> list[str]:
        """Published tables whose REPLICA IDENTITY is not FULL (no complete before image)."""
        return tables_without_full_identity(self.conn, publication)


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

"""What ``walcast run`` checks before it writes any state or creates a slot (issue 38.4).

A start that fails must leave nothing behind: no slot, no publication, no new generation
or pending load in ``walcast.snapshots``. The replication source checks each thing as it
sets it up (:class:`~capture.source.ReplicationSource`), but by then the daemon has already
recorded a new slot generation (:meth:`~capture.state.progress.KafkaProgress.
start_generation`), so :func:`check_source` runs every check that can fail first, on one
ordinary connection, and writes nothing:

* ``wal_level`` is ``logical`` (:meth:`~capture.replication.setup.Preflight.server`);
* the role may replicate: a superuser, the ``REPLICATION`` attribute, or membership of
  Amazon RDS's ``rds_replication`` role (the check a walsender makes, in the words of the
  errors the server would give);
* every publication exists, or ``--create-publication`` may create it: its tables exist
  and have a replica identity, the role owns them and may create in the database
  (``FOR TABLE``) or is a superuser (``FOR ALL TABLES``);
* the slot: an existing one is a pgoutput slot of this database, not invalidated; a
  missing one is asked for with ``--create-slot`` and ``max_replication_slots`` leaves room
  for it; ``--proto-version`` and ``source.failover_slot`` suit the server;
* with ``--binary``, every published column has a type binary mode can render;
* when the session will load the tables, the role may read each published table (its
  schema's ``USAGE`` and ``SELECT``).

A slot held by another process is not refused here: the session itself tells this
walcast's own walsender of a cut connection from a stranger (:mod:`capture.daemon.
walsenders`). The Kafka cluster is checked next, by the session's wait for a broker, still
before any write. Decisions: the checks run at the start of every session (a reconnect may
meet a server changed meanwhile), and what they refuse gets the same line the set-up would
have given, so a user meets one wording whichever step found it.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from capture import dsn as dsn_util
from capture.errors import AccessDeniedError, SetupError, SlotInUseError
from capture.replication.binary_check import check_binary_columns
from capture.replication.connect import connection_error
from capture.replication.setup import Preflight, ServerInfo, resolve_failover, slots_exhausted
from capture.source import SourceConfig

REPLICATION_ROLES: Final = ("rds_replication",)
"""Roles whose members may replicate without the REPLICATION attribute (Amazon RDS)."""


def check_source(config: SourceConfig, *, loading: bool = False) -> None:
    """Raise the error the set-up would raise, before anything is written (module docstring).

    ``loading``: this session will load the published tables, so the role must be able to
    read each of them.
    """
    config.validate()
    with Preflight(config.dsn) as preflight:
        server = preflight.server()  # wal_level
        if config.proto_version is not None:
            preflight.check_proto_version(server, config.proto_version)
        resolve_failover(config.failover_slot, server)
        slot = preflight.slot(config.slot)
        conn = preflight.conn
        try:
            _check_role(conn, config.slot, creating=slot is None)
            for publication in config.publications:
                _check_publication(preflight, publication, config)
            if slot is None:
                if not config.create_slot:
                    preflight.ensure_slot(config.slot, server, create=False)  # raises: missing
                _check_room(conn, config.slot)
            else:
                _check_slot(preflight, config, server)
            published = _publications_exist(conn, config.publications)
            if config.binary and published:
                check_binary_columns(conn, config.publications)
            if loading and published:
                _check_readable(conn, config.publications)
        except psycopg.OperationalError as exc:
            raise connection_error(exc, config.dsn) from None
        except psycopg.Error as exc:
            text = dsn_util.scrub(str(exc).strip().splitlines()[0], config.dsn)
            raise SetupError(
                f"cannot check the source before the start: {text}",
                hint="check the role's rights on the database (it reads pg_catalog)",
            ) from None


def _check_role(conn: psycopg.Connection[Any], slot: str, *, creating: bool) -> None:
    """The role is a superuser, has REPLICATION, or is a member of a replication role."""
    row = conn.execute(
        "SELECT current_user, rolsuper OR rolreplication OR EXISTS ("
        " SELECT 1 FROM pg_roles r WHERE r.rolname = ANY(%s)"
        " AND pg_has_role(current_user, r.oid, 'MEMBER'))"
        " FROM pg_roles WHERE rolname = current_user",
        (list(REPLICATION_ROLES),),
    ).fetchone()
    if row is None or row[1]:
        return
    user = row[0]
    doing = (
        f"create replication slot {slot!r}: must be superuser or replication role to use "
        "replication slots"
        if creating
        else "open a replication connection (it lacks the REPLICATION attribute)"
    )
    raise AccessDeniedError(
        f"role {user!r} may not {doing}",
        hint=f"ALTER ROLE {user} WITH REPLICATION",
    )


def _check_publication(preflight: Preflight, name: str, config: SourceConfig) -> None:
    """The publication exists, or ``--create-publication`` may create it (nothing written)."""
    conn = preflight.conn
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone():
        return
    if not config.create_publication:
        preflight.ensure_publication(name, create=False, tables=None)  # raises: missing
    tables = config.publish_tables or None
    # The same check, and the same line, as the creation itself.
    preflight._check_publishable(name, tables)  # noqa: SLF001 - setup's own check, read-only
    row = conn.execute(
        "SELECT current_user, rolsuper, has_database_privilege(current_database(), 'CREATE') "
        "FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    assert row is not None
    user, superuser, may_create = row
    hint = (
        "FOR ALL TABLES needs a superuser, FOR TABLE the tables' owner; list tables with "
        "--publish-tables, or create the publication as such a role"
    )
    if superuser:
        return
    if tables is None:
        raise AccessDeniedError(
            f"cannot create publication {name!r} as role {user!r}: must be superuser to "
            "create FOR ALL TABLES publication",
            hint=hint,
        )
    if not may_create:
        raise AccessDeniedError(
            f"cannot create publication {name!r} as role {user!r}: permission denied for "
            "database (CREATE)",
            hint=f"GRANT CREATE ON DATABASE {conn.info.dbname} TO {user}; or " + hint,
        )
    foreign = [
        str(r[0])
        for r in conn.execute(
            "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE format('%%s.%%s', n.nspname, c.relname) = ANY(%s) "
            "AND NOT pg_has_role(current_user, c.relowner, 'USAGE') ORDER BY 1",
            ([t if "." in t else f"public.{t}" for t in tables],),
        ).fetchall()
    ]
    if foreign:
        raise AccessDeniedError(
            f"cannot create publication {name!r} as role {user!r}: must be owner of table "
            f"{foreign[0]}" + (f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""),
            hint=hint,
        )


def _check_readable(conn: psycopg.Connection[Any], publications: list[str]) -> None:
    """The role may read every published table (a load's SELECT).

    Otherwise one line names the first table it may not read, and the GRANT.
    """
    rows = conn.execute(
        "SELECT DISTINCT format('%%I.%%I', schemaname, tablename) AS name, current_user "
        "FROM pg_publication_tables WHERE pubname = ANY(%s) "
        "AND NOT (has_schema_privilege(schemaname, 'USAGE') "
        "AND has_any_column_privilege(format('%%I.%%I', schemaname, tablename), 'SELECT')) "
        "ORDER BY 1",
        (publications,),
    ).fetchall()
    if not rows:
        return
    table, user = str(rows[0][0]), str(rows[0][1])
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    raise AccessDeniedError(
        f"role {user!r} may not read table {table}{more}, which the load of the published "
        "tables reads",
        hint=f"GRANT USAGE ON SCHEMA {table.rpartition('.')[0]} TO {user}; GRANT SELECT ON "
        f"{table} TO {user}; or leave the table out of the publication, or --snapshot never",
    )


def _check_room(conn: psycopg.Connection[Any], slot: str) -> None:
    """``max_replication_slots`` leaves room for the slot ``--create-slot`` would create."""
    row = conn.execute(
        "SELECT count(*), current_setting('max_replication_slots')::int FROM pg_replication_slots"
    ).fetchone()
    assert row is not None
    used, limit = int(str(row[0])), int(str(row[1]))
    if used < limit:
        return
    raise slots_exhausted(f"create replication slot {slot!r}", limit)


def _check_slot(preflight: Preflight, config: SourceConfig, server: ServerInfo) -> None:
    """An existing slot is one walcast can stream from (a slot in use is the session's)."""
    try:
        preflight.ensure_slot(config.slot, server, create=False)
    except SlotInUseError:
        return


def _publications_exist(conn: psycopg.Connection[Any], names: list[str]) -> bool:
    row = conn.execute(
        "SELECT count(*) = cardinality(%s::text[]) FROM pg_publication WHERE pubname = ANY(%s)",
        (names, names),
    ).fetchone()
    return bool(row and row[0])

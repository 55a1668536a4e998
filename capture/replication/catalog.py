"""Catalog queries every front door uses, as plain functions of an open connection.

One module holds what walcast asks the catalog (``tail``, ``run``, ``status`` and the load
use the same functions, so they cannot drift apart): primary keys, the tables of
publications with their replica identity, the state of replication slots and the WAL they
retain. Every function takes an ordinary (non-replication) psycopg connection and quotes
identifiers with :mod:`psycopg.sql` or passes names as parameters; none commits or changes
anything.

LSNs come back as integers (``pg_lsn - '0/0'``); sizes in bytes; lag times in seconds.
Columns a server version does not have (``wal_status`` and ``safe_wal_size`` before 13,
``two_phase`` before 14, ``reply_time`` before 12) come back as None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

_IDENTITY = {"d": "default", "f": "full", "i": "index", "n": "nothing"}


@dataclass(frozen=True, slots=True)
class PublishedTable:
    """A table of a publication, as the catalog describes it."""

    relation_id: int
    schema: str
    name: str
    replica_identity: str
    """``default``, ``full``, ``index`` or ``nothing``."""
    primary_key: tuple[str, ...]
    """Primary-key columns in key order; empty when the table has none."""

    @property
    def qualified_name(self) -> str:
        """``schema.table`` (unquoted)."""
        return f"{self.schema}.{self.name}"


def primary_key(conn: psycopg.Connection[Any], relation_id: int) -> tuple[str, ...] | None:
    """The primary-key columns of the relation with OID ``relation_id``, in key order."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
        (relation_id,),
    ).fetchall()
    return tuple(str(r[0]) for r in rows) or None


def publication_tables(
    conn: psycopg.Connection[Any], publications: Sequence[str]
) -> list[PublishedTable]:
    """The tables of ``publications`` (each once), with replica identity and primary key."""
    rows = conn.execute(
        "SELECT DISTINCT c.oid::int8, n.nspname, c.relname, c.relreplident, "
        "  coalesce((SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i "
        "    JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true "
        "    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "    WHERE i.indrelid = c.oid AND i.indisprimary), '{}') "
        "FROM pg_publication_tables p "
        "JOIN pg_namespace n ON n.nspname = p.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
        "WHERE p.pubname = ANY(%s) ORDER BY 2, 3",
        (list(publications),),
    ).fetchall()
    return [
        PublishedTable(
            int(oid), str(schema), str(name), _IDENTITY.get(str(ident), str(ident)), tuple(pk)
        )
        for oid, schema, name, ident, pk in rows
    ]


def wal_retained(conn: psycopg.Connection[Any], slot: str) -> int | None:
    """Bytes of WAL the server keeps for ``slot`` (current WAL LSN minus its restart LSN)."""
    row = conn.execute(
        "SELECT (pg_current_wal_lsn() - restart_lsn)::int8 FROM pg_replication_slots "
        "WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


@dataclass(frozen=True, slots=True)
class TableLayout:
    """A published table as pgoutput describes it, plus what a load needs to read it.

    ``columns`` are ``(name, type OID, type modifier, is_key)`` in attnum order, exactly the
    columns a Relation message carries: no dropped or generated columns, and only those of
    the publications' column lists (PostgreSQL 15+). ``is_key`` marks replica-identity
    columns (all of them under REPLICA IDENTITY FULL), as pgoutput flags them.
    """

    relation_id: int
    schema: str
    name: str
    replica_identity: str
    """``d``, ``f``, ``i`` or ``n`` (``pg_class.relreplident``)."""
    columns: tuple[tuple[str, int, int, bool], ...]
    chunk_key: tuple[str, ...]
    """Columns of a unique, non-null key to read the table in ranges by (the primary key,
    else the replica-identity index, else another unique index on NOT NULL columns);
    empty for a table without one, which is read in one piece."""
    chunk_key_types: tuple[str, ...]
    """``format_type`` of each chunk-key column (for casts of range bounds)."""
    estimated_rows: int
    """``pg_class.reltuples`` (0 when never analysed)."""

    @property
    def qualified_name(self) -> str:
        """``schema.table`` (unquoted)."""
        return f"{self.schema}.{self.name}"


def resolve_table(conn: psycopg.Connection[Any], qualified_name: str) -> int | None:
    """The OID of table ``schema.table`` (unquoted names), or None if it does not exist."""
    schema, _, name = qualified_name.partition(".")
    if not name:
        schema, name = "public", schema
    row = conn.execute(
        "SELECT c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, name),
    ).fetchone()
    return int(row[0]) if row else None


def table_layout(
    conn: psycopg.Connection[Any], relation_id: int, publications: Sequence[str]
) -> TableLayout | None:
    """The layout of table ``relation_id`` as ``publications`` publish it, or None if gone."""
    row = conn.execute(
        "SELECT n.nspname, c.relname, c.relreplident, greatest(c.reltuples, 0)::int8 "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
        (relation_id,),
    ).fetchone()
    if row is None:
        return None
    schema, name, identity, estimate = str(row[0]), str(row[1]), str(row[2]), int(row[3])
    published = _published_columns(conn, schema, name, publications)
    attributes = conn.execute(
        "SELECT a.attname, a.atttypid::int8, a.atttypmod, format_type(a.atttypid, a.atttypmod), "
        "a.attnotnull FROM pg_attribute a "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' "
        "ORDER BY a.attnum",
        (relation_id,),
    ).fetchall()
    identity_columns = set(_index_columns(conn, relation_id, "indisreplident"))
    primary = _index_columns(conn, relation_id, "indisprimary")
    if identity == "d":
        identity_columns = set(primary)
    columns = tuple(
        (str(a), int(t), int(m), identity == "f" or str(a) in identity_columns)
        for a, t, m, _, _ in attributes
        if published is None or str(a) in published
    )
    types = {str(a): str(ft) for a, _, _, ft, _ in attributes}
    not_null = {str(a) for a, _, _, _, nn in attributes if nn}
    key = primary or _index_columns(conn, relation_id, "indisreplident")
    if not key:
        key = _unique_not_null_key(conn, relation_id, not_null)
    return TableLayout(
        relation_id, schema, name, identity, columns, key, tuple(types[k] for k in key), estimate
    )


def _published_columns(
    conn: psycopg.Connection[Any], schema: str, name: str, publications: Sequence[str]
) -> set[str] | None:
    """Columns the publications' column lists publish, or None for every column."""
    if conn.info.server_version < 150000:
        return None
    rows = conn.execute(
        "SELECT attnames FROM pg_publication_tables "
        "WHERE pubname = ANY(%s) AND schemaname = %s AND tablename = %s",
        (list(publications), schema, name),
    ).fetchall()
    if not rows:
        return None
    return {str(a) for (names,) in rows for a in (names or ())}


def _index_columns(conn: psycopg.Connection[Any], relation_id: int, flag: str) -> tuple[str, ...]:
    """Columns of the index of ``relation_id`` with boolean ``pg_index`` column ``flag``."""
    assert flag in ("indisprimary", "indisreplident")
    query = sql.SQL(
        "SELECT a.attname FROM pg_index i "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.{} ORDER BY k.n"
    ).format(sql.Identifier(flag))
    rows = conn.execute(query, (relation_id,)).fetchall()
    return tuple(str(r[0]) for r in rows)


def _unique_not_null_key(
    conn: psycopg.Connection[Any], relation_id: int, not_null: set[str]
) -> tuple[str, ...]:
    """The narrowest valid unique index on NOT NULL plain columns, or ()."""
    rows = conn.execute(
        "SELECT i.indexrelid, array_agg(a.attname ORDER BY k.n) FROM pg_index i "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid AND i.indexprs IS NULL "
        "AND i.indpred IS NULL GROUP BY i.indexrelid ORDER BY count(*), i.indexrelid",
        (relation_id,),
    ).fetchall()
    for _, names in rows:
        if all(str(n) in not_null for n in names):
            return tuple(str(n) for n in names)
    return ()


def type_names(
    conn: psycopg.Connection[Any], type_oids: Sequence[int]
) -> list[tuple[int, str, str]]:
    """``(oid, namespace, name)`` of non-built-in types, as pgoutput's Type messages name them.

    A domain is named after its base type.
    """
    rows = conn.execute(
        "WITH RECURSIVE base(oid, cur) AS ("
        "  SELECT oid, oid FROM pg_type WHERE oid = ANY(%s) AND oid >= 10000"
        "  UNION ALL SELECT b.oid, t.typbasetype FROM base b JOIN pg_type t ON t.oid = b.cur"
        "  WHERE t.typtype = 'd') "
        "SELECT b.oid::int8, n.nspname, t.typname FROM base b "
        "JOIN pg_type t ON t.oid = b.cur JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE t.typtype <> 'd'",
        ([int(o) for o in type_oids],),
    ).fetchall()
    return [(int(o), str(ns), str(name)) for o, ns, name in rows]


# -- publications ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publication:
    """A publication of the connected database."""

    name: str
    all_tables: bool
    operations: tuple[str, ...]
    """What it publishes, of ``insert``, ``update``, ``delete``, ``truncate``."""


def publications(conn: psycopg.Connection[Any], names: Sequence[str] = ()) -> list[Publication]:
    """The publications called ``names`` (every publication of the database when empty).

    Names that do not exist are simply absent from the result.
    """
    truncate = "p.pubtruncate" if conn.info.server_version >= 110000 else "false"
    query = sql.SQL(
        "SELECT p.pubname, p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, {} "
        "FROM pg_publication p WHERE cardinality(%s::text[]) = 0 OR p.pubname = ANY(%s) "
        "ORDER BY 1"
    ).format(sql.SQL(truncate))
    rows = conn.execute(query, (list(names), list(names))).fetchall()
    ops = ("insert", "update", "delete", "truncate")
    return [
        Publication(
            str(r[0]), bool(r[1]), tuple(op for op, on in zip(ops, r[2:], strict=True) if on)
        )
        for r in rows
    ]


# -- replication slots -----------------------------------------------------------------------


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


def _lsn(column: str) -> sql.Composable:
    return sql.SQL("({} - '0/0'::pg_lsn)::int8").format(sql.SQL(column))


def slot_status(conn: psycopg.Connection[Any], slot: str | None = None) -> list[SlotStatus]:
    """The status of slot ``slot``, or of every logical slot of the connected database.

    Empty when ``slot`` does not exist.
    """
    version = conn.info.server_version
    null = sql.SQL("NULL")
    query = sql.SQL(
        "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
        "  ELSE pg_current_wal_lsn() END AS lsn) "
        "SELECT s.slot_name, s.slot_type, s.plugin, s.database, s.temporary, s.active_pid, "
        "{confirmed}, {restart}, (here.lsn - '0/0'::pg_lsn)::int8, {wal_status}, "
        "{safe}, {two_phase}, extract(epoch FROM r.write_lag)::float8, "
        "extract(epoch FROM r.flush_lag)::float8, extract(epoch FROM r.replay_lag)::float8, "
        "{reply_time} "
        "FROM pg_replication_slots s CROSS JOIN here "
        "LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid "
        "WHERE CASE WHEN %(slot)s::text IS NULL "
        "  THEN s.slot_type = 'logical' AND s.database = current_database() "
        "  ELSE s.slot_name = %(slot)s END "
        "ORDER BY s.slot_name"
    ).format(
        confirmed=_lsn("s.confirmed_flush_lsn"),
        restart=_lsn("s.restart_lsn"),
        wal_status=sql.SQL("s.wal_status") if version >= 130000 else null,
        safe=sql.SQL("s.safe_wal_size") if version >= 130000 else null,
        two_phase=sql.SQL("s.two_phase") if version >= 140000 else null,
        reply_time=sql.SQL("r.reply_time") if version >= 120000 else null,
    )
    rows = conn.execute(query, {"slot": slot}).fetchall()
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
            current_lsn=int(r[8]),
            wal_status=_text(r[9]),
            safe_wal_size=_int(r[10]),
            two_phase=None if r[11] is None else bool(r[11]),
            write_lag=_float(r[12]),
            flush_lag=_float(r[13]),
            replay_lag=_float(r[14]),
            reply_time=r[15] if isinstance(r[15], datetime) else None,
        )
        for r in rows
    ]


def slot_names(conn: psycopg.Connection[Any]) -> list[str]:
    """Every replication slot of the server, by name."""
    rows = conn.execute("SELECT slot_name FROM pg_replication_slots ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


def max_slot_wal_keep_size(conn: psycopg.Connection[Any]) -> int | None:
    """``max_slot_wal_keep_size`` in bytes; None when unlimited (-1) or before PostgreSQL 13."""
    row = conn.execute(
        "SELECT setting::int8, unit FROM pg_settings WHERE name = 'max_slot_wal_keep_size'"
    ).fetchone()
    if row is None or int(row[0]) < 0:
        return None
    units = {"B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3}
    return int(row[0]) * units.get(str(row[1] or "B"), 1)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _float(value: object) -> float | None:
    return None if value is None else float(str(value))

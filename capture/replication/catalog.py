"""Catalog queries every front door uses, as plain functions of an open connection.

One module holds what walcast asks the catalog (``tail``, ``run``, ``status`` and the load
use the same functions, so they cannot drift apart): primary keys, the tables of
publications with their replica identity, table layouts and type names. Slots are asked
about in :mod:`capture.replication.slots` only. Every function takes an ordinary
(non-replication) psycopg connection and quotes identifiers with :mod:`psycopg.sql` or
passes names as parameters; none commits or changes anything.

LSNs come back as integers (``pg_lsn - '0/0'``); sizes in bytes; lag times in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

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


@dataclass(frozen=True, slots=True)
class CatalogColumn:
    """What the catalog says now of one column of a table (:func:`catalog_columns`)."""

    number: int
    """``attnum``: stays with the column through a RENAME COLUMN and is never reused, so it
    tells a renamed column from a dropped one and a new one (new columns get numbers above
    every existing and dropped one)."""
    type_oid: int
    has_default: bool
    """The column has a DEFAULT of its own (``atthasdef``), is an identity column (whose ADD
    numbered every row), or its type is a domain with a DEFAULT: a column without any of
    these read NULL in the rows stored before it was added, unless a DEFAULT dropped since
    gave them values (which no catalog says: the README's limit)."""
    missing: str | None
    """The value (text) rows stored before the column was added read as: PostgreSQL 11+
    adds a column with a non-volatile DEFAULT without rewriting the table, and stores the
    value once, ``pg_attribute.attmissingval`` (a one-element array of the column's type;
    its element's text is the column's output function's). None when there is none: a
    column without a DEFAULT, one added with a volatile DEFAULT (the table was rewritten
    with a value per row), a table rewritten since (``VACUUM FULL``, ``CLUSTER``,
    ``ALTER … TYPE``), or a DEFAULT set after the ADD."""
    dropped: bool = False
    """A dropped column (``attisdropped``): PostgreSQL keeps its number, under a name no
    column can have (``........pg.dropped.N........``) and no type (``type_oid`` 0)."""


def catalog_columns(conn: psycopg.Connection[Any], relation_id: int) -> dict[str, CatalogColumn]:
    """Column name → :class:`CatalogColumn`, for the table's columns of now.

    The dropped ones too (under PostgreSQL's name for them, ``dropped`` set: their numbers
    say what a number between two columns can be); no generated column (pgoutput sends none
    before PostgreSQL 18, and there only when asked).
    """
    rows = conn.execute(
        "SELECT a.attname, a.attnum, a.atttypid::int8, "
        "NOT a.attisdropped "
        "AND (a.atthasdef OR a.attidentity <> '' OR t.typdefault IS NOT NULL), "
        "CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END, "
        "a.attisdropped "
        "FROM pg_attribute a LEFT JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND a.attgenerated = ''",
        (relation_id,),
    ).fetchall()
    return {
        str(name): CatalogColumn(
            int(number), int(type_oid), bool(default), None if missing is None else str(missing),
            dropped=bool(dropped),
        )
        for name, number, type_oid, default, missing, dropped in rows
    }  # fmt: skip


_TABLE_COLUMNS: Final = (
    "c.oid::int8, n.nspname, c.relname, "
    "  CASE WHEN c.relreplident = 'i' AND NOT EXISTS (SELECT 1 FROM pg_index ri "
    "    WHERE ri.indrelid = c.oid AND ri.indisreplident) THEN 'n' ELSE c.relreplident END, "
    "  coalesce((SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i "
    "    JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true "
    "    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
    "    WHERE i.indrelid = c.oid AND i.indisprimary), '{}') "
)
"""A table's OID, schema, name, replica identity (``i`` whose index is gone counts as ``n``,
as PostgreSQL then treats it) and primary key, from ``pg_class c`` and ``pg_namespace n``."""


def _published(rows: Sequence[tuple[object, ...]]) -> list[PublishedTable]:
    return [
        PublishedTable(
            int(str(oid)),
            str(schema),
            str(name),
            _IDENTITY.get(str(ident), str(ident)),
            tuple(str(c) for c in pk) if isinstance(pk, list) else (),
        )
        for oid, schema, name, ident, pk in rows
    ]


def publication_tables(
    conn: psycopg.Connection[Any], publications: Sequence[str]
) -> list[PublishedTable]:
    """The tables of ``publications`` (each once), with replica identity and primary key."""
    rows = conn.execute(
        "SELECT DISTINCT " + _TABLE_COLUMNS + "FROM pg_publication_tables p "
        "JOIN pg_namespace n ON n.nspname = p.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
        "WHERE p.pubname = ANY(%s) ORDER BY 2, 3",
        (list(publications),),
    ).fetchall()
    return _published(rows)


def tables_to_publish(
    conn: psycopg.Connection[Any], names: Sequence[str] | None
) -> tuple[list[PublishedTable], list[str]]:
    """The tables a new publication would hold, and the ``names`` that are no table.

    ``names``: ``schema.table`` (unquoted; ``public`` when no schema is given), or None for
    ``FOR ALL TABLES`` (every ordinary and partitioned table outside the system schemas;
    partitions count through their parent).
    """
    if names is None:
        rows = conn.execute(
            "SELECT " + _TABLE_COLUMNS + "FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg\\_%%' ORDER BY 2, 3"
        ).fetchall()
        return _published(rows), []
    pairs = [tuple(n.split(".", 1)) if "." in n else ("public", n) for n in names]
    rows = conn.execute(
        "SELECT " + _TABLE_COLUMNS + "FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN unnest(%s::text[], %s::text[]) AS w(s, t) ON w.s = n.nspname AND w.t = c.relname "
        "WHERE c.relkind IN ('r', 'p') ORDER BY 2, 3",
        ([s for s, _ in pairs], [t for _, t in pairs]),
    ).fetchall()
    found = _published(rows)
    known = {(t.schema, t.name) for t in found}
    return found, [n for n, p in zip(names, pairs, strict=True) if p not in known]


def refused_changes(table: PublishedTable, operations: Sequence[str]) -> str | None:
    """Why PostgreSQL refuses the application's changes of ``table`` once it is published.

    A table published for UPDATE or DELETE needs a replica identity: a primary key (or the
    index of REPLICA IDENTITY USING INDEX) or REPLICA IDENTITY FULL. Without one, the
    server refuses those statements (``cannot update table … because it does not have a
    replica identity and publishes updates``). None when nothing is refused.
    """
    refused = [op.upper() for op in ("update", "delete") if op in operations]
    if not refused:
        return None
    what = " and ".join(refused)
    if table.replica_identity == "nothing":
        return f"{what} refused: REPLICA IDENTITY NOTHING (set DEFAULT with a key, or FULL)"
    if table.replica_identity == "default" and not table.primary_key:
        return f"{what} refused: no primary key (add one, or REPLICA IDENTITY FULL)"
    return None


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
    """Columns of the key to read the table in ranges by: the key its changes carry (the
    primary key under REPLICA IDENTITY DEFAULT or FULL, the identity index under USING
    INDEX). Empty for a table without one, which is read in one piece: its consumers keep
    it as a multiset and start it over at a load's first row, so the load must be whole
    (a unique NOT NULL index that the changes do not name as a key does not count)."""
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
    # The chunk key is the key the stream's consumers fold the table by
    # (capture.events.Table.primary_key): the primary key under DEFAULT or FULL, the
    # identity index under USING INDEX. A table without one is kept as a multiset by its
    # consumers, who start it over at the first row of a load: it must be one chunk.
    if identity in ("d", "f"):
        key = primary
    elif identity == "i":
        key = tuple(c for c in _index_columns(conn, relation_id, "indisreplident"))
    else:
        key = ()
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


def refused_writes(
    conn: psycopg.Connection[Any], names: Sequence[str]
) -> list[tuple[str, str, str]]:
    """``(schema.table, publication, why)`` of each table whose changes PostgreSQL refuses.

    See :func:`refused_changes`; only the operations each publication publishes count.
    """
    found = []
    for publication in publications(conn, names):
        for table in publication_tables(conn, [publication.name]):
            note = refused_changes(table, publication.operations)
            if note is not None:
                found.append((table.qualified_name, publication.name, note))
    return found


# -- settings ------------------------------------------------------------------------------


def setting(conn: psycopg.Connection[Any], name: str) -> str | None:
    """A server setting's value (``current_setting``), or None where the server has none."""
    row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def max_slot_wal_keep_size(conn: psycopg.Connection[Any]) -> int | None:
    """``max_slot_wal_keep_size`` in bytes; None when unlimited (-1) or before PostgreSQL 13."""
    row = conn.execute(
        "SELECT setting::int8, unit FROM pg_settings WHERE name = 'max_slot_wal_keep_size'"
    ).fetchone()
    if row is None or int(row[0]) < 0:
        return None
    units = {"B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3}
    return int(row[0]) * units.get(str(row[1] or "B"), 1)

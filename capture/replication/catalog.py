"""Catalog queries every front door uses, as plain functions of an open connection.

One module holds what walcast asks the catalog (``tail``, ``run``, ``status`` and the load
use the same functions, so they cannot drift apart): primary keys, the tables of
publications with their replica identity, and the WAL a slot retains. Every function takes
an ordinary (non-replication) psycopg connection and quotes identifiers with
:mod:`psycopg.sql` or passes them as parameters; none commits or changes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

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

"""Chunks of a table: key ranges, and the SQL that plans and reads them.

A table with a key (:attr:`~capture.replication.catalog.TableLayout.chunk_key`: the key its
changes carry, unique and NOT NULL) is read in key ranges ``(lower, upper]`` of about
``chunk_rows`` rows. Range bounds are the key's values as text, cast back to the key's types
in SQL, and compared by PostgreSQL itself as row values (``(a, b) > (…)``), so the order is
the index's order, collation included; Python never compares keys. The upper bound of a
chunk is found with one index-ordered ``OFFSET chunk_rows - 1`` query from its lower bound,
just before the chunk is read, so planning costs one short index scan per chunk and no list
of boundaries is kept.

A table without such a key is one chunk: the whole table, in one read (its consumers keep it
as a multiset and start it over at the load's first row).

Every identifier and literal reaches SQL through :mod:`psycopg.sql`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql

from capture.replication.catalog import TableLayout

Bound = tuple[str, ...]
"""A key's values as PostgreSQL text, one per chunk-key column."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One range of one table to read: ``lower < key <= upper`` (None: unbounded)."""

    table: TableLayout
    number: int
    """1-based position of the chunk in its table's key order."""
    lower: Bound | None
    upper: Bound | None
    request: str
    """The load request it belongs to (the initial load, or a ``walcast snapshot`` id)."""

    @property
    def last(self) -> bool:
        """The chunk reaches the end of the table."""
        return self.upper is None


def _key(table: TableLayout) -> sql.Composable:
    return sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(k) for k in table.chunk_key))


def _bound(table: TableLayout, values: Bound) -> sql.Composable:
    return sql.SQL("({})").format(
        sql.SQL(", ").join(
            sql.SQL("CAST({} AS {})").format(sql.Literal(v), sql.SQL(t))
            for v, t in zip(values, table.chunk_key_types, strict=True)
        )
    )


def _where(table: TableLayout, lower: Bound | None, upper: Bound | None) -> sql.Composable:
    terms: list[sql.Composable] = []
    if lower is not None:
        terms.append(sql.SQL("{} > {}").format(_key(table), _bound(table, lower)))
    if upper is not None:
        terms.append(sql.SQL("{} <= {}").format(_key(table), _bound(table, upper)))
    if not terms:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(terms)


def _relation(table: TableLayout) -> sql.Composable:
    return sql.Identifier(table.schema, table.name)


def next_upper(
    conn: psycopg.Connection[Any], table: TableLayout, lower: Bound | None, chunk_rows: int
) -> Bound | None:
    """The upper bound of the chunk after ``lower``, or None when the rest fits in one chunk.

    The texts are selected under aliases of their own: ``ORDER BY id`` would otherwise name
    the output column ``CAST(id AS text)`` and sort by text ("10" before "9"), a sort of
    the rest of the table for every chunk instead of a walk of the key's index.
    """
    texts = sql.SQL(", ").join(
        sql.SQL("CAST({} AS text) AS {}").format(sql.Identifier(k), sql.Identifier(f"_k{i}"))
        for i, k in enumerate(table.chunk_key)
    )
    query = sql.SQL("SELECT {} FROM {}{} ORDER BY {} OFFSET {} LIMIT 1").format(
        texts,
        _relation(table),
        _where(table, lower, None),
        sql.SQL(", ").join(sql.Identifier(k) for k in table.chunk_key),
        sql.Literal(chunk_rows - 1),
    )
    row = conn.execute(query).fetchone()
    if row is None:
        return None
    return tuple(str(v) for v in row)


def copy_query(chunk: Chunk, layout: TableLayout | None = None) -> sql.Composed:
    """``COPY (SELECT <published columns> FROM … WHERE <range>) TO STDOUT``.

    The columns are ``layout``'s (the table's in the read's snapshot; default: the planned
    one), the range is the chunk's key's.
    """
    table = chunk.table
    read = layout if layout is not None else table
    columns = sql.SQL(", ").join(sql.Identifier(c[0]) for c in read.columns)
    select = sql.SQL("SELECT {} FROM {}{}").format(
        columns, _relation(table), _where(table, chunk.lower, chunk.upper)
    )
    return sql.SQL("COPY ({}) TO STDOUT").format(select)


PLANNING_LOCK_TIMEOUT = "100ms"
"""How long planning a chunk waits for the table's lock before it tries at the next poll."""


def upper_unless_locked(
    conn: psycopg.Connection[Any], table: TableLayout, lower: Bound | None, chunk_rows: int
) -> Bound | Locked | None:
    """:func:`next_upper`, or :data:`LOCKED` when the table's lock is not granted at once.

    The coordinator plans chunks between polls of the stream, and a reader holds the
    table's lock until the stream reaches its watermark and the coordinator takes its rows.
    DDL that waits for that lock makes every later lock of the table wait behind it: a
    planning query that waited too would never be answered (the reader waits for the
    coordinator, the DDL for the reader, the coordinator for the DDL). So it waits
    :data:`PLANNING_LOCK_TIMEOUT` at most, and the coordinator goes on with the stream.
    """
    try:
        with conn.transaction():
            conn.execute(
                sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(PLANNING_LOCK_TIMEOUT))
            )
            return next_upper(conn, table, lower, chunk_rows)
    except psycopg.errors.LockNotAvailable:
        return LOCKED


class Locked:
    """The type of :data:`LOCKED`."""


LOCKED: Final = Locked()
"""The table's lock was not granted in time: plan the chunk at a later poll."""


def lock_query(chunk: Chunk) -> sql.Composed:
    """A query that reads nothing and takes the ``ACCESS SHARE`` lock its read would take.

    It references no column, so a role with SELECT on some columns only may run it (as it
    may run the ``COPY`` of those columns); column DDL waits for the lock until the read's
    transaction ends.
    """
    return sql.SQL("SELECT FROM {} WHERE false").format(_relation(chunk.table))


def count_query(chunk: Chunk) -> sql.Composed:
    """The number of rows of ``chunk``, in the same snapshot as its read."""
    return sql.SQL("SELECT count(*) FROM {}{}").format(
        _relation(chunk.table), _where(chunk.table, chunk.lower, chunk.upper)
    )

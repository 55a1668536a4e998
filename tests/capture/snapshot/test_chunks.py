"""Chunk bounds on a real server: key order, not the order of the bounds' text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from capture.replication import catalog
from capture.replication.catalog import TableLayout
from capture.snapshot.chunks import Bound, next_upper

pytestmark = pytest.mark.integration


SCHEMA = f"chunks_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"SET search_path TO {SCHEMA}")
        yield conn
        conn.execute(f"DROP PUBLICATION IF EXISTS {SCHEMA}")
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


def _layout(conn: psycopg.Connection[tuple[object, ...]], table: str) -> TableLayout:
    conn.execute(f"CREATE PUBLICATION {SCHEMA} FOR TABLE {table}")
    relation_id = catalog.resolve_table(conn, f"{SCHEMA}.{table}")
    assert relation_id is not None
    layout = catalog.table_layout(conn, relation_id, [SCHEMA])
    assert layout is not None
    return layout


def _bounds(conn: psycopg.Connection[tuple[object, ...]], table: str, rows: int) -> list[Bound]:
    layout = _layout(conn, table)
    bounds: list[Bound] = []
    lower: Bound | None = None
    while (lower := next_upper(conn, layout, lower, rows)) is not None:
        bounds.append(lower)
    return bounds


def test_bigint_keys_are_cut_in_numeric_order(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, v text)")
    conn.execute("INSERT INTO t SELECT g, 'v' FROM generate_series(1, 25) g")
    # text order would put 10..19 before 2 and give ('13',), ('18',), ...
    assert _bounds(conn, "t", 5) == [("5",), ("10",), ("15",), ("20",), ("25",)]


def test_composite_keys_are_cut_in_key_order(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    conn.execute("CREATE TABLE c (a int, b text, PRIMARY KEY (a, b))")
    conn.execute("INSERT INTO c SELECT g / 3, 'b' || (g % 3) FROM generate_series(1, 12) g")
    assert _bounds(conn, "c", 4) == [("1", "b1"), ("2", "b2"), ("4", "b0")]

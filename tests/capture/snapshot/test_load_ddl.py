"""Column DDL while a table is loaded, at each point of a chunk's window.

A load reads a table in chunks of 10 rows (ids 2, 4, … 60: three chunks) through the
loading source over a real slot (:func:`tests.capture.snapshot.test_load_window.load`). At
one point of the first read of chunk 2, a hook commits, from another connection, a column
DDL and then an update of a row in each chunk:

* ``add``: ``ADD COLUMN c text DEFAULT 'dflt'``, then ``c`` set on ids 4, 24 and 44;
* ``drop``: ``DROP COLUMN w``, then ``v`` changed on those ids;
* ``rename``: ``RENAME COLUMN v TO v2``, then ``v2`` changed on those ids.

The points are the window's (:mod:`capture.snapshot.reader`): before the chunk's watermark,
between the watermark and the read's snapshot, and after the snapshot (before the
``COPY``: a DROP or RENAME there makes the read name a column gone, and the chunk is read
again in a snapshot that sees it).

What a consumer folds from the yielded changes must equal ``SELECT *`` in the end: the
rows in the newest layout's columns, a column a row's image lacks (loaded before the ADD)
given the newest layout's ``missing`` value, a renamed column followed by its number (as
``bench/kit/fold.py`` and ``walcast spark materialize`` do). Before each chunk read its
own layout, a load read every chunk with the columns of its first: a column added during
the load was missing from the later chunks, values and all (the rows then read its
DEFAULT), and a DROP or RENAME stopped the load.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.kit.fold import Change, Tables
from capture.errors import WalcastError
from capture.events import ChangeEvent, Table
from capture.snapshot.chunks import Chunk
from capture.snapshot.reader import LoadHooks, ReadSnapshot
from pipeline.column_numbers import image_renames
from tests.capture.snapshot.test_load_window import Published, load, unpublish

pytestmark = pytest.mark.integration

TARGET_CHUNK = 2
DDL = {
    "add": [
        "ALTER TABLE {s}.k ADD COLUMN c text DEFAULT 'dflt'",
        "UPDATE {s}.k SET c = 'set' || id WHERE id IN (4, 24, 44)",
    ],
    "drop": [
        "ALTER TABLE {s}.k DROP COLUMN w",
        "UPDATE {s}.k SET v = v || '+d' WHERE id IN (4, 24, 44)",
    ],
    "rename": [
        "ALTER TABLE {s}.k RENAME COLUMN v TO v2",
        "UPDATE {s}.k SET v2 = v2 || '+r' WHERE id IN (4, 24, 44)",
    ],
}
POINTS = ("before_watermark", "after_watermark", "after_snapshot")


class Altering(LoadHooks):
    """Commits ``statements`` at ``point`` of the first read of ``k``'s chunk 2."""

    def __init__(self, dsn: str, statements: list[str], point: str) -> None:
        self.dsn, self.statements, self.point = dsn, statements, point
        self.reads: Counter[tuple[str, int]] = Counter()
        """Reads of each (table, chunk) whose snapshot was taken."""
        self.done = False

    def _at(self, chunk: Chunk, point: str) -> None:
        if self.done or point != self.point or chunk.table.name != "k":
            return
        if chunk.number != TARGET_CHUNK:
            return
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in self.statements:
                conn.execute(statement)
        self.done = True

    def before_watermark(self, chunk: Chunk) -> None:
        self._at(chunk, "before_watermark")

    def after_watermark(self, chunk: Chunk) -> None:
        self._at(chunk, "after_watermark")

    def after_snapshot(self, chunk: Chunk, snapshot: ReadSnapshot) -> ReadSnapshot:
        self._at(chunk, "after_snapshot")
        self.reads[chunk.table.name, chunk.number] += 1
        return snapshot


@pytest.fixture
def published(pg_dsn: str, pg_major: int) -> Iterator[Published]:
    if pg_major < 14:
        pytest.skip("loads need PostgreSQL 14 (the refusal: test_versions.py)")
    tag = uuid.uuid4().hex[:8]
    schema, publication = f"ld_{tag}", f"ld_pub_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.k (id int PRIMARY KEY, v text, w int)")
        conn.execute(
            f"INSERT INTO {schema}.k SELECT 2 * g, 'v' || 2 * g, g FROM generate_series(1, 30) g"
        )
        conn.execute(f"CREATE TABLE {schema}.bag (x int, y text)")
        conn.execute(f"ALTER TABLE {schema}.bag REPLICA IDENTITY FULL")
        conn.execute(f"INSERT INTO {schema}.bag SELECT g, 'b' || g FROM generate_series(1, 5) g")
        conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {schema}.k, {schema}.bag")
    published = Published(pg_dsn, schema, publication)
    yield published
    unpublish(published)


def _layout(table: Table) -> tuple[tuple[str, int | None], ...]:
    return tuple((name, table.column_numbers.get(name)) for name in table.column_names)


def folded(items: list[Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """``k`` as a consumer folds the yielded changes: the newest layout's columns and rows."""
    tables = Tables({"k": ("id",), "bag": None})
    layouts: list[tuple[tuple[str, int | None], ...]] = []
    newest: Table | None = None
    for item in items:
        if not isinstance(item, ChangeEvent) or item.table.name != "k":
            if isinstance(item, ChangeEvent):
                tables.apply(Change.from_event(item))
            continue
        if item.table is not newest:  # what the pump announces: the layout, in stream order
            newest = item.table
            layout = _layout(newest)
            if layout in layouts:
                layouts.remove(layout)
            layouts.append(layout)
        tables.apply(Change.from_event(item))
    assert newest is not None
    missing = {c: v for c, v in newest.missing_values.items() if v is not None}
    columns = list(newest.column_names)
    rows = tables.rows("k", columns, missing, image_renames(layouts))
    return columns, sorted(rows)


def selected(published: Published) -> tuple[list[str], list[tuple[Any, ...]]]:
    with psycopg.connect(published.dsn, autocommit=True) as conn:
        cursor = conn.execute(f"SELECT * FROM {published.schema}.k")
        columns = [d.name for d in cursor.description or ()]
        texts = ", ".join(f"{c}::text" for c in columns)
        rows = conn.execute(f"SELECT {texts} FROM {published.schema}.k").fetchall()
    return columns, sorted(tuple(r) for r in rows)


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("ddl", sorted(DDL))
def test_column_ddl_during_a_load_gives_the_table_as_it_is(
    published: Published, ddl: str, point: str
) -> None:
    statements = [s.format(s=published.schema) for s in DDL[ddl]]
    hooks = Altering(published.dsn, statements, point)
    items = load(published, hooks)
    assert hooks.done, "the DDL was never placed"
    columns, rows = folded(items)
    expected_columns, expected_rows = selected(published)
    assert columns == expected_columns
    assert rows == expected_rows, "\n".join(
        f"folded {f}\nselect {e}" for f, e in zip(rows, expected_rows, strict=False) if f != e
    )
    changed = {r[0]: r for r in expected_rows if r[0] in {"4", "24", "44"}}
    assert len(changed) == 3
    if ddl == "add":
        assert {r[columns.index("c")] for r in changed.values()} == {"set4", "set24", "set44"}
        assert {r[columns.index("c")] for r in expected_rows} - {"set4", "set24", "set44"} == {
            "dflt"
        }
    # a DROP or RENAME after the snapshot makes the COPY name a column gone: read again
    again = ddl != "add" and point == "after_snapshot"
    assert hooks.reads["k", TARGET_CHUNK] == (2 if again else 1), hooks.reads


def test_a_key_changed_during_a_load_stops_it_with_one_line(published: Published) -> None:
    """The chunks are ranges of the key planned; a renamed key column ends the load with one
    line naming both keys, before any row of the chunk (the slot is not moved past it)."""
    schema = published.schema
    hooks = Altering(
        published.dsn, [f"ALTER TABLE {schema}.k RENAME COLUMN id TO ident"], "before_watermark"
    )
    with pytest.raises(WalcastError) as raised:
        load(published, hooks)
    assert str(raised.value) == (
        f"load of {schema}.k: its key changed during the load (id → ident), and the load's "
        "chunks are ranges of the old one"
    )
    assert "restart walcast" in (raised.value.hint or "")

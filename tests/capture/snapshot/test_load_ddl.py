"""Column DDL while a table is loaded, at each point of a chunk's window.

A load reads a table in chunks of 10 rows (ids 2, 4, … 60: three chunks) through the
loading source over a real slot (:func:`tests.capture.snapshot.test_load_window.load`). At
one point of the first read of chunk 2, a hook commits, from another connection, a column
DDL and then an update of a row in each chunk:

* ``add``: ``ADD COLUMN c text DEFAULT 'dflt'``, then ``c`` set on ids 4, 24 and 44;
* ``drop``: ``DROP COLUMN w``, then ``v`` changed on those ids;
* ``rename``: ``RENAME COLUMN v TO v2``, then ``v2`` changed on those ids;
* ``retype``: ``ALTER COLUMN w TYPE bigint`` (a rewrite of the table), then ``w`` changed;
* ``aborted``: an ``ADD COLUMN`` rolled back, then ``v`` changed.

The points are the window's (:mod:`capture.snapshot.reader`): before the chunk's watermark,
between the watermark and the read's snapshot, and after the snapshot but before the
read's lock. There, the chunk is read again in a snapshot that sees the DDL: without that,
the ``COPY`` would name a column gone (drop, rename), lack the added one, and read an
empty table after the rewrite (rows lost). The rolled-back DDL makes it read again once,
not forever.

What a consumer folds from the yielded changes must equal ``SELECT *`` in the end: the
rows in the newest layout's columns, a column a row's image lacks (loaded before the ADD)
given the newest layout's ``missing`` value, a renamed column followed by its number (as
``bench/kit/fold.py`` and ``walcast spark materialize`` do). Before each chunk read its
own layout, a load read every chunk with the columns of its first: a column added during
the load was missing from the later chunks, values and all (the rows then read its
DEFAULT), and a DROP or RENAME stopped the load.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.kit.fold import Change, Tables
from capture.errors import WalcastError
from capture.events import ChangeEvent, Table
from capture.replication import catalog
from capture.snapshot import reader
from capture.snapshot.chunks import LOCKED, Chunk, upper_unless_locked
from capture.snapshot.reader import LoadHooks, ReadSnapshot
from pipeline.column_numbers import image_renames
from tests.capture.snapshot.test_load_window import Published, load, publish, unpublish

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
    "retype": [
        "ALTER TABLE {s}.k ALTER COLUMN w TYPE bigint",
        "UPDATE {s}.k SET w = w + 1000 WHERE id IN (4, 24, 44)",
    ],
    "aborted": [
        "BEGIN",
        "ALTER TABLE {s}.k ADD COLUMN z int DEFAULT 5",
        "ROLLBACK",
        "UPDATE {s}.k SET v = v || '+a' WHERE id IN (4, 24, 44)",
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
        if self.done or point != self.point or (chunk.table.name, chunk.number) != (
            "k", TARGET_CHUNK,
        ):  # fmt: skip
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
    published = publish(pg_dsn, k=("id int PRIMARY KEY, v text, w int", "2 * g, 'v' || 2 * g, g"))
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
        if not isinstance(item, ChangeEvent):
            continue
        if item.table.name == "k" and item.table is not newest:  # a layout the pump announces
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
    assert len(rows) == 30
    # DDL between the snapshot and the lock: the chunk is read again, once
    again = point == "after_snapshot"
    assert hooks.reads["k", TARGET_CHUNK] == (2 if again else 1), hooks.reads
    assert all(n == 1 for key, n in hooks.reads.items() if key != ("k", TARGET_CHUNK))


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


class QueuedAlter(LoadHooks):
    """The first read of ``k``'s chunk 1, once its snapshot is taken, waits until the read of
    chunk 2 (a later watermark) holds the table's lock, then until an ``ALTER TABLE`` from
    another connection waits for that lock (which makes every later lock of the table wait
    behind it)."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.reads: Counter[int] = Counter()

    def _count(self, conn: psycopg.Connection[Any], condition: str) -> int:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            f"WHERE l.relation = %s::regclass AND {condition}",
            (f"{self.schema}.k",),
        ).fetchone()
        return int(row[0]) if row else 0

    def _wait(self, condition: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 20
            while not self._count(conn, condition):
                if time.monotonic() > deadline:
                    seen = conn.execute(
                        "SELECT l.mode, l.granted, a.state, left(a.query, 60) FROM pg_locks l "
                        "JOIN pg_stat_activity a USING (pid) WHERE l.relation = %s::regclass",
                        (f"{self.schema}.k",),
                    ).fetchall()
                    raise AssertionError(f"never: {condition}; the table's locks: {seen}")
                time.sleep(0.01)

    def _alter(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '20s'")  # a stalled load must not hang the test
                started = time.monotonic()
                try:
                    conn.execute(f"ALTER TABLE {self.schema}.k ADD COLUMN q int DEFAULT 9")
                finally:
                    self.seconds = time.monotonic() - started
                conn.execute(f"UPDATE {self.schema}.k SET q = 1 WHERE id = 2")  # the stream has q
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def after_snapshot(self, chunk: Chunk, snapshot: ReadSnapshot) -> ReadSnapshot:
        if chunk.table.name != "k":
            return snapshot
        self.reads[chunk.number] += 1
        if chunk.number == 1 and self.thread is None:
            self._wait("l.granted AND a.query LIKE 'COPY (SELECT%%' AND a.xact_start IS NOT NULL")
            self.thread = threading.Thread(target=self._alter, daemon=True)
            self.thread.start()
            self._wait("NOT l.granted AND l.mode = 'AccessExclusiveLock'")
        return snapshot


def test_ddl_waiting_for_a_read_does_not_stall_the_load(
    published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two readers (``k`` alone); the read of a later chunk holds the table's lock and
    waits for the coordinator to take its rows at its watermark, an ALTER waits for that
    lock, and the read of chunk 1
    (an earlier watermark, where the coordinator waits for it) would wait behind the ALTER:
    nothing would move (until the ALTER gave up after 20 s). The read of chunk 1 gives up
    the lock after a second and is read again behind a new watermark; the coordinator takes
    chunk 2's rows meanwhile, and the ALTER gets its lock. The coordinator never waits for
    the lock either when it plans a chunk."""
    monkeypatch.setattr(reader, "BATCH_ROWS", 1)  # a read holds its lock until its rows
    monkeypatch.setattr(reader, "QUEUE_BATCHES", 1)  # are taken: a chunk bigger than the queue
    only_k = Published(published.dsn, published.schema, f"{published.publication}_k")
    with psycopg.connect(published.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {only_k.publication} FOR TABLE {published.schema}.k")
    hooks = QueuedAlter(published.dsn, published.schema)
    try:
        items = load(only_k, hooks, workers=2, tables=("k",))
    finally:
        with psycopg.connect(published.dsn, autocommit=True) as conn:
            conn.execute(f"DROP PUBLICATION {only_k.publication}")
    assert hooks.thread is not None
    hooks.thread.join(30)
    assert hooks.error is None, f"the ALTER waited {hooks.seconds:.1f} s: {hooks.error}"
    assert hooks.reads[1] >= 2, hooks.reads
    columns, rows = folded(items)
    assert (columns, rows) == selected(published)


def test_planning_a_chunk_does_not_wait_behind_ddl(published: Published) -> None:
    """A read holds the table's lock, an ALTER waits for it: planning the next chunk (a query
    of the table, run by the coordinator, which the read waits for) answers LOCKED at once
    instead of waiting behind the ALTER; once the read ends, it plans the chunk."""
    dsn, table = published.dsn, f"{published.schema}.k"
    with psycopg.connect(dsn, autocommit=True) as conn:
        relation_id = catalog.resolve_table(conn, table)
        assert relation_id is not None
        layout = catalog.table_layout(conn, relation_id, [published.publication])
    assert layout is not None
    errors: list[BaseException] = []

    def alter() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '20s'")
                conn.execute(f"ALTER TABLE {table} ADD COLUMN q int")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    with psycopg.connect(dsn) as reading, psycopg.connect(dsn, autocommit=True) as planning:
        reading.execute(f"SELECT FROM {table} WHERE false")  # a read's lock, held
        thread = threading.Thread(target=alter, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        waiting = "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted"
        while planning.execute(waiting, (table,)).fetchone() == (0,):
            assert time.monotonic() < deadline, "the ALTER never waited for the lock"
            time.sleep(0.01)
        started = time.monotonic()
        assert upper_unless_locked(planning, layout, None, 10) is LOCKED
        assert time.monotonic() - started < 5
        reading.rollback()  # the read ends: the ALTER runs, and the planning goes on
        thread.join(30)
        assert not errors, errors
        assert upper_unless_locked(planning, layout, None, 10) == ("20",)

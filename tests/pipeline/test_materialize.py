"""Materialize's fold and stores on hand-built normalized changes (no Kafka, no PostgreSQL).

The key-move cases: an UPDATE that changes a row's primary key while a column is not
sent (unchanged TOAST) must keep that column's value in the new key's row, whether the
old row was stored by an earlier batch, built earlier in the same batch, or moved more
than once in the batch. Every store (Parquet, Delta and Iceberg) is checked.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from collections.abc import Iterator

import pytest

from pipeline.local_frames import local_rows
from pipeline.materialize import apply_batch, read_table
from pipeline.model import NORMALIZED

pytestmark = pytest.mark.integration

BODY_A = "a" * 5000
BODY_B = "b" * 5000


class Changes:
    """Normalized changes of ``public.doc (id bigint primary key, v int, body text)``."""

    def __init__(self) -> None:
        self._lsn: Iterator[int] = itertools.count(1000, 10)
        self.rows: list[dict] = []

    def _add(self, op: str, before: dict | None, after: dict | None, toast: list[str]) -> None:
        lsn = next(self._lsn)
        self.rows.append(
            {
                "format": "test",
                "schema": "public",
                "table": "doc",
                "op": op,
                "commit_lsn": f"0/{lsn:X}",
                "commit_lsn_num": lsn,
                "commit_time": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
                "ordinal": 1,
                "primary_key": ["id"],
                "before": before,
                "after": after,
                "unchanged_toast": toast,
                "column_types": {"id": "int8", "v": "int4", "body": "text"},
                "kafka_topic": "t",
                "kafka_partition": 0,
                "kafka_offset": lsn,
                "record_index": 0,
                "commit_date": dt.date(2024, 1, 1),
            }
        )

    def insert(self, key: int, v: int, body: str) -> Changes:
        self._add("insert", None, {"id": str(key), "v": str(v), "body": body}, [])
        return self

    def move(self, old: int, new: int, v: int) -> Changes:
        """UPDATE … SET id = new: the TOASTed body unchanged, so not sent."""
        self._add("update", {"id": str(old)}, {"id": str(new), "v": str(v)}, ["body"])
        return self

    def update(self, key: int, v: int) -> Changes:
        self._add("update", None, {"id": str(key), "v": str(v)}, ["body"])
        return self

    def full_update(self, key: int, v: int, body: str) -> Changes:
        """An UPDATE that sent every column (the body changed)."""
        self._add("update", None, {"id": str(key), "v": str(v), "body": body}, [])
        return self

    def full_move(self, old: int, new: int, v: int, body: str) -> Changes:
        """UPDATE … SET id = new, body = …: every column sent."""
        self._add("update", {"id": str(old)}, {"id": str(new), "v": str(v), "body": body}, [])
        return self

    def delete(self, key: int) -> Changes:
        self._add("delete", {"id": str(key)}, None, [])
        return self

    def frame(self, spark):
        full = [tuple(row.get(f.name) for f in NORMALIZED.fields) for row in self.rows]
        self.rows = []
        return local_rows(spark, full, NORMALIZED)


STORES = {
    "parquet": {"use_delta": False},
    "delta": {"use_delta": True},
    "iceberg": {"store": "iceberg"},
}
"""Each store as ``apply_batch``'s keywords."""


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest) -> dict:
    return STORES[request.param]


def state(spark, root: str) -> dict[int, tuple[str | None, str | None]]:
    rows = read_table(spark, root, "public", "doc").collect()
    return {int(r["id"]): (r["v"], r["body"]) for r in rows}


def test_a_key_move_keeps_the_unsent_toast_column_of_a_stored_row(
    spark, tmp_path, store: dict
) -> None:
    root = str(tmp_path / "state")
    changes = Changes()
    apply_batch(spark, changes.insert(7, 1, BODY_A).frame(spark), root, 0, **store, typed=False)
    apply_batch(spark, changes.move(7, 8, 1).frame(spark), root, 1, **store, typed=False)
    assert state(spark, root) == {8: ("1", BODY_A)}


def test_key_moves_inside_one_batch_follow_the_row(spark, tmp_path, store: dict) -> None:
    root = str(tmp_path / "state")
    changes = Changes()
    apply_batch(
        spark,
        changes.insert(30, 1, BODY_A).insert(31, 1, BODY_B).insert(40, 1, BODY_A).frame(spark),
        root,
        0,
        **store,
        typed=False,
    )
    batch = (
        changes.insert(7, 1, BODY_A)
        .move(7, 8, 2)  # built in this batch, then moved
        .move(40, 41, 2)  # stored, moved twice, updated between
        .update(41, 3)
        .move(41, 42, 4)
        .move(30, 99, 5)  # a swap of two stored rows through a spare key
        .move(31, 30, 5)
        .move(99, 31, 5)
        .insert(50, 1, BODY_B)  # moved, then deleted
        .move(50, 51, 1)
        .delete(51)
        .frame(spark)
    )
    apply_batch(spark, batch, root, 1, **store, typed=False)
    assert state(spark, root) == {
        8: ("2", BODY_A),
        42: ("4", BODY_A),
        30: ("5", BODY_B),
        31: ("5", BODY_A),
    }


def test_a_key_move_of_an_unknown_row_is_kept_out_not_stored_partial(
    spark, tmp_path, store: dict, caplog: pytest.LogCaptureFixture
) -> None:
    """The old row is in neither the batch nor the store (materialize started late).

    The move did not send ``body`` (unchanged TOAST): storing the new key with a NULL body
    would be silent wrong data, so the row is kept out and a warning names table and key.
    """
    root = str(tmp_path / "state")
    changes = Changes()
    apply_batch(spark, changes.insert(1, 1, BODY_A).frame(spark), root, 0, **store, typed=False)
    with caplog.at_level(logging.WARNING, logger="pipeline.stores"):
        apply_batch(spark, changes.move(5, 6, 9).frame(spark), root, 1, **store, typed=False)
    assert state(spark, root) == {1: ("1", BODY_A)}
    assert [r.getMessage() for r in caplog.records] == [
        (
            "walcast spark materialize: public.doc: 1 row kept out (first key id=6): an "
            "update or key move of a row the table does not hold left columns unsent "
            "(unchanged TOAST), so their values are unknown; load the table (walcast "
            "snapshot --table public.doc) to fill it in"
        )
    ]


def test_an_update_of_an_unknown_row_is_stored_only_when_complete(
    spark, tmp_path, store: dict, caplog: pytest.LogCaptureFixture
) -> None:
    """An update of a row the table does not hold: stored when it sent every column.

    Row 3 is updated without its TOASTed body (kept out), then, in the next batch, with
    every column (stored); row 4's key move sent every column (stored); row 1 is known,
    so its update without the body keeps the stored body.
    """
    root = str(tmp_path / "state")
    changes = Changes()
    apply_batch(spark, changes.insert(1, 1, BODY_A).frame(spark), root, 0, **store, typed=False)
    with caplog.at_level(logging.WARNING, logger="pipeline.stores"):
        apply_batch(
            spark,
            changes.update(3, 2).update(1, 7).update(3, 5).frame(spark),
            root,
            1,
            **store,
            typed=False,
        )
    assert state(spark, root) == {1: ("7", BODY_A)}
    assert len(caplog.records) == 1
    assert "1 row kept out (first key id=3)" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline.stores"):
        apply_batch(
            spark,
            changes.full_update(3, 6, BODY_B).full_move(8, 4, 1, BODY_A).frame(spark),
            root,
            2,
            **store,
            typed=False,
        )
    assert state(spark, root) == {1: ("7", BODY_A), 3: ("6", BODY_B), 4: ("1", BODY_A)}
    assert caplog.records == []


def _commits(spark, root: str, store: dict) -> list[str]:
    """The operations of the table's commits (Delta) or snapshots (Iceberg), oldest first."""
    if store.get("store") == "iceberg":
        from pipeline.iceberg_store import catalog_for, table_name  # noqa: PLC0415

        name = table_name(catalog_for(spark, root), "public", "doc", None)
        rows = spark.sql(f"SELECT operation FROM {name}.snapshots ORDER BY committed_at")
        return [r["operation"] for r in rows.collect()]
    from pipeline.tables import table_path  # noqa: PLC0415

    path = table_path(root, "public", "doc", None)
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    return [r["operation"] for r in rows]


@pytest.mark.parametrize("name", ["delta", "iceberg"])
def test_a_new_tables_first_batch_is_appended_as_a_merge_would_apply_it(
    spark, tmp_path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch that makes a table appends what a MERGE would insert (the table holds no
    row): moves inside the batch follow the row, updates and moves of rows it does not
    hold are kept out unless complete, a row inserted then deleted is not there. The same
    batch again (a replay after a crash) finds the table and commits nothing."""
    store = STORES[name]
    root = str(tmp_path / "state")
    changes = Changes()
    batch = (
        changes.insert(1, 1, BODY_A)
        .move(1, 2, 2)
        .update(3, 5)  # not held, not complete: kept out
        .full_update(4, 6, BODY_B)  # not held, complete: stored
        .move(5, 6, 9)  # its old row unknown: kept out
        .insert(7, 1, BODY_A)
        .delete(7)
        .full_move(8, 9, 3, BODY_B)
        .rows
    )
    expected = {2: ("2", BODY_A), 4: ("6", BODY_B), 9: ("3", BODY_B)}
    changes.rows = list(batch)
    with caplog.at_level(logging.WARNING, logger="pipeline.stores"):
        apply_batch(spark, changes.frame(spark), root, 0, **store, typed=False)
    assert state(spark, root) == expected
    assert [r.getMessage().split(": an update")[0] for r in caplog.records] == [
        "walcast spark materialize: public.doc: 2 rows kept out (first key id=3)"
    ]
    made = _commits(spark, root, store)
    if name == "delta":  # (an Iceberg MERGE's snapshot is an "overwrite" or an "append")
        assert "MERGE" not in made, made
    changes.rows = list(batch)
    apply_batch(spark, changes.frame(spark), root, 0, **store, typed=False)
    assert state(spark, root) == expected
    assert _commits(spark, root, store) == made

"""A table without a primary key keeps finding its rows across ADD and DROP COLUMN.

Such a table is a multiset of whole rows, each stored with its key (the row's values as
JSON: :func:`pipeline.fold.row_key`). Before, the key held every column of the image, NULLs
included: after ``ADD COLUMN c`` a row stored before had a key without ``c``, its later
changes' images had ``"c": null``, so a DELETE removed nothing and an UPDATE added a copy
beside the old row (found by hand, in every store: ``[a 1, b 2, b 3]`` for ``[b 3]``).
Now NULLs do not count and only the table's columns of now do (a DROP makes the stored keys
again, once). Every store takes the same changes through walcast's json encoder and parser;
Delta's table starts with keys as walcast 0.1 wrote them (NULLs kept, no recorded columns).
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F  # noqa: N812

from capture.events import Op
from pipeline.fold import rekeyed, row_key
from pipeline.materialize import ROW_KEY, apply_batch, read_table
from pipeline.row_keys import ROW_KEY_COLUMNS
from pipeline.tables import table_path
from tests.pipeline.test_type_changes import Source
from tests.support.events import table_with

pytestmark = pytest.mark.spark

RELATION = 9_700_001
FIRST = table_with(
    "public", "events",
    [("at", "text", True, -1), ("n", "int4", True, -1), ("note", "text", True, -1)],
    "f", relation_id=RELATION,
)  # fmt: skip
ADDED = table_with(
    "public", "events",
    [("at", "text", True, -1), ("n", "int4", True, -1), ("note", "text", True, -1),
     ("c", "int4", True, -1)],
    "f", relation_id=RELATION,
)  # fmt: skip
DROPPED = table_with(
    "public", "events",
    [("at", "text", True, -1), ("n", "int4", True, -1), ("c", "int4", True, -1)],
    "f", relation_id=RELATION,
)  # fmt: skip
STORES = {
    "parquet": {"use_delta": False},
    "delta": {"use_delta": True},
    "iceberg": {"store": "iceberg"},
}


def test_a_row_key_ignores_nulls_and_columns_the_table_no_longer_has(spark) -> None:
    frame = spark.createDataFrame(
        [({"n": "1", "at": "a", "c": None, "note": "x"},)], "image map<string,string>"
    )
    keys = frame.select(
        row_key(F.col("image")).alias("all"),
        row_key(F.col("image"), ["at", "n", "c"]).alias("now"),
        rekeyed(F.lit('{"at":"a","c":null,"n":"1","note":"x"}'), ["at", "n", "c"]).alias("old"),
    ).first()
    assert keys is not None
    assert keys["all"] == '{"at":"a","n":"1","note":"x"}'
    assert keys["now"] == keys["old"] == '{"at":"a","n":"1"}'


def _as_written_by_0_1(spark, root: str) -> None:
    """Give the Delta table keys as walcast 0.1 made them: NULLs kept, nothing recorded."""
    path = table_path(root, "public", "events")
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{ROW_KEY_COLUMNS}')")
    spark.sql(
        f'UPDATE delta.`{path}` SET `{ROW_KEY}` = \'{{"at":"b","n":"2","note":null}}\' '
        f"WHERE at = 'b'"
    )


@pytest.mark.integration
@pytest.mark.parametrize("store", STORES)
def test_deletes_and_updates_find_rows_stored_before_a_column_was_added_or_dropped(
    spark, tmp_path, store: str
) -> None:
    root = str(tmp_path / "state")
    source = Source()

    def apply(batch_id: int, *changes) -> None:
        frame, layouts = source.batch(spark, *changes)
        try:
            apply_batch(spark, frame, root, batch_id, layouts, **STORES[store])
        finally:
            frame.unpersist()

    def rows(*columns: str) -> list[tuple]:
        table = read_table(spark, root, "public", "events")
        return sorted(tuple(r) for r in table.select(*columns).collect())

    source.publish(FIRST)
    apply(
        0,
        (FIRST, Op.INSERT, None, {"at": "a", "n": "1", "note": "x"}),
        (FIRST, Op.INSERT, None, {"at": "b", "n": "2"}),
        (FIRST, Op.INSERT, None, {"at": "c", "n": "3", "note": "z"}),
    )
    if store == "delta":
        _as_written_by_0_1(spark, root)
    source.publish(ADDED)  # ALTER TABLE events ADD COLUMN c int4
    apply(
        1,
        (ADDED, Op.DELETE, {"at": "a", "n": "1", "note": "x"}, None),
        (ADDED, Op.UPDATE, {"at": "b", "n": "2"}, {"at": "b", "n": "20", "c": "5"}),
    )
    assert rows("at", "n", "note", "c") == [("b", 20, None, 5), ("c", 3, "z", None)]
    source.publish(DROPPED)  # ALTER TABLE events DROP COLUMN note
    apply(
        2,
        (DROPPED, Op.DELETE, {"at": "c", "n": "3"}, None),
        (DROPPED, Op.UPDATE, {"at": "b", "n": "20", "c": "5"}, {"at": "b", "n": "21", "c": "5"}),
    )
    assert rows("at", "n", "c") == [("b", 21, 5)]

"""Rows stored before an ADD or DROP COLUMN stay equal to the source's, in every store.

Two ways a materialized table silently differed from ``SELECT *`` (both found by hand; this
test fails without either fix, in each store):

* **A column added with a DEFAULT.** PostgreSQL writes no row for ``ADD COLUMN region text
  DEFAULT 'eu'``: the rows stored before read ``eu`` from the catalog (``attmissingval``),
  which walcast's layout record names (``missing``). Before, materialize left NULL there.
  :mod:`pipeline.added_columns` gives the value to the stored rows and to the batch's changes
  encoded before the ADD; a column added without a DEFAULT stays NULL, as at the source,
  also in a change encoded before the ADD (``missing_null``): a key move of a row the table
  does not hold was kept out before, one row less than the source (found by the soak,
  seed 462290771).
* **A table without a primary key** is a multiset of whole rows, each stored with its key
  (:func:`pipeline.fold.row_key`). Before, the key held every column of the image, NULLs
  included: after an ADD COLUMN a row's later images (``"c": null``) no longer matched the
  key stored before, after a DROP COLUMN they lacked the dropped value, so a DELETE removed
  nothing and an UPDATE added a copy (``[a 1, b 2, b 3]`` for ``[b 3]``). Now NULLs do not
  count and only the table's columns of now do (:mod:`pipeline.row_keys`).

Each store takes the same changes through walcast's json encoder and parser, as
``walcast spark materialize`` does: a keyed ``orders`` (stored rows, a change encoded before
the ADD in the batch that adds ``region``, rows written after with a value and with an
explicit NULL) and a keyless ``events`` (``c`` added without a DEFAULT, ``w`` with one, then
``note`` dropped; changes of rows stored before each). Delta's ``events`` starts with keys as
walcast 0.1 wrote them (NULLs kept, no recorded columns). Delta and Iceberg also take a crash
between the ADD COLUMNS and the fill: the batch run again fills the rows.
"""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.sql import functions as F  # noqa: N812

import pipeline.added_columns
from capture.events import Op
from pipeline.fold import rekeyed, row_key
from pipeline.local_frames import local_rows
from pipeline.materialize import ROW_KEY
from pipeline.row_keys import ROW_KEY_COLUMNS
from pipeline.tables import table_path
from tests.pipeline.layout_changes import STORES, Materialized
from tests.support.events import table_with

pytestmark = pytest.mark.spark

ORDERS_ID, EVENTS_ID = 9_700_101, 9_700_102
ORDERS = table_with(
    "public", "orders", [("id", "int8", True, -1), ("v", "text", False, -1)], relation_id=ORDERS_ID
)
ORDERS_ADDED = dataclasses.replace(
    table_with(
        "public", "orders",
        [("id", "int8", True, -1), ("v", "text", False, -1), ("region", "text", False, -1),
         ("c", "int4", False, -1)],
        relation_id=ORDERS_ID,
    ),
    # ADD COLUMN region text DEFAULT 'eu', ADD COLUMN c int4 (the catalog: no DEFAULT)
    missing_values={"id": None, "v": None, "region": "eu", "c": None},
)  # fmt: skip
EVENTS = table_with(
    "public", "events",
    [("at", "text", True, -1), ("n", "int4", True, -1), ("note", "text", True, -1)],
    "f", relation_id=EVENTS_ID,
)  # fmt: skip
EVENTS_ADDED = dataclasses.replace(
    table_with(
        "public", "events",
        [("at", "text", True, -1), ("n", "int4", True, -1), ("note", "text", True, -1),
         ("c", "int4", True, -1), ("w", "int4", True, -1)],
        "f", relation_id=EVENTS_ID,
    ),
    missing_values={"w": "7"},  # ADD COLUMN c int4, ADD COLUMN w int4 DEFAULT 7
)  # fmt: skip
EVENTS_DROPPED = dataclasses.replace(
    table_with(
        "public", "events",
        [("at", "text", True, -1), ("n", "int4", True, -1), ("c", "int4", True, -1),
         ("w", "int4", True, -1)],
        "f", relation_id=EVENTS_ID,
    ),
    missing_values={"w": "7"},  # DROP COLUMN note
)  # fmt: skip


def test_a_row_key_ignores_nulls_and_columns_the_table_no_longer_has(spark) -> None:
    frame = local_rows(
        spark, [({"n": "1", "at": "a", "c": None, "note": "x"},)], "image map<string,string>"
    )
    old = F.lit('{"at":"a","c":null,"n":"1","note":"x"}')  # walcast 0.1's key of that row
    keys = frame.select(
        row_key(F.col("image")).alias("all"),
        row_key(F.col("image"), ["at", "n", "c"]).alias("now"),
        rekeyed(old, ["at", "n", "c"]).alias("old"),
        rekeyed(old, ["at", "n", "c", "w"], [("w", "7")]).alias("filled"),
    ).first()
    assert keys is not None
    assert keys["all"] == '{"at":"a","n":"1","note":"x"}'
    assert keys["now"] == keys["old"] == '{"at":"a","n":"1"}'
    assert keys["filled"] == '{"at":"a","n":"1","w":"7"}'


def _as_written_by_0_1(spark, root: str) -> None:
    """Give the Delta ``events`` keys as walcast 0.1 made them: NULLs kept, nothing recorded."""
    path = table_path(root, "public", "events")
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('{ROW_KEY_COLUMNS}')")
    spark.sql(
        f'UPDATE delta.`{path}` SET `{ROW_KEY}` = \'{{"at":"b","n":"2","note":null}}\' '
        f"WHERE at = 'b'"
    )


@pytest.mark.integration
@pytest.mark.parametrize("store", STORES)
def test_rows_stored_before_an_add_or_drop_column_stay_equal_to_the_source(
    spark, tmp_path, store: str, monkeypatch
) -> None:
    root = str(tmp_path / "state")
    tables = Materialized(spark, root, store)
    apply, rows, source = tables.apply, tables.rows, tables.source

    source.publish(ORDERS, EVENTS)
    apply(
        0,
        *[(ORDERS, Op.INSERT, {"id": str(i), "v": f"v{i}"}) for i in (1, 2, 3)],
        (EVENTS, Op.INSERT, None, {"at": "a", "n": "1", "note": "x"}),
        (EVENTS, Op.INSERT, None, {"at": "b", "n": "2"}),
        (EVENTS, Op.INSERT, None, {"at": "c", "n": "3", "note": "z"}),
    )
    if store == "delta":
        _as_written_by_0_1(spark, root)
    source.publish(ORDERS_ADDED, EVENTS_ADDED)
    batch = (
        (ORDERS, Op.INSERT, {"id": "4", "v": "v4"}),  # committed before the ADD
        # a key move committed before the ADD, of a row the table does not hold (its load
        # chunk came later and found it moved): complete, with region's DEFAULT and c NULL
        (ORDERS, Op.UPDATE, {"id": "9"}, {"id": "-9", "v": "v9"}),
        (ORDERS_ADDED, Op.UPDATE, {"id": "2", "v": "v2", "region": "us"}),
        (ORDERS_ADDED, Op.INSERT, {"id": "5", "v": "v5"}),  # region NULL, written after
        (EVENTS_ADDED, Op.DELETE, {"at": "a", "n": "1", "note": "x", "w": "7"}, None),
        (EVENTS_ADDED, Op.UPDATE, {"at": "b", "n": "2", "w": "7"},
         {"at": "b", "n": "20", "c": "5", "w": "7"}),
    )  # fmt: skip
    if store == "parquet":  # added and filled in the batch's one rewrite
        apply(1, *batch)
    else:  # dies between the ADD COLUMNS and the fill: the next run fills
        tables.apply_after_a_crash(monkeypatch, pipeline.added_columns, "_fill_stored", 1, *batch)
    assert rows("orders", "id", "v", "region", "c") == [
        (-9, "v9", "eu", None),
        (1, "v1", "eu", None),
        (2, "v2", "us", None),
        (3, "v3", "eu", None),
        (4, "v4", "eu", None),
        (5, "v5", None, None),
    ]
    assert rows("events", "at", "n", "note", "c", "w") == [
        ("b", 20, None, 5, 7),
        ("c", 3, "z", None, 7),
    ]
    source.publish(EVENTS_DROPPED)
    apply(
        2,
        (EVENTS_DROPPED, Op.DELETE, {"at": "c", "n": "3", "w": "7"}, None),
        (EVENTS_DROPPED, Op.UPDATE, {"at": "b", "n": "20", "c": "5", "w": "7"},
         {"at": "b", "n": "21", "c": "5", "w": "7"}),
    )  # fmt: skip
    assert rows("events", "at", "n", "c", "w") == [("b", 21, 5, 7)]

"""A column added with a DEFAULT: the rows stored before it hold its value, in every store.

PostgreSQL writes no row for ``ADD COLUMN region text DEFAULT 'eu'``; the rows stored
before read ``eu`` from the catalog (``attmissingval``), which walcast's layout record
names (``missing``). Before, materialize left NULL there (silently unlike ``SELECT *``).
Each store takes the same changes through walcast's json encoder and parser: a keyed table
(stored rows, a change encoded before the ADD in the batch that adds it, rows written after
with a value and with an explicit NULL) and a keyless one (whose rows are found by their
whole image, the added value included). Delta and Iceberg also take a crash between the
ADD COLUMNS and the fill: the batch run again fills the rows.
"""

from __future__ import annotations

import dataclasses

import pytest

import pipeline.added_columns
from capture.events import Op
from pipeline.materialize import apply_batch, read_table
from tests.pipeline.test_type_changes import Source
from tests.support.events import table_with

pytestmark = pytest.mark.spark

ORDERS = table_with(
    "public", "orders", [("id", "int8", True, -1), ("v", "text", False, -1)], relation_id=9_700_101
)
ORDERS_ADDED = dataclasses.replace(
    table_with(
        "public", "orders",
        [("id", "int8", True, -1), ("v", "text", False, -1), ("region", "text", False, -1)],
        relation_id=9_700_101,
    ),
    missing_values={"region": "eu"},
)  # fmt: skip
EVENTS = table_with("public", "events", [("at", "text", True, -1)], "f", relation_id=9_700_102)
EVENTS_ADDED = dataclasses.replace(
    table_with(
        "public", "events", [("at", "text", True, -1), ("n", "int4", True, -1)], "f",
        relation_id=9_700_102,
    ),
    missing_values={"n": "7"},
)  # fmt: skip
STORES = {
    "parquet": {"use_delta": False},
    "delta": {"use_delta": True},
    "iceberg": {"store": "iceberg"},
}


class CrashError(Exception):
    """The process dies between a table's ADD COLUMNS and its fill."""


@pytest.mark.integration
@pytest.mark.parametrize("store", STORES)
def test_rows_stored_before_a_column_was_added_hold_its_default(
    spark, tmp_path, store: str, monkeypatch
) -> None:
    root = str(tmp_path / "state")
    source = Source()

    def apply(batch_id: int, *changes) -> None:
        frame, layouts = source.batch(spark, *changes)
        try:
            apply_batch(spark, frame, root, batch_id, layouts, **STORES[store])
        finally:
            frame.unpersist()

    def rows(table: str, *columns: str) -> list[tuple]:
        frame = read_table(spark, root, "public", table).select(*columns)
        return sorted(tuple(r) for r in frame.collect())

    source.publish(ORDERS, EVENTS)
    apply(
        0,
        *[(ORDERS, Op.INSERT, {"id": str(i), "v": f"v{i}"}) for i in (1, 2, 3)],
        (EVENTS, Op.INSERT, None, {"at": "a"}),
        (EVENTS, Op.INSERT, None, {"at": "b"}),
    )
    source.publish(ORDERS_ADDED, EVENTS_ADDED)  # ADD COLUMN region text DEFAULT 'eu', …
    batch = (
        (ORDERS, Op.INSERT, {"id": "4", "v": "v4"}),  # committed before the ADD
        (ORDERS_ADDED, Op.UPDATE, {"id": "2", "v": "v2", "region": "us"}),
        (ORDERS_ADDED, Op.INSERT, {"id": "5", "v": "v5"}),  # region NULL, written after
        (EVENTS_ADDED, Op.DELETE, {"at": "a", "n": "7"}, None),
    )
    if store != "parquet":  # the Parquet store adds and fills in one rewrite
        fill = pipeline.added_columns._fill_stored

        def crash(*args, **kwargs) -> None:
            raise CrashError

        monkeypatch.setattr(pipeline.added_columns, "_fill_stored", crash)
        with pytest.raises(CrashError):
            apply(1, *batch)
        monkeypatch.setattr(pipeline.added_columns, "_fill_stored", fill)
    apply(1, *batch)
    assert rows("orders", "id", "v", "region") == [
        (1, "v1", "eu"),
        (2, "v2", "us"),
        (3, "v3", "eu"),
        (4, "v4", "eu"),
        (5, "v5", None),
    ]
    assert rows("events", "at", "n") == [("b", 7)]
    apply(2, (EVENTS_ADDED, Op.DELETE, {"at": "b", "n": "7"}, None))
    assert rows("events", "at", "n") == []

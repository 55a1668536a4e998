"""A RENAME COLUMN, and a column name used again, leave every store equal to the source.

The Relation message names columns but does not number them; walcast's layout record gives
each its catalog number (``attnum``), which a rename keeps (:mod:`pipeline.column_numbers`).
Without it, both cases below were silently wrong in every store (this test fails on the
code before): after ``RENAME COLUMN v TO label`` the stored rows had ``label`` NULL, and
after ``ADD COLUMN v text DEFAULT 'new'`` the new ``v`` held the renamed column's values;
a keyless table's rows, found by their whole image, were no longer found (a DELETE removed
nothing).

The changes go through walcast's json encoder and parser, as ``walcast spark materialize``
reads them; the batch after the DDL holds changes encoded with each layout (before the
rename, between, after the ADD). Delta and Iceberg also take a crash between the recorded
fill and the fill: the batch run again fills the rows.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import pipeline.added_columns
from capture.events import Op, Table
from pipeline.column_numbers import COLUMN_NUMBERS
from pipeline.iceberg_store import catalog_for, table_name
from pipeline.materialize import read_table
from pipeline.tables import TableProperties, table_path
from tests.pipeline.layout_changes import STORES, Materialized
from tests.support.events import table_with

pytestmark = pytest.mark.spark

ORDERS_ID, EVENTS_ID = 9_700_201, 9_700_202


def numbered(table: Table, numbers: dict[str, int], **missing: str) -> Table:
    """``table`` as capture describes it with the catalog's numbers (and DEFAULT values)."""
    return dataclasses.replace(table, column_numbers=numbers, missing_values=missing)


def orders(*columns: tuple[str, str, bool, int]) -> Table:
    return table_with("public", "orders", columns, relation_id=ORDERS_ID)


def events(*columns: tuple[str, str, bool, int]) -> Table:
    return table_with("public", "events", columns, "f", relation_id=EVENTS_ID)


ID, V, LABEL = ("id", "int8", True, -1), ("v", "text", False, -1), ("label", "text", False, -1)
ORDERS = numbered(orders(ID, V), {"id": 1, "v": 2})
RENAMED = numbered(orders(ID, LABEL), {"id": 1, "label": 2})  # RENAME COLUMN v TO label
READDED = numbered(  # then ADD COLUMN v text DEFAULT 'new': a new column, number 3
    orders(ID, LABEL, V), {"id": 1, "label": 2, "v": 3}, v="new"
)
AT, N = ("at", "text", True, -1), ("n", "int4", True, -1)
EVENTS = numbered(events(AT, N, ("note", "text", True, -1)), {"at": 1, "n": 2, "note": 3})
MEMO = numbered(events(AT, N, ("memo", "text", True, -1)), {"at": 1, "n": 2, "memo": 3})


@pytest.mark.integration
@pytest.mark.parametrize("store", STORES)
def test_a_renamed_column_keeps_its_values_and_a_name_used_again_is_a_new_column(
    spark, tmp_path, store: str, monkeypatch
) -> None:
    root = str(tmp_path / "state")
    tables = Materialized(spark, root, store, history=store != "parquet")
    apply, rows, source = tables.apply, tables.rows, tables.source

    source.publish(ORDERS, EVENTS)
    apply(
        0,
        (EVENTS, Op.INSERT, None, {"at": "a", "n": "1", "note": "x"}),
        (EVENTS, Op.INSERT, None, {"at": "b", "n": "2", "note": "y"}),
        *[(ORDERS, Op.INSERT, {"id": str(i), "v": f"v{i}"}) for i in (1, 2, 3)],
    )
    loaded = source.lsn
    source.publish(RENAMED, READDED, MEMO)
    batch = (
        (EVENTS, Op.DELETE, {"at": "a", "n": "1", "note": "x"}, None),
        (MEMO, Op.UPDATE, {"at": "b", "n": "2", "memo": "y"}, {"at": "b", "n": "3", "memo": "y"}),
        (ORDERS, Op.UPDATE, {"id": "1", "v": "v1b"}),  # committed before the rename
        (RENAMED, Op.UPDATE, {"id": "2", "label": "v2b"}),  # between rename and ADD
        (READDED, Op.INSERT, {"id": "4", "label": "v4", "v": "x"}),  # after the ADD
    )
    if store == "parquet":  # renamed and filled in the batch's one rewrite
        apply(1, *batch)
    else:  # dies between recording the fills and running them: the next run fills
        tables.apply_after_a_crash(monkeypatch, pipeline.added_columns, "_fill_stored", 1, *batch)
    # SELECT * at the source: label holds v's values; the new v reads its DEFAULT in the
    # rows stored before it (row 1's last change was encoded as v, before the rename)
    assert rows("orders", "id", "label", "v") == [
        (1, "v1b", "new"),
        (2, "v2b", "new"),
        (3, "v3", "new"),
        (4, "v4", "x"),
    ]
    assert rows("events", "at", "n", "memo") == [("b", 3, "y")]
    if store != "parquet":
        name = (
            f"delta.`{table_path(root, 'public', 'orders')}`"
            if store == "delta"
            else table_name(catalog_for(spark, root), "public", "orders")
        )
        recorded = TableProperties.read(spark, name).get(COLUMN_NUMBERS)
        assert recorded is not None
        assert json.loads(recorded) == {"id": 1, "label": 2, "v": 3}
    else:  # the Parquet store keeps the source's columns of now only
        assert "note" not in read_table(spark, root, "public", "events").columns
    if store != "parquet":  # the history, read as of each batch's end (its last change: orders)
        assert rows("orders", "id", "label", "v", as_of_lsn=source.lsn) == rows(
            "orders", "id", "label", "v"
        )
        # before the rename: label holds the renamed column's values in every version; the
        # versions open when the name v was used again hold the new v (a limit: one value
        # per version and column; pipeline/README.md)
        assert rows("orders", "id", "label", "v", as_of_lsn=loaded) == [
            (1, "v1", "new"),
            (2, "v2", "new"),
            (3, "v3", "new"),
        ]
    # a later batch changes nothing more: the fills ran once
    apply(2, (READDED, Op.UPDATE, {"id": "3", "label": "v3c", "v": "z"}))
    assert rows("orders", "id", "label", "v")[2:] == [(3, "v3c", "z"), (4, "v4", "x")]


FLAG, R2, COUNT = ("flag", "text", False, -1), ("r2", "text", False, -1), ("n", "int4", False, -1)


def flags(*columns: tuple[str, str, bool, int]) -> Table:
    return table_with("public", "flags", columns, relation_id=FLAGS_ID)


FLAGS_ID = 9_700_203
FLAGS = numbered(flags(ID, FLAG, COUNT), {"id": 1, "flag": 2, "n": 3})
FLAG_AS_R2 = numbered(flags(ID, R2, COUNT), {"id": 1, "r2": 2, "n": 3})  # RENAME flag TO r2
FLAG_AS_R3 = numbered(  # RENAME r2 TO r3, with no change under it
    flags(ID, ("r3", "text", False, -1), COUNT), {"id": 1, "r3": 2, "n": 3}
)
FLAG_DROPPED = numbered(flags(ID, COUNT), {"id": 1, "n": 3})  # (renamed back) DROP flag


@pytest.mark.integration
@pytest.mark.parametrize("store", ["delta", "iceberg"])
def test_a_history_read_as_of_any_moment_finds_a_column_under_its_name_of_then(
    spark, tmp_path, store: str
) -> None:
    # The soak's seed 618798201: one batch renamed a column, updated a row, renamed it
    # back and later dropped it (here renamed once more, to r3, before going back). Read
    # as of a moment after the rename back, the row updated under the other name held the
    # value of before under the old name.
    tables = Materialized(spark, str(tmp_path / "state"), store, history=True)
    apply, rows, source = tables.apply, tables.rows, tables.source
    source.publish(FLAGS)
    apply(
        0,
        (FLAGS, Op.INSERT, {"id": "1", "flag": "t", "n": "1"}),
        (FLAGS, Op.INSERT, {"id": "2", "flag": "t", "n": "2"}),
    )
    loaded = source.lsn
    source.publish(FLAG_AS_R2, FLAG_AS_R3, FLAGS, FLAG_DROPPED)
    apply(
        1,
        (FLAG_AS_R2, Op.UPDATE, {"id": "1", "r2": "f", "n": "1"}),  # loaded + 0x1000
        (FLAGS, Op.UPDATE, {"id": "2", "flag": "x", "n": "3"}),  # renamed back: + 0x2000
        (FLAG_DROPPED, Op.UPDATE, {"id": "2", "n": "4"}),  # dropped: + 0x3000
    )
    assert rows("flags", "id", "flag", as_of_lsn=loaded) == [(1, "t"), (2, "t")]
    # named r2 then: row 2's version is from the batch before the rename
    assert rows("flags", "id", "r2", as_of_lsn=loaded + 0x1000) == [(1, "f"), (2, "t")]
    # then named r3, a name no change was written under: the history has it too
    assert rows("flags", "id", "r3", as_of_lsn=loaded + 0x1000) == [(1, "f"), (2, "t")]
    # named flag again: row 1's version was written under r2
    assert rows("flags", "id", "flag", as_of_lsn=loaded + 0x2000) == [(1, "f"), (2, "x")]
    assert rows("flags", "id", "n") == [(1, 1), (2, 4)]

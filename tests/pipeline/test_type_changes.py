"""A column's type changed at the source: each store widens it in place, or quarantines.

The rules (:mod:`pipeline.type_changes`) are checked alone; then every store takes the
same changes through walcast's json encoder and parser, as ``walcast spark materialize``
does: a table written with ``n int4``, ``amount numeric(10,2)`` and ``note text``, then
``ALTER … TYPE int8``/``numeric(14,2)`` (widenings: followed, the stored values kept
exactly, the new ones stored whole), then ``note`` → ``int4`` (no store can follow it:
the table's changes are quarantined with one line, the table left as it was, and another
table of the same batch applied).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from capture.events import Op, Table
from pipeline.materialize import apply_batch, read_table
from pipeline.tables import read_history, table_path
from pipeline.type_changes import TYPE_CHANGE, is_widening, quarantine_path, type_changes
from tests.pipeline.layout_changes import Source
from tests.support.events import keyed_table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("old", "new", "stores"),
    [
        ("int", "bigint", {"delta", "parquet", "iceberg"}),
        ("smallint", "int", {"delta", "parquet", "iceberg"}),  # Iceberg keeps an int already
        ("smallint", "bigint", {"delta", "parquet", "iceberg"}),
        ("float", "double", {"delta", "parquet", "iceberg"}),
        ("decimal(10,2)", "decimal(14,2)", {"delta", "parquet", "iceberg"}),
        ("decimal(10,2)", "decimal(14,4)", {"delta", "parquet"}),  # Iceberg keeps the scale
        ("decimal(10,2)", "decimal(11,4)", set()),  # fewer integer digits
        ("int", "decimal(12,2)", {"delta", "parquet"}),
        ("int", "decimal(11,2)", set()),  # 9 integer digits: not every int
        ("bigint", "decimal(20,0)", {"delta", "parquet"}),
        ("int", "double", {"delta", "parquet"}),
        ("bigint", "double", set()),  # a double does not hold every bigint
        ("date", "timestamp_ntz", {"delta", "parquet"}),
        ("bigint", "int", set()),
        ("string", "int", set()),
        ("int", "string", set()),
        ("timestamp", "timestamp_ntz", set()),
        ("decimal(14,2)", "decimal(10,2)", set()),
    ],
)
def test_the_widenings_each_store_follows(old: str, new: str, stores: set[str]) -> None:
    assert {s for s in ("delta", "parquet", "iceberg") if is_widening(old, new, s)} == stores


def test_unchanged_added_widened_and_refused_columns_are_told_apart() -> None:
    stored = {"id": "bigint", "n": "int", "note": "string", "small": "int"}
    wanted = [
        ("id", "bigint"),
        ("n", "bigint"),
        ("note", "int"),
        ("small", "smallint"),
        ("added", "date"),
    ]
    widened, refused = type_changes(stored, wanted, "iceberg")
    assert [str(c) for c in widened] == ["n int → bigint"]
    # Iceberg stores a smallint as an int: not a change there, a narrowing elsewhere
    assert [str(c) for c in refused] == ["note string → int"]
    _, refused = type_changes(stored, wanted, "delta")
    assert [str(c) for c in refused] == ["note string → int", "small int → smallint"]


NUMERIC_10_2 = ((10 << 16) | 2) + 4
NUMERIC_14_2 = ((14 << 16) | 2) + 4
FIRST = keyed_table(
    [("id", "int8", True), ("n", "int4", False), ("amount", "numeric", False),
     ("note", "text", False)],
    typmods={"amount": NUMERIC_10_2},
)  # fmt: skip
WIDENED = keyed_table(
    [("id", "int8", True), ("n", "int8", False), ("amount", "numeric", False),
     ("note", "text", False)],
    typmods={"amount": NUMERIC_14_2},
)  # fmt: skip
NARROWED = keyed_table(
    [("id", "int8", True), ("n", "int8", False), ("amount", "numeric", False),
     ("note", "int4", False)],
    typmods={"amount": NUMERIC_14_2},
)  # fmt: skip
OTHER = keyed_table([("id", "int8", True), ("v", "text", False)], name="other")
"""Another table, changed in the batch that narrows ``orders.note``: applied as usual."""

STORES = {
    "parquet": {"use_delta": False},
    "delta": {"use_delta": True, "history": True},
    "iceberg": {"store": "iceberg", "history": True},
}
"""Each store as ``apply_batch``'s keywords (Delta and Iceberg with their history: both
are widened)."""


def rows(spark, root: str) -> dict[int, tuple]:
    frame = read_table(spark, root, "public", "orders").select("id", "n", "amount", "note")
    return {r["id"]: tuple(r)[1:] for r in frame.collect()}


def types(spark, root: str) -> dict[str, str]:
    frame = read_table(spark, root, "public", "orders")
    return {f.name: f.dataType.simpleString() for f in frame.schema.fields}


@pytest.mark.integration
@pytest.mark.parametrize("store", STORES)
def test_a_widened_column_is_followed_and_a_narrowed_one_quarantined(
    spark, tmp_path, store: str
) -> None:
    kwargs = STORES[store]
    root = str(tmp_path / "state")
    lines: list[str] = []
    source = Source()

    def apply(batch_id: int, *changes: tuple[Table, Op, dict[str, str]]) -> dict[str, int]:
        frame, layouts = source.batch(spark, *changes)
        try:
            return apply_batch(spark, frame, root, batch_id, layouts, report=lines.append, **kwargs)
        finally:
            frame.unpersist()

    source.publish(FIRST, OTHER)
    apply(0, (FIRST, Op.INSERT, {"id": "1", "n": "2147483647", "amount": "12345678.91",
                                 "note": "kept"}))  # fmt: skip
    assert types(spark, root)["n"] == "int"
    source.publish(WIDENED)
    applied = apply(
        1,
        (WIDENED, Op.INSERT, {"id": "2", "n": "3000000000", "amount": "123456789012.34",
                              "note": "wide"}),
        (WIDENED, Op.UPDATE, {"id": "3", "n": "-3000000000", "amount": "-0.01",
                              "note": "new"}),
    )  # fmt: skip
    assert applied == {"public.orders": 2}
    assert lines == []
    assert types(spark, root)["n"] == "bigint"
    assert types(spark, root)["amount"] == "decimal(14,2)"
    widened = {
        1: (2147483647, Decimal("12345678.91"), "kept"),
        2: (3000000000, Decimal("123456789012.34"), "wide"),
        3: (-3000000000, Decimal("-0.01"), "new"),  # an update sending every column
    }
    assert rows(spark, root) == widened

    source.publish(NARROWED)
    applied = apply(
        2,
        (NARROWED, Op.INSERT, {"id": "4", "n": "1", "amount": "1.00", "note": "7"}),
        (OTHER, Op.INSERT, {"id": "1", "v": "applied"}),
    )
    assert applied == {"public.other": 1}
    assert rows(spark, root) == widened, "the table is left as it was"
    assert types(spark, root)["note"] == "string"
    other = read_table(spark, root, "public", "other").select("id", "v").collect()
    assert [tuple(r) for r in other] == [(1, "applied")]
    kind = "an Iceberg" if store == "iceberg" else "a Parquet" if store == "parquet" else "a Delta"
    expected_line = (
        "walcast spark materialize: public.orders: the source changed the type of note "
        f"(string → int), which {kind} table cannot follow without changing stored values; "
        "the table is left as it was and its 1 changes of batch 2 are quarantined in "
        f"{quarantine_path(root)} (reason {TYPE_CHANGE}). To follow the new type, drop the "
        "table (and its history), then reload it at the source: walcast snapshot --table "
        "public.orders"
    )
    assert lines == [expected_line]
    quarantined = spark.read.parquet(quarantine_path(root)).collect()
    assert [(r["batch_id"], r["table"], r["reason"], r["after"]["id"]) for r in quarantined] == [
        (2, "orders", TYPE_CHANGE, "4")
    ]
    assert "note string → int" in quarantined[0]["detail"]

    if kwargs.get("history"):
        history = read_history(spark, table_path(root, "public", "orders"))
        assert history is not None
        assert dict(history.dtypes)["n"] == "bigint"
        values = {(r["id"], r["n"]) for r in history.collect()}
        assert values == {(1, 2147483647), (2, 3000000000), (3, -3000000000)}

    if store != "parquet":
        return
    # the same batch again (a restart before its commit): the quarantine does not double
    apply(2, (NARROWED, Op.INSERT, {"id": "4", "n": "1", "amount": "1.00", "note": "7"}),
          (OTHER, Op.INSERT, {"id": "1", "v": "applied"}))  # fmt: skip
    assert spark.read.parquet(quarantine_path(root)).count() == 1


def test_a_refusal_names_every_refused_column() -> None:
    _, refused = type_changes(
        {"a": "bigint", "b": "string"}, [("a", "int"), ("b", "date")], "parquet"
    )
    assert ", ".join(map(str, refused)) == "a bigint → int, b string → date"

"""The schema history: each layout change of a table, at the position of its first change.

The rules of :func:`pipeline.schema_history.differences` without Spark; then changes
encoded by walcast's json encoder under several layouts (:class:`Source`), materialized
into Iceberg batch by batch with a :class:`SchemaHistory`, as ``walcast spark materialize``
keeps it: the rows name each change at the commit LSN of the first change encoded with
the new layout, a batch run again writes the same rows, a restarted job continues from
what the history holds, and a layout that returns within one batch is two changes.
``walcast spark show --schema-history`` prints them, and ``show`` reads the Iceberg table.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from capture.events import Op, Table
from pipeline.schema_history import (
    CHANGES,
    Column,
    LayoutShape,
    SchemaHistory,
    differences,
    read_schema_history,
)
from tests.pipeline.layout_changes import Materialized
from tests.pipeline.test_cli import assert_one_line_error
from tests.support import scenario as sc
from tests.support.events import table_with

ORDERS_ID = 9_700_301


def shape(*columns: tuple[str, int | None, str], key=("id",), identity="default") -> LayoutShape:
    return LayoutShape("v", tuple(Column(*c) for c in columns), key, identity)


ID = ("id", 1, "int8")


def test_each_kind_of_change_is_told_apart() -> None:
    old = shape(ID, ("v", 2, "text"), ("amount", 3, "numeric(10,2)"), ("gone", 4, "int4"))
    new = dataclasses.replace(
        shape(ID, ("label", 2, "text"), ("amount", 3, "numeric(14,2)"), ("note", 5, "text")),
        version="w",
    )
    assert differences(old, new) == [
        ("rename_column", "label", "v", "label"),
        ("type_change", "amount", "numeric(10,2)", "numeric(14,2)"),
        ("add_column", "note", None, "text"),
        ("drop_column", "gone", "int4", None),
    ]
    # without catalog numbers a rename cannot be told from a drop and an add
    unnumbered = shape(("id", None, "int8"), ("label", None, "text"))
    assert differences(shape(("id", None, "int8"), ("v", None, "text")), unnumbered) == [
        ("add_column", "label", None, "text"),
        ("drop_column", "v", "text", None),
    ]
    # a name used again by a new column (another number) is a drop and an add
    assert differences(shape(ID, ("v", 2, "text")), shape(ID, ("v", 3, "text"))) == [
        ("add_column", "v", None, "text"),
        ("drop_column", "v", "text", None),
    ]
    # a layout decoded after later DDL has no numbers: it takes them by name from the
    # version before, so the rename after it is still one (the e2e's orders.note → remark)
    numbered = shape(ID, ("total", 3, "numeric(10,2)"), ("note", 4, "text"))
    decoded_late = shape(
        ("id", None, "int8"), ("total", None, "numeric(14,2)"), ("note", None, "text")
    )
    renamed = shape(ID, ("total", 3, "numeric(14,2)"), ("remark", 4, "text"))
    middle = decoded_late.numbered_from(numbered)
    assert [c.number for c in middle.columns] == [1, 3, 4]
    assert differences(numbered, middle) == [
        ("type_change", "total", "numeric(10,2)", "numeric(14,2)")
    ]
    assert differences(middle, renamed) == [("rename_column", "remark", "note", "remark")]
    assert differences(decoded_late, renamed) == [
        ("add_column", "remark", None, "text"),
        ("drop_column", "note", "text", None),
    ]
    rekeyed = shape(ID, ("v", 2, "text"), key=("id", "v"), identity="full")
    assert differences(shape(ID, ("v", 2, "text")), rekeyed) == [
        ("primary_key", None, "id", "id,v"),
        ("replica_identity", None, "default", "full"),
    ]
    other = dataclasses.replace(shape(ID), version="w")
    assert differences(shape(ID), other) == [("layout", None, None, None)]
    assert {c for c, *_ in differences(old, new)} <= set(CHANGES)


def numeric(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4  # PostgreSQL's typmod of numeric(p,s)


def orders(*columns: tuple[str, str, int], **numbers: int) -> Table:
    table = table_with(
        "public", "orders",
        [("id", "int8", True, -1), *[(n, t, False, m) for n, t, m in columns]],
        relation_id=ORDERS_ID,
    )  # fmt: skip
    return dataclasses.replace(table, column_numbers={"id": 1, **numbers})


V1 = orders(("v", "text", -1), ("amount", "numeric", numeric(10, 2)), v=2, amount=3)
V2 = orders(("label", "text", -1), ("amount", "numeric", numeric(10, 2)), label=2, amount=3)
V3 = orders(  # amount widened, note added
    ("label", "text", -1), ("amount", "numeric", numeric(14, 2)), ("note", "text", -1),
    label=2, amount=3, note=4,
)  # fmt: skip
V4 = orders(  # label renamed back to v
    ("v", "text", -1), ("amount", "numeric", numeric(14, 2)), ("note", "text", -1),
    v=2, amount=3, note=4,
)  # fmt: skip


def recorded(spark, root: str) -> list[tuple]:
    frame = read_schema_history(spark, root)
    assert frame is not None
    return sorted(
        (r["batch_id"], r["layout_index"], r["commit_lsn_num"], r["change"], r["column"],
         r["before"], r["after"])
        for r in frame.collect()
    )  # fmt: skip


@pytest.mark.integration
def test_layout_changes_are_recorded_at_their_first_change(spark, tmp_path: Path) -> None:
    root = str(tmp_path / "state")
    tables = Materialized(spark, root, "iceberg", schema_history=SchemaHistory(root))
    source = tables.source
    source.publish(V1)
    tables.apply(
        0,
        (V1, Op.INSERT, {"id": "1", "v": "a", "amount": "1.00"}),  # LSN 0x1000
        (V1, Op.INSERT, {"id": "2", "v": "b", "amount": "2.00"}),
    )
    source.publish(V2, V3)
    batch = (
        (V1, Op.UPDATE, {"id": "1", "v": "a2", "amount": "1.00"}),  # 0x3000
        (V2, Op.UPDATE, {"id": "2", "label": "b2", "amount": "2.00"}),  # 0x4000: renamed
        (V2, Op.INSERT, {"id": "3", "label": "c", "amount": "3.00"}),
        (V3, Op.INSERT, {"id": "4", "label": "d", "amount": "123456789.00", "note": "n"}),
    )  # 0x6000: widened and added
    tables.apply(1, *batch)
    first = [
        (0, 0, 0x1000, "first_seen", None, None, None),
        (1, 0, 0x4000, "rename_column", "label", "v", "label"),
        (1, 1, 0x6000, "add_column", "note", None, "text"),
        (1, 1, 0x6000, "type_change", "amount", "numeric(10,2)", "numeric(14,2)"),
    ]
    assert recorded(spark, root) == first
    saved = source.lsn
    source.lsn = 0x2000  # the same batch again, as a restarted job replays it
    tables.apply(1, *batch)
    assert source.lsn == saved
    assert recorded(spark, root) == first
    # a restarted job: the version before batch 2 comes from the history on disk; a
    # layout that returns within the batch (V3, V4, V3) is two changes
    again = Materialized(spark, root, "iceberg", schema_history=SchemaHistory(root))
    again.source = source
    source.publish(V4, V3)  # V3 newest again
    again.apply(
        2,
        (V3, Op.UPDATE, {"id": "4", "label": "d2", "amount": "4.00", "note": "n"}),  # 0x7000
        (V4, Op.UPDATE, {"id": "3", "v": "c2", "amount": "3.00", "note": None}),  # 0x8000
        (V3, Op.UPDATE, {"id": "3", "label": "c3", "amount": "3.00", "note": None}),  # 0x9000
    )
    assert recorded(spark, root) == [
        *first,
        (2, 0, 0x8000, "rename_column", "v", "label", "v"),
        (2, 1, 0x9000, "rename_column", "label", "v", "label"),
    ]
    frame = read_schema_history(spark, root)
    assert frame is not None
    last = frame.where("batch_id = 2 AND layout_index = 1").first()
    assert last is not None
    assert (last["layout"], last["previous_layout"]) == (V3.layout_version, V4.layout_version)
    assert [c["name"] for c in json.loads(last["columns"])] == ["id", "label", "amount", "note"]
    assert tables.rows("orders", "id", "label", "note") == [
        (1, "a2", None), (2, "b2", None), (3, "c3", None), (4, "d2", "n"),
    ]  # fmt: skip

    # as a user reads them: walcast spark show, of the schema history and of the table
    args = ("spark", "show", "--tables", root, "--table", "public.orders")
    done = sc.walcast(*args, "--schema-history", timeout=600)
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(p["batch_id"], p["change"], p["commit_lsn"]) for p in printed] == [
        (0, "first_seen", "0/1000"), (1, "rename_column", "0/4000"),
        (1, "add_column", "0/6000"), (1, "type_change", "0/6000"),
        (2, "rename_column", "0/8000"), (2, "rename_column", "0/9000"),
    ]  # fmt: skip
    assert "public.orders's schema history: 6 rows" in done.stderr
    done = sc.walcast(*args, timeout=600)  # an Iceberg table (was: "no such table")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [1, 2, 3, 4]


def test_show_without_a_schema_history_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    done = sc.walcast(
        "spark", "show", "--tables", str(tmp_path / "state"), "--table", "public.orders",
        "--schema-history", timeout=600,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert_one_line_error(done, "public.orders", "has no schema history", "--bootstrap-servers")

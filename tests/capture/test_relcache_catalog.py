"""Unit tests (no server): what a Relation message's table takes from the catalog.

* the values that rows stored before an ``ADD COLUMN … DEFAULT`` read (``attmissingval``),
  named in its layout record, and NULL for a column without a DEFAULT (``missing_null``); a
  new column whose DEFAULT the catalog cannot give for those rows is warned about once,
  naming the table and the reload;
* each column's number (``attnum``), which a RENAME COLUMN keeps: in the layout record as
  ``number``, only where the catalog of now still describes the message's column.
"""

from __future__ import annotations

from structlog.testing import capture_logs

from capture.formats.layout import layout_record
from capture.pgoutput.messages import Relation, RelationColumn, ReplicaIdentity
from capture.relcache import RelationCache
from capture.replication.catalog import CatalogColumn

INT4, TEXT = 23, 25


def relation(*names: str) -> Relation:
    columns = tuple(RelationColumn(1 if n == "id" else 0, n, INT4 if n == "id" else TEXT, -1)
                    for n in names)  # fmt: skip
    return Relation(None, 7, "shop", "orders", ReplicaIdentity.DEFAULT, columns)


def column(number: int, missing: str | None = None, *, default: bool = False,
           type_oid: int = TEXT) -> CatalogColumn:  # fmt: skip
    return CatalogColumn(number, type_oid, default or missing is not None, missing)


def test_the_rows_stored_before_an_added_column_read_its_default() -> None:
    catalog = {
        "id": column(1, type_oid=INT4), "note": column(2), "region": column(4, "eu"),
        "gone": column(5, "x"), "stamped": column(6, default=True),
        "retyped": column(7, type_oid=INT4),
    }  # fmt: skip
    asked: list[int] = []
    cache = RelationCache(column_resolver=lambda oid: asked.append(oid) or catalog)
    before = cache.apply_relation(relation("id", "note"))
    assert before.missing_values == {"id": None, "note": None}
    with capture_logs() as logs:
        table = cache.apply_relation(relation("id", "note", "region", "stamped", "retyped"))
    assert asked == [7, 7]  # once per Relation message
    # "gone" is not a column of this layout (dropped since); "stamped" has no value to give;
    # "retyped" is int4 now, text in the message: another column by that name, unknown
    assert table.missing_values == {"id": None, "note": None, "region": "eu"}
    columns = {c["name"]: c for c in layout_record(table)["columns"]}
    assert columns["region"]["missing"] == "eu"
    assert "missing_null" not in columns["region"]
    assert columns["note"]["missing_null"] is True
    assert "missing" not in columns["note"]
    for unknown in ("stamped", "retyped"):
        assert "missing" not in columns[unknown]
        assert "missing_null" not in columns[unknown]
    assert (
        table.layout_version
        == RelationCache()
        .apply_relation(relation("id", "note", "region", "stamped", "retyped"))
        .layout_version
    ), "the catalog's facts are not part of the layout's version"
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["event"], e["table"], e["column"]) for e in warnings] == [
        ("added_column_values_unknown", "shop.orders", "stamped")
    ]
    assert warnings[0]["hint"] == "reload the table: walcast snapshot --table shop.orders"


def test_a_table_first_seen_warns_of_nothing_and_an_unreachable_catalog_gives_no_facts() -> None:
    with capture_logs() as logs:
        table = RelationCache(
            column_resolver=lambda _: {"note": column(2, default=True)}
        ).apply_relation(relation("id", "note"))
        unknown = RelationCache(column_resolver=lambda _: None).apply_relation(
            relation("id", "note")
        )
    assert table.missing_values == unknown.missing_values == {}
    assert unknown.column_numbers == {}
    assert "number" not in layout_record(unknown)["columns"][0]
    assert [e for e in logs if e["log_level"] == "warning"] == []


def test_each_column_has_its_catalog_number_in_the_layout_record() -> None:
    # note (attnum 2) renamed to memo: the number stays, the new column gets a higher one
    catalog = {"id": column(1, type_oid=INT4), "memo": column(2), "region": column(4)}
    table = RelationCache(column_resolver=lambda _: catalog).apply_relation(
        relation("id", "memo", "region")
    )
    assert table.column_numbers == {"id": 1, "memo": 2, "region": 4}
    assert [c["number"] for c in layout_record(table)["columns"]] == [1, 2, 4]


def test_a_column_the_catalog_of_now_describes_otherwise_has_no_number() -> None:
    # decoded after later DDL: "note" renamed again (not there), "region" has another type
    later = {"id": column(1, type_oid=INT4), "memo": column(2), "region": column(4, type_oid=INT4)}
    table = RelationCache(column_resolver=lambda _: later).apply_relation(
        relation("id", "note", "region")
    )
    assert table.column_numbers == {"id": 1}
    assert [c.get("number") for c in layout_record(table)["columns"]] == [1, None, None]
    # names swapped since (a ↔ b): the numbers found fall in the message's order, so none
    swapped = {"id": column(1, type_oid=INT4), "a": column(3), "b": column(2)}
    crossed = RelationCache(column_resolver=lambda _: swapped).apply_relation(
        relation("id", "a", "b")
    )
    assert crossed.column_numbers == {}


def test_a_name_given_to_a_new_column_since_is_not_taken_for_the_message_s_column() -> None:
    # decoded after RENAME note TO remark, then ADD COLUMN note: "note" now names number 3,
    # but the message's note was number 2 (remark now), which the message does not name
    later = {"id": column(1, type_oid=INT4), "remark": column(2), "note": column(3)}
    table = RelationCache(column_resolver=lambda _: later).apply_relation(relation("id", "note"))
    assert table.column_numbers == {}
    # the same catalog, for the messages sent after each step, gives every number
    renamed = RelationCache(column_resolver=lambda _: later).apply_relation(
        relation("id", "remark")
    )
    assert renamed.column_numbers == {"id": 1, "remark": 2}
    both = RelationCache(column_resolver=lambda _: later).apply_relation(
        relation("id", "remark", "note")
    )
    assert both.column_numbers == {"id": 1, "remark": 2, "note": 3}

"""Unit tests (no server): a Relation message's table carries the values that rows stored
before an ``ADD COLUMN … DEFAULT`` read (the catalog's ``attmissingval``), and its layout
record names them; a new column whose DEFAULT the catalog cannot give for those rows is
warned about once, naming the table and the reload."""

from __future__ import annotations

from structlog.testing import capture_logs

from capture.formats.layout import layout_record
from capture.pgoutput.messages import Relation, RelationColumn, ReplicaIdentity
from capture.relcache import RelationCache

INT4, TEXT = 23, 25


def relation(*names: str) -> Relation:
    columns = tuple(RelationColumn(1 if n == "id" else 0, n, INT4 if n == "id" else TEXT, -1)
                    for n in names)  # fmt: skip
    return Relation(None, 7, "shop", "orders", ReplicaIdentity.DEFAULT, columns)


def test_the_rows_stored_before_an_added_column_read_its_default() -> None:
    catalog = {"region": "eu", "gone": "x", "stamped": None}
    asked: list[int] = []
    cache = RelationCache(missing_resolver=lambda oid: asked.append(oid) or catalog)
    before = cache.apply_relation(relation("id", "note"))
    assert before.missing_values == {}
    with capture_logs() as logs:
        table = cache.apply_relation(relation("id", "note", "region", "stamped"))
    assert asked == [7, 7]  # once per Relation message
    # "gone" is not a column of this layout (dropped since); "stamped" has no value to give
    assert table.missing_values == {"region": "eu"}
    columns = {c["name"]: c for c in layout_record(table)["columns"]}
    assert columns["region"]["missing"] == "eu"
    assert "missing" not in columns["note"]
    assert "missing" not in columns["stamped"]
    assert (
        table.layout_version
        == RelationCache()
        .apply_relation(relation("id", "note", "region", "stamped"))
        .layout_version
    ), "the missing values are not part of the layout's version"
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["event"], e["table"], e["column"]) for e in warnings] == [
        ("added_column_values_unknown", "shop.orders", "stamped")
    ]
    assert warnings[0]["hint"] == "reload the table: walcast snapshot --table shop.orders"


def test_a_table_first_seen_warns_of_nothing_and_an_unreachable_catalog_gives_no_values() -> None:
    with capture_logs() as logs:
        table = RelationCache(missing_resolver=lambda _: {"note": None}).apply_relation(
            relation("id", "note")
        )
        unknown = RelationCache(missing_resolver=lambda _: None).apply_relation(
            relation("id", "note")
        )
    assert table.missing_values == unknown.missing_values == {}
    assert [e for e in logs if e["log_level"] == "warning"] == []

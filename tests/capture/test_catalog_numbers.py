"""Unit tests (no server): the number of each column a Relation message names, from the
catalog of now (:mod:`capture.catalog_numbers`), when walcast decodes the message after
later DDL: a rename is followed where the catalog says which column it must be, and
nothing is given where it could be another."""

from __future__ import annotations

from capture.catalog_numbers import message_numbers
from capture.replication.catalog import CatalogColumn

INT4, TEXT, BOOL = 23, 25, 16


def live(number: int, type_oid: int = TEXT) -> CatalogColumn:
    return CatalogColumn(number, type_oid, False, None)


def dropped(number: int) -> CatalogColumn:
    return CatalogColumn(number, 0, False, None, dropped=True)


MESSAGE = [("id", INT4), ("note", TEXT), ("active", BOOL), ("region", TEXT)]
"""Columns 1 to 4, as the message names them."""


def test_every_column_found_by_name() -> None:
    catalog = {"id": live(1, INT4), "note": live(2), "active": live(3, BOOL), "region": live(4)}
    assert message_numbers(MESSAGE, catalog) == {"id": 1, "note": 2, "active": 3, "region": 4}


def test_columns_renamed_since_between_two_found_take_the_numbers_between() -> None:
    # RENAME note TO memo and active TO flag after the message was sent, before it was decoded
    catalog = {"id": live(1, INT4), "memo": live(2), "flag": live(3, BOOL), "region": live(4)}
    assert message_numbers(MESSAGE, catalog) == {"id": 1, "note": 2, "active": 3, "region": 4}
    # the first column too (nothing found before it)
    catalog = {"key": live(1, INT4), "note": live(2), "active": live(3, BOOL), "region": live(4)}
    assert message_numbers(MESSAGE, catalog)["id"] == 1


def test_the_last_column_renamed_since_when_nothing_was_added_or_dropped_above() -> None:
    catalog = {"id": live(1, INT4), "note": live(2), "active": live(3, BOOL), "place": live(4)}
    assert message_numbers(MESSAGE, catalog)["region"] == 4
    # a column added since as well: region may be 4 or 5 (4 dropped since): no number
    added = {**catalog, "extra": live(5)}
    assert message_numbers(MESSAGE, added) == {"id": 1, "note": 2, "active": 3}
    # a column dropped above: place may be a column added after region was dropped
    gone = {"id": live(1, INT4), "note": live(2), "active": live(3, BOOL), "......": dropped(4),
            "place": live(5)}  # fmt: skip
    assert message_numbers(MESSAGE, gone) == {"id": 1, "note": 2, "active": 3}


def test_no_number_between_two_columns_when_the_catalog_cannot_say_which() -> None:
    # a column dropped between them: dropped before the message (and memo is note) or
    # note dropped since (and memo is another): nothing is given, since memo (2 or 3)
    # existed when the message was sent under a name it does not find
    catalog = {"id": live(1, INT4), "......": dropped(2), "memo": live(3), "active": live(4, BOOL),
               "region": live(5)}  # fmt: skip
    assert message_numbers(MESSAGE, catalog) == {}
    # another type between them than the message's: not the message's column
    retyped = {"id": live(1, INT4), "memo": live(2, INT4), "active": live(3, BOOL),
               "region": live(4)}  # fmt: skip
    assert message_numbers(MESSAGE, retyped) == {}
    # two names swapped since: the numbers found do not rise
    swapped = {"id": live(1, INT4), "region": live(2), "active": live(3, BOOL), "note": live(4)}
    assert message_numbers(MESSAGE, swapped) == {}


def test_a_name_given_to_a_new_column_since_is_not_taken_for_the_message_s_column() -> None:
    # RENAME region TO place, then ADD COLUMN region: "region" finds 5, and place (4),
    # which the message does not name, lies below it
    catalog = {"id": live(1, INT4), "note": live(2), "active": live(3, BOOL), "place": live(4),
               "region": live(5)}  # fmt: skip
    assert message_numbers(MESSAGE, catalog) == {}

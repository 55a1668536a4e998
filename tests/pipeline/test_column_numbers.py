"""Unit tests (no Spark session): renames and names used again, told by catalog numbers.

The rules of :mod:`pipeline.column_numbers` on hand-built layouts: what the stored rows get
(:func:`stored_fills`), what the stored columns stand for when the table recorded nothing
(:func:`stored_numbers`), and which older layouts' images are mapped (:func:`image_renames`).
"""

from __future__ import annotations

import json

from pipeline.column_numbers import (
    COLUMN_NUMBERS,
    every_name,
    image_renames,
    names_per_column,
    record_numbers,
    stored_fills,
    stored_numbers,
)

V1 = (("id", 1), ("v", 2))
RENAMED = (("id", 1), ("label", 2))
READDED = (("id", 1), ("label", 2), ("v", 3))


def test_a_rename_copies_and_a_name_used_again_takes_the_new_column_s_default() -> None:
    fills = stored_fills({"id": 1, "v": 2}, ["id", "v"], READDED, {"v": "new"})
    assert fills == {"label": ("from", "v"), "v": ("value", "new")}
    # without a DEFAULT the name used again is NULL in the rows stored before
    assert stored_fills({"id": 1, "v": 2}, ["id", "v"], READDED, {})["v"] == ("value", None)


def test_a_swap_of_two_names_is_two_copies_and_nothing_to_do_is_nothing() -> None:
    swapped = (("id", 1), ("b", 2), ("a", 3))
    assert stored_fills({"id": 1, "a": 2, "b": 3}, ["id", "a", "b"], swapped, {}) == {
        "b": ("from", "a"),
        "a": ("from", "b"),
    }
    assert stored_fills({"id": 1, "v": 2}, ["id", "v"], V1, {}) == {}


def test_columns_without_numbers_are_followed_by_name_as_before() -> None:
    unnumbered = (("id", None), ("label", None))
    assert stored_fills({}, ["id", "v"], unnumbered, {}) == {}
    assert stored_fills({"id": 1}, ["id", "v"], (("id", 1), ("v", None)), {}) == {}


def test_stored_numbers_are_recorded_else_the_layout_with_exactly_the_stored_columns() -> None:
    assert stored_numbers({"id": 1, "v": 9, "gone": 4}, ["id", "v"], [V1]) == {"id": 1, "v": 9}
    # no record: the newest layout whose columns are the stored ones (v was number 2 there,
    # though the newest layout gives the name v to number 3)
    assert stored_numbers(None, ["id", "v"], [V1, RENAMED, READDED]) == {"id": 1, "v": 2}
    # none has exactly those: each name's newest number
    assert stored_numbers(None, ["id", "v", "x"], [V1, RENAMED, READDED]) == {"id": 1, "v": 3}


def test_images_of_older_layouts_are_mapped_to_the_newest_names() -> None:
    assert image_renames([V1, RENAMED, READDED]) == [
        (["id", "v"], {"v": "label"}),  # v was number 2, label now; the new v is another
    ]
    assert image_renames([V1, RENAMED]) == [(["id", "v"], {"v": "label"})]
    dropped = (("id", 1),)
    # v dropped, then v added again: the old images' v is left out, not the new v
    assert image_renames([V1, dropped, (("id", 1), ("v", 3))]) == []  # same names: ambiguous
    assert image_renames([(("id", 1), ("v", 2), ("w", 4)), (("id", 1), ("v", 3))]) == [
        (["id", "v", "w"], {"v": None})
    ]


def test_two_older_layouts_with_the_same_names_and_other_numbers_are_not_mapped() -> None:
    ab, ba = (("id", 1), ("a", 2), ("b", 3)), (("id", 1), ("b", 2), ("a", 3))
    newest = (("id", 1), ("c", 2), ("a", 3))
    assert image_renames([ab, ba, newest]) == []


def test_a_layout_without_numbers_is_followed_by_name_and_maps_nothing() -> None:
    # decoded when the catalog could no longer tell (capture gave no numbers): its images
    # are mapped as an older layout with the same names and numbers says
    unknown = (("id", None), ("v", None))
    assert image_renames([V1, unknown, RENAMED]) == [(["id", "v"], {"v": "label"})]


def test_a_number_stands_for_one_stored_column_its_newest_name() -> None:
    # origin (4) renamed to via while a Delta table kept origin: without a record, each
    # number is its newest name's, so a second rename copies via's values, not origin's
    layouts = [(("at", 1), ("origin", 4)), (("at", 1), ("via", 4))]
    assert stored_numbers(None, ["at", "origin", "via"], layouts) == {"at": 1, "via": 4}
    again = (("at", 1), ("how", 4))
    numbers = stored_numbers(None, ["at", "origin", "via"], [*layouts, again])
    assert stored_fills(numbers, ["at", "origin", "via"], again, {}) == {"how": ("from", "via")}


def test_the_recorded_numbers_leave_a_renamed_away_column_without_one() -> None:
    class Properties:
        def __init__(self) -> None:
            self.values: dict[str, str] = {}

        def get(self, key: str) -> str | None:
            return self.values.get(key)

        def set(self, key: str, value: str) -> None:
            self.values[key] = value

    properties = Properties()
    record_numbers(properties, {"at": 1, "origin": 4, "gone": 5}, (("at", 1), ("via", 4)))  # type: ignore[arg-type]
    assert json.loads(properties.values[COLUMN_NUMBERS]) == {"at": 1, "via": 4, "gone": 5}


def test_the_history_keeps_a_value_under_every_name_only_its_column_had() -> None:
    # updated (3) renamed to r1, then to r3; v (2) renamed to label and v used again (4);
    # active (5) renamed to r2, back to active, then dropped (no longer in the newest)
    layouts = [
        (("id", 1), ("v", 2), ("updated", 3), ("active", 5)),
        (("id", 1), ("v", 2), ("r1", 3), ("r2", 5)),
        (("id", 1), ("v", 2), ("r1", 3), ("active", 5)),
        (("id", 1), ("label", 2), ("r3", 3), ("v", 4)),
    ]
    assert names_per_column(layouts) == [["r1", "r3", "updated"], ["active", "r2"]]
    # the history's columns: the names a batch has, and every other name of their columns
    groups = names_per_column(layouts)
    assert every_name(groups, ["id", "r3", "label"]) == ["id", "r3", "label", "r1", "updated"]
    assert every_name(groups, ["id", "r2"]) == ["id", "r2", "active"]


def test_a_rename_and_an_add_in_one_transaction_are_one_layout_and_both_followed() -> None:
    # ALTER TABLE t RENAME COLUMN v TO label; ALTER TABLE t ADD COLUMN w int DEFAULT 7 (one
    # transaction: one Relation message, one layout)
    both = (("id", 1), ("label", 2), ("w", 3))
    assert image_renames([V1, both]) == [(["id", "v"], {"v": "label"})]
    assert stored_fills({"id": 1, "v": 2}, ["id", "v"], both, {"w": "7"}) == {
        "label": ("from", "v")  # w is new: its ADD and its DEFAULT's fill (planned_fills)
    }

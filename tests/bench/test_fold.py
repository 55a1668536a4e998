"""bench/kit/fold.py: the README's consumer contract as the soak and the tests fold topics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from bench.kit.fold import (
    MISSING_TOAST,
    Change,
    Tables,
    column_renames,
    drop_replays,
    fold_json,
    lsn_number,
    missing_values,
)

KEYS: dict[str, tuple[str, ...] | None] = {"t": ("id",), "bag": None}


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    lsn: str
    ordinal: int
    source: str = "s1"
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return {
            "walcast.commit_lsn": self.lsn,
            "walcast.ordinal": str(self.ordinal),
            "walcast.source": self.source,
        }

    @property
    def value(self) -> bytes:
        return orjson.dumps(self.body)


def change(table: str, op: str, before: Any = None, after: Any = None, **kw: Any) -> dict:
    return {"table": table, "op": op, "before": before, "after": after, **kw}


def test_lsn_numbers_compare_as_numbers_not_text() -> None:
    assert lsn_number("0/A") == 10
    assert lsn_number("1/0") == 1 << 32
    assert lsn_number("0/FFFFFFFF") < lsn_number("1/0")
    assert lsn_number("9/0") < lsn_number("10/0")  # as text, "10/0" < "9/0"
    assert lsn_number("0/9") < lsn_number("0/10")


def test_a_position_not_above_the_last_one_kept_is_a_replay_per_source_and_partition() -> None:
    records = [
        Msg("a", 0, 0, "0/10", 1),
        Msg("a", 0, 1, "0/20", 1),
        Msg("a", 0, 2, "0/10", 1),  # replayed after a crash
        Msg("a", 0, 3, "0/12", 1),  # below the last kept, never seen: dropped all the same
        Msg("a", 0, 4, "0/30", 1),
        Msg("a", 1, 0, "0/10", 1),  # another partition: its own sequence
        Msg("a", 0, 5, "0/15", 1, source="s2"),  # another source: its own sequence
        Msg("b", 0, 0, "0/5", 1),  # another topic
    ]
    kept, replays = drop_replays(reversed(records))  # any input order: offsets decide
    assert [(r.topic, r.partition, r.offset) for r in replays] == [("a", 0, 2), ("a", 0, 3)]
    assert len(kept) == 6
    assert [r.offset for r in kept if r.topic == "a" and r.partition == 0] == [0, 1, 4, 5]


def test_keyed_rows_insert_update_move_delete_toast_truncate() -> None:
    tables = Tables(KEYS)
    tables.apply(Change("t", "insert", None, {"id": 1, "v": "a", "doc": "big"}, 1))
    tables.apply(Change("t", "insert", None, {"id": 2, "v": "b", "doc": "x"}, 2))
    tables.apply(
        Change("t", "update", {"id": 1}, {"id": 3, "v": "a2", "doc": None}, 3, ("doc",))
    )  # a key change that keeps the unchanged TOAST value
    tables.apply(Change("t", "delete", {"id": 2}, None, 4))
    tables.apply(Change("t", "update", None, {"id": 9, "v": "z", "doc": None}, 5, ("doc",)))
    assert sorted(tables.rows("t", ["id", "v", "doc"])) == [
        (3, "a2", "big"),
        (9, "z", MISSING_TOAST),
    ]
    assert tables.missing_toast == 1
    tables.apply(Change("t", "snapshot", None, {"id": 9, "v": "z", "doc": "loaded"}, 1))
    assert sorted(tables.rows("t", ["id", "doc"])) == [(3, "big"), (9, "loaded")]
    tables.apply(Change("t", "truncate", None, None, 6))
    assert tables.rows("t", ["id"]) == []


def test_a_keyless_table_is_an_exact_multiset_that_its_load_starts_over() -> None:
    tables = Tables(KEYS)
    row = {"x": 1, "y": "a"}
    tables.apply(Change("bag", "delete", row, None, 1))  # before the table's load
    assert tables.absent_deletes == 1
    assert tables.below_zero() == {"bag": [(("x", 1), ("y", "a"))]}
    tables.apply(Change("bag", "snapshot", None, row, 1))  # the load: the whole table
    tables.apply(Change("bag", "snapshot", None, row, 2))
    tables.apply(Change("bag", "insert", None, {"x": 2, "y": None}, 1))
    tables.apply(Change("bag", "update", row, {"x": 1, "y": "b"}, 1))
    assert tables.below_zero() == {}
    assert sorted(tables.rows("bag", ["x", "y"]), key=str) == [(1, "a"), (1, "b"), (2, None)]
    tables.apply(Change("bag", "delete", {"x": 7, "y": "gone"}, None, 1))  # wrong data
    assert tables.below_zero() == {"bag": [(("x", 7), ("y", "gone"))]}
    assert tables.absent_deletes == 2


def test_a_change_of_a_table_the_fold_does_not_know_fails() -> None:
    with pytest.raises(KeyError):
        Tables(KEYS).apply(Change("other", "insert", None, {"id": 1}, 1))


def test_fold_json_applies_each_sources_changes_in_position_order() -> None:
    records = [
        # a load row of t sorts after the change its chunk includes, whatever the topic
        Msg("p.t", 0, 0, "0/30", 1, body=change("t", "snapshot", after={"id": 1, "v": "load"})),
        Msg("p.t", 0, 1, "0/40", 1, body=change("t", "update", after={"id": 1, "v": "new"})),
        Msg("p.t", 0, 2, "0/40", 1, body=change("t", "update", after={"id": 1, "v": "new"})),
        Msg("p.bag", 0, 0, "0/20", 1, body=change("bag", "insert", after={"x": 5})),
        Msg("p.t", 0, 0, "0/30", 1, "s2", body=change("t", "insert", after={"id": 7, "v": "b"})),
    ]
    folded = fold_json(records, KEYS)
    assert (folded.messages, folded.replays) == (5, 1)
    assert sorted(folded.sources) == ["s1", "s2"]
    one = folded.sources["s1"]
    assert one.rows("t", ["id", "v"]) == [(1, "new")]
    assert one.rows("bag", ["x"]) == [(5,)]
    assert folded.sources["s2"].rows("t", ["id", "v"]) == [(7, "b")]
    assert folded.sources["s2"].rows("bag", ["x"]) == []


@dataclass
class LayoutRecord:
    key: bytes
    value: bytes


def test_rows_encoded_before_a_column_was_added_read_the_layout_s_missing_value() -> None:
    source = "7/db/slot"
    layouts = [  # the schema topic's records, oldest first
        LayoutRecord(f"{source}/public.t/v1".encode(),
                     orjson.dumps({"table": "t", "columns": [{"name": "id"}, {"name": "v"}]})),
        LayoutRecord(f"{source}/public.t/v2".encode(),
                     orjson.dumps({"table": "t", "columns": [
                         {"name": "id"}, {"name": "v"}, {"name": "tier", "missing": "basic"}]})),
    ]  # fmt: skip
    missing = missing_values(layouts)
    assert missing == {(source, "t"): {"tier": "basic"}}
    tables = Tables(KEYS)
    tables.apply(Change("t", "insert", None, {"id": 1, "v": "before the ADD"}, 1))
    tables.apply(Change("t", "insert", None, {"id": 2, "v": "after", "tier": None}, 2))
    tables.apply(Change("t", "insert", None, {"id": 3, "v": "after", "tier": "gold"}, 3))
    assert sorted(tables.rows("t", ["id", "tier"], missing[(source, "t")])) == [
        (1, "basic"),
        (2, None),
        (3, "gold"),
    ]
    assert sorted(tables.rows("t", ["id", "tier"])) == [(1, None), (2, None), (3, "gold")]


def _layout(source: str, version: str, *columns: tuple[str, int]) -> LayoutRecord:
    body = {"table": "t", "columns": [{"name": n, "number": k} for n, k in columns]}
    return LayoutRecord(f"{source}/public.t/{version}".encode(), orjson.dumps(body))


def test_rows_encoded_before_a_rename_have_their_values_under_the_new_name() -> None:
    source = "7/db/slot"
    layouts = [  # v renamed to label (number 2), then a new column takes the name v
        _layout(source, "v1", ("id", 1), ("v", 2)),
        _layout(source, "v2", ("id", 1), ("label", 2)),
        _layout(source, "v3", ("id", 1), ("label", 2), ("v", 3)),
    ]
    renames = column_renames(layouts)
    assert renames == {(source, "t"): [(["id", "v"], {"v": "label"})]}
    tables = Tables(KEYS)
    tables.apply(Change("t", "insert", None, {"id": 1, "v": "before the rename"}, 1))
    tables.apply(Change("t", "insert", None, {"id": 2, "label": "between"}, 2))
    tables.apply(Change("t", "insert", None, {"id": 3, "label": "after", "v": "new"}, 3))
    got = tables.rows("t", ["id", "label", "v"], {}, renames[(source, "t")])
    assert sorted(got) == [
        (1, "before the rename", None),
        (2, "between", None),
        (3, "after", "new"),
    ]
    # without the renames, the old value would read as the new column's
    assert min(tables.rows("t", ["id", "label", "v"])) == (1, None, "before the rename")

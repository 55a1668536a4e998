from __future__ import annotations

import dataclasses

from capture.events import Op
from capture.split import key_changed, split_key_update
from tests.support.events import event, make_table

T = make_table("public", "t", [("id", "int4", True), ("v", "text", False)])
FULL = make_table("public", "f", [("id", "int4", True), ("v", "text", True)], identity="f")


def test_key_image_means_key_changed() -> None:
    ev = event(Op.UPDATE, T, before={"id": "1"}, before_key_only=True, after={"id": "2", "v": "x"})
    delete, insert = split_key_update(ev)
    assert (delete.op, insert.op) == (Op.DELETE, Op.INSERT)
    assert delete.before is ev.before
    assert insert.after is ev.after
    assert delete.ordinal == insert.ordinal == ev.ordinal


def test_update_without_key_change_is_kept() -> None:
    ev = event(Op.UPDATE, T, after={"id": "1", "v": "y"})
    assert split_key_update(ev) == (ev,)
    assert not key_changed(event(Op.INSERT, T, after={"id": "1"}))


def test_full_identity_compares_primary_key_values() -> None:
    full_pk = dataclasses.replace(FULL, primary_key=("id",))
    same = event(Op.UPDATE, full_pk, before={"id": "1", "v": "a"}, after={"id": "1", "v": "b"})
    moved = event(Op.UPDATE, full_pk, before={"id": "1", "v": "a"}, after={"id": "5", "v": "a"})
    assert split_key_update(same) == (same,)
    assert [e.op for e in split_key_update(moved)] == [Op.DELETE, Op.INSERT]

"""What the Spark jobs must produce for a synthetic stream (``capture.teststream.generate``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from capture.events import ChangeEvent, Image, Op
from capture.pgoutput.messages import UNCHANGED_TOAST
from capture.synthetic import generate

FLOAT_TYPES = {"float4", "float8"}


def image_text(image: Image | None) -> dict[str, str | None] | None:
    """PostgreSQL text of the columns an image carries (unchanged TOAST left out)."""
    if image is None:
        return None
    return {k: v for k, v in image.as_dict(typed=False).items() if v is not UNCHANGED_TOAST}


def changes(count: int, seed: int = 7, tables: int = 8) -> list[ChangeEvent]:
    return [e for e in generate(count, seed, tables) if isinstance(e, ChangeEvent)]


def same_value(expected: Any, got: Any, type_name: str) -> bool:
    """Equal texts; float columns compare as numbers (JSON number rendering differs)."""
    if expected == got:
        return True
    if type_name in FLOAT_TYPES and expected is not None and got is not None:
        return float(expected) == float(got)
    return False


def final_state(count: int, seed: int = 7, tables: int = 8) -> dict[tuple[str, str], Any]:
    """Per table: key tuple -> row (tables with a key) or Counter of rows (without)."""
    state: dict[tuple[str, str], Any] = {}
    for e in changes(count, seed, tables):
        t = e.table
        pk = list(t.primary_key)
        rows = state.setdefault((t.schema, t.name), {} if pk else Counter())
        before, after = image_text(e.before), image_text(e.after)
        if not pk:
            if e.op in (Op.DELETE, Op.UPDATE):
                rows[frozenset(before.items())] -= 1
            if e.op in (Op.INSERT, Op.UPDATE):
                rows[frozenset(after.items())] += 1
            continue
        if e.op is Op.INSERT:
            rows[tuple(after[c] for c in pk)] = after
        elif e.op is Op.DELETE:
            rows.pop(tuple(before[c] for c in pk), None)
        elif e.op is Op.UPDATE:
            new_key = tuple(after[c] for c in pk)
            old_key = tuple(before[c] for c in pk) if before else new_key
            rows[new_key] = {**rows.pop(old_key, {}), **after}
    return state


def as_rows(state: Any) -> list[tuple]:
    """Comparable sorted rows of one table's expected state."""
    if isinstance(state, Counter):
        return sorted(tuple(sorted(k)) for k, n in state.items() for _ in range(n))
    return sorted(tuple(sorted(v.items())) for v in state.values())

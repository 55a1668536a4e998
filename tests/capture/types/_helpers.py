"""Shared test helpers: strict value comparison."""

from __future__ import annotations

import math
from datetime import datetime, time
from decimal import Decimal
from typing import Any

from capture.types import PgArray


def same(a: Any, b: Any) -> bool:
    """Equality that is stricter than ``==`` where ``==`` hides a difference.

    Same Python type; floats equal including NaN and the sign of zero; Decimals equal
    digit for digit (so the scale counts); times/datetimes equal including the UTC
    offset; lists and PgArrays element by element.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, PgArray):
        return a.lower_bounds == b.lower_bounds and same(a.items, b.items)
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Decimal):
        return bool(a.as_tuple() == b.as_tuple())
    if isinstance(a, time | datetime):
        return bool(a == b and a.utcoffset() == b.utcoffset())
    return bool(a == b)

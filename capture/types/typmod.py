"""Type modifiers (``atttypmod``): declared length, precision and scale of a column's type.

pgoutput's Relation message sends each column's type modifier as the server stores it;
``-1`` means "none declared". This module decodes it the way PostgreSQL's own
``*typmodout`` functions do (``format_type``), in one place, for every output format:

=====================================  ===============================================
type                                   modifier
=====================================  ===============================================
varchar(n), char(n) (``bpchar``)       ``n + 4`` (``VARHDRSZ`` added)
numeric(p, s)                          ``((p << 16) | (s & 0x7FF)) + 4``; ``s`` is an
                                       11-bit two's-complement number (-1000..1000)
bit(n), varbit(n)                      ``n``
time(p), timetz(p), timestamp(p),      ``p`` (0..6)
timestamptz(p)
interval <fields>(p)                   ``(fields << 16) | p``; ``p`` = 0xFFFF when no
                                       precision was declared; ``fields`` a bit mask
                                       (0x7FFF: all, i.e. none declared)
=====================================  ===============================================

Every function returns None when the modifier declares nothing (``typmod < 0``, or below
``VARHDRSZ`` where that is added). Array columns carry their element's modifier.
"""

from __future__ import annotations

from typing import Final

VARHDRSZ: Final = 4
"""Added to the declared length or precision of varlena types (varchar, bpchar, numeric)."""

_CHAR_TYPES: Final = frozenset({"varchar", "bpchar"})
_BIT_TYPES: Final = frozenset({"bit", "varbit"})
_TIME_TYPES: Final = frozenset({"time", "timetz", "timestamp", "timestamptz"})

_INTERVAL_FULL_PRECISION: Final = 0xFFFF
_YEAR: Final = 1 << 2
_MONTH: Final = 1 << 1
_DAY: Final = 1 << 3
_HOUR: Final = 1 << 10
_MINUTE: Final = 1 << 11
_SECOND: Final = 1 << 12
INTERVAL_FIELDS: Final = {
    _YEAR: "year",
    _MONTH: "month",
    _DAY: "day",
    _HOUR: "hour",
    _MINUTE: "minute",
    _SECOND: "second",
    _YEAR | _MONTH: "year to month",
    _DAY | _HOUR: "day to hour",
    _DAY | _HOUR | _MINUTE: "day to minute",
    _DAY | _HOUR | _MINUTE | _SECOND: "day to second",
    _HOUR | _MINUTE: "hour to minute",
    _HOUR | _MINUTE | _SECOND: "hour to second",
    _MINUTE | _SECOND: "minute to second",
}
"""The field masks ``interval`` accepts (PostgreSQL's ``INTERVAL_MASK`` bits), as written."""


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """(precision, scale) of ``numeric(p, s)``; None for an unconstrained numeric."""
    if typmod < VARHDRSZ:
        return None
    raw = typmod - VARHDRSZ
    return (raw >> 16) & 0xFFFF, ((raw & 0x7FF) ^ 1024) - 1024


def char_length(typmod: int) -> int | None:
    """Declared length of ``varchar(n)`` / ``char(n)``; None when unbounded."""
    return typmod - VARHDRSZ if typmod >= VARHDRSZ else None


def bit_length(typmod: int) -> int | None:
    """Declared length of ``bit(n)`` / ``varbit(n)``; None when unbounded."""
    return typmod if typmod >= 0 else None


def time_precision(typmod: int) -> int | None:
    """Declared fractional-second digits of time/timetz/timestamp/timestamptz (``(p)``)."""
    return typmod if typmod >= 0 else None


def interval_fields(typmod: int) -> str | None:
    """The declared fields of an interval (``"day to second"``); None when none declared."""
    if typmod < 0:
        return None
    return INTERVAL_FIELDS.get((typmod >> 16) & 0x7FFF)


def interval_precision(typmod: int) -> int | None:
    """Declared fractional-second digits of an interval; None when none declared."""
    if typmod < 0:
        return None
    precision = typmod & 0xFFFF
    return None if precision == _INTERVAL_FULL_PRECISION else precision


def length(type_name: str, typmod: int) -> int | None:
    """Declared length of a character or bit-string type; None otherwise or when unbounded."""
    if type_name in _CHAR_TYPES:
        return char_length(typmod)
    if type_name in _BIT_TYPES:
        return bit_length(typmod)
    return None


def modifier_text(type_name: str, typmod: int) -> str:
    """The modifier as ``format_type`` appends it to the type's name.

    ``(20)`` for varchar(20), ``(12,2)`` for numeric(12,2), ``(3)`` for timestamptz(3),
    `` day to second(3)`` for an interval; ``""`` when nothing is declared or the type has
    no modifier this module knows (``type_name`` is the element type for arrays).
    """
    if typmod < 0:
        return ""
    if type_name == "numeric":
        declared = numeric_precision_scale(typmod)
        return "" if declared is None else f"({declared[0]},{declared[1]})"
    if type_name in _CHAR_TYPES or type_name in _BIT_TYPES:
        n = length(type_name, typmod)
        return "" if n is None else f"({n})"
    if type_name in _TIME_TYPES:
        return f"({typmod})"
    if type_name == "interval":
        fields = interval_fields(typmod)
        precision = interval_precision(typmod)
        return (f" {fields}" if fields else "") + (
            f"({precision})" if precision is not None else ""
        )
    return ""


__all__ = [
    "INTERVAL_FIELDS",
    "VARHDRSZ",
    "bit_length",
    "char_length",
    "interval_fields",
    "interval_precision",
    "length",
    "modifier_text",
    "numeric_precision_scale",
    "time_precision",
]

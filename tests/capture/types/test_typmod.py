"""Type modifiers: decoded as PostgreSQL's ``format_type`` prints them (``capture.types.typmod``).

The unit tests pin the encoding; the integration test asks a real server for the
``atttypmod`` and ``format_type`` of declared columns and checks that the modifier text
this module derives from ``atttypmod`` is the one PostgreSQL appends.
"""

from __future__ import annotations

import psycopg
import pytest

from capture.types import typmod

NUMERIC_12_2 = ((12 << 16) | 2) + 4
NUMERIC_5_NEG2 = ((5 << 16) | (-2 & 0x7FF)) + 4


def test_numeric() -> None:
    assert typmod.numeric_precision_scale(-1) is None
    assert typmod.numeric_precision_scale(NUMERIC_12_2) == (12, 2)
    assert typmod.numeric_precision_scale(NUMERIC_5_NEG2) == (5, -2)
    assert typmod.modifier_text("numeric", NUMERIC_5_NEG2) == "(5,-2)"


def test_lengths() -> None:
    assert typmod.char_length(24) == 20
    assert typmod.char_length(-1) is None
    assert typmod.length("varchar", 24) == 20
    assert typmod.length("bpchar", 5) == 1
    assert typmod.length("bit", 8) == 8
    assert typmod.length("varbit", -1) is None
    assert typmod.length("text", 24) is None


def test_time_precision_zero_is_declared() -> None:
    assert typmod.time_precision(0) == 0
    assert typmod.time_precision(-1) is None
    assert typmod.modifier_text("timestamptz", 0) == "(0)"


def test_interval() -> None:
    day_to_second_3 = ((1 << 3 | 1 << 10 | 1 << 11 | 1 << 12) << 16) | 3
    assert typmod.interval_fields(day_to_second_3) == "day to second"
    assert typmod.interval_precision(day_to_second_3) == 3
    hour_to_minute = ((1 << 10 | 1 << 11) << 16) | 0xFFFF
    assert typmod.interval_precision(hour_to_minute) is None
    assert typmod.modifier_text("interval", hour_to_minute) == " hour to minute"
    assert typmod.modifier_text("interval", (0x7FFF << 16) | 2) == "(2)"


DECLARED = [
    "varchar(20)",
    "character(3)",
    "numeric(12,2)",
    "numeric(5,-2)",
    "numeric(1000,1000)",
    "numeric",
    "bit(7)",
    "bit varying(9)",
    "time(0) without time zone",
    "time(3) with time zone",
    "timestamp(6) without time zone",
    "timestamp(2) with time zone",
    "interval",
    "interval(4)",
    "interval day to second(2)",
    "interval year to month",
    "interval minute",
    "text",
    "integer[]",
    "character varying(5)[]",
]


@pytest.mark.integration
def test_modifier_text_matches_format_type(pg_dsn: str) -> None:
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(DECLARED))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TEMP TABLE typmod_probe ({columns})")
        rows = conn.execute(
            "SELECT t.typname, a.atttypmod, format_type(a.atttypid, a.atttypmod),"
            " format_type(a.atttypid, NULL)"
            " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
            " WHERE a.attrelid = 'typmod_probe'::regclass AND a.attnum > 0 ORDER BY a.attnum"
        ).fetchall()
    assert len(rows) == len(DECLARED)
    for type_name, mod, full, bare in rows:
        element = type_name.removeprefix("_")
        suffix = typmod.modifier_text(element, mod)
        # format_type puts the modifier inside multi-word names ("time(3) with time zone")
        # and before "[]"; rebuild its text from the bare name and ours.
        head, _, tail = bare.removesuffix("[]").partition(" with")
        if element in ("time", "timetz", "timestamp", "timestamptz"):
            head = head.removesuffix(" without time zone")
            tail = (" with" + tail) if tail else " without time zone"
        else:
            tail = (" with" + tail) if tail else ""
        rebuilt = head + suffix + tail + ("[]" if bare.endswith("[]") else "")
        assert rebuilt == full, (type_name, mod)

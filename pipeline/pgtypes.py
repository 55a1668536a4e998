"""PostgreSQL types → Spark types, and casts from PostgreSQL's text output.

Materialize stores each column with the Spark type of its PostgreSQL type (from the
layout record, else the change's ``column_types``):

================================  ==========================================
PostgreSQL                        Spark
================================  ==========================================
bool                              boolean
int2 / int4 / int8, oid, xid      short / int / long / long
float4 / float8                   float / double (NaN, ±Infinity kept)
numeric(p,s), p ≤ 38              decimal(p,s)
numeric unconstrained or p > 38   string (PostgreSQL's exact text)
date                              date
timestamp / timestamptz           timestamp_ntz / timestamp (UTC)
bytea                             binary
everything else                   string (PostgreSQL's text output)
================================  ==========================================

Values a Spark type cannot hold (``infinity`` dates and timestamps, BC dates, numeric
``NaN``) become NULL in typed mode; ``typed=False`` keeps every column as text (exact).
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

_SIMPLE = {
    "bool": "boolean",
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "oid": "bigint",
    "xid": "bigint",
    "float4": "float",
    "float8": "double",
    "date": "date",
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "bytea": "binary",
}
_NUMERIC = re.compile(r"^numeric\((\d+),\s*(-?\d+)\)$")


def spark_type(pg_type: str | None, declared: str | None = None, *, typed: bool = True) -> str:
    """The Spark SQL type name for a PostgreSQL type (``declared`` adds the modifier)."""
    if not typed or pg_type is None:
        return "string"
    if pg_type == "numeric":
        match = _NUMERIC.match((declared or "").replace(" ", ""))
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if 0 < precision <= 38 and 0 <= scale <= precision:
                return f"decimal({precision},{scale})"
        return "string"
    return _SIMPLE.get(pg_type, "string")


def from_text(value: Column, target: str) -> Column:
    """Cast PostgreSQL text ``value`` to the Spark type ``target``."""
    if target == "string":
        return value
    if target == "binary":
        return F.when(value.startswith("\\x"), F.unhex(F.substring(value, 3, 1 << 30)))
    if target == "timestamp_ntz":
        return F.to_timestamp_ntz(value)
    return value.cast(target)

r"""``walcast spark show``: a materialized table on standard output, one JSON object per row.

Now (:func:`pipeline.stores.read_table`) or as of an LSN or a commit time
(:func:`pipeline.asof.read_table_as_of`), or its schema history (``--schema-history``,
:mod:`pipeline.schema_history`). Values are printed as JSON: numbers as numbers
(decimals as their exact text), timestamps as UTC text (``2026-11-29 06:30:00.123456``),
binary as ``\x`` hex, as PostgreSQL prints bytea. Rows are sorted by their columns, so
two reads of the same state print the same lines. A one-line summary goes to standard
error (``walcast spark show: public.orders as of 0/16B3748: 3 rows``).
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from capture.errors import lsn_text
from pipeline.asof import find_table_path, read_table_as_of
from pipeline.errors import AsOfError
from pipeline.schema_history import no_history, read_schema_history
from pipeline.tables import is_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _json_value(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (dt.date, dt.datetime)):
        return str(value)
    return value


def _printable(frame: DataFrame) -> DataFrame:
    """Timestamps as UTC text (the session's zone), before Python sees them."""
    columns = [
        F.col(f"`{name}`").cast("string").alias(name)
        if kind.startswith("timestamp")
        else F.col(f"`{name}`")
        for name, kind in frame.dtypes
    ]
    return frame.select(*columns)


def print_table(
    spark: SparkSession,
    root: str,
    schema: str,
    table: str,
    source: str | None = None,
    *,
    as_of_lsn: int | None = None,
    as_of_time: dt.datetime | None = None,
) -> int:
    """Print the table's rows (JSON lines) and a summary line; returns the row count."""
    from pipeline.stores import read_table  # noqa: PLC0415

    label = f"{schema}.{table}"
    if as_of_lsn is not None or as_of_time is not None:
        frame = read_table_as_of(
            spark, root, schema, table, source, as_of_lsn=as_of_lsn, as_of_time=as_of_time
        )
        point = lsn_text(as_of_lsn) if as_of_lsn is not None else f"{as_of_time}"
        what = f"{label} as of {point}"
    else:
        path = find_table_path(spark, root, schema, table, source)
        if not is_table(spark, path):  # any store's
            raise AsOfError(f"{label}: no such table under {root}")
        frame = read_table(spark, root, schema, table, source)
        what = label
    shown = _printable(frame)
    return _print(shown.orderBy(*[F.col(f"`{c}`") for c in shown.columns]), what)


def print_schema_history(
    spark: SparkSession, root: str, schema: str, table: str, source: str | None = None
) -> int:
    """Print the table's schema-history rows (JSON lines, in order) and a summary line.

    ``source`` picks one source's rows (default: every source's). Returns the row count.
    """
    label = f"{schema}.{table}"
    history = read_schema_history(spark, root)
    if history is None:
        raise no_history(label, root)
    rows = history.where((F.col("schema") == schema) & (F.col("table") == table))
    if source is not None:
        rows = rows.where(F.col("source") == source)
    order = ["source", "batch_id", "layout_index", "change", "column"]
    return _print(_printable(rows).orderBy(*order), f"{label}'s schema history")


def _print(frame: DataFrame, what: str) -> int:
    """Print ``frame``'s rows as JSON lines, then ``what`` and their number on stderr."""
    rows = frame.collect()
    out = sys.stdout
    for row in rows:
        out.write(json.dumps({k: _json_value(v) for k, v in row.asDict().items()}) + "\n")
    out.flush()
    noun = "row" if len(rows) == 1 else "rows"
    print(f"walcast spark show: {what}: {len(rows):,} {noun}", file=sys.stderr)
    return len(rows)

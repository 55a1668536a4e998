"""What one batch of normalized changes holds, per table: one aggregate, asked once.

Materialize needs, before it writes anything, each table's number of changes, how many
carry a commit LSN (the apply order, :func:`pipeline.model.order_columns`), the LSN and
time range they span (recorded in each Delta commit, :mod:`pipeline.delta_versions`), the
columns they send (a column dropped at the source since, :func:`pipeline.materialize.with_retired`)
and where each layout version they were encoded with starts and ends (the schema history,
:mod:`pipeline.schema_history`). :func:`count_tables` gets all of it with one Spark job,
grouped by table and layout version, and rolls the groups up per table here.

Invariants: positions are :data:`pipeline.model.LOG_ORDER` structs, which also order a
table applied in Kafka order (its commit LSNs and ordinals are all null, so the Kafka
position decides); a span's ``first``/``last`` are its first and last change in that
order, and its ``commit_*`` fields are those of its first change.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.model import LOG_ORDER

TableKey = tuple[str | None, str, str]
"""``(source, schema, table)``."""


@dataclass(frozen=True, slots=True)
class LayoutSpan:
    """The changes of one table in a batch that name one layout version."""

    version: str
    first: tuple[Any, ...]
    """The position (:data:`~pipeline.model.LOG_ORDER` values) of the first."""
    last: tuple[Any, ...]
    """The position of the last."""
    commit_lsn: str | None
    commit_lsn_num: int | None
    commit_time: dt.datetime | None


@dataclass(slots=True)
class TableCounts:
    """One table's part of a batch."""

    n: int = 0
    positioned: int = 0
    """Changes with a commit LSN."""
    first_lsn: int | None = None
    last_lsn: int | None = None
    first_time: int | None = None
    """Unix microseconds."""
    last_time: int | None = None
    sent: set[str] = field(default_factory=set)
    """Every column a change's before or after image names."""
    spans: list[LayoutSpan] = field(default_factory=list)
    """One per layout version the changes name (``layout``), by first position."""


def _low(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _high(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _ordered(position: Any) -> tuple[Any, ...]:
    """A position struct as a tuple that sorts as Spark sorts it (nulls first)."""
    return tuple((value is not None, value) for value in position)


def count_tables(changes: DataFrame) -> dict[TableKey, TableCounts]:
    """Each table's :class:`TableCounts` (one Spark job)."""
    position = F.struct(*[F.col(c) for c in LOG_ORDER])
    first_change = F.min_by(F.struct("commit_lsn", "commit_lsn_num", "commit_time"), position)
    rows = (
        changes.groupBy("source", "schema", "table", "layout")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count("commit_lsn_num").alias("positioned"),
            F.min("commit_lsn_num").alias("first_lsn"),
            F.max("commit_lsn_num").alias("last_lsn"),
            F.unix_micros(F.min("commit_time")).alias("first_time"),
            F.unix_micros(F.max("commit_time")).alias("last_time"),
            F.array_distinct(
                F.flatten(
                    F.collect_set(
                        F.concat(
                            F.coalesce(F.map_keys("after"), F.array().cast("array<string>")),
                            F.coalesce(F.map_keys("before"), F.array().cast("array<string>")),
                        )
                    )
                )
            ).alias("sent"),
            F.min(position).alias("first"),
            F.max(position).alias("last"),
            first_change.alias("first_change"),
        )
        .collect()
    )
    tables: dict[TableKey, TableCounts] = {}
    for r in rows:
        t = tables.setdefault((r["source"], r["schema"], r["table"]), TableCounts())
        t.n += int(r["n"])
        t.positioned += int(r["positioned"])
        t.first_lsn = _low(t.first_lsn, r["first_lsn"])
        t.last_lsn = _high(t.last_lsn, r["last_lsn"])
        t.first_time = _low(t.first_time, r["first_time"])
        t.last_time = _high(t.last_time, r["last_time"])
        t.sent.update(r["sent"] or [])
        if r["layout"] is not None:
            first = r["first_change"]
            t.spans.append(
                LayoutSpan(
                    r["layout"],
                    _ordered(r["first"]),
                    _ordered(r["last"]),
                    first["commit_lsn"],
                    first["commit_lsn_num"],
                    first["commit_time"],
                )
            )
    for t in tables.values():
        t.spans.sort(key=lambda s: s.first)
    return tables

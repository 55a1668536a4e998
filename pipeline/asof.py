"""Reads of a materialized table as the source had it at an LSN or a commit time.

:func:`read_table_as_of` answers from the table's history when it has one
(:mod:`pipeline.history`, ``materialize --history``, Delta or Iceberg): the versions with
``valid_from_lsn <= X`` and ``valid_to_lsn > X`` (or none), i.e. every transaction
committed at or before ``X`` applied, none after; any point of its range is exact. A Delta
table without a history answers from its own versions (Delta time travel), through the
range of changes materialize recorded in each commit (:mod:`pipeline.delta_versions`):
exact at the points between two batches, refused (one line naming the nearest readable
points) inside one. The result has the state table's columns (the table's own, then those
of :mod:`pipeline.lineage`: the last change written into each row).

Decisions and invariants:

* **The range that exists** is from the table's first change to its last one, both as
  the history recorded them. An LSN (or time) before the first change is refused (the
  history does not know what the table held before materialize saw it), and so is one
  after the last change: whether the source changed between that change and ``X`` is
  unknown here (materialize may not have read that far). Both are one line naming the
  range (:class:`AsOfError`).
* **A commit time** ``T`` reads as of the last commit (of this table's changes) at or
  before ``T``: the history's transactions in commit-LSN order, which PostgreSQL's commit
  times follow.
* **Malformed input** (an LSN not ``X/Y``, a time not ISO 8601) is one line, checked
  before any Spark session starts (:func:`parse_as_of_lsn`, :func:`parse_as_of_time`).
* A table that cannot answer is one line naming why: a Parquet table, an Iceberg table
  materialized without ``--history`` (walcast reads no Iceberg snapshot as of an LSN), or
  a Delta table whose commits record no changes (see :mod:`pipeline.delta_versions`).
* With tracked columns (``--history-columns``), versions change only with those columns,
  so a read as of ``X`` is exact for them and shows the others as the version's last
  values.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from capture.errors import ConfigError, lsn_text
from capture.lsn import parse_lsn
from pipeline.delta_versions import recorded_commits, utc_time, version_as_of
from pipeline.errors import AsOfError
from pipeline.history import (
    VALID_FROM_LSN,
    VALID_FROM_TIME,
    VALID_TO_LSN,
    VALID_TO_TIME,
    VERSION_COLUMNS,
)
from pipeline.tables import (
    current_version,
    history_path,
    is_table,
    read_history,
    table_path,
    table_paths,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def parse_as_of_lsn(text: str, flag: str = "--as-of-lsn") -> int:
    """PostgreSQL's ``X/Y`` form of an LSN as a number (ConfigError, one line)."""
    return parse_lsn(text, setting=flag)


def parse_as_of_time(text: str, flag: str = "--as-of-time") -> dt.datetime:
    """An ISO 8601 time, UTC when it names no zone (ConfigError, one line)."""
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{flag}: {text!r} is not a time; expected ISO 8601, e.g. 2026-11-29T06:30:00Z "
            "(UTC when no zone is given)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _utc(micros: int) -> dt.datetime:
    """A Spark timestamp read as microseconds (PySpark would give the process's zone)."""
    return utc_time(micros)


def _micros(when: dt.datetime) -> int:
    return (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def read_table_as_of(
    spark: SparkSession,
    root: str,
    schema: str,
    table: str,
    source: str | None = None,
    *,
    as_of_lsn: int | str | None = None,
    as_of_time: dt.datetime | str | None = None,
) -> DataFrame:
    """``schema.table`` under ``root`` as the source had it at an LSN or a commit time.

    Exactly one of ``as_of_lsn`` (a number or ``X/Y``) and ``as_of_time`` (a datetime,
    naive = UTC, or ISO text). :class:`AsOfError` (one line) when the table has no
    history or the point is outside the range it covers.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    if (as_of_lsn is None) == (as_of_time is None):
        raise ValueError("pass exactly one of as_of_lsn and as_of_time")
    label = f"{schema}.{table}"
    path = find_table_path(spark, root, schema, table, source)
    history = read_history(spark, path)
    if history is None:
        return _read_version_as_of(spark, path, label, root, as_of_lsn, as_of_time)
    to_lsn = F.coalesce(F.col(VALID_TO_LSN), F.col(VALID_FROM_LSN))
    to_time = F.coalesce(F.col(VALID_TO_TIME), F.col(VALID_FROM_TIME))
    bounds = history.select(
        F.min(VALID_FROM_LSN).alias("first"),
        F.max(F.greatest(F.col(VALID_FROM_LSN), to_lsn)).alias("last"),
        F.unix_micros(F.min_by(VALID_FROM_TIME, VALID_FROM_LSN)).alias("first_time"),
        F.unix_micros(F.max_by(to_time, to_lsn)).alias("last_time"),
    ).first()
    if bounds is None or bounds["first"] is None:
        raise AsOfError(f"{label}: its history is empty (no change of a keyed row yet)")
    first, last = int(bounds["first"]), int(bounds["last"])
    span = f"{label}'s history covers {lsn_text(first)} to {lsn_text(last)}"
    if as_of_time is not None:
        when = parse_as_of_time(as_of_time) if isinstance(as_of_time, str) else as_of_time
        when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        first_time, last_time = _utc(bounds["first_time"]), _utc(bounds["last_time"])
        times = f"{first_time.isoformat()} to {last_time.isoformat()}"
        point = _last_commit_at(history, when)
        if point is None or when > last_time:
            raise AsOfError(
                f"--as-of-time {when.isoformat()}: {label}'s history covers {times} "
                f"({lsn_text(first)} to {lsn_text(last)}), its first and last change"
            )
        lsn = point
    else:
        lsn = parse_as_of_lsn(as_of_lsn) if isinstance(as_of_lsn, str) else int(as_of_lsn or 0)
        if not first <= lsn <= last:
            raise AsOfError(
                f"--as-of-lsn {lsn_text(lsn)}: {span}, its first and last change",
                hint="read a point inside that range",
            )
    columns = [c for c in history.columns if c not in {n for n, _ in VERSION_COLUMNS}]
    visible = (F.col(VALID_FROM_LSN) <= F.lit(lsn)) & (
        F.col(VALID_TO_LSN).isNull() | (F.col(VALID_TO_LSN) > F.lit(lsn))
    )
    return history.where(visible).select(*columns)


def _read_version_as_of(
    spark: SparkSession,
    path: str,
    label: str,
    root: str,
    as_of_lsn: int | str | None,
    as_of_time: dt.datetime | str | None,
) -> DataFrame:
    """A Delta table without a history as of a point: the version that holds it exactly."""
    from delta.tables import DeltaTable  # noqa: PLC0415

    if not DeltaTable.isDeltaTable(spark, path):
        if _is_parquet(spark, path):
            store = "a Parquet table, which keeps"
        elif is_table(spark, path):
            store = "an Iceberg table materialized without --history has"
        else:
            raise AsOfError(f"{label}: no such table under {root}")
        raise AsOfError(
            f"{label}: {store} no history ({history_path(path)} does not exist)",
            hint="materialize it with --history (Delta Lake or Iceberg)",
        )
    if as_of_time is not None:
        when = parse_as_of_time(as_of_time) if isinstance(as_of_time, str) else as_of_time
        when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        point, by_time = _micros(when), True
    else:
        point = parse_as_of_lsn(as_of_lsn) if isinstance(as_of_lsn, str) else int(as_of_lsn or 0)
        by_time = False
    version = version_as_of(recorded_commits(spark, path), point, label, by_time=by_time)
    return spark.read.format("delta").option("versionAsOf", version).load(path)


def _last_commit_at(history: DataFrame, when: dt.datetime) -> int | None:
    """The LSN of the last transaction of the history committed at or before ``when``."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    moments = history.select(
        F.col(VALID_FROM_LSN).alias("lsn"), F.col(VALID_FROM_TIME).alias("time")
    ).unionByName(
        history.where(F.col(VALID_TO_LSN).isNotNull()).select(
            F.col(VALID_TO_LSN).alias("lsn"), F.col(VALID_TO_TIME).alias("time")
        )
    )
    row = (
        moments.where(F.col("time") <= F.timestamp_micros(F.lit(_micros(when))))
        .select(F.max("lsn").alias("lsn"))
        .first()
    )
    return None if row is None or row["lsn"] is None else int(row["lsn"])


def find_table_path(
    spark: SparkSession, root: str, schema: str, table: str, source: str | None
) -> str:
    """The table's directory: ``source``'s copy, or the one copy there is (as read_table).

    :class:`AsOfError` when several sources have the table and ``source`` is None.
    """
    if source is not None:
        return table_path(root, schema, table, source)
    paths = table_paths(spark, root, schema, table)
    if len(paths) > 1:
        raise AsOfError(
            f"{schema}.{table} exists for {len(paths)} sources under {root}: "
            f"{', '.join(p.split('/')[-3] for p in paths)}",
            hint="name one with --source (source= in Python)",
        )
    return paths[0] if paths else table_path(root, schema, table)


def _is_parquet(spark: SparkSession, path: str) -> bool:

    return current_version(spark, path) is not None

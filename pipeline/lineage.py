"""The last change of a materialized row: its commit LSN, commit time and operation.

Every row of a state table (both stores, :mod:`pipeline.stores`) carries the change that
last wrote it:

* ``_walcast_commit_lsn`` (``bigint``): its commit LSN as PostgreSQL's 64-bit number
  (``0/16B3748`` is ``23803720``; :func:`capture.errors.lsn_text` prints the ``X/Y``
  form); null for a table whose changes carry no commit LSN (a Debezium connector's own
  topics, applied in Kafka order);
* ``_walcast_commit_time`` (``timestamp``, UTC): its commit time;
* ``_walcast_op`` (``string``): its operation, ``insert`` or ``update`` (a load row is an
  ``insert``; a row that moved to its key by a key change says ``update``).

Invariants: the three columns are set together from one change, the last one (in the
apply order, :func:`pipeline.model.order_columns`) that inserted or updated the row; a
column the change did not send (unchanged TOAST) keeps its value, the three columns never
do. They are carried through the fold as three more entries of the change's after image
(:func:`with_lineage`), so a key move takes them from the change that moved it. Tables
without a primary key (multisets) are rewritten per row image: the copies of one image
carry the last change that added or removed a copy of it (:func:`multiset_lineage`), so
``_walcast_op`` may say ``delete`` there (two of three equal rows deleted: the one left
says so).
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.fold import row_key
from pipeline.model import LOG_ORDER

COMMIT_LSN = "_walcast_commit_lsn"
COMMIT_TIME = "_walcast_commit_time"
OP = "_walcast_op"
LINEAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    (COMMIT_LSN, "bigint"),
    (COMMIT_TIME, "timestamp"),
    (OP, "string"),
)
"""The columns every state row ends with (name, Spark type), after the table's own."""
LINEAGE_NAMES = tuple(name for name, _ in LINEAGE_COLUMNS)


def _texts() -> list[Column]:
    """The three values of a change as texts (``from_text`` casts them back)."""
    return [
        F.lit(COMMIT_LSN),
        F.col("commit_lsn_num").cast("string"),
        F.lit(COMMIT_TIME),
        # session time zone UTC (pipeline.session): the cast back is exact to the microsecond
        F.col("commit_time").cast("string"),
        F.lit(OP),
        F.col("op"),
    ]


def with_lineage(changes: DataFrame) -> DataFrame:
    """``changes`` whose inserts' and updates' after images also hold the three columns.

    Call it after the table's columns were taken from the changes (the names are not
    source columns), on keyed tables only: a multiset's row identity is its image.
    """
    writes = F.col("op").isin("insert", "update")
    image = F.map_concat(
        F.coalesce(F.col("after"), F.create_map().cast("map<string,string>")),
        F.create_map(*_texts()),
    )
    return changes.withColumn("after", F.when(writes, image).otherwise(F.col("after")))


def multiset_lineage(
    changes: DataFrame, order: Sequence[str] = LOG_ORDER, columns: Sequence[str] | None = None
) -> DataFrame:
    """The three columns per row image (``_row_key`` over ``columns``, as in fold_multiset).

    They are the last change's (in ``order``) that added or removed a copy of the image.
    """
    position = F.struct(*[F.col(c) for c in order])
    meta = F.struct(
        F.col("commit_lsn_num").alias(COMMIT_LSN),
        F.col("commit_time").alias(COMMIT_TIME),
        F.col("op").alias(OP),
    )
    images = F.filter(
        F.array(
            F.when(F.col("op").isin("delete", "update"), row_key(F.col("before"), columns)),
            F.when(F.col("op").isin("insert", "update"), row_key(F.col("after"), columns)),
        ),
        lambda k: k.isNotNull(),
    )
    return (
        changes.select(F.explode(images).alias("_row_key"), position.alias("_pos"), meta.alias("m"))
        .groupBy("_row_key")
        .agg(F.max_by("m", "_pos").alias("m"))
        .select("_row_key", *[F.col(f"m.{n}").alias(n) for n in LINEAGE_NAMES])
    )

"""The fold of a batch of normalized changes into one result per row (no I/O).

Changes sort by ``(commit_lsn_num, ordinal)`` then the Kafka position
(:data:`pipeline.model.ORDER_COLUMNS`); :func:`without_truncated` drops what a TRUNCATE
in the batch wiped out. Tables with a primary key fold per key (:func:`fold_by_key`:
insert resets the row to the after image, update overlays the after image's columns so
an absent column, e.g. unchanged TOAST, keeps its value, delete removes; a key change is
a delete of the old key and an upsert of the new one), as a Spark ``aggregate`` over the
key's sorted events. Tables without one are multisets of whole rows
(:func:`fold_multiset`: ``+1``/``-1`` per row image). :mod:`pipeline.stores` applies the
results.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.model import ORDER_COLUMNS

ROW_KEY = "_walcast_row_key"
"""The column of a keyless table that identifies a whole row (its image as JSON)."""


def _sort_key() -> Column:
    return F.struct(*[F.col(c) for c in ORDER_COLUMNS])


def without_truncated(changes: DataFrame) -> tuple[DataFrame, bool]:
    """The changes after the last TRUNCATE, and whether there was one (collects 1 row)."""
    last = changes.where(F.col("op") == "truncate").select(F.max(_sort_key()).alias("t")).collect()
    cut = last[0]["t"] if last else None
    if cut is None:
        return changes.where(F.col("op") != "truncate"), False
    # Typed literals: a NULL field (e.g. an ordinal a format does not carry) must keep
    # the column's type, or the struct comparison does not resolve.
    types = {f.name: f.dataType for f in changes.schema.fields}
    cut_col = F.struct(
        *[F.lit(v).cast(types[c]).alias(c) for c, v in zip(ORDER_COLUMNS, cut, strict=True)]
    )
    return changes.where((F.col("op") != "truncate") & (_sort_key() > cut_col)), True


def fold_by_key(changes: DataFrame, pk: Sequence[str]) -> DataFrame:
    """Per primary key: ``_key`` (array of text values), ``_reset``, ``_exists``, ``_row``."""

    def key_of(image: Column) -> Column:
        return F.array(*[F.element_at(image, F.lit(c)) for c in pk])

    def has_key(image: Column) -> Column:
        cond = image.isNotNull()
        for c in pk:
            cond = cond & F.map_contains_key(image, F.lit(c))
        return cond

    before_key = F.when(has_key(F.col("before")), key_of(F.col("before")))
    after_key = key_of(F.col("after"))
    op = F.col("op")
    main_key = (
        F.when(op == "insert", after_key)
        .when(op == "delete", before_key)
        .otherwise(F.coalesce(before_key, after_key))
    )
    moved = (
        (op == "update")
        & before_key.isNotNull()
        & has_key(F.col("after"))
        & (before_key != after_key)
    )
    empty_map = F.create_map().cast("map<string,string>")

    def event(key: Column, kind: Column, img: Column, sub: int) -> Column:
        return F.struct(
            key.alias("key"),
            _sort_key().alias("pos"),
            F.lit(sub).alias("sub"),
            kind.alias("op"),
            img.alias("img"),
        )

    first = event(
        main_key,
        F.when(moved, F.lit("delete")).otherwise(op),
        F.when(op == "delete", empty_map).otherwise(F.coalesce(F.col("after"), empty_map)),
        0,
    )
    second = event(after_key, F.lit("update"), F.coalesce(F.col("after"), empty_map), 1)
    # an update whose after image lacks key columns (Shareplex: changed columns only)
    # is about its before key; only a complete new key different from it is a move
    events = changes.select(
        F.explode(F.when(moved, F.array(first, second)).otherwise(F.array(first))).alias("e")
    ).select("e.*")
    grouped = events.groupBy("key").agg(
        F.array_sort(F.collect_list(F.struct("pos", "sub", "op", "img")), _by_position).alias("evs")
    )
    init = _acc(F.lit(False), F.lit(True), empty_map)

    def step(acc: Column, e: Column) -> Column:
        return (
            F.when(e["op"] == "insert", _acc(F.lit(True), F.lit(True), e["img"]))
            .when(e["op"] == "delete", _acc(F.lit(True), F.lit(False), empty_map))
            .otherwise(_acc(acc["reset"], F.lit(True), F.map_concat(acc["row"], e["img"])))
        )

    folded = F.aggregate("evs", init, step)
    return grouped.select(
        F.col("key").alias("_key"),
        folded["reset"].alias("_reset"),
        folded["exists"].alias("_exists"),
        folded["row"].alias("_row"),
    )


def _by_position(a: Column, b: Column) -> Column:
    x = F.struct(a["pos"], a["sub"])
    y = F.struct(b["pos"], b["sub"])
    return F.when(x < y, F.lit(-1)).when(x > y, F.lit(1)).otherwise(F.lit(0))


def _acc(reset: Column, exists: Column, row: Column) -> Column:
    return F.struct(reset.alias("reset"), exists.alias("exists"), row.alias("row"))


def row_key(image: Column) -> Column:
    """Identity of a whole row (multiset tables): the image as JSON, columns sorted."""
    return F.to_json(F.map_from_entries(F.array_sort(F.map_entries(image))))


def fold_multiset(changes: DataFrame) -> DataFrame:
    """Per whole-row identity: ``_row_key``, ``_delta`` (copies added or removed), ``_row``."""
    op = F.col("op")
    minus = F.struct(
        row_key(F.col("before")).alias("k"), F.lit(-1).alias("d"), F.col("before").alias("row")
    )
    plus = F.struct(
        row_key(F.col("after")).alias("k"), F.lit(1).alias("d"), F.col("after").alias("row")
    )
    deltas = (
        F.when(op == "insert", F.array(plus))
        .when(op == "delete", F.array(minus))
        .when(op == "update", F.array(minus, plus))
    )
    return (
        changes.select(F.explode(deltas).alias("x"))
        .where(F.col("x.k").isNotNull())
        .groupBy(F.col("x.k").alias("_row_key"))
        .agg(F.sum("x.d").alias("_delta"), F.first("x.row").alias("_row"))
    )

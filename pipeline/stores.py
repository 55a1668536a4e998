"""Where materialized tables live: one current-state table per source table.

:class:`TableSpec` is a table's columns (typed from its layout record, or from the
changes' ``column_types``) and primary key. Two stores apply a batch's fold
(:mod:`pipeline.fold`) idempotently:

* Delta Lake (:func:`apply_delta`): one ``MERGE`` per table and batch (plus a ``DELETE``
  for TRUNCATE), made idempotent with Delta's ``txnAppId``/``txnVersion``;
* Parquet (:func:`apply_parquet`): the table's state is rewritten into a new version
  directory and ``_CURRENT`` is switched to it (:func:`read_table` reads it); a batch the
  table already has is skipped. That costs the whole table per batch: above
  :data:`PARQUET_WARN_BYTES` one warning per table says so and names the other stores.

A third, Apache Iceberg, lives in :mod:`pipeline.iceberg_store` and runs this module's
MERGEs (:func:`_merge_by_key`, :func:`_merge_multiset`) as SQL ``MERGE INTO``.

Every stored row ends with the change that last wrote it (``_walcast_commit_lsn``,
``_walcast_commit_time``, ``_walcast_op``: :mod:`pipeline.lineage`, added by
:func:`stored_spec`). With ``change_data_feed``, :func:`apply_delta` turns Delta's Change
Data Feed on for the table (``delta.enableChangeDataFeed``) before writing it. Each Delta
commit of a batch records the range of changes it applied (:mod:`pipeline.delta_versions`),
so the table can be read as of an LSN without a history.

**No partial rows** (issue 36's orphan rule). A row the fold leaves to be completed from
the table (an update whose change did not send every column, e.g. unchanged TOAST, a
Debezium key move's placeholder, or a format that sends changed columns only; or a key
move that leaves columns to the old key's row) needs that row: the stored row of its key
(an update) or of its old key (a move). When the table does not hold it (materialize
started after the row was written and no load brought it), the unsent columns' values
are unknown, and inserting the row with NULLs there would be silent wrong data. Such a
row is **kept out** of the table: not inserted, and a row already stored at a move's new
key is left as it is. Each apply counts them (its return value) and logs one warning per
table and batch naming the table, the count and a key, and what fills the row in (a
load: ``walcast snapshot --table``). "Every column" is the table spec's columns (from its
layout, or the changes): a change that sent all of them still upserts a row the table
does not hold, as before. A change older than a column added later (``ALTER TABLE … ADD
COLUMN``) did not send that column either: it carries what the rows stored before the ADD
read when the layout says (the DEFAULT's value, or NULL for a column without a DEFAULT:
:func:`pipeline.added_columns.fill_images`), as the row did at the source. Decision where
the rule is vague: when the layout does not say (a DEFAULT whose value for those rows the
catalog did not hold, or no layout), such a change is kept out rather than stored with a
NULL PostgreSQL may not hold.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.added_columns import add_and_fill, fill_values
from pipeline.column_numbers import planned_fills
from pipeline.conflicts import retry_conflicts
from pipeline.delta_versions import USER_METADATA, BatchRange, commit_metadata
from pipeline.fold import (
    ROW_KEY,
    KeyFold,
    fold_by_key,
    fold_multiset,
    rekeyed,
    without_truncated,
)
from pipeline.lineage import LINEAGE_COLUMNS, LINEAGE_NAMES, multiset_lineage, with_lineage
from pipeline.local_frames import local_empty
from pipeline.model import LOG_ORDER
from pipeline.partitioning import (
    PartitionField,
    check_columns,
    check_partitioning,
    delta_columns,
)
from pipeline.pgtypes import from_text, spark_type
from pipeline.row_keys import keep_row_keys
from pipeline.tables import (
    CURRENT,
    ICEBERG_HINT,
    TableProperties,
    TableSpec,
    current_version,
    hadoop_fs,
    quote_identifier,
    table_path,
    table_paths,
)
from pipeline.type_changes import checked_type_changes, stored_types, widen_delta

log = logging.getLogger(__name__)


def stored_spec(spec: TableSpec) -> TableSpec:
    """The spec of the stored table: the source's columns, then the lineage columns."""
    names = set(spec.names)
    extra = tuple(c for c in LINEAGE_COLUMNS if c[0] not in names)
    return dataclasses.replace(spec, columns=spec.columns + extra)


def source_spec(spec: TableSpec) -> TableSpec:
    """The spec without the lineage columns (what the changes' images carry)."""
    columns = tuple(c for c in spec.columns if c[0] not in LINEAGE_NAMES)
    return dataclasses.replace(spec, columns=columns)


def spec_from_layout(layout: Any, *, typed: bool = True) -> TableSpec:
    """A TableSpec from a layout row (:data:`pipeline.layouts.LAYOUT_FIELDS`)."""
    cols = tuple(
        (c["name"], spark_type(c["type"], c["declared_type"], typed=typed))
        for c in layout["columns"]
    )
    missing = tuple(
        (c["name"], c["missing"])
        for c in layout["columns"]
        if c["missing"] is not None or c["missing_null"]
    )
    return TableSpec(
        layout["schema"], layout["table"], cols, tuple(layout["primary_key"] or ()), (), missing
    )


def spec_from_changes(
    changes: DataFrame, schema: str, table: str, *, typed: bool = True
) -> TableSpec:
    """A TableSpec guessed from the changes themselves (no layout known)."""
    row = changes.select(
        F.flatten(
            F.collect_list(
                F.concat(
                    F.coalesce(F.map_keys("column_types"), F.array().cast("array<string>")),
                    F.coalesce(F.map_keys("after"), F.array().cast("array<string>")),
                    F.coalesce(F.map_keys("before"), F.array().cast("array<string>")),
                )
            )
        ).alias("names"),
        F.max_by(F.col("column_types"), F.size("column_types")).alias("types"),
        F.max_by(F.col("primary_key"), F.size("primary_key")).alias("pk"),
    ).collect()[0]
    names = list(dict.fromkeys(row["names"] or []))
    types = row["types"] or {}
    cols = tuple((n, spark_type(types.get(n), None, typed=typed)) for n in names)
    return TableSpec(schema, table, cols, tuple(row["pk"] or ()))


# ------------------------------------------------------------------ folding


def typed_columns(spec: TableSpec, row: Column, prefix: str = "") -> list[Column]:
    """The spec's columns cast from the text map ``row``, named ``prefix + name``."""
    return [
        from_text(F.element_at(row, F.lit(name)), kind).alias(prefix + name)
        for name, kind in spec.columns
    ]


def empty_table(spark: SparkSession, spec: TableSpec) -> DataFrame:
    """An empty DataFrame with the state table's schema."""
    fields = [f"`{n}` {t}" for n, t in spec.columns]
    if not spec.primary_key:
        fields.append(f"`{ROW_KEY}` string")
    # A batch may know no column of a table yet (e.g. only its TRUNCATE): the table then
    # starts with the row-key column alone.
    return local_empty(spark, ", ".join(fields))


# ------------------------------------------------------------------ Parquet


def _set_current(spark: SparkSession, path: str, version: str) -> None:
    jvm, fs = hadoop_fs(spark, path)
    tmp = jvm.org.apache.hadoop.fs.Path(f"{path}/{CURRENT}.tmp")
    out = fs.create(tmp, True)
    try:
        out.write(bytearray(version.encode()))
    finally:
        out.close()
    target = jvm.org.apache.hadoop.fs.Path(f"{path}/{CURRENT}")
    fs.delete(target, False)
    fs.rename(tmp, target)
    for status in fs.listStatus(jvm.org.apache.hadoop.fs.Path(path)):
        name = status.getPath().getName()
        if name.startswith("v") and name != version and name < version:
            fs.delete(status.getPath(), True)


def read_table(
    spark: SparkSession,
    root: str,
    schema: str,
    table: str,
    source: str | None = None,
    *,
    as_of_lsn: int | str | None = None,
    as_of_time: dt.datetime | str | None = None,
) -> DataFrame:
    """The current state of ``schema.table`` (Delta, Parquet or Iceberg), as materialize wrote it.

    ``source`` (``<system identifier>/<database>/<slot>``) picks a source's copy; without
    it, the table must exist for one source only (a ValueError names the copies).
    ``as_of_lsn`` (a number or ``X/Y``) or ``as_of_time`` reads the table as the source had
    it then, from its history (:func:`pipeline.asof.read_table_as_of`).
    """
    if as_of_lsn is not None or as_of_time is not None:
        from pipeline.asof import read_table_as_of  # noqa: PLC0415 - asof imports this module

        return read_table_as_of(
            spark, root, schema, table, source, as_of_lsn=as_of_lsn, as_of_time=as_of_time
        )
    if source is not None:
        path = table_path(root, schema, table, source)
    else:
        paths = table_paths(spark, root, schema, table)
        if len(paths) > 1:
            raise ValueError(
                f"{schema}.{table} exists for {len(paths)} sources under {root}: "
                f"{', '.join(p.split('/')[-3] for p in paths)}; pass source="
            )
        path = paths[0] if paths else table_path(root, schema, table)
    version = current_version(spark, path)
    if version is not None:
        return spark.read.parquet(f"{path}/{version}")
    jvm, fs = hadoop_fs(spark, path)
    if fs.exists(jvm.org.apache.hadoop.fs.Path(f"{path}/{ICEBERG_HINT}")):
        return spark.read.format("iceberg").load(path)  # pipeline.iceberg_store's table
    return spark.read.format("delta").load(path)


PARQUET_WARN_BYTES = 256 * 1024 * 1024
"""Above this size a Parquet table's whole rewrite per batch is said to cost (once per
table and process): the store is the small-table option (pipeline/README.md)."""
_warned_large: set[str] = set()


def _warn_if_large(spark: SparkSession, spec: TableSpec, path: str, version: str) -> None:
    """One warning line when the version just written exceeds :data:`PARQUET_WARN_BYTES`."""
    if path in _warned_large:
        return
    jvm, fs = hadoop_fs(spark, path)
    size = int(fs.getContentSummary(jvm.org.apache.hadoop.fs.Path(f"{path}/{version}")).getLength())
    if size <= PARQUET_WARN_BYTES:
        return
    _warned_large.add(path)
    log.warning(
        "walcast spark materialize: %s.%s: the Parquet store rewrote the whole table (%d MiB) "
        "for one batch, and does so for every batch that changes it; use --delta or --store "
        "iceberg for tables this large (they rewrite only the files a batch touches)",
        spec.schema,
        spec.table,
        size // (1024 * 1024),
    )


def _version_name(batch_id: int) -> str:
    return f"v{batch_id:020d}"


def _key_matches(spec: TableSpec, alias: str, key: Column) -> Column:
    """``alias``'s primary key equals the text key array ``key`` (typed per the spec)."""
    types = dict(spec.columns)
    cond = None
    for i, c in enumerate(spec.primary_key):
        term = F.col(f"{alias}.{c}").eqNullSafe(from_text(F.element_at(key, i + 1), types[c]))
        cond = term if cond is None else cond & term
    assert cond is not None
    return cond


def _with_base(keyed: DataFrame, current: DataFrame, spec: TableSpec) -> DataFrame:
    """``keyed`` plus ``_b_<column>``, the stored row of ``_base_key``, and ``_b_found``.

    That is a key move's old row before the batch (:class:`pipeline.fold.KeyFold`); null
    where there is none (``_b_found`` false).
    """
    base = current.select(*[F.col(n) for n in spec.names], F.lit(True).alias(FOUND))
    cond = F.col("r._base_key").isNotNull() & _key_matches(spec, "b", F.col("r._base_key"))
    return (
        keyed.alias("r")
        .join(base.alias("b"), cond, "left")
        .select(
            "r.*",
            *[F.col(f"b.{n}").alias(f"_b_{n}") for n in spec.names],
            F.coalesce(F.col(f"b.{FOUND}"), F.lit(False)).alias("_b_found"),
        )
    )


FOUND = "_walcast_found"
"""A marker column joined in with a stored row: true where the table holds it."""


def _complete(spec: TableSpec) -> Column:
    """The folded row ``_row`` carries every column of the table (nothing left unsent).

    Retired columns (dropped at the source since) are not asked for: a row written after
    the DROP cannot send them.
    """
    cond = F.lit(True)
    for n in spec.required:
        cond = cond & F.map_contains_key(F.col("_row"), F.lit(n))
    return cond


def _orphan(stored: Column, *, based: bool) -> Column:
    """The folded row needs a stored row the table does not hold (no partial rows: module doc).

    Only a row that is not complete needs one: an update (not reset) its key's stored row
    (``stored``: the table holds it); a move (reset, ``_base_key`` set) its old key's,
    ``_b_found`` (``based``: the store read it; otherwise, after a TRUNCATE in the batch,
    the table holds no old row).
    """
    base_found = F.col("_b_found") if based else F.lit(False)
    update = ~F.col("_reset") & ~stored
    move = F.col("_reset") & F.col("_base_key").isNotNull() & ~base_found
    return F.col("_exists") & ~F.col("_complete") & (update | move)


def _report_kept_out(spec: TableSpec, orphans: DataFrame) -> int:
    """Count the rows kept out (``_key``s), and say so in one line when there are any."""
    row = orphans.agg(F.count(F.lit(1)).alias("n"), F.min("_key").alias("key")).collect()[0]
    count = int(row["n"])
    if count:
        name = f"{spec.schema}.{spec.table}"
        key = ", ".join(f"{c}={v}" for c, v in zip(spec.primary_key, row["key"], strict=True))
        rows = "row" if count == 1 else "rows"
        log.warning(
            "walcast spark materialize: %s: %d %s kept out (first key %s): an update or key "
            "move of a row the table does not hold left columns unsent (unchanged TOAST), so "
            "their values are unknown; load the table (walcast snapshot --table %s) to fill "
            "it in",
            name,
            count,
            rows,
            key,
            name,
        )
    return count


def _parquet_columns(
    current: DataFrame, spec: TableSpec
) -> tuple[DataFrame, list[tuple[str, str | None]], dict[str, str]]:
    """The stored rows with the source's columns of now, read from the rows as they were.

    Each added column has the value the rows stored before read (its DEFAULT's, else
    NULL), each renamed one the old column's values (:mod:`pipeline.column_numbers`).

    Also returns the columns set to a value, and the renames (old → new), for the row keys.
    """
    source = [c for c in current.columns if c not in LINEAGE_NAMES and c != ROW_KEY]
    stored = stored_types(current.select(*[F.col(quote_identifier(c)) for c in source]))
    fills, _ = planned_fills(spec, stored, None, "parquet")
    fills |= {n: ("value", None) for n in spec.names if n not in stored and n not in fills}
    sets, values, renamed = fill_values(fills, spec, stored)
    return (current.withColumns(sets) if sets else current), values, renamed


def apply_parquet(
    spark: SparkSession,
    path: str,
    spec: TableSpec,
    changes: DataFrame,
    batch_id: int,
    order: Sequence[str] = LOG_ORDER,
) -> int:
    """Rewrite ``path``'s state with ``changes`` applied in ``order`` (once per batch).

    Returns the number of rows kept out (no partial rows: module doc); 0 for a batch the
    table already has.
    """
    version = current_version(spark, path)
    name = _version_name(batch_id)
    if version is not None and version >= name:
        return 0
    base, spec = source_spec(spec), stored_spec(spec)
    current = spark.read.parquet(f"{path}/{version}") if version else empty_table(spark, spec)
    for change in checked_type_changes(stored_types(current), spec.columns, "parquet"):
        current = current.withColumn(change.column, F.col(change.column).cast(change.new))
    current, added, renamed = _parquet_columns(current, base)
    kept, truncated = without_truncated(changes, reset_at_load=not spec.primary_key, order=order)
    if truncated:
        current = empty_table(spark, spec)
    elif not spec.primary_key:  # the whole table is rewritten anyway: every key made now
        current = current.withColumn(ROW_KEY, rekeyed(F.col(ROW_KEY), base.names, added, renamed))
    out_cols = spec.names + ([] if spec.primary_key else [ROW_KEY])
    kept_out = 0
    persisted: DataFrame | None = None
    fold: KeyFold | None = None
    if spec.primary_key:
        fold = fold_by_key(with_lineage(kept), spec.primary_key, order=order)
        keyed = fold.rows.select(
            "*", *typed_columns(spec, F.col("_row"), "_v_"), _complete(spec).alias("_complete")
        )
        based = fold.moves and not truncated
        if based:
            keyed = _with_base(keyed, current, spec)
        keyed = persisted = keyed.persist()
        cond = _key_matches(spec, "cur", F.col("_key"))
        marked = current.select("*", F.lit(True).alias(FOUND))
        joined = keyed.alias("r").join(marked.alias("cur"), cond, "left")
        stored = F.coalesce(F.col(f"cur.{FOUND}"), F.lit(False))
        orphan = _orphan(stored, based=based)

        def value(n: str) -> Column:
            sent = F.map_contains_key(F.col("_row"), F.lit(n))
            if based:
                changed = (
                    F.when(sent, F.col(f"_v_{n}"))
                    .when(F.col("_reset"), F.col(f"_b_{n}"))
                    .otherwise(F.col(f"cur.{n}"))
                )
            else:
                changed = F.when(F.col("_reset") | sent, F.col(f"_v_{n}")).otherwise(
                    F.col(f"cur.{n}")
                )
            # kept out: a stored row at the key stays as it is
            return F.when(orphan, F.col(f"cur.{n}")).otherwise(changed)

        updated = joined.where(F.col("_exists") & ~(orphan & ~stored)).select(
            *[value(n).alias(n) for n in spec.names]
        )
        untouched = current.alias("cur").join(keyed.alias("r"), cond, "left_anti")
        new_state = untouched.select(*out_cols).unionByName(updated.select(*out_cols))
        # counted before the write: the write's switch deletes the version read here
        kept_out = _report_kept_out(spec, joined.where(orphan).select("_key"))
    else:
        deltas = fold_multiset(kept, base.names)
        counts = current.groupBy(ROW_KEY).count()
        affected = (
            deltas.join(counts, deltas["_row_key"] == counts[ROW_KEY], "left")
            .select(
                "_row_key",
                "_row",
                F.greatest(F.coalesce(F.col("count"), F.lit(0)) + F.col("_delta"), F.lit(0)).alias(
                    "n"
                ),
            )
            .join(multiset_lineage(kept, order, base.names), "_row_key", "left")
        )
        copy = F.struct("_row", "_row_key", *LINEAGE_NAMES)
        copies = affected.select(
            F.explode(F.array_repeat(copy, F.col("n").cast("int"))).alias("x")
        ).select(
            *typed_columns(base, F.col("x._row")),
            *[F.col(f"x.{n}").alias(n) for n in LINEAGE_NAMES],
            F.col("x._row_key").alias(ROW_KEY),
        )
        untouched = current.join(deltas, current[ROW_KEY] == deltas["_row_key"], "left_anti")
        new_state = untouched.select(*out_cols).unionByName(copies.select(*out_cols))
    new_state.write.mode("overwrite").parquet(f"{path}/{name}")
    _set_current(spark, path, name)
    _warn_if_large(spark, spec, path, name)
    if persisted is not None:
        persisted.unpersist()
    if fold is not None:
        fold.release()
    return kept_out


# ------------------------------------------------------------------ Delta


def apply_delta(
    spark: SparkSession,
    path: str,
    spec: TableSpec,
    changes: DataFrame,
    batch_id: int,
    app_id: str,
    order: Sequence[str] = LOG_ORDER,
    *,
    change_data_feed: bool = False,
    applied: BatchRange | None = None,
    partition_by: Sequence[PartitionField] = (),
) -> int:
    """MERGE ``changes`` in ``order`` into the Delta table at ``path`` (once per batch id).

    ``partition_by``: the table's partition columns when it is created; a table that
    exists with others is refused (:mod:`pipeline.partitioning`).

    Returns the number of rows kept out (no partial rows: module doc). With
    ``change_data_feed``, the table's Change Data Feed is turned on first. A step that
    loses a race with another writer of the table (``walcast spark maintain``) runs again
    (:mod:`pipeline.conflicts`; the txn settings make it a no-op once committed). ``applied``
    (the changes' first and last commit LSN and time) is recorded in the batch's commits
    (:mod:`pipeline.delta_versions`: reads as of an LSN without a history).
    """
    from delta.tables import DeltaTable  # noqa: PLC0415

    base, spec = source_spec(spec), stored_spec(spec)
    created = not DeltaTable.isDeltaTable(spark, path)
    if created:
        check_columns(partition_by, spec.schema, spec.table, base.columns)
        # with the feed from the table's first version on: a reader may start at version 0
        default = "spark.databricks.delta.properties.defaults.enableChangeDataFeed"
        if change_data_feed:
            spark.conf.set(default, "true")
        try:
            # one metadata commit (no Spark job, unlike writing an empty frame: 0.3 s a
            # table, measured 2026-12-05); if another writer made it meanwhile, nothing
            creating = (
                DeltaTable.createIfNotExists(spark)
                .location(path)
                .addColumns(empty_table(spark, spec).schema)
            )
            if partition_by:
                creating = creating.partitionedBy(*delta_columns(partition_by))
            creating.execute()
        finally:
            if change_data_feed:
                spark.conf.unset(default)
    target = DeltaTable.forPath(spark, path)
    if partition_by and not created:
        found = target.detail().select("partitionColumns").first()
        check_partitioning(
            partition_by, spec.schema, spec.table, list(found[0]) if found else [], "delta"
        )
    properties = TableProperties.read(spark, f"delta.{quote_identifier(path)}")
    stored = stored_types(target.toDF())
    widened = checked_type_changes(stored, spec.columns, "delta")
    missing = [(n, t) for n, t in spec.columns if n not in stored]

    def add() -> Any:
        if not missing:
            return target
        cols = ", ".join(f"`{n}` {t}" for n, t in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
        return DeltaTable.forPath(spark, path)

    target = add_and_fill(base, stored, properties, store="delta", add=add)
    if widened:
        widen_delta(spark, path, widened)
        target = DeltaTable.forPath(spark, path)
    if change_data_feed:
        _enable_change_data_feed(properties)
    what = f"{spec.schema}.{spec.table} batch {batch_id}"
    if not spec.primary_key:
        keep_row_keys(target, properties, base.names, created=created, what=what)
    kept, truncated = without_truncated(changes, reset_at_load=not spec.primary_key, order=order)

    def txn(step: str) -> None:
        spark.conf.set("spark.databricks.delta.write.txnAppId", f"{app_id}:{step}")
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        if applied is not None:
            spark.conf.set(USER_METADATA, commit_metadata(batch_id, applied))

    kept_out = 0
    try:
        if truncated:
            txn("truncate")
            retry_conflicts(f"{what} (TRUNCATE)", target.delete)
        txn("merge")
        if spec.primary_key:
            kept_out = retry_conflicts(
                f"{what} (MERGE)",
                lambda: _merge_by_key(
                    target, spec, with_lineage(kept), truncated=truncated, order=order,
                    append=_delta_append(path) if created else None,
                ),
            )  # fmt: skip
        else:
            retry_conflicts(
                f"{what} (MERGE)", lambda: _merge_multiset(spark, target, base, kept, order)
            )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
        spark.conf.unset(USER_METADATA)
    return kept_out


def _delta_append(path: str) -> Callable[[DataFrame], None]:
    """Appends rows to the Delta table at ``path`` (the txn settings apply as to a MERGE)."""

    def append(rows: DataFrame) -> None:
        rows.write.format("delta").mode("append").save(path)

    return append


def _merge_by_key(
    target: Any,
    spec: TableSpec,
    changes: DataFrame,
    *,
    truncated: bool = False,
    order: Sequence[str] = LOG_ORDER,
    append: Callable[[DataFrame], None] | None = None,
) -> int:
    """One MERGE of the batch's fold; returns the rows kept out (no partial rows).

    ``append`` is given when the table was created by this batch, so holds no row: the
    rows the MERGE would insert are appended with it instead (one write, where a MERGE
    reads the table and joins twice), and nothing is read from the table. The result is
    the MERGE's: on an empty table no row matches, a key move finds no old row (as
    ``_with_base`` would find none), and every update is of a row the table does not hold.
    A batch run again after a crash finds the table made, and MERGEs.
    """
    fold = fold_by_key(changes, spec.primary_key, order=order)
    try:  # a MERGE that loses a race runs again (retry_conflicts): each run's fold is let go
        return _merge_fold(target, spec, fold, truncated=truncated, append=append)
    finally:
        fold.release()


def _merge_fold(
    target: Any,
    spec: TableSpec,
    fold: KeyFold,
    *,
    truncated: bool,
    append: Callable[[DataFrame], None] | None,
) -> int:
    """:func:`_merge_by_key`'s MERGE (or append) of ``fold``; returns the rows kept out."""
    types = dict(spec.columns)
    keyed = fold.rows.select(
        "_reset",
        "_exists",
        "_base_key",
        *typed_columns(spec, F.col("_row"), "_v_"),
        *[
            from_text(F.element_at(F.col("_key"), i + 1), types[c]).alias(f"_k_{c}")
            for i, c in enumerate(spec.primary_key)
        ],
        *[
            F.map_contains_key(F.col("_row"), F.lit(n)).alias(f"_h_{i}")
            for i, (n, _) in enumerate(spec.columns)
        ],
        "_key",
        _complete(spec).alias("_complete"),
    )
    based = fold.moves and not truncated and append is None
    if based:
        keyed = _with_base(keyed, target.toDF(), spec)
    keyed = keyed.persist()
    candidates = keyed.where(F.col("_exists") & ~F.col("_complete"))
    if append is not None:  # the table holds no row
        orphans = candidates.where(_orphan(F.lit(False), based=False)).select("_key")
    else:
        # rows the table does not hold, read before the MERGE changes it
        held = target.toDF().select(*spec.primary_key, F.lit(True).alias(FOUND))
        stored = F.coalesce(F.col(f"cur.{FOUND}"), F.lit(False))
        orphans = (
            candidates.alias("r")
            .join(held.alias("cur"), _key_matches(spec, "cur", F.col("r._key")), "left")
            .where(_orphan(stored, based=based))
            .select("_key")
        )
    kept_out = _report_kept_out(spec, orphans)
    # a move left without its old row: kept out, a row stored at its key stays as it is
    moved_out = "(s._reset AND s._base_key IS NOT NULL AND NOT s._complete" + (
        " AND NOT s._b_found)" if based else ")"
    )
    cond = " AND ".join(f"t.`{c}` <=> s.`_k_{c}`" for c in spec.primary_key)
    if based:
        update = {
            f"`{n}`": f"CASE WHEN s.`_h_{i}` THEN s.`_v_{n}` WHEN s._reset THEN s.`_b_{n}` "
            f"ELSE t.`{n}` END"
            for i, (n, _) in enumerate(spec.columns)
        }
        insert = {
            f"`{n}`": f"CASE WHEN s.`_h_{i}` THEN s.`_v_{n}` ELSE s.`_b_{n}` END"
            for i, (n, _) in enumerate(spec.columns)
        }
    else:
        update = {
            f"`{n}`": f"CASE WHEN s._reset OR s.`_h_{i}` THEN s.`_v_{n}` ELSE t.`{n}` END"
            for i, (n, _) in enumerate(spec.columns)
        }
        insert = {f"`{n}`": f"s.`_v_{n}`" for n, _ in spec.columns}
    inserted = f"s._exists AND NOT {moved_out} AND (s._reset OR s._complete)"
    if append is not None:  # the MERGE's inserts, in the table's column order
        append(
            keyed.alias("s")
            .where(F.expr(inserted))
            .select(
                *[
                    F.expr(insert[f"`{f.name}`"]).alias(f.name)
                    if f"`{f.name}`" in insert
                    else F.lit(None).cast(f.dataType).alias(f.name)
                    for f in target.toDF().schema.fields
                ]
            )
        )
    else:
        (
            target.alias("t")
            .merge(keyed.alias("s"), cond)
            .whenMatchedDelete(condition="NOT s._exists")
            .whenMatchedUpdate(condition=f"s._exists AND NOT {moved_out}", set=update)
            # an update of a row the table does not hold inserts only a complete row
            .whenNotMatchedInsert(condition=inserted, values=insert)
            .execute()
        )
    keyed.unpersist()
    return kept_out


CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
"""The Delta table property of the Change Data Feed."""


def _enable_change_data_feed(properties: TableProperties) -> None:
    """Turn the table's Change Data Feed on, unless it is on.

    A table made by this option has it from its first version; one turned on later has a
    feed from that version on (a reader starts there: ``startingVersion``).
    """
    if properties.get(CHANGE_DATA_FEED) != "true":
        properties.set(CHANGE_DATA_FEED, "true")


def _merge_multiset(
    spark: SparkSession,
    target: Any,
    spec: TableSpec,
    changes: DataFrame,
    order: Sequence[str] = LOG_ORDER,
) -> None:
    """MERGE a keyless table's batch (``spec``: the source's columns, no lineage ones).

    The lineage columns come from :func:`~pipeline.lineage.multiset_lineage`.
    """
    deltas = fold_multiset(changes, spec.names).persist()
    current = target.toDF()
    counts = (
        current.join(deltas.select("_row_key"), current[ROW_KEY] == F.col("_row_key"))
        .groupBy(ROW_KEY)
        .count()
    )
    affected = (
        deltas.join(counts, deltas["_row_key"] == counts[ROW_KEY], "left")
        .select(
            "_row_key",
            "_row",
            F.greatest(F.coalesce(F.col("count"), F.lit(0)) + F.col("_delta"), F.lit(0)).alias("n"),
        )
        .join(multiset_lineage(changes, order, spec.names), "_row_key", "left")
    )
    old = affected.select(
        F.lit("old").alias("_kind"),
        F.col("_row_key").alias("_match"),
        *typed_columns(spec, F.lit(None).cast("map<string,string>")),
        *[F.lit(None).cast(t).alias(n) for n, t in LINEAGE_COLUMNS],
        F.col("_row_key").alias(ROW_KEY),
    )
    copy = F.struct("_row", "_row_key", *LINEAGE_NAMES)
    new = affected.select(
        F.explode(F.array_repeat(copy, F.col("n").cast("int"))).alias("x")
    ).select(
        F.lit("new").alias("_kind"),
        F.lit(None).cast("string").alias("_match"),
        *typed_columns(spec, F.col("x._row")),
        *[F.col(f"x.{n}").alias(n) for n in LINEAGE_NAMES],
        F.col("x._row_key").alias(ROW_KEY),
    )
    source = old.unionByName(new)
    values = {f"`{n}`": f"s.`{n}`" for n in [*spec.names, *LINEAGE_NAMES, ROW_KEY]}
    (
        target.alias("t")
        .merge(source.alias("s"), f"s._kind = 'old' AND t.`{ROW_KEY}` = s._match")
        .whenMatchedDelete()
        .whenNotMatchedInsert(condition="s._kind = 'new'", values=values)
        .execute()
    )
    deltas.unpersist()
    del spark


# ------------------------------------------------------------------ the job

"""The materialize job: the normalized change table → one current-state table per source table.

Input: the normalized table written by :mod:`pipeline.normalize`, read as a stream
(Spark's file source follows the sink's ``_spark_metadata`` log: every committed file
exactly once). Per micro-batch and per source table:

1. **Order**: changes sort by ``(commit_lsn_num, ordinal)`` then the Kafka position
   (:data:`pipeline.model.ORDER_COLUMNS`). Changes before the batch's last TRUNCATE of
   the table are dropped and the table is emptied first.
2. **Fold per key** (tables with a primary key): each change is an event on its key
   (insert: reset to the after image; update: overlay the after image's columns, so an
   absent column, e.g. unchanged TOAST, keeps its value; delete: remove). An update
   that changes the key is a delete of the old key and an upsert of the new one. The
   fold is a Spark ``aggregate`` over the key's sorted events (no UDF).
3. **Multiset** (no primary key, REPLICA IDENTITY FULL): a row is identified by its whole
   image; insert adds a copy, delete removes one copy matching the before image, update
   does both. Such tables keep a ``_walcast_row_key`` column (the row image as JSON).
4. **Apply**: with Delta Lake (when the session has it) one ``MERGE`` per table and
   batch (plus a ``DELETE`` for TRUNCATE), made idempotent with Delta's
   ``txnAppId``/``txnVersion``; without Delta, the affected table's state is rewritten
   as Parquet into a new version directory and ``_CURRENT`` is switched to it
   (:func:`read_table` reads it), skipped when the table already has the batch.

Columns are typed with :mod:`pipeline.pgtypes` from the table's layout record (latest
version on the layout topic) or, without one, from the changes' ``column_types``; the
primary key from the layout or the changes. Restart safety: Spark's checkpoint replays an
uncommitted batch with the same files, and both apply paths skip what that batch already
committed, so no change is applied twice or skipped.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from pipeline.layouts import latest_layouts, read_layouts
from pipeline.model import NORMALIZED, ORDER_COLUMNS
from pipeline.pgtypes import from_text, spark_type
from pipeline.session import session_uses_delta

log = logging.getLogger(__name__)

ROW_KEY = "_walcast_row_key"
CURRENT = "_CURRENT"


@dataclass(frozen=True, slots=True)
class TableSpec:
    """What a state table looks like: columns (name, Spark type) and primary key."""

    schema: str
    table: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [n for n, _ in self.columns]


def spec_from_layout(layout: Any, *, typed: bool = True) -> TableSpec:
    """A TableSpec from a layout row (:data:`pipeline.layouts.LAYOUT_FIELDS`)."""
    cols = tuple(
        (c["name"], spark_type(c["type"], c["declared_type"], typed=typed))
        for c in layout["columns"]
    )
    return TableSpec(layout["schema"], layout["table"], cols, tuple(layout["primary_key"] or ()))


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
    return spark.createDataFrame([], ", ".join(fields))


# ------------------------------------------------------------------ Parquet


def _fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm = spark._jvm  # noqa: SLF001
    assert jvm is not None
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    return jvm, jpath.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001


def current_version(spark: SparkSession, path: str) -> str | None:
    """The version directory name ``_CURRENT`` points to (None: no table yet)."""
    jvm, fs = _fs(spark, path)
    pointer = jvm.org.apache.hadoop.fs.Path(f"{path}/{CURRENT}")
    if not fs.exists(pointer):
        return None
    stream = fs.open(pointer)
    try:
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        line = reader.readLine()
    finally:
        stream.close()
    return line.strip() if line else None


def _set_current(spark: SparkSession, path: str, version: str) -> None:
    jvm, fs = _fs(spark, path)
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


def table_path(root: str, schema: str, table: str) -> str:
    """Where the state of ``schema.table`` lives under ``root``."""
    return f"{root.rstrip('/')}/{schema}/{table}"


def read_table(spark: SparkSession, root: str, schema: str, table: str) -> DataFrame:
    """The current state of ``schema.table`` (Delta or Parquet), as written by materialize."""
    path = table_path(root, schema, table)
    version = current_version(spark, path)
    if version is not None:
        return spark.read.parquet(f"{path}/{version}")
    return spark.read.format("delta").load(path)


def _version_name(batch_id: int) -> str:
    return f"v{batch_id:020d}"


def apply_parquet(
    spark: SparkSession, path: str, spec: TableSpec, changes: DataFrame, batch_id: int
) -> None:
    """Rewrite ``path``'s state with ``changes`` applied (skipped when already applied)."""
    version = current_version(spark, path)
    name = _version_name(batch_id)
    if version is not None and version >= name:
        return
    current = spark.read.parquet(f"{path}/{version}") if version else empty_table(spark, spec)
    for n, t in spec.columns:
        if n not in current.columns:
            current = current.withColumn(n, F.lit(None).cast(t))
    kept, truncated = without_truncated(changes)
    if truncated:
        current = empty_table(spark, spec)
    out_cols = spec.names + ([] if spec.primary_key else [ROW_KEY])
    if spec.primary_key:
        results = fold_by_key(kept, spec.primary_key)
        keyed = results.select("*", *typed_columns(spec, F.col("_row"), "_v_"))
        cond = None
        for i, c in enumerate(spec.primary_key):
            typed_key = from_text(F.element_at(F.col("_key"), i + 1), dict(spec.columns)[c])
            term = F.col(f"cur.{c}").eqNullSafe(typed_key)
            cond = term if cond is None else cond & term
        assert cond is not None
        joined = keyed.alias("r").join(current.alias("cur"), cond, "left")
        updated = joined.where(F.col("_exists")).select(
            *[
                F.when(
                    F.col("_reset") | F.map_contains_key(F.col("_row"), F.lit(n)), F.col(f"_v_{n}")
                )
                .otherwise(F.col(f"cur.{n}"))
                .alias(n)
                for n in spec.names
            ]
        )
        untouched = current.alias("cur").join(keyed.alias("r"), cond, "left_anti")
        new_state = untouched.select(*out_cols).unionByName(updated.select(*out_cols))
    else:
        deltas = fold_multiset(kept)
        counts = current.groupBy(ROW_KEY).count()
        affected = deltas.join(counts, deltas["_row_key"] == counts[ROW_KEY], "left").select(
            "_row_key",
            "_row",
            F.greatest(F.coalesce(F.col("count"), F.lit(0)) + F.col("_delta"), F.lit(0)).alias("n"),
        )
        copies = affected.select(
            F.explode(F.array_repeat(F.struct("_row", "_row_key"), F.col("n").cast("int"))).alias(
                "x"
            )
        ).select(*typed_columns(spec, F.col("x._row")), F.col("x._row_key").alias(ROW_KEY))
        untouched = current.join(deltas, current[ROW_KEY] == deltas["_row_key"], "left_anti")
        new_state = untouched.select(*out_cols).unionByName(copies.select(*out_cols))
    new_state.write.mode("overwrite").parquet(f"{path}/{name}")
    _set_current(spark, path, name)


# ------------------------------------------------------------------ Delta


def apply_delta(
    spark: SparkSession, path: str, spec: TableSpec, changes: DataFrame, batch_id: int, app_id: str
) -> None:
    """MERGE ``changes`` into the Delta table at ``path`` (idempotent per batch id)."""
    from delta.tables import DeltaTable  # noqa: PLC0415

    if not DeltaTable.isDeltaTable(spark, path):
        empty_table(spark, spec).write.format("delta").mode("ignore").save(path)
    target = DeltaTable.forPath(spark, path)
    existing = set(target.toDF().columns)
    missing = [(n, t) for n, t in spec.columns if n not in existing]
    if missing:
        cols = ", ".join(f"`{n}` {t}" for n, t in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
        target = DeltaTable.forPath(spark, path)
    kept, truncated = without_truncated(changes)

    def txn(step: str) -> None:
        spark.conf.set("spark.databricks.delta.write.txnAppId", f"{app_id}:{step}")
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))

    try:
        if truncated:
            txn("truncate")
            target.delete()
        txn("merge")
        if spec.primary_key:
            _merge_by_key(target, spec, kept)
        else:
            _merge_multiset(spark, target, spec, kept)
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def _merge_by_key(target: Any, spec: TableSpec, changes: DataFrame) -> None:
    results = fold_by_key(changes, spec.primary_key)
    types = dict(spec.columns)
    keyed = results.select(
        "_reset",
        "_exists",
        *typed_columns(spec, F.col("_row"), "_v_"),
        *[
            from_text(F.element_at(F.col("_key"), i + 1), types[c]).alias(f"_k_{c}")
            for i, c in enumerate(spec.primary_key)
        ],
        *[
            F.map_contains_key(F.col("_row"), F.lit(n)).alias(f"_h_{i}")
            for i, (n, _) in enumerate(spec.columns)
        ],
    )
    cond = " AND ".join(f"t.`{c}` <=> s.`_k_{c}`" for c in spec.primary_key)
    update = {
        f"`{n}`": f"CASE WHEN s._reset OR s.`_h_{i}` THEN s.`_v_{n}` ELSE t.`{n}` END"
        for i, (n, _) in enumerate(spec.columns)
    }
    insert = {f"`{n}`": f"s.`_v_{n}`" for n, _ in spec.columns}
    (
        target.alias("t")
        .merge(keyed.alias("s"), cond)
        .whenMatchedDelete(condition="NOT s._exists")
        .whenMatchedUpdate(condition="s._exists", set=update)
        .whenNotMatchedInsert(condition="s._exists", values=insert)
        .execute()
    )


def _merge_multiset(spark: SparkSession, target: Any, spec: TableSpec, changes: DataFrame) -> None:
    deltas = fold_multiset(changes).persist()
    current = target.toDF()
    counts = (
        current.join(deltas.select("_row_key"), current[ROW_KEY] == F.col("_row_key"))
        .groupBy(ROW_KEY)
        .count()
    )
    affected = deltas.join(counts, deltas["_row_key"] == counts[ROW_KEY], "left").select(
        "_row_key",
        "_row",
        F.greatest(F.coalesce(F.col("count"), F.lit(0)) + F.col("_delta"), F.lit(0)).alias("n"),
    )
    old = affected.select(
        F.lit("old").alias("_kind"),
        F.col("_row_key").alias("_match"),
        *typed_columns(spec, F.lit(None).cast("map<string,string>")),
        F.col("_row_key").alias(ROW_KEY),
    )
    new = affected.select(
        F.explode(F.array_repeat(F.struct("_row", "_row_key"), F.col("n").cast("int"))).alias("x")
    ).select(
        F.lit("new").alias("_kind"),
        F.lit(None).cast("string").alias("_match"),
        *typed_columns(spec, F.col("x._row")),
        F.col("x._row_key").alias(ROW_KEY),
    )
    source = old.unionByName(new)
    values = {f"`{n}`": f"s.`{n}`" for n in [*spec.names, ROW_KEY]}
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


def apply_batch(
    spark: SparkSession,
    changes: DataFrame,
    state_root: str,
    batch_id: int,
    layouts: DataFrame | None = None,
    *,
    use_delta: bool | None = None,
    typed: bool = True,
    app_id: str = "walcast-materialize",
) -> list[str]:
    """Apply one batch of normalized changes to the state tables; returns their names."""
    delta = session_uses_delta(spark) if use_delta is None else use_delta
    by_table: dict[tuple[str, str], Any] = {}
    if layouts is not None:
        for row in latest_layouts(layouts).collect():
            by_table[(row["schema"], row["table"])] = row
    tables = [
        (r["schema"], r["table"]) for r in changes.select("schema", "table").distinct().collect()
    ]
    done = []
    for schema, table in sorted(tables):
        part = changes.where((F.col("schema") == schema) & (F.col("table") == table))
        layout = by_table.get((schema, table))
        spec = (
            spec_from_layout(layout, typed=typed)
            if layout is not None
            else spec_from_changes(part, schema, table, typed=typed)
        )
        path = table_path(state_root, schema, table)
        if delta:
            apply_delta(spark, path, spec, part, batch_id, f"{app_id}:{schema}.{table}")
        else:
            apply_parquet(spark, path, spec, part, batch_id)
        done.append(f"{schema}.{table}")
    return done


@dataclass(slots=True)
class MaterializeJob:
    """Everything the materialize job needs; :meth:`start` runs it."""

    normalized: str
    state: str
    checkpoint: str
    bootstrap: str | None = None
    layout_topic: str | None = None
    use_delta: bool | None = None
    typed: bool = True
    available_now: bool = False
    processing_time: str | None = None
    max_files_per_trigger: int | None = None
    query_name: str | None = None
    applied: list[str] = field(default_factory=list)

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the streaming query (returns at once)."""
        spark.conf.set("spark.sql.ansi.enabled", "false")
        spark.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
        reader = spark.readStream.schema(NORMALIZED)
        if self.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(self.max_files_per_trigger))
        stream = reader.parquet(self.normalized)

        def run_batch(batch: DataFrame, batch_id: int) -> None:
            changes = batch.persist()
            try:
                layout_topic = (
                    "walcast.schemas" if self.layout_topic is None else self.layout_topic
                )  # walcast run's default schema topic; read only if it exists
                layouts = (
                    read_layouts(spark, self.bootstrap, layout_topic)
                    if self.bootstrap and layout_topic
                    else None
                )
                self.applied = apply_batch(
                    spark,
                    changes,
                    self.state,
                    batch_id,
                    layouts,
                    use_delta=self.use_delta,
                    typed=self.typed,
                    app_id=f"walcast-materialize:{self.checkpoint}",
                )
            finally:
                changes.unpersist()
            log.info("materialize batch %d: %s", batch_id, ", ".join(self.applied))

        writer = (
            stream.writeStream.foreachBatch(run_batch)
            .option("checkpointLocation", self.checkpoint)
            .queryName(self.query_name or "walcast-materialize")
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        elif self.processing_time:
            writer = writer.trigger(processingTime=self.processing_time)
        return writer.start()

    def run(self, spark: SparkSession) -> None:
        """Start and wait until the query ends."""
        self.start(spark).awaitTermination()

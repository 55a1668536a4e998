"""The Apache Iceberg store: one MERGE per table and batch into an Iceberg table.

``walcast spark materialize --store iceberg`` applies the same fold as the Delta store
(:mod:`pipeline.fold`, one final change per key and batch) with the same MERGE clauses:
:func:`apply_iceberg` hands :func:`pipeline.stores._merge_by_key` and
:func:`pipeline.stores._merge_multiset` a target (:class:`IcebergTarget`) that speaks
Delta's Python merge builder and runs it as one SQL ``MERGE INTO`` on the Iceberg table.
The rules are the Delta store's, so the stores cannot drift apart: a keyed table is
merged by its primary key, a keyless one (REPLICA IDENTITY FULL) is a multiset on
``_walcast_row_key``, the no-partial-rows rule keeps orphans out, and every row ends with
the ``_walcast_`` columns of the change that last wrote it (:mod:`pipeline.lineage`).

Invariants:

* **Where a table lives.** Without a catalog of the user's, the tables are in an
  Iceberg *Hadoop catalog* whose warehouse is materialize's ``--output`` root (no server;
  decision: no separate warehouse flag, so an Iceberg table sits exactly where
  :func:`pipeline.stores.table_path` puts a Delta one, and ``read_table`` finds it the same
  way). The catalog is registered at run time under a name derived from the root
  (:func:`catalog_for`), so one session may write several roots. A user's catalog is the
  Spark catalog ``walcast`` (``--conf spark.sql.catalog.walcast=…``: REST, Hive, Glue,
  Nessie, JDBC), used as configured when set. Either way a table's identifier is
  ``<catalog>.<source dir>.<schema>.<table>`` (a nested namespace, :func:`table_name`;
  changes without a source: ``<catalog>.<schema>.<table>``).
* **Exactly once.** Each commit of a batch (the TRUNCATE's ``DELETE``, then the
  ``MERGE``) carries ``walcast.app-id``, ``walcast.batch-id`` and ``walcast.step`` in its
  snapshot summary, written by the same commit (Iceberg's ``CommitMetadata``). Before a
  step, the highest ``(batch, step)`` among the table's snapshots of this app id is read
  (:func:`last_commit`): a step at or before it is skipped. A batch replayed after a crash
  therefore applies only what it had not committed, as Delta's ``txnAppId``/``txnVersion``
  do. Only the latest batch is ever replayed, and its snapshot is the table's current
  one unless another writer committed since: a snapshot expiry that removes the app's
  last snapshot while a batch is pending (possible only with a second writer) could let
  that batch apply again.
* **Schema.** A column the table lacks is added (``ALTER TABLE … ADD COLUMNS``), as in the
  Delta store. Iceberg has no 8- or 16-bit integers: ``int2`` columns are stored as
  ``int`` (Iceberg's own mapping); every other type is the Delta store's.
* **History** (``--history``) is kept in an Iceberg table beside each state table
  (:mod:`pipeline.history_store`). ``--change-data-feed`` is Delta Lake's; with
  ``--store iceberg`` it is refused in one line (:data:`CHANGE_FEED_REFUSAL`).
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`)
from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from capture.errors import ConfigError
from pipeline.added_columns import add_and_fill
from pipeline.conflicts import retry_conflicts
from pipeline.fold import without_truncated
from pipeline.lineage import with_lineage
from pipeline.model import LOG_ORDER
from pipeline.partitioning import (
    PartitionField,
    check_columns,
    check_partitioning,
    iceberg_columns,
)
from pipeline.row_keys import keep_row_keys
from pipeline.stores import (
    _merge_by_key,  # the Delta store's MERGEs, shared on purpose
    _merge_multiset,
    empty_table,
    source_spec,
    stored_spec,
)
from pipeline.tables import HISTORY_DIR, TableProperties, TableSpec, source_dir
from pipeline.tables import quote_identifier as _quote
from pipeline.type_changes import TypeChange, checked_type_changes, stored_types

USER_CATALOG = "walcast"
"""The Spark catalog a user configures for a real Iceberg catalog (REST, Hive, Glue …)."""

CATALOG_SETTING = f"spark.sql.catalog.{USER_CATALOG}"

CHANGE_FEED_REFUSAL = (
    "--change-data-feed is Delta Lake's: Iceberg tables have snapshots instead "
    "(read them incrementally with Iceberg's start-snapshot-id)"
)

APP_ID = "walcast.app-id"
BATCH_ID = "walcast.batch-id"
STEP = "walcast.step"
STEPS = {"truncate": 1, "merge": 2}
"""The commits of one batch, in order (the ``walcast.step`` of each snapshot)."""


def catalog_for(spark: SparkSession, root: str) -> str:
    """The Spark catalog the tables under ``root`` are written through.

    ``walcast`` when the session configures it (a user's catalog); else a Hadoop catalog
    on ``root``, registered now under ``walcast_<hash of root>`` (catalogs load lazily,
    so a running session can gain one).
    """
    if spark.conf.get(CATALOG_SETTING, None):
        return USER_CATALOG
    warehouse = _warehouse(root)
    name = "walcast_" + hashlib.sha256(warehouse.encode()).hexdigest()[:12]
    prefix = f"spark.sql.catalog.{name}"
    if spark.conf.get(prefix, None) is None:
        spark.conf.set(f"{prefix}.type", "hadoop")
        spark.conf.set(f"{prefix}.warehouse", warehouse)
        # every read sees the last commit, also one made by another process
        spark.conf.set(f"{prefix}.cache-enabled", "false")
        spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    return name


def _warehouse(root: str) -> str:
    """``root`` as the Hadoop catalog's warehouse: a local path made absolute."""
    if "://" in root and not root.startswith("file:"):
        return root.rstrip("/")
    return str(Path(root.removeprefix("file://").removeprefix("file:")).resolve())


def table_name(
    catalog: str, schema: str, table: str, source: str | None = None, *, history: bool = False
) -> str:
    """The quoted identifier of ``schema.table`` of ``source`` in ``catalog``.

    The namespace is ``(<source dir>, <schema>)`` (:func:`pipeline.stores.source_dir`), so
    a Hadoop catalog on the output root puts it at :func:`pipeline.stores.table_path`.
    With ``history``, the table's history: namespace ``(<source dir>, <schema>,
    _walcast_history)``, at :func:`pipeline.history_store.history_path` of that path.
    """
    parts = [
        catalog,
        *([source_dir(source)] if source is not None else []),
        schema,
        *([HISTORY_DIR] if history else []),
        table,
    ]
    return ".".join(_quote(p) for p in parts)


# ------------------------------------------------------------------ commits


def commit_marked(
    spark: SparkSession, properties: dict[str, str], function: Callable[[], object]
) -> Any:
    """Run ``function`` so that the Iceberg commits it makes carry ``properties``.

    Iceberg's ``CommitMetadata.withCommitProperties`` keeps the properties in a
    thread-local of the JVM thread that commits, for the duration of a ``Callable``. A
    Python ``Callable`` would be a py4j callback into this process, nested inside a call of
    the same pinned connection; a failure or interruption there can leave an answer unread
    on the gateway and every later Spark call of the process off by one. So the same
    thread-local (``CommitMetadata.COMMIT_PROPERTIES``, read by its public
    ``commitProperties()``) is set and cleared here, from Python, around ``function``:
    PySpark's pinned threads run this thread's calls, ``function``'s SQL included, on one
    JVM thread, the one whose thread-local is set. Invariant: the thread-local is empty
    again when this returns or raises.
    """
    jvm = spark._jvm  # noqa: SLF001
    assert jvm is not None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # Spark's jars
    name = "org.apache.iceberg.spark.CommitMetadata"
    holder = jvm.java.lang.Class.forName(name, True, loader)  # noqa: FBT003 - Java API
    field = holder.getDeclaredField("COMMIT_PROPERTIES")
    field.setAccessible(True)
    local = field.get(None)
    values = jvm.java.util.HashMap()
    for key, value in properties.items():
        values.put(key, value)
    local.set(values)
    try:
        return function()
    finally:
        local.set(jvm.java.util.HashMap())


def last_commit(spark: SparkSession, name: str, app_id: str) -> tuple[int, int] | None:
    """The highest ``(batch id, step)`` ``app_id`` committed to table ``name`` (None: none).

    The highest, not the newest: two commits of one batch may share a millisecond, and a
    streaming query's batch ids only grow.
    """
    summary = F.col("summary")
    step = F.coalesce(
        *[F.when(summary.getItem(STEP) == label, F.lit(rank)) for label, rank in STEPS.items()],
        F.lit(0),
    )
    row = (
        spark.sql(f"SELECT summary FROM {name}.snapshots")  # noqa: S608 - quoted name
        .where(summary.getItem(APP_ID) == F.lit(app_id))
        .select(
            F.max(
                F.struct(summary.getItem(BATCH_ID).cast("long").alias("batch"), step.alias("step"))
            ).alias("last")
        )
        .first()
    )
    if row is None or row["last"] is None:
        return None
    return int(row["last"]["batch"]), int(row["last"]["step"])


# ------------------------------------------------------------------ MERGE


class IcebergTarget:
    """The part of Delta's ``DeltaTable`` merge builder the Delta store's MERGEs use.

    ``target.alias("t").merge(source.alias("s"), cond).whenMatchedDelete(…)
    .whenMatchedUpdate(…).whenNotMatchedInsert(…).execute()`` becomes one
    ``MERGE INTO <table> t USING <source view> s ON … WHEN …`` with the same clauses in
    the same order (conditions and values are SQL text in both).
    """

    def __init__(self, spark: SparkSession, name: str) -> None:
        self.spark = spark
        self.name = name
        self._alias = "t"
        self._source: DataFrame | None = None
        self._source_alias = "s"
        self._on = ""
        self._clauses: list[str] = []

    def toDF(self) -> DataFrame:  # noqa: N802 - DeltaTable's name
        """The table as it is now."""
        return self.spark.table(self.name)

    def alias(self, alias: str) -> IcebergTarget:
        """Name the target in the conditions."""
        self._alias = alias
        return self

    def merge(self, source: DataFrame, condition: str) -> IcebergTarget:
        """Start a MERGE of ``source`` (aliased ``s`` by the caller) on ``condition``."""
        self._source = source
        self._on = condition
        self._clauses = []
        return self

    def whenMatchedDelete(self, condition: str | None = None) -> IcebergTarget:  # noqa: N802
        """``WHEN MATCHED [AND cond] THEN DELETE``."""
        self._clauses.append(f"WHEN MATCHED{_and(condition)} THEN DELETE")
        return self

    def whenMatchedUpdate(  # noqa: N802
        self,
        condition: str | None = None,
        set: dict[str, str] | None = None,  # noqa: A002 - DeltaTable's keyword
    ) -> IcebergTarget:
        """``WHEN MATCHED [AND cond] THEN UPDATE SET col = expr, …``."""
        assignments = ", ".join(f"{col} = {expr}" for col, expr in (set or {}).items())
        self._clauses.append(f"WHEN MATCHED{_and(condition)} THEN UPDATE SET {assignments}")
        return self

    def update(self, set: dict[str, Column]) -> None:  # noqa: A002 - DeltaTable's keyword
        """Give every row the ``set`` columns' values (quoted name → expression).

        One Iceberg commit, which overwrites the table with itself so changed.
        """
        table = self.toDF()
        row = [set.get(_quote(c), F.col(_quote(c))).alias(c) for c in table.columns]
        table.select(*row).writeTo(self.name).overwrite(F.lit(True))  # noqa: FBT003

    def whenNotMatchedInsert(  # noqa: N802
        self, condition: str | None = None, values: dict[str, str] | None = None
    ) -> IcebergTarget:
        """``WHEN NOT MATCHED [AND cond] THEN INSERT (cols) VALUES (exprs)``."""
        pairs = list((values or {}).items())
        columns = ", ".join(c for c, _ in pairs)
        exprs = ", ".join(e for _, e in pairs)
        self._clauses.append(
            f"WHEN NOT MATCHED{_and(condition)} THEN INSERT ({columns}) VALUES ({exprs})"  # noqa: S608
        )
        return self

    def execute(self) -> None:
        """Run the MERGE (one Iceberg commit)."""
        assert self._source is not None
        with _global_view(self.spark, self._source) as view:
            self.spark.sql(
                f"MERGE INTO {self.name} {self._alias} USING {view} "
                f"{self._source_alias} ON {self._on} " + " ".join(self._clauses)
            )


@contextlib.contextmanager
def _global_view(spark: SparkSession, frame: DataFrame) -> Iterator[str]:
    """``frame`` as a global temporary view for ``spark``'s SQL: yields its qualified name.

    The view is dropped after. A streaming batch's frames belong to the query's cloned
    session, whose temporary views (and the catalogs registered since it was cloned) the
    session running the SQL does not share; a global view is seen by both.
    """
    view = "_walcast_" + uuid.uuid4().hex
    frame.createOrReplaceGlobalTempView(view)
    database = spark.conf.get("spark.sql.globalTempDatabase", "global_temp")
    try:
        yield f"{_quote(database or '')}.{view}"
    finally:
        spark.catalog.dropGlobalTempView(view)


def _and(condition: str | None) -> str:
    return f" AND ({condition})" if condition else ""


# ------------------------------------------------------------------ apply


def apply_iceberg(
    spark: SparkSession,
    root: str,
    spec: TableSpec,
    changes: DataFrame,
    batch_id: int,
    app_id: str,
    order: Sequence[str] = LOG_ORDER,
    *,
    source: str | None = None,
    partition_by: Sequence[PartitionField] = (),
) -> int:
    """MERGE ``changes`` in ``order`` into the Iceberg table of ``spec`` (once per batch id).

    ``partition_by``: the table's partition fields when it is created; a table that exists
    with others is refused (:mod:`pipeline.partitioning`).

    ``root`` is materialize's output (the Hadoop catalog's warehouse unless the session
    configures catalog ``walcast``); ``source`` is the changes' source. Returns the number
    of rows kept out (no partial rows: :mod:`pipeline.stores`).
    """
    base, spec = source_spec(spec), stored_spec(spec)
    catalog = catalog_for(spark, root)
    name = table_name(catalog, spec.schema, spec.table, source)
    created = not spark.catalog.tableExists(name)
    if created:
        check_columns(partition_by, spec.schema, spec.table, base.columns)
        writer = empty_table(spark, spec).writeTo(name).using("iceberg")
        if partition_by:
            writer = writer.partitionedBy(*iceberg_columns(partition_by))
        writer.create()
    elif partition_by:
        check_partitioning(
            partition_by, spec.schema, spec.table, partition_fields(spark, name), "iceberg"
        )
    properties = TableProperties.read(spark, name)
    stored = stored_types(spark.table(name))
    widened = checked_type_changes(stored, spec.columns, "iceberg")
    missing = [(n, t) for n, t in spec.columns if n not in stored]
    target = IcebergTarget(spark, name)

    def add() -> IcebergTarget:
        if missing:
            cols = ", ".join(f"{_quote(n)} {t}" for n, t in missing)
            spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({cols})")
        return target

    add_and_fill(base, stored, properties, store="iceberg", add=add)
    widen_iceberg(spark, name, widened)
    done = last_commit(spark, name, app_id)
    kept, truncated = without_truncated(changes, reset_at_load=not spec.primary_key, order=order)

    def pending(step: str) -> bool:
        return done is None or (batch_id, STEPS[step]) > done

    def mark(step: str) -> dict[str, str]:
        return {APP_ID: app_id, BATCH_ID: str(batch_id), STEP: step}

    kept_out = 0
    what = f"{spec.schema}.{spec.table} batch {batch_id}"
    if not spec.primary_key:
        keep_row_keys(target, properties, base.names, created=created, what=what)
    # a lost race with another writer (walcast spark maintain) committed nothing: run again
    if truncated and pending("truncate"):
        retry_conflicts(
            f"{what} (TRUNCATE)",
            lambda: commit_marked(
                spark,
                mark("truncate"),
                lambda: spark.sql(f"DELETE FROM {name}"),  # noqa: S608 - quoted
            ),
        )
    if pending("merge"):
        if spec.primary_key:
            kept_out = int(
                retry_conflicts(
                    f"{what} (MERGE)",
                    lambda: commit_marked(
                        spark,
                        mark("merge"),
                        lambda: _merge_by_key(
                            target,
                            spec,
                            with_lineage(kept),
                            truncated=truncated,
                            order=order,
                            append=_appender(spark, name) if created else None,
                        ),
                    ),
                )
            )
        else:
            retry_conflicts(
                f"{what} (MERGE)",
                lambda: commit_marked(
                    spark, mark("merge"), lambda: _merge_multiset(spark, target, base, kept, order)
                ),
            )
    return kept_out


def widen_iceberg(spark: SparkSession, name: str, widened: Sequence[TypeChange]) -> None:
    """Change the type of ``widened``'s columns of Iceberg table ``name`` in place.

    Iceberg's type promotion: a metadata change, the data files stay as written.
    """
    for change in widened:
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN {_quote(change.column)} TYPE {change.new}")


def _appender(spark: SparkSession, name: str) -> Callable[[DataFrame], None]:
    """Appends rows to the Iceberg table ``name``: a table this batch made.

    The MERGE's inserts (:func:`pipeline.stores._merge_by_key`), in the table's column
    order; the commit carries :func:`_commit`'s properties as the MERGE's would. Through
    :func:`_global_view` and ``spark``, as the MERGE: ``writeTo`` on a streaming batch's
    frame fails (``REQUIRES_SINGLE_PART_NAMESPACE``: its session does not know the catalog).
    """

    def append(rows: DataFrame) -> None:
        with _global_view(spark, rows) as view:
            spark.sql(f"INSERT INTO {name} SELECT * FROM {view}")  # noqa: S608 - quoted

    return append


def check_catalog(spark: SparkSession) -> None:
    """One line (ConfigError) when the user's catalog ``walcast`` does not answer.

    Asked once before the stream starts (listing the catalog's namespaces), so a wrong
    ``uri``, a closed port or bad credentials are named before any batch. A Hadoop
    catalog on ``--output`` needs no check here (the CLI checks the directory first).
    """
    if not spark.conf.get(CATALOG_SETTING, None):
        return
    try:
        spark.sql(f"SHOW NAMESPACES IN {_quote(USER_CATALOG)}").collect()
    except Exception as exc:  # noqa: BLE001 - the JVM's errors carry pages of stack
        from pipeline.errors import first_line  # noqa: PLC0415

        uri = spark.conf.get(f"{CATALOG_SETTING}.uri", None)
        setting = f"{CATALOG_SETTING}.uri={uri}" if uri else CATALOG_SETTING
        raise ConfigError(
            f"{setting}: the Iceberg catalog cannot be reached: {first_line(exc)[:300]}",
            hint=f"check {CATALOG_SETTING}.* (uri, credentials), or drop them to write a "
            "Hadoop catalog under --output",
        ) from None


def refuse_unsupported(*, change_data_feed: bool) -> None:
    """One line for what the Iceberg store does not keep."""
    if change_data_feed:
        raise ConfigError(CHANGE_FEED_REFUSAL, hint="drop --change-data-feed")


def partition_fields(spark: SparkSession, name: str) -> list[str]:
    """The Iceberg table's partition fields as ``DESCRIBE TABLE`` prints them, in order.

    Spark prints two shapes: with a transform among the fields, a ``# Partitioning``
    section of ``Part N`` rows naming each field (``days(at)``, ``region``); with columns
    only, a ``# Partition Information`` section whose rows (after its ``# col_name``
    header) name the columns.
    """
    rows = [
        (str(r["col_name"]), str(r["data_type"]))
        for r in spark.sql(f"DESCRIBE TABLE {name}").collect()
    ]
    parts = [kind for col, kind in rows if col.startswith("Part ") and col[5:].isdigit()]
    if parts:
        return parts
    section = [col for col, _ in rows]
    if "# Partition Information" not in section:
        return []
    start = section.index("# Partition Information") + 1
    columns = []
    for col in section[start:]:
        if col == "# col_name":
            continue
        if not col or col.startswith("#"):
            break
        columns.append(col)
    return columns

"""Where a table's history is kept: a Delta or an Iceberg table beside its state table.

:mod:`pipeline.history` computes the versions a batch writes; this module keeps them, in
the state table's own store:

* **Delta Lake** (``--store delta``): a Delta table at
  :func:`pipeline.tables.history_path`, written by path.
* **Apache Iceberg** (``--store iceberg``): the table ``<catalog>.<source
  dir>.<schema>._walcast_history.<table>``
  (:func:`pipeline.iceberg_store.table_name` with ``history``), in the catalog the state
  tables use. In the Hadoop catalog on ``--output`` it sits at that path too, so as-of
  reads (:func:`pipeline.tables.read_history`) and ``walcast spark maintain`` find it,
  as they find a Delta history. (With a catalog of the user's, read it by its name.)
* **Parquet**: none. The store rewrites a table whole per batch, which for a history
  (that only grows) would cost the whole history every batch: ``--history --parquet`` is
  refused (:data:`PARQUET_REFUSAL`).

Invariants:

* **One MERGE per table and batch**, on ``(primary key, valid_from_lsn)``, with the same
  clauses in both stores (Iceberg's through :class:`pipeline.iceberg_store.IcebergTarget`,
  which speaks Delta's merge builder).
* **Exactly once.** Delta: the MERGE carries ``txnAppId`` ``<app id>:history`` and
  ``txnVersion`` the batch id. Iceberg: its snapshot carries the same app id, the batch id
  and step ``merge`` (:func:`pipeline.iceberg_store.last_commit`), and a batch the
  history already has is skipped before its versions are computed. Materialize writes
  the state table first, then the history, so a crash between the two applies the
  history alone on the next run.
* **Schema.** Columns the history lacks are added and filled like the state table's
  (:func:`pipeline.added_columns.add_and_fill`, the value fills limited to current
  versions), and a column's other names from the names it is stored under
  (:func:`other_names`);
  a widening the store follows changes the column in place (Delta type widening,
  Iceberg type promotion); any other type change refuses the batch before the state
  table is written (:func:`check_history_types`). Iceberg stores ``int2`` as ``int``,
  as for state tables.
* **A lost race** with another writer (``walcast spark maintain`` compacting the
  history) committed nothing and is run again (:func:`pipeline.conflicts.retry_conflicts`).
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.added_columns import add_and_fill
from pipeline.column_numbers import Fill, names_per_column
from pipeline.conflicts import retry_conflicts
from pipeline.history import (
    IS_CURRENT,
    VALID_FROM_LSN,
    HistoryOrderError,
    history_fields,
    versions,
)
from pipeline.iceberg_store import (
    APP_ID,
    BATCH_ID,
    STEP,
    STEPS,
    IcebergTarget,
    commit_marked,
    last_commit,
    widen_iceberg,
)
from pipeline.local_frames import local_empty
from pipeline.model import LOG_ORDER
from pipeline.tables import TableProperties, history_path, quote_identifier
from pipeline.type_changes import TypeChangeRefused, stored_types, type_changes, widen_delta

if TYPE_CHECKING:
    from pipeline.tables import TableSpec

PARQUET_REFUSAL = (
    "--history needs Delta Lake or Iceberg tables: the Parquet store rewrites a table whole "
    "every batch, and a history only grows"
)
"""Why ``--history --parquet`` is refused (the CLI adds the hint)."""


def empty_history(spark: SparkSession, spec: TableSpec) -> DataFrame:
    """An empty DataFrame with the history table's schema."""
    return local_empty(spark, ", ".join(f"`{n}` {t}" for n, t in history_fields(spec)))


def check_history_types(
    spark: SparkSession, table_path: str, spec: TableSpec, *, iceberg: str | None = None
) -> None:
    """Refuse a batch whose types the history of the state table at ``table_path`` cannot take.

    :class:`~pipeline.type_changes.TypeChangeRefused` when the history holds a column of
    ``spec`` with a type its store cannot widen to the new one. ``iceberg``: the history's
    Iceberg identifier (else it is Delta's, at :func:`pipeline.tables.history_path`).
    Materialize asks before it writes the state table, so a batch that the history cannot
    take is applied to neither.
    """
    if not spec.primary_key:
        return
    if iceberg is not None:
        if not spark.catalog.tableExists(iceberg):
            return
        stored, store = stored_types(spark.table(iceberg)), "iceberg"
    else:
        from delta.tables import DeltaTable  # noqa: PLC0415

        path = history_path(table_path)
        if not DeltaTable.isDeltaTable(spark, path):
            return
        stored, store = stored_types(spark.read.format("delta").load(path)), "delta"
    _, refused = type_changes(stored, history_fields(spec), store)
    if refused:
        raise TypeChangeRefused(store, refused)


def apply_history(
    spark: SparkSession,
    table_path: str,
    spec: TableSpec,
    changes: DataFrame,
    batch_id: int,
    app_id: str,
    order: Sequence[str],
    track: Sequence[str] | None = None,
    *,
    label: str | None = None,
    iceberg: str | None = None,
) -> bool:
    """MERGE the batch's versions of one table into its history (once per batch id).

    ``iceberg``: the history's Iceberg identifier (:func:`pipeline.iceberg_store.table_name`
    with ``history``); without it the history is the Delta table at
    :func:`pipeline.tables.history_path`.
    Returns False, writing nothing, for a table without a primary key (no history, see
    :mod:`pipeline.history`). :class:`~pipeline.history.HistoryOrderError` when the
    changes have no commit LSN (``order`` is not :data:`~pipeline.model.LOG_ORDER`) or
    ``track`` names a column the table does not have.
    """
    name = label or f"{spec.schema}.{spec.table}"
    if not spec.primary_key:
        return False
    if tuple(order) != LOG_ORDER:
        raise HistoryOrderError(
            f"{name}: --history orders versions by commit LSN, and these changes carry "
            "none (a Debezium connector's own topics are applied in Kafka order)",
            hint="materialize this table without --history, or from walcast's topics",
        )
    missing_track = [c for c in track or () if c not in spec.names]
    if missing_track:
        raise HistoryOrderError(
            f"{name}: --history-columns names {', '.join(missing_track)}, not a column of "
            f"the table (its columns: {', '.join(spec.names)})",
            hint="name columns of every table materialized with --history",
        )
    history_app = f"{app_id}:history"
    if iceberg is not None:
        _IcebergHistory(spark, iceberg, spec, history_app).apply(changes, batch_id, track)
    else:
        _DeltaHistory(spark, history_path(table_path), spec).apply(
            changes, batch_id, history_app, track
        )
    return True


def _merge(target: Any, spec: TableSpec, rows: DataFrame) -> None:
    """The history's MERGE of ``rows`` (:func:`pipeline.history.versions`) into ``target``.

    ``target``: a ``DeltaTable`` or the Iceberg store's stand-in, which run the same
    clauses.
    """
    match = " AND ".join(
        [f"t.`{c}` <=> s.`{c}`" for c in spec.primary_key]
        + [f"t.`{VALID_FROM_LSN}` = s.`{VALID_FROM_LSN}`"]
    )
    values: dict[str, str | Column] = {f"`{n}`": f"s.`{n}`" for n, _ in history_fields(spec)}
    (
        target.alias("t")
        .merge(rows.alias("s"), match)
        .whenMatchedDelete(condition="s._action = 'delete'")
        .whenMatchedUpdate(condition="s._action = 'upsert'", set=values)
        .whenNotMatchedInsert(condition="s._action = 'upsert'", values=values)
        .execute()
    )


def _prepared(
    spec: TableSpec,
    stored: dict[str, str],
    properties: TableProperties,
    store: str,
    add: Any,
) -> Any:
    """The history given the columns ``spec`` adds, their stored versions filled.

    The stored versions get what the state's rows get: a renamed column's values (kept
    under the old name too), a DEFAULT's value (:mod:`pipeline.added_columns`), the value
    fills limited to current versions (a closed version of a name used again held the old
    column).
    """
    names = {n for n, _ in history_fields(spec)}
    own = names - set(spec.names)
    source = {n: t for n, t in stored.items() if n not in own}
    return add_and_fill(
        spec, source, properties, store=store, add=add, values_where=F.col(IS_CURRENT),
        also=other_names(spec, source, names),
    )  # fmt: skip


def other_names(spec: TableSpec, stored: Mapping[str, str], names: set[str]) -> dict[str, Fill]:
    """The history's columns to add that are another name of a stored column: copied from it.

    A column's names (:func:`pipeline.column_numbers.names_per_column`) hold the same
    value in every version (:func:`pipeline.added_columns.under_every_name` for the
    batch's changes); a name the history gets later (a rename, its column dropped since,
    so not the newest layout's) gets the stored versions' values too, in every version.
    """
    fills: dict[str, Fill] = {}
    for group in names_per_column(spec.layouts):
        held = [n for n in group if n in stored]
        if held:
            fills |= {n: ("from", held[0]) for n in group if n in names and n not in stored}
    return fills


def _added_columns(spec: TableSpec, stored: dict[str, str]) -> str:
    """``ADD COLUMNS`` text of the history columns ``stored`` lacks ('' when none)."""
    return ", ".join(
        f"{quote_identifier(n)} {t}" for n, t in history_fields(spec) if n not in stored
    )


class _DeltaHistory:
    """A history kept as the Delta table at ``path``."""

    def __init__(self, spark: SparkSession, path: str, spec: TableSpec) -> None:
        self.spark, self.path, self.spec = spark, path, spec

    def apply(
        self, changes: DataFrame, batch_id: int, app_id: str, track: Sequence[str] | None
    ) -> None:
        from delta.tables import DeltaTable  # noqa: PLC0415

        spark, path, spec = self.spark, self.path, self.spec
        if not DeltaTable.isDeltaTable(spark, path):
            empty_history(spark, spec).write.format("delta").mode("ignore").save(path)
        stored = stored_types(DeltaTable.forPath(spark, path).toDF())
        widened, _ = type_changes(stored, history_fields(spec), "delta")  # refused: before
        added = _added_columns(spec, stored)

        def add() -> Any:
            if added:
                spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({added})")
            return DeltaTable.forPath(spark, path)

        properties = TableProperties.read(spark, f"delta.{quote_identifier(path)}")
        target = _prepared(spec, stored, properties, "delta", add)
        if widened:
            widen_delta(spark, path, widened)
            target = DeltaTable.forPath(spark, path)
        current = target.toDF().where(F.col(IS_CURRENT))
        rows = versions(spec, changes, current, track).localCheckpoint()
        spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            retry_conflicts(
                f"{spec.schema}.{spec.table} history batch {batch_id} (MERGE)",
                lambda: _merge(DeltaTable.forPath(spark, path), spec, rows),
            )
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")


class _IcebergHistory:
    """A history kept as the Iceberg table ``name``, committed with ``app_id``'s marks."""

    def __init__(self, spark: SparkSession, name: str, spec: TableSpec, app_id: str) -> None:
        self.spark, self.name, self.spec, self.app_id = spark, name, spec, app_id

    def apply(self, changes: DataFrame, batch_id: int, track: Sequence[str] | None) -> None:
        spark, name, spec = self.spark, self.name, self.spec
        if not spark.catalog.tableExists(name):
            empty_history(spark, spec).writeTo(name).using("iceberg").create()
        done = last_commit(spark, name, self.app_id)
        if done is not None and (batch_id, STEPS["merge"]) <= done:
            return  # this batch's versions are in (a replay after a crash)
        stored = stored_types(spark.table(name))
        widened, _ = type_changes(stored, history_fields(spec), "iceberg")  # refused: before
        added = _added_columns(spec, stored)
        target = IcebergTarget(spark, name)

        def add() -> IcebergTarget:
            if added:
                spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({added})")
            return target

        _prepared(spec, stored, TableProperties.read(spark, name), "iceberg", add)
        widen_iceberg(spark, name, widened)
        current = spark.table(name).where(F.col(IS_CURRENT))
        rows = versions(spec, changes, current, track).localCheckpoint()
        marks = {APP_ID: self.app_id, BATCH_ID: str(batch_id), STEP: "merge"}
        retry_conflicts(
            f"{spec.schema}.{spec.table} history batch {batch_id} (MERGE)",
            lambda: commit_marked(spark, marks, lambda: _merge(target, spec, rows)),
        )

"""The materialize job: the normalized change table → one current-state table per source table.

Input: the normalized table written by :mod:`pipeline.normalize`, read as a stream
(Spark's file source follows the sink's ``_spark_metadata`` log: every committed file
exactly once). Per micro-batch and per source table:

1. **Order**: changes sort by ``(commit_lsn_num, ordinal)`` then the Kafka position
   (:data:`pipeline.model.LOG_ORDER`) when each of the table's changes in the batch has a
   commit LSN, by the Kafka position (:data:`pipeline.model.KAFKA_ORDER`) when none has;
   a table with both is a one-line error before any table of the batch is written
   (:func:`pipeline.model.order_columns`, the rule in :mod:`pipeline.model`). Changes
   before the batch's last TRUNCATE of the table are dropped and the table is emptied
   first.
2. **Fold per key** (tables with a primary key): each change is an event on its key
   (insert: reset to the after image; update: overlay the after image's columns, so an
   absent column, e.g. unchanged TOAST, keeps its value; delete: remove). An update
   that changes the key is a delete of the old key and a move into the new one: the
   new key's row is the old row (from the batch or the store) overlaid with the after
   image, so columns the change did not send (unchanged TOAST) keep their values. The
   fold is a Spark ``aggregate`` over the key's sorted events (no UDF).
3. **Multiset** (no primary key, REPLICA IDENTITY FULL): a row is identified by its whole
   image; insert adds a copy, delete removes one copy matching the before image, update
   does both. Such tables keep a ``_walcast_row_key`` column (the row image as JSON).
4. **Apply**: with Apache Iceberg (``store="iceberg"``) one ``MERGE INTO`` per table and
   batch (:mod:`pipeline.iceberg_store`); with Delta Lake (when the session has it) one
   ``MERGE`` per table and batch (plus a ``DELETE`` for TRUNCATE), made idempotent with Delta's
   ``txnAppId``/``txnVersion``; without Delta, the affected table's state is rewritten
   as Parquet into a new version directory and ``_CURRENT`` is switched to it
   (:func:`read_table` reads it), skipped when the table already has the batch.

Every row carries the change that last wrote it (:mod:`pipeline.lineage`). With
``history``, each keyed table's versions also go to its history table
(:mod:`pipeline.history`, Delta or Iceberg, after the state table's MERGE of the batch); with
``change_data_feed``, Delta's Change Data Feed is on for the state tables.

Columns are typed with :mod:`pipeline.pgtypes` from the table's layout record (latest
version on the layout topic) or, without one, from the changes' ``column_types``; the
primary key from the layout or the changes. Restart safety: Spark's checkpoint replays an
uncommitted batch with the same files, and both apply paths skip what that batch already
committed, so no change is applied twice or skipped.

Steps 1 to 3 live in :mod:`pipeline.fold` (no I/O), step 4 and the table specs in
:mod:`pipeline.stores`; this module runs the streaming job (:class:`MaterializeJob`).
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from capture.errors import ConfigError, WalcastError
from capture.state.identity import SourceIdentity
from pipeline import preflight
from pipeline.added_columns import fill_images, renamed_images, under_every_name
from pipeline.batch_tables import count_tables
from pipeline.column_numbers import every_name, image_renames, names_per_column
from pipeline.delta_versions import BatchRange
from pipeline.errors import run_job
from pipeline.fold import ROW_KEY, fold_by_key, fold_multiset
from pipeline.history import HistoryOrderError
from pipeline.history_store import PARQUET_REFUSAL, apply_history, check_history_types
from pipeline.iceberg_store import (
    apply_iceberg,
    catalog_for,
    check_catalog,
    refuse_unsupported,
    table_name,
)
from pipeline.layouts import layout_topic_name, read_layouts, warn_sourceless
from pipeline.lineage import LINEAGE_NAMES
from pipeline.model import LOG_ORDER, NORMALIZED, order_columns
from pipeline.normalize import rate_text
from pipeline.partitioning import Partitioning, check_store
from pipeline.pgtypes import spark_type
from pipeline.schema_history import LayoutShape, SchemaHistory
from pipeline.session import session_uses_delta
from pipeline.stores import (
    apply_delta,
    apply_parquet,
    read_table,
    spec_from_changes,
    spec_from_layout,
)
from pipeline.tables import CURRENT, Layout, TableSpec, table_path
from pipeline.type_changes import (
    TypeChangeRefused,
    quarantine_path,
    refusal_line,
    refused_changes,
    write_quarantine,
)

__all__ = [
    "CURRENT",
    "ROW_KEY",
    "MaterializeJob",
    "TableSpec",
    "apply_batch",
    "fold_by_key",
    "fold_multiset",
    "read_table",
]


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
    history: bool = False,
    history_columns: Sequence[str] | None = None,
    change_data_feed: bool = False,
    without_history: set[str] | None = None,
    store: str | None = None,
    report: Callable[[str], None] | None = None,
    partition_by: Partitioning | None = None,
    seen: set[tuple[str, str]] | None = None,
    schema_history: SchemaHistory | None = None,
) -> dict[str, int]:
    """Apply one batch of normalized changes to the state tables.

    Each source's tables are kept apart (:func:`~pipeline.stores.table_path`), typed with
    that source's layouts only. Returns the tables' names → the number of changes applied
    to each, in name order: ``schema.table``, or ``database/schema.table`` when the batch
    holds changes of several sources. With ``history`` (Delta or Iceberg: ConfigError
    for Parquet), each keyed table's history is updated too (``history_columns``: the
    tracked columns); the names of tables left without one (no primary key) are added to
    ``without_history``. ``store="iceberg"`` writes Iceberg tables (else ``use_delta``
    or the session picks Delta or Parquet). ``partition_by`` partitions the tables it names
    as they are created (:mod:`pipeline.partitioning`; refused for Parquet). ``seen`` gets
    the ``(schema, table)`` of every table the batch's changes or ``layouts`` name. With
    ``schema_history`` and ``layouts``, the layout changes the batch's changes show are
    recorded first (:mod:`pipeline.schema_history`).

    A table whose newest layout changed a column's type in a way its store cannot follow
    (:mod:`pipeline.type_changes`) is left as it was: its changes of the batch go to the
    quarantine (:func:`quarantine_path`), ``report`` gets one line naming the column,
    both types and what to do, and the other tables are applied. Such a table is not in
    the returned names.
    """
    iceberg = store == "iceberg"
    if iceberg:
        refuse_unsupported(change_data_feed=change_data_feed)
    delta = session_uses_delta(spark) if use_delta is None else use_delta
    if (history or change_data_feed) and not delta and not iceberg:
        what = PARQUET_REFUSAL if history else "--change-data-feed needs Delta Lake tables"
        raise ConfigError(what, hint="install delta-spark (pip install 'walcast[spark]')")
    store_name = "iceberg" if iceberg else "delta" if delta else "parquet"
    partition_by = partition_by or {}
    check_store(partition_by, store_name)
    by_table: dict[tuple[str | None, str, str], Any] = {}
    # per table, the type of each column its older layouts had (the newest that had it)
    earlier: dict[tuple[str | None, str, str], dict[str, str]] = {}
    # per table, every layout with its columns' catalog numbers (renames), oldest first
    history_of: dict[tuple[str | None, str, str], list[Layout]] = {}
    # every layout version held, by table and version (the schema history's)
    shapes: dict[tuple[tuple[str | None, str, str], str], LayoutShape] = {}
    # per table, each column with a DEFAULT the rows stored before its ADD read: the value,
    # and the layouts (column names) before the first that had it (the history's fills; not
    # a column's NULL, ``missing_null``: a name's first incarnation would fix its value for
    # good, and one added again with a DEFAULT would lose it)
    added: dict[tuple[str | None, str, str], dict[str, tuple[str, list[list[str]]]]] = {}
    if layouts is not None:
        rows = sorted(layouts.collect(), key=lambda r: r["layout_offset"])
        for row in rows:  # oldest first: the newest layout and type win
            name = (row["source"], row["schema"], row["table"])
            by_table[name] = row
            shapes[(name, row["version"])] = LayoutShape.of(row)
            history_of.setdefault(name, []).append(
                tuple((c["name"], c["number"]) for c in row["columns"])
            )
            first_seen = added.setdefault(name, {})  # computed once per such column
            for column in row["columns"]:
                if column["missing"] is not None and column["name"] not in first_seen:
                    before = [sorted(n for n, _ in layout) for layout in history_of[name][:-1]]
                    first_seen[column["name"]] = (column["missing"], before)
            types = earlier.setdefault(name, {})
            types.update(spec_from_layout(row, typed=typed).columns)
    counted = count_tables(changes)
    if schema_history is not None and layouts is not None:
        schema_history.record(spark, batch_id, counted, shapes, changes)
    if seen is not None:
        seen.update((schema, table) for _, schema, table in [*by_table, *counted])
    sent = {name: sorted(t.sent) for name, t in counted.items()}
    counts = {name: t.n for name, t in counted.items()}
    positioned = {name: t.positioned for name, t in counted.items()}
    ranges = {
        name: BatchRange(t.first_lsn, t.last_lsn, t.first_time, t.last_time)
        for name, t in counted.items()
        # every change positioned (else no LSN to read at), with its commit time
        if t.positioned == t.n
        and t.first_lsn is not None
        and t.last_lsn is not None
        and t.first_time is not None
        and t.last_time is not None
    }
    several = len({source for source, _, _ in counts}) > 1
    # the apply order of each table, checked before any table is written
    orders = {
        name: order_columns(count, positioned[name], _label(*name, several=several))
        for name, count in counts.items()
    }
    unplaced = [name for name, order in orders.items() if order != LOG_ORDER]
    if history and unplaced:
        raise HistoryOrderError(
            f"{_label(*unplaced[0], several=several)}: --history orders versions by commit "
            "LSN, and these changes carry none (a Debezium connector's own topics are "
            "applied in Kafka order)",
            hint="materialize them without --history, or from walcast's topics",
        )
    done: dict[str, int] = {}
    refusals: list[DataFrame] = []
    for (source, schema, table), count in sorted(counts.items(), key=_by_name):
        order = orders[(source, schema, table)]
        part = changes.where(
            F.col("source").eqNullSafe(F.lit(source).cast("string"))
            & (F.col("schema") == schema)
            & (F.col("table") == table)
        )
        layout = by_table.get((source, schema, table))
        spec = (
            dataclasses.replace(
                spec_from_layout(layout, typed=typed),
                layouts=tuple(history_of[(source, schema, table)]),
            )
            if layout is not None
            else spec_from_changes(part, schema, table, typed=typed)
        )
        # the history keeps what the batch's changes from before a DROP COLUMN sent, and
        # every name those columns had (a read as of any time finds the name of then); the
        # state table has the source's columns as the newest layout says
        name_groups = names_per_column(spec.layouts)
        history_spec = (
            with_retired(
                spec, every_name(name_groups, [*spec.names, *sent[(source, schema, table)]]),
                earlier[(source, schema, table)], typed=typed,
            )
            if layout is not None
            else spec
        )  # fmt: skip
        path = table_path(state_root, schema, table, source)
        label = _label(source, schema, table, several=several)
        history_name = (
            table_name(catalog_for(spark, state_root), schema, table, source, history=True)
            if history and iceberg
            else None
        )
        try:
            if history:
                check_history_types(spark, path, history_spec, iceberg=history_name)
            # changes encoded before a RENAME COLUMN name the column as it was then; the
            # rows stored before a column added with a DEFAULT read its value
            renames = image_renames(spec.layouts)
            renamed = renamed_images(part, renames)
            filled = fill_images(renamed, spec.missing, keyless=not spec.primary_key)
            if iceberg:
                apply_iceberg(
                    spark, state_root, spec, filled, batch_id, f"{app_id}:{path}", order,
                    source=source, partition_by=partition_by.get((schema, table), ()),
                )  # fmt: skip
            elif delta:
                apply_delta(
                    spark, path, spec, filled, batch_id, f"{app_id}:{path}", order,
                    change_data_feed=change_data_feed,
                    applied=ranges.get((source, schema, table)),
                    partition_by=partition_by.get((schema, table), ()),
                )  # fmt: skip
            else:
                apply_parquet(spark, path, spec, filled, batch_id, order)
        except TypeChangeRefused as refusal:
            refusals.append(refused_changes(part, refusal))
            (report or _stderr)(
                refusal_line(label, schema, table, store_name, refusal, count, batch_id,
                              quarantine_path(state_root))
            )  # fmt: skip
            continue
        # the history keeps a renamed column's values under every name it had (a version
        # read as of a time before the rename has the name of then), and the DEFAULT values
        # of columns dropped since (a version read as of a time they existed has them)
        defaults = added.get((source, schema, table), {})
        kept = history and apply_history(
            spark, path, history_spec,
            under_every_name(
                renamed_images(
                    fill_images(
                        part, [(c, value) for c, (value, _) in defaults.items()],
                        keyless=False,
                        before={c: layouts for c, (_, layouts) in defaults.items()},
                    ),
                    renames,
                ),
                name_groups,
            ),
            batch_id, f"{app_id}:{path}", order, history_columns, label=label,
            iceberg=history_name,
        )  # fmt: skip
        if history and not kept and without_history is not None:
            without_history.add(label)
        done[label] = count
    if refusals:
        write_quarantine(refusals, quarantine_path(state_root), batch_id)
    return done


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def with_retired(
    spec: TableSpec, sent: Sequence[str], earlier: dict[str, str], *, typed: bool = True
) -> TableSpec:
    """``spec`` (the table's newest layout) plus the columns it lacks that changes sent.

    (Materialize passes, with the names sent, every other name their columns had:
    :func:`pipeline.column_numbers.every_name`.) Those were dropped (or renamed) at the
    source after the changes that sent them; they are typed as the older layouts had them
    (text when none did) and marked retired (never required of a change). Without them, a
    batch that spans the DROP would lose their values: a history read as of a point before
    it would have no such column. The history only: the state table keeps the newest
    layout's columns.
    """
    names = set(spec.names)
    gone = sorted({n for n in sent if n not in names and n not in LINEAGE_NAMES})
    if not gone:
        return spec
    extra = tuple((n, earlier.get(n) or spark_type(None, None, typed=typed)) for n in gone)
    return dataclasses.replace(
        spec, columns=spec.columns + extra, retired=spec.retired + tuple(gone)
    )


def _by_name(item: tuple[tuple[str | None, str, str], int]) -> tuple[str, str, str]:
    (source, schema, table), _ = item
    return (schema, table, source or "")


def _label(source: str | None, schema: str, table: str, *, several: bool) -> str:
    """A table's name in the job's lines: with its database when sources are mixed."""
    if not several:
        return f"{schema}.{table}"
    identity = SourceIdentity.parse(source) if source else None
    database = identity.database if identity else (source or "(no source)")
    return f"{database}/{schema}.{table}"


@dataclass(slots=True)
class MaterializeTotals:
    """What the job did so far: batches, changes applied, the tables they went to."""

    batches: int = 0
    changes: int = 0
    tables: set[str] = field(default_factory=set)

    def add(self, applied: dict[str, int]) -> None:
        """Count one batch (``schema.table`` → changes)."""
        self.batches += 1
        self.changes += sum(applied.values())
        self.tables.update(applied)


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
    kafka_timeout: float = 30.0
    """How long the start (and each batch's layout read) waits for a broker to answer."""
    history: bool = False
    """Keep each keyed table's history too (:mod:`pipeline.history`; Delta or Iceberg)."""
    history_columns: tuple[str, ...] | None = None
    """The tracked columns of the histories (None: every column)."""
    change_data_feed: bool = False
    """Turn Delta's Change Data Feed on for the state tables."""
    store: str | None = None
    """``iceberg`` for Apache Iceberg tables (None: ``use_delta`` or the session decides)."""
    partition_by: Partitioning = field(default_factory=dict)
    """The partition fields of the tables it names, as they are created
    (:mod:`pipeline.partitioning`)."""
    report: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr))
    """Where the per-batch lines and the summary go."""
    applied: dict[str, int] = field(default_factory=dict)
    """The last batch's tables (``schema.table`` → changes applied)."""
    totals: MaterializeTotals = field(default_factory=MaterializeTotals, init=False)
    failure: WalcastError | None = field(default=None, init=False)
    """The job's own error, raised inside a batch (Spark wraps it)."""
    warned: set[str] = field(default_factory=set, init=False)
    """Tables already said to have no history."""
    seen: set[tuple[str, str]] = field(default_factory=set, init=False)
    """Every ``(schema, table)`` the run's changes or layouts named."""
    schema_history: SchemaHistory | None = field(default=None, init=False)
    """The output's schema history (:mod:`pipeline.schema_history`), made at start."""
    unmatched_said: set[tuple[str, str]] = field(default_factory=set, init=False)
    """``--partition-by`` tables already said to be named by nothing (:meth:`_unmatched`)."""
    cluster_topics: set[str] | None = field(default=None, init=False)
    """The cluster's topics, once :meth:`check` asked (before any Spark session)."""

    @property
    def layout_topic_name(self) -> str | None:
        """The layout topic read per batch (None: none, or no ``bootstrap``)."""
        return layout_topic_name(self.layout_topic) if self.bootstrap else None

    def check(self) -> set[str]:
        """Ask Kafka for its topics when layouts are read from it (one line if none answers)."""
        if self.layout_topic_name is None or self.bootstrap is None:
            return set()
        if self.cluster_topics is None:
            self.cluster_topics = preflight.existing_topics(self.bootstrap, {}, self.kafka_timeout)
        return self.cluster_topics

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the streaming query (returns at once)."""
        spark.conf.set("spark.sql.ansi.enabled", "false")
        spark.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
        delta = session_uses_delta(spark) if self.use_delta is None else self.use_delta
        if self.store == "iceberg":
            refuse_unsupported(change_data_feed=self.change_data_feed)
            check_catalog(spark)
        elif (self.history or self.change_data_feed) and not delta:
            flag = "--history" if self.history else "--change-data-feed"
            raise ConfigError(
                f"{flag} needs Delta Lake tables, and this session has no Delta Lake",
                hint="install delta-spark (pip install 'walcast[spark]') or drop " + flag,
            )
        without_history: set[str] = set()
        layout_topic = self.layout_topic_name
        if layout_topic is not None and layout_topic not in self.check():
            self.report(
                f"walcast spark materialize: no layout topic {layout_topic!r} (yet): column "
                "types and keys come from the changes"
            )
        self.schema_history = SchemaHistory(self.state) if layout_topic is not None else None
        reader = spark.readStream.schema(NORMALIZED)
        if self.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", str(self.max_files_per_trigger))
        stream = reader.parquet(self.normalized)
        totals = self.totals = MaterializeTotals()

        def run_batch(batch: DataFrame, batch_id: int) -> None:
            started = time.monotonic()
            changes = batch.persist()
            layouts: DataFrame | None = None
            try:
                layouts = (
                    read_layouts(spark, self.bootstrap, layout_topic, timeout=self.kafka_timeout)
                    if self.bootstrap and layout_topic
                    else None
                )
                if layouts is not None and totals.batches == 0:
                    # counted here and collected by apply_batch: one read of the topic
                    layouts = layouts.cache()
                    warn_sourceless(layouts, layout_topic, "materialize", self.report)
                self.applied = apply_batch(
                    spark,
                    changes,
                    self.state,
                    batch_id,
                    layouts,
                    use_delta=self.use_delta,
                    typed=self.typed,
                    app_id=f"walcast-materialize:{self.checkpoint}",
                    history=self.history,
                    history_columns=self.history_columns,
                    change_data_feed=self.change_data_feed,
                    without_history=without_history,
                    store=self.store,
                    report=self.report,
                    partition_by=self.partition_by,
                    seen=self.seen,
                    schema_history=self.schema_history,
                )
            except WalcastError as exc:
                self.failure = exc
                raise
            finally:
                changes.unpersist()
                if layouts is not None:
                    layouts.unpersist()
            for name in sorted(without_history - self.warned):
                self.report(
                    f"walcast spark materialize: {name} has no primary key: no history is "
                    "kept for it (its current table is)"
                )
            self.warned |= without_history
            if layouts is not None:  # every table the source published a layout of: known
                self._unmatched()
            count = sum(self.applied.values())
            totals.add(self.applied)
            self.report(
                f"walcast spark materialize: batch {batch_id}: {count:,} changes into "
                f"{_tables_text(self.applied)}, "
                f"{rate_text(count, time.monotonic() - started)} rows/s"
            )

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
        """Start and wait until the query ends, then print a summary.

        A failure is one WalcastError: the job's own (Kafka gone), or Spark's first line.
        """
        run_job(self, spark, "materialize", self._summary)
        self._unmatched()

    def _unmatched(self) -> None:
        """Say once per name which ``--partition-by`` tables nothing of the run named.

        Asked after a batch that read the layouts (they name every table the source
        published) and when the run ends; such a name is likely misspelt, and a table
        created later under it would still be partitioned as asked.
        """
        for schema, table in sorted(set(self.partition_by) - self.seen - self.unmatched_said):
            self.unmatched_said.add((schema, table))
            names = sorted(f"{s}.{t}" for s, t in self.seen)
            shown = ", ".join(names[:TABLES_SHOWN]) + (" …" if len(names) > TABLES_SHOWN else "")
            self.report(
                f"walcast spark materialize: --partition-by {schema}.{table}: no layout or "
                "change of this run names that table, so nothing is partitioned by it yet; "
                f"check the name (tables seen: {shown or 'none'})"
            )

    def _summary(self, seconds: float) -> str:
        """The line :meth:`run` ends with: what the whole run did in ``seconds``."""
        totals = self.totals
        batches = "batch" if totals.batches == 1 else "batches"
        changes = "change" if totals.changes == 1 else "changes"
        tables = "table" if len(totals.tables) == 1 else "tables"
        return (
            f"walcast spark materialize: done: {totals.batches} {batches}, {totals.changes:,} "
            f"{changes} into {len(totals.tables)} {tables} under {self.state}, "
            f"{rate_text(totals.changes, seconds)} rows/s in {seconds:.1f} s"
        )


TABLES_SHOWN = 6
"""Tables named in a batch line; more are counted (``+N more``)."""


def _tables_text(applied: dict[str, int]) -> str:
    """``N tables (a.b 10, c.d 3, …)`` of a batch."""
    if not applied:
        return "no tables"
    shown = ", ".join(f"{name} {n:,}" for name, n in list(applied.items())[:TABLES_SHOWN])
    more = f" +{len(applied) - TABLES_SHOWN} more" if len(applied) > TABLES_SHOWN else ""
    noun = "table" if len(applied) == 1 else "tables"
    return f"{len(applied)} {noun} ({shown}{more})"

"""History tables (SCD type 2): one row per version of each source row, kept by materialize.

``walcast spark materialize --history`` keeps, next to each state table
``<...>/<schema>/<table>``, a table at ``<...>/<schema>/_walcast_history/<table>``
(:func:`pipeline.history_store.history_path`, in the state table's store) whose rows are
the table's columns (typed as the state table), the last change's columns of
:mod:`pipeline.lineage`, then:

* ``_walcast_valid_from_lsn`` / ``_walcast_valid_from_time``: commit LSN (PostgreSQL's
  64-bit number) and commit time of the transaction that opened the version;
* ``_walcast_valid_to_lsn`` / ``_walcast_valid_to_time``: those of the transaction that
  closed it (updated the row again, deleted it, changed its key, truncated the table);
  null while the version is current;
* ``_walcast_is_current``: ``_walcast_valid_to_lsn`` is null.

The source as of LSN ``X`` is exactly the versions with ``valid_from_lsn <= X <
valid_to_lsn`` (or no ``valid_to_lsn``): :mod:`pipeline.asof` reads that.

Invariants (and the decisions where the issue left a choice):

* **Order.** Versions follow the changes' positions, ``(commit_lsn_num, ordinal)`` then the
  Kafka position (:data:`pipeline.model.LOG_ORDER`), never their arrival. A table whose
  changes carry no commit LSN (a Debezium connector's own topics, applied in Kafka order)
  has no history: :class:`HistoryOrderError`, one line, before anything of the batch is
  written.
* **One version per transaction.** A version is what a row was *between* transactions:
  a row written several times in one transaction gets one version, with the
  transaction's last values (what any reader of the source could see); a row inserted
  and deleted in one transaction gets none. A transaction split over two micro-batches
  continues the same version (its second part replaces the version its first part
  opened). So ``valid_from_lsn < valid_to_lsn`` always.
* **Columns not sent** (unchanged TOAST, a format that sends changed columns only) keep
  the row's value at that moment: from an earlier change of the batch, from the key the
  row moved from (followed back through chains of key changes), or from the version that
  was current before the batch. When that version is not in the history (materialize
  started after the row was written), the row opens no version: its unsent values are
  unknown (the state table's "no partial rows" rule, :mod:`pipeline.stores`).
* **Dropped columns.** A batch spanning an ``ALTER TABLE … DROP COLUMN`` keeps the column
  in the history for the changes from before it (:func:`pipeline.materialize.with_retired`:
  a *retired* column, never required of a change), so versions opened before the DROP
  hold its value; versions opened after it by an update carry the last value forward, by
  an insert have none, and an as-of read after the DROP shows a column the source no
  longer has (a reader ignores it, as the soak does).
* **Known limit**: a batch holding a ``RENAME COLUMN`` and then an ``ADD COLUMN`` that
  uses the old name again with a DEFAULT leaves NULL, not the DEFAULT, in the new column
  of the current versions of rows last written before the rename (the state table has
  the DEFAULT): the batch's images are filled before they are renamed, and an image that
  named the old column is not filled (``tests/pipeline/test_end_to_end.py`` checks that
  only these differ).
* **Key changes** close the old key's version at the change's transaction and open the
  new key's there, as a delete and an insert would. **Deletes** close the version (no row
  stands for the delete itself). **TRUNCATE** closes every version open at that point.
* **Replays never create a version.** normalize drops replayed changes (per partition and
  source, :mod:`pipeline.sequencing`), and a batch is applied once (Delta's
  ``txnAppId``/``txnVersion``, as the state tables).
* **Tracked columns.** With ``track`` (``--history-columns a,b``, as Databricks'
  ``track_history_column_list``), only a change of one of those columns opens a new
  version; a change of the others updates the open version in place (its values and its
  last-change columns), so as-of reads are exact for the tracked columns only. Without
  it, every transaction that writes a row opens a version (also an update that changed
  no value: the source wrote the row).
* **Tables without a primary key** have no history (:func:`apply_history` skips them and
  materialize says so once): their rows have no identity that chains one version to the
  next (two equal rows are indistinguishable, and an UPDATE of one of them says which
  image changed, not which copy).
* **Stores.** This module computes the rows a batch writes (:func:`versions`);
  :mod:`pipeline.history_store` keeps them, in Delta Lake or Apache Iceberg.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from capture.errors import WalcastError
from pipeline.lineage import COMMIT_LSN, COMMIT_TIME, LINEAGE_COLUMNS, LINEAGE_NAMES, OP
from pipeline.model import LOG_ORDER
from pipeline.pgtypes import from_text

if TYPE_CHECKING:
    from pipeline.tables import TableSpec

VALID_FROM_LSN = "_walcast_valid_from_lsn"
VALID_TO_LSN = "_walcast_valid_to_lsn"
VALID_FROM_TIME = "_walcast_valid_from_time"
VALID_TO_TIME = "_walcast_valid_to_time"
IS_CURRENT = "_walcast_is_current"
VERSION_COLUMNS: tuple[tuple[str, str], ...] = (
    (VALID_FROM_LSN, "bigint"),
    (VALID_TO_LSN, "bigint"),
    (VALID_FROM_TIME, "timestamp"),
    (VALID_TO_TIME, "timestamp"),
    (IS_CURRENT, "boolean"),
)
"""The version columns a history row ends with (after the lineage columns)."""


class HistoryOrderError(WalcastError):
    """A table's changes carry no commit LSN: versions cannot be placed (exit 1)."""


def history_fields(spec: TableSpec) -> list[tuple[str, str]]:
    """The history table's columns (name, Spark type), in order."""
    return [*spec.columns, *LINEAGE_COLUMNS, *VERSION_COLUMNS]


# ------------------------------------------------------------------ events


def _key_struct(spec: TableSpec, key: Column) -> Column:
    """The typed primary key (a struct) of a text key array (null when ``key`` is)."""
    types = dict(spec.columns)
    typed = F.struct(
        *[
            from_text(F.element_at(key, i + 1), types[c]).alias(c)
            for i, c in enumerate(spec.primary_key)
        ]
    )
    return F.when(key.isNotNull(), typed)


def _events(spec: TableSpec, changes: DataFrame, current: DataFrame) -> DataFrame:
    """One event per change and key (a key change is two), TRUNCATE one per key it empties.

    Columns: ``_k`` (typed key struct), ``pos`` (the change's position), ``sub`` (0, or
    1 for the move half of a key change), ``op`` (insert, update, delete, move), ``img``
    (the after image), ``from`` (a move's old key), ``lsn``, ``time``, ``cop`` (the
    change's own operation).
    """
    pk = spec.primary_key

    def key_of(image: Column) -> Column:
        return F.array(*[F.element_at(image, F.lit(c)) for c in pk])

    def has_key(image: Column) -> Column:
        cond = image.isNotNull()
        for c in pk:
            cond = cond & F.map_contains_key(image, F.lit(c))
        return cond

    op = F.col("op")
    before_key = F.when(has_key(F.col("before")), key_of(F.col("before")))
    after_key = key_of(F.col("after"))
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
    empty = F.create_map().cast("map<string,string>")
    position = F.struct(*[F.col(c) for c in LOG_ORDER])

    def event(key: Column, kind: Column, img: Column, sub: int, source: Column) -> Column:
        return F.struct(
            _key_struct(spec, key).alias("_k"),
            position.alias("pos"),
            F.lit(sub).alias("sub"),
            kind.alias("op"),
            img.alias("img"),
            _key_struct(spec, source).alias("from"),
            F.col("commit_lsn_num").alias("lsn"),
            F.col("commit_time").alias("time"),
            op.alias("cop"),
        )

    no_key = F.lit(None).cast("array<string>")
    first = event(
        main_key,
        F.when(moved, F.lit("delete")).otherwise(op),
        F.when(op == "delete", empty).otherwise(F.coalesce(F.col("after"), empty)),
        0,
        no_key,
    )
    second = event(after_key, F.lit("move"), F.coalesce(F.col("after"), empty), 1, before_key)
    rows = changes.where(op != "truncate")
    events = rows.select(
        F.explode(F.when(moved, F.array(first, second)).otherwise(F.array(first))).alias("e")
    ).select("e.*")
    truncates = changes.where(op == "truncate").select(
        position.alias("pos"),
        F.col("commit_lsn_num").alias("lsn"),
        F.col("commit_time").alias("time"),
    )
    if truncates.limit(1).count():
        keys = events.select("_k").unionByName(
            current.select(F.struct(*[F.col(c) for c in pk]).alias("_k"))
        )
        wiped = (
            keys.distinct()
            .crossJoin(truncates)
            .select(
                "_k",
                "pos",
                F.lit(0).alias("sub"),
                F.lit("delete").alias("op"),
                empty.alias("img"),
                F.lit(None).cast(events.schema["from"].dataType).alias("from"),
                "lsn",
                "time",
                F.lit("truncate").alias("cop"),
            )
        )
        events = events.unionByName(wiped)
    return events.where(F.col("_k").isNotNull())


def _partial_states(spec: TableSpec, events: DataFrame) -> DataFrame:
    """Each event with the row it leaves, as far as the batch tells.

    ``_p<i>``: ``struct(v)`` of column ``i`` as last sent since the key's last reset
    (insert, delete, move), null when not sent since; ``kind``/``ref_key``/``ref_pos``: what
    the unsent columns come from: ``none`` (nothing: an insert's unsent column is null),
    ``store`` (the key's version before the batch) or ``move`` (the row of ``ref_key``
    just before position ``ref_pos``); ``exists``: the row exists after the event.
    """
    by_key = (
        Window.partitionBy("_k")
        .orderBy("pos", "sub")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    reset = F.col("op").isin("insert", "delete", "move")
    segmented = events.withColumn("seg", F.sum(reset.cast("int")).over(by_key))
    by_seg = (
        Window.partitionBy("_k", "seg")
        .orderBy("pos", "sub")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    sent = [
        F.last(
            F.when(
                (F.col("op") != "delete") & F.map_contains_key(F.col("img"), F.lit(name)),
                F.struct(F.element_at(F.col("img"), F.lit(name)).alias("v")),
            ),
            ignorenulls=True,
        )
        .over(by_seg)
        .alias(f"_p{i}")
        for i, name in enumerate(spec.names)
    ]
    first_op = F.first("op").over(by_seg)
    kind = (
        F.when(F.col("seg") == 0, F.lit("store"))
        .when(first_op == "move", F.lit("move"))
        .otherwise(F.lit("none"))
    )
    return segmented.select(
        "_k",
        "pos",
        "sub",
        "lsn",
        "time",
        "cop",
        (F.col("op") != "delete").alias("exists"),
        *sent,
        kind.alias("kind"),
        F.when(kind == "store", F.col("_k"))
        .when(kind == "move", F.first("from").over(by_seg))
        .alias("ref_key"),
        F.when(kind == "move", F.first("pos").over(by_seg)).alias("ref_pos"),
    )


def _resolve(spec: TableSpec, states: DataFrame, wanted: DataFrame) -> DataFrame:
    """``wanted`` (rows of ``states``) with every ``move`` reference followed to its end.

    A move's unsent columns are those of the old key's row just before the move: the last
    event of the old key before it (its sent columns, then its own reference), or, with
    none in the batch, the old key's version before the batch. Each round follows one link
    (positions strictly decrease along a chain, so the loop ends); the result's ``kind``
    is ``none`` or ``store`` (``ref_key``: whose stored version fills what is still unsent).
    """
    count = len(spec.names)
    done = wanted.where(F.col("kind") != "move")
    pending = wanted.where(F.col("kind") == "move").withColumn("_eid", F.struct("_k", "pos", "sub"))
    links = states.select(
        F.col("_k").alias("l_k"),
        F.col("pos").alias("l_pos"),
        F.col("sub").alias("l_sub"),
        F.col("exists").alias("l_exists"),
        *[F.col(f"_p{i}").alias(f"l_p{i}") for i in range(count)],
        F.col("kind").alias("l_kind"),
        F.col("ref_key").alias("l_ref_key"),
        F.col("ref_pos").alias("l_ref_pos"),
    )
    while pending.limit(1).count():
        joined = pending.join(
            links,
            (F.col("l_k") == F.col("ref_key")) & (F.col("l_pos") < F.col("ref_pos")),
            "left",
        )
        latest = Window.partitionBy("_eid").orderBy(F.desc("l_pos"), F.desc("l_sub"))
        step = joined.withColumn("_n", F.row_number().over(latest)).where(F.col("_n") == 1)
        found = F.col("l_pos").isNotNull()
        kind = (
            F.when(~found, F.lit("store"))
            .when(~F.col("l_exists"), F.lit("none"))
            .otherwise(F.col("l_kind"))
        )
        ref_key = (
            F.when(~found, F.col("ref_key"))
            .when(~F.col("l_exists"), F.lit(None))
            .otherwise(F.col("l_ref_key"))
        )
        ref_pos = F.when(found & F.col("l_exists"), F.col("l_ref_pos"))
        sent = [
            F.when(found & F.col("l_exists"), F.coalesce(F.col(f"_p{i}"), F.col(f"l_p{i}")))
            .otherwise(F.col(f"_p{i}"))
            .alias(f"_p{i}")
            for i in range(count)
        ]
        others = [c for c in pending.columns if not c.startswith("_p") and c != "kind"]
        nxt = step.select(
            *[c for c in others if c not in ("ref_key", "ref_pos")],
            *sent,
            kind.alias("kind"),
            ref_key.cast(pending.schema["ref_key"].dataType).alias("ref_key"),
            ref_pos.alias("ref_pos"),
        ).localCheckpoint()
        done = done.unionByName(nxt.where(F.col("kind") != "move").drop("_eid"))
        pending = nxt.where(F.col("kind") == "move")
    return done


# ------------------------------------------------------------------ versions


def _entries(spec: TableSpec, changes: DataFrame, current: DataFrame) -> DataFrame:
    """Per key and transaction of the batch, the row after it: typed columns, ``exists``.

    Columns: ``_k``, ``lsn``, ``time``, the spec's columns, the lineage columns,
    ``exists``, ``stored`` (false).
    """
    states = _partial_states(spec, _events(spec, changes, current)).localCheckpoint()
    last = Window.partitionBy("_k", "lsn").orderBy(F.desc("pos"), F.desc("sub"))
    wanted = (
        states.withColumn("_n", F.row_number().over(last))
        .where(F.col("_n") == 1)
        .drop("_n")
        .localCheckpoint()
    )
    resolved = _resolve(spec, states, wanted)
    stored = current.select(
        F.struct(*[F.col(c) for c in spec.primary_key]).alias("_sk"),
        *[F.col(n).alias(f"_s{i}") for i, n in enumerate(spec.names)],
    )
    joined = resolved.join(
        stored, (F.col("kind") == "store") & (F.col("ref_key") == F.col("_sk")), "left"
    )
    values = [
        F.when(F.col(f"_p{i}").isNotNull(), from_text(F.col(f"_p{i}.v"), kind))
        .otherwise(F.col(f"_s{i}"))
        .alias(name)
        for i, (name, kind) in enumerate(spec.columns)
    ]
    complete = F.lit(True)
    for i, name in enumerate(spec.names):
        if name not in spec.retired:  # dropped at the source since: never required
            complete = complete & F.col(f"_p{i}").isNotNull()
    # no partial rows (pipeline.stores): a row whose unsent columns had to come from a
    # version the history does not hold (materialize started after the row was written)
    # opens no version, as the state table keeps it out
    orphan = F.col("exists") & (F.col("kind") == "store") & F.col("_sk").isNull() & ~complete
    return joined.where(~orphan).select(
        "_k",
        "lsn",
        "time",
        *values,
        F.col("lsn").alias(COMMIT_LSN),
        F.col("time").alias(COMMIT_TIME),
        F.when(F.col("cop") == "delete", F.lit("delete")).otherwise(F.col("cop")).alias(OP),
        "exists",
        F.lit(False).alias("stored"),
    )


def versions(
    spec: TableSpec,
    changes: DataFrame,
    current: DataFrame,
    track: Sequence[str] | None = None,
) -> DataFrame:
    """The history rows a batch writes, each with ``_action`` (``upsert`` or ``delete``).

    ``changes``: the table's changes of the batch (all with a commit LSN); ``current``: the
    history's current versions before the batch. ``upsert`` rows are whole history rows
    (:func:`history_fields`), matched on (primary key, ``valid_from_lsn``): new versions,
    and the current versions the batch closes or updates in place; a ``delete`` row (key,
    ``valid_from_lsn``) removes a version opened by an earlier part of a transaction whose
    later part (this batch) deleted the row.
    """
    pk = spec.primary_key
    entries = _entries(spec, changes, current).persist()
    firsts = entries.groupBy("_k").agg(F.min("lsn").alias("_first"))
    touched = current.withColumn("_k", F.struct(*[F.col(c) for c in pk])).join(firsts, "_k")
    # the open version continues when the batch starts with the transaction that opened it
    replaced = touched.where(F.col(VALID_FROM_LSN) == F.col("_first"))
    kept = touched.where(F.col(VALID_FROM_LSN) != F.col("_first")).select(
        "_k",
        F.col(VALID_FROM_LSN).alias("lsn"),
        F.col(VALID_FROM_TIME).alias("time"),
        *spec.names,
        *LINEAGE_NAMES,
        F.lit(True).alias("exists"),
        F.lit(True).alias("stored"),
    )
    sequence = kept.unionByName(entries)
    by_key = Window.partitionBy("_k").orderBy("lsn")
    running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    previous_exists = F.lag("exists").over(by_key)
    starts = F.col("exists") & (previous_exists.isNull() | ~previous_exists)
    if track is None:
        starts = F.col("exists")
    else:
        tracked = F.struct(*[F.col(c) for c in track])
        starts = starts | ~tracked.eqNullSafe(F.lag(tracked).over(by_key))
        starts = F.col("exists") & starts
    marked = sequence.select(
        "*",
        starts.alias("_starts"),
        F.lead("lsn").over(by_key).alias("_next_lsn"),
        F.lead("time").over(by_key).alias("_next_time"),
    ).withColumn("_group", F.sum(F.col("_starts").cast("int")).over(running))
    last = F.struct(*[F.col(n) for n in [*spec.names, *LINEAGE_NAMES, "_next_lsn", "_next_time"]])
    grouped = (
        marked.where(F.col("exists"))
        .groupBy("_k", "_group")
        .agg(
            F.min("lsn").alias("_from"),
            F.min_by("time", "lsn").alias("_from_time"),
            F.max_by(last, "lsn").alias("_last"),
        )
    )
    upserts = grouped.select(
        *[F.col(f"_last.{n}").alias(n) for n in [*spec.names, *LINEAGE_NAMES]],
        F.col("_from").alias(VALID_FROM_LSN),
        F.col("_last._next_lsn").alias(VALID_TO_LSN),
        F.col("_from_time").alias(VALID_FROM_TIME),
        F.col("_last._next_time").alias(VALID_TO_TIME),
        F.col("_last._next_lsn").isNull().alias(IS_CURRENT),
        F.lit("upsert").alias("_action"),
    )
    gone = replaced.join(
        grouped.select("_k", F.col("_from").alias(VALID_FROM_LSN)),
        ["_k", VALID_FROM_LSN],
        "left_anti",
    ).select(
        *[F.col(n) for n in [*spec.names, *LINEAGE_NAMES]],
        F.col(VALID_FROM_LSN),
        *[F.col(n) for n, _ in VERSION_COLUMNS[1:]],
        F.lit("delete").alias("_action"),
    )
    return upserts.unionByName(gone)

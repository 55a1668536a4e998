"""Per-partition sequencing of parsed messages: replays, IBM segment ordinals, split updates.

Within one Kafka partition walcast writes changes in commit order, so the position
``(commit_lsn_num, ordinal)`` strictly increases from message to message, except when
the daemon restarts and sends again the transactions it had not acknowledged. That holds
per **source** (the ``walcast.source`` header, :mod:`pipeline.kafka`): two databases (or
two slots) writing to one topic interleave their messages, and their positions are not
comparable (two servers' LSNs; two slots of one server at different points of the WAL).
So everything below is per topic, partition and source: a sequence is a source's messages
in one partition. Hence:

* **Positions** (:mod:`pipeline.model` states the rule): a change's commit LSN is the
  record's, else the ``walcast.commit_lsn`` header's; its ordinal the record's, else the
  ``walcast.ordinal`` header's (messages of one change). An ordinal without a commit LSN
  is dropped (:func:`outputs`): alone it orders nothing across transactions.
* **Replays**: a change whose position is not above every position seen before it in its
  partition (earlier in the batch, or in earlier batches: the partition's high-water
  mark) is a replay and is dropped from the output (it goes to the quarantine with
  reason ``replay``, so nothing disappears silently). Changes without a position
  (formats or producers that carry no ordinal) are never treated as replays. A format
  that writes a key-changing update as a delete and an insert with the update's position
  (:attr:`~pipeline.formats.base.Parser.splits_key_updates`, Debezium) compares
  ``(commit LSN, 2 x ordinal + h)``, ``h`` 1 for the insert, 0 otherwise, so the insert
  half is above its delete half, and a resent pair is still a replay.
* **IBM segments**: a transaction split into segments ``0001, 0002, …, 0000`` numbers
  its records across the segments; a message continues the run of the previous message
  in its partition when both have the same commit LSN, the previous one is not final
  (``0000``) and the current one is not ``0001``. The record ordinal is the number of
  records of the earlier segments of the run plus the record's position.
* **Split updates** (DataWorks ``UPDATE_BEFOR`` + ``UPDATE_AFTER``): the before half is
  merged into the after half that follows it in the partition with the same pair key;
  a before half with no such successor is an ``orphan`` (quarantine).

State that crosses micro-batches (per topic, partition and source): the high-water mark, the
open IBM run (commit LSN, last segment, records so far) and a pending before half at
the end of a batch. It is a small DataFrame (:data:`STATE`) that the jobs persist next
to the checkpoint (:mod:`pipeline.state`) and turn into pseudo messages placed before
the batch's messages (``sort_key`` -3, -2, -1), so one window pass over each partition
in offset order does everything. Invariant: the result depends only on the batch and
the previous state, so a re-run batch gives the same output and the same next state.
A before half carried in the state that the next batch does not pair is that batch's
orphan (quarantined there: it was only pending in its own batch). The state's schema,
its pseudo messages and the aggregation that makes the next one are in
:mod:`pipeline._sequencing_state`.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline import pgtext
from pipeline._sequencing_state import PART as _PART
from pipeline._sequencing_state import PENDING as _PENDING
from pipeline._sequencing_state import SEQ as _SEQ
from pipeline._sequencing_state import STATE, empty_state, pseudo_messages, summary
from pipeline.formats.base import ERR_ORPHAN, ERR_REPLAY, Parser, changed_between
from pipeline.model import CHANGE, NORMALIZED


def _without_unneeded_raw(messages: DataFrame, parser: Parser) -> DataFrame:
    """``messages`` with the raw Kafka key and value nulled where nothing reads them.

    Only a wholly rejected message (``error`` set) and a DataWorks before half (it may
    become an orphan or be carried to the next batch) need their raw bytes. Dropping
    the others before the window keeps the per-partition sort small: a parser that
    returns one row per record (IBM) would otherwise copy its message into every row.
    """
    needed = F.col("error").isNotNull()
    if parser.paired:
        needed = needed | (F.coalesce(F.col("pair_role"), F.lit("")) == "before")
    return messages.withColumns(
        {
            "kafka_key": F.when(needed, F.col("kafka_key")),
            "kafka_value": F.when(needed, F.col("kafka_value")),
        }
    )


ROW_NAMES = {
    "commit_lsn_num": "message_lsn",
    "record_index": "message_index",
    "error": "message_error",
    "error_detail": "message_error_detail",
}
"""Message columns renamed in :func:`explode_changes`'s rows (a change's fields take the
names they have in the normalized table)."""
CHANGE_NAMES = {"error": "change_error", "error_detail": "change_error_detail"}
"""Change fields renamed in :func:`explode_changes`'s rows."""


def explode_changes(messages: DataFrame) -> DataFrame:
    """One row per change of each message, its fields as columns.

    A message without changes has one row, whose change columns are null. Message columns
    keep their names except :data:`ROW_NAMES`; change fields keep theirs except
    :data:`CHANGE_NAMES`; ``_pos`` is the change's index in its message (null: the message
    has none). Flat columns, so that a reader of a few of them (the window's positions,
    the quarantine) does not decode the images.
    """
    # posexplode_outer: with posexplode, Spark infers a filter size(changes) > 0 and pushes
    # it below the parser's projection, which then builds every change twice (measured:
    # +9.5 s on 1M canal changes). Messages without changes are wanted here anyway.
    names = [c for c in messages.columns if c != "changes"]
    exploded = messages.select(
        *[F.col(c).alias(ROW_NAMES.get(c, c)) for c in names],
        F.posexplode_outer("changes").alias("_pos", "_c"),
    )
    return exploded.select(
        *[ROW_NAMES.get(c, c) for c in names],
        "_pos",
        *[F.col("_c")[f.name].alias(CHANGE_NAMES.get(f.name, f.name)) for f in CHANGE.fields],
    )


def first_of_message() -> Column:
    """The one row of a message in :func:`explode_changes`'s rows that stands for it."""
    return F.coalesce(F.col("_pos"), F.lit(0)) == 0


@dataclass(frozen=True, slots=True)
class Sequenced:
    """A batch's changes after sequencing, and what the batch leaves for the next one.

    ``rows``: :func:`explode_changes` rows of the batch's real messages (the state's
    pseudo messages left out, except a carried before half that became an orphan), with
    ``is_replay``, ``base`` (records of earlier segments of the run), ``consumed`` (a
    before half merged into its successor), ``pending`` (a before half carried to the
    next batch) and ``orphan``. ``kafka_key``/``kafka_value`` are kept only where the
    quarantine or the next state reads them (:func:`_without_unneeded_raw`).
    ``state``: the :data:`STATE` rows after the batch. ``offsets``: ``kafka_topic,
    kafka_partition, first, last``, the Kafka offsets of the batch's messages.
    ``cached``: what was persisted for the batch (free it with ``unpersist``).
    """

    rows: DataFrame
    state: DataFrame
    offsets: DataFrame
    cached: tuple[DataFrame, ...] = ()


POSITION_COLUMNS = (
    *_SEQ,
    "header_ordinal",
    "kafka_offset",
    "sort_key",
    "record_index",
    "commit_lsn_num",
    "first_ordinal",
    "change_count",
    "segment",
)
"""What the window pass reads of a message when the format has no split updates."""

BROADCAST_FLAGS = 1_000_000
"""Flagged messages (replays, continued IBM runs) joined back by broadcast, at most."""


def sequence(
    messages: DataFrame, state: DataFrame, parser: Parser, *, persist: bool = False
) -> Sequenced:
    """The batch's changes (:attr:`Sequenced.rows`), annotated for output, and the next state.

    The messages' changes are exploded once, into the one frame every output reads
    (``persist`` caches it: call ``unpersist`` on :attr:`Sequenced.cached` afterwards).
    The window pass needs each Kafka partition's messages in one task, in order: a
    shuffle and a sort. A paired format (DataWorks) merges a before image into the next
    message, so its whole messages go through the window, and the rows are exploded from
    its output. Every other format's window reads only :data:`POSITION_COLUMNS` of the
    rows (one per message), and the few messages the window flags (replays, IBM messages
    continuing a run of earlier segments) are joined back, by broadcast up to
    :data:`BROADCAST_FLAGS` (measured on 1M canal changes, local[2]: the whole-row shuffle
    wrote 340 MB and its sort took 11 s).

    One aggregation of the window's output per sequence, collected to the driver (a row
    per topic, partition and source), gives the flags' count, the offsets read and the
    next state at once. It runs here, so the rows are computed (and cached) by it.
    """
    slim = _without_unneeded_raw(messages, parser).withColumn("is_pseudo", F.lit(False))
    pseudo = pseudo_messages(state, parser).withColumn("is_pseudo", F.col("sort_key") < 0)
    if parser.paired:
        every = explode_changes(_annotate(slim.unionByName(pseudo), parser))
        if persist:
            every = every.persist()
        change = F.struct(
            *[F.col(CHANGE_NAMES.get(f.name, f.name)).alias(f.name) for f in CHANGE.fields]
        )
        positions = every.where(first_of_message()).select(
            *_SEQ,
            "is_pseudo",
            "sort_key",
            "pos_last",
            F.col("message_lsn").alias("commit_lsn_num"),
            "segment",
            "base",
            "change_count",
            "pending",
            *_PENDING.values(),
            F.when(F.col("pending"), F.to_json(change)).alias("pending_json"),
        )
        batch = summary(positions, parser, None)
        return Sequenced(
            # the state's pending half is an orphan when this batch does not pair it: it
            # goes to this batch's quarantine (it was not quarantined in its own batch)
            rows=every.where(~F.col("is_pseudo") | F.col("orphan")),
            state=batch.state,
            offsets=batch.offsets,
            cached=(every, batch.cached) if persist else (batch.cached,),
        )
    rows = explode_changes(slim)
    if persist:
        rows = rows.persist()
    narrow = [*POSITION_COLUMNS, "is_pseudo"]
    own = rows.where(first_of_message()).select(
        *[F.col(ROW_NAMES.get(c, c)).alias(c) for c in narrow],
        # the insert half of a split key update (see the module docstring)
        F.when(F.lit(parser.splits_key_updates) & (F.col("op") == "insert"), F.lit(1))
        .otherwise(F.lit(0))
        .alias("split_half"),
    )
    positions = _annotate(
        own.unionByName(pseudo.select(*narrow).withColumn("split_half", F.lit(0))), parser
    )
    if persist:
        positions = positions.persist()
    # An IBM record row counts one change, and the records of a message are one run, so
    # record i's base is its message's base + i: only a message that continues a run of
    # earlier segments has a base of its own to join back.
    in_message = (
        F.coalesce(F.col("record_index"), F.lit(0)).cast("long")
        if parser.segmented
        else F.lit(0).cast("long")
    )
    message_base = F.col("base") - in_message
    is_flagged = ~F.col("is_pseudo") & (F.col("is_replay") | (message_base != 0))
    batch = summary(positions, parser, is_flagged)
    row_base = (
        F.coalesce(F.col("message_index"), F.lit(0)).cast("long")
        if parser.segmented
        else F.lit(0).cast("long")
    )
    if batch.flags == 0:
        joined = rows.withColumns({"is_replay": F.lit(False), "base": row_base})
    else:
        flagged = positions.where(is_flagged).select(
            *_PART, "sort_key", F.col("is_replay").alias("_replay"), message_base.alias("_base")
        )
        side = F.broadcast(flagged) if batch.flags <= BROADCAST_FLAGS else flagged
        joined = (
            rows.join(side, [*_PART, "sort_key"], "left")
            .withColumn("is_replay", F.coalesce(F.col("_replay"), F.lit(False)))
            .withColumn("base", F.coalesce(F.col("_base"), F.lit(0).cast("long")) + row_base)
            .drop("_replay", "_base")
        )
    return Sequenced(
        rows=joined.withColumns(
            {"consumed": F.lit(False), "pending": F.lit(False), "orphan": F.lit(False)}
        ),
        state=batch.state,
        offsets=batch.offsets,
        cached=(rows, positions, batch.cached) if persist else (batch.cached,),
    )


def _annotate(df: DataFrame, parser: Parser) -> DataFrame:
    """The window pass of :func:`sequence` over ``df`` (messages and pseudo messages)."""
    w = Window.partitionBy(*_SEQ).orderBy("sort_key")
    before_now = w.rowsBetween(Window.unboundedPreceding, -1)
    upto_now = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    lsn = F.col("commit_lsn_num")
    count = F.coalesce(F.col("change_count"), F.lit(0)).cast("long")
    if parser.segmented:
        seg = F.col("segment")
        prev_seg = F.lag("segment").over(w)
        continues = (F.coalesce(F.col("record_index"), F.lit(0)) > 0) | (
            seg.isNotNull()
            & (seg != 1)
            & prev_seg.isNotNull()
            & (prev_seg != 0)
            & (F.lag("commit_lsn_num").over(w) == lsn)
        )
        continues = F.coalesce(continues, F.lit(False))
        df = df.withColumn("_cum", F.sum(count).over(upto_now)).withColumn(
            "_start", F.when(~continues, F.col("_cum") - count)
        )
        df = df.withColumn(
            "base",
            F.when(
                ~F.col("is_pseudo") | (F.col("sort_key") == -2),
                F.col("_cum") - count - F.last("_start", ignorenulls=True).over(upto_now),
            ).otherwise(F.lit(0).cast("long")),
        ).drop("_cum", "_start")
        first = F.when(F.col("sort_key") == -3, F.col("first_ordinal")).otherwise(F.col("base") + 1)
    else:
        df = df.withColumn("base", F.lit(0).cast("long"))
        first = F.coalesce(F.col("first_ordinal"), header_ordinal())
        if parser.splits_key_updates:
            # the state's high-water mark (sort_key -3) is kept in this scale already
            first = F.when(F.col("sort_key") == -3, first).otherwise(
                first * 2 + F.col("split_half")
            )
    if parser.paired:
        role = F.coalesce(F.col("pair_role"), F.lit(""))
        is_before = role == "before"
        next_matches = (F.lead("pair_role").over(w) == "after") & (
            F.lead("pair_key").over(w) == F.col("pair_key")
        )
        prev_matches = (F.lag("pair_role").over(w) == "before") & (
            F.lag("pair_key").over(w) == F.col("pair_key")
        )
        df = (
            df.withColumn("_prev_before", F.lag(F.element_at("changes", 1)["before"]).over(w))
            .withColumn("consumed", is_before & F.coalesce(next_matches, F.lit(False)))
            .withColumn("pending", is_before & F.lead("sort_key").over(w).isNull())
            .withColumn("orphan", is_before & ~F.col("consumed") & ~F.col("pending"))
            .withColumn(
                "changes",
                F.when(
                    (role == "after") & F.coalesce(prev_matches, F.lit(False)),
                    F.transform(
                        "changes",
                        lambda c: c.withField("before", F.col("_prev_before")).withField(
                            "changed_columns",
                            F.when(
                                F.size(F.col("_prev_before")) >= F.size(c["after"]),
                                changed_between(F.col("_prev_before"), c["after"]),
                            ),
                        ),
                    ),
                ).otherwise(F.col("changes")),
            )
            .drop("_prev_before")
        )
        counted = ~is_before
    else:  # no split updates: sequence() gives the messages their (false) pair flags
        counted = F.lit(True)
    has_pos = lsn.isNotNull() & first.isNotNull() & (count > 0)
    pos_first = F.when(has_pos, F.struct(lsn.alias("lsn"), first.alias("ordinal")))
    pos_last = F.when(has_pos, F.struct(lsn.alias("lsn"), (first + count - 1).alias("ordinal")))
    df = df.withColumn("pos_last", F.when(counted, pos_last)).withColumn(
        "_pos_first", F.when(counted, pos_first)
    )
    prev_max = F.max("pos_last").over(before_now)
    return df.withColumn(
        "is_replay",
        ~F.col("is_pseudo")
        & F.col("_pos_first").isNotNull()
        & F.coalesce(F.col("_pos_first") <= prev_max, F.lit(False)),
    ).drop("_pos_first")


def header_ordinal() -> Column:
    """The ``walcast.ordinal`` header of a message of one change (null otherwise).

    A format that carries no ordinal of its own (canal without ``canal.walcast_keys``) gets
    it from walcast's header, so its changes have positions (replays are found) and a load
    row its place in its chunk.
    """
    return F.when(F.col("change_count") == 1, F.col("header_ordinal"))


def outputs(rows: DataFrame, parser: Parser) -> tuple[DataFrame, DataFrame]:
    """``(changes, problems)`` of :attr:`Sequenced.rows`.

    ``changes``: every change of the kept messages (not merged into a successor, not
    pending, not an orphan), as the NORMALIZED columns plus ``error``, ``error_detail``,
    ``is_replay``. ``problems``: the messages wholly quarantined (unreadable ones and
    orphan halves), with their Kafka columns, ``reason`` and ``detail``.
    """
    kept = ~F.col("consumed") & ~F.col("pending") & ~F.col("orphan")
    lsn = F.coalesce(F.col("commit_lsn_num"), F.col("header_lsn"))
    ordinal = (
        F.col("base") + F.col("ordinal")
        if parser.segmented
        else F.coalesce(F.col("ordinal"), header_ordinal())
    )
    special = {
        # the position rule of pipeline.model: no ordinal without its commit LSN
        "commit_lsn": F.coalesce(F.col("commit_lsn"), pgtext.lsn_text(F.col("header_lsn"))),
        "commit_lsn_num": lsn,
        "ordinal": F.when(lsn.isNotNull(), ordinal),
        # the change's own WAL position: the record's, else walcast's header (one change)
        "change_lsn": F.coalesce(
            F.col("change_lsn"), F.when(F.col("change_count") == 1, F.col("header_change_lsn"))
        ),
        "commit_date": F.to_date(F.col("commit_time")),
        "record_index": F.coalesce(F.col("message_index"), F.lit(0)) + F.col("_pos"),
    }
    changes = rows.where(F.col("_pos").isNotNull() & kept).select(
        *[special.get(f.name, F.col(f.name)).cast(f.dataType).alias(f.name) for f in NORMALIZED],
        F.col("change_error").alias("error"),
        F.col("change_error_detail").alias("error_detail"),
        "is_replay",
    )
    bad = first_of_message() & (F.col("message_error").isNotNull() | F.col("orphan"))
    problems = rows.where(bad).select(
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        "kafka_key",
        "kafka_value",
        F.coalesce(F.col("message_error"), F.lit(ERR_ORPHAN)).alias("reason"),
        F.coalesce(
            F.col("message_error_detail"),
            F.when(F.col("orphan"), F.lit("update before-image without its after-image")),
        ).alias("detail"),
    )
    return changes, problems


WRITTEN = "written"
"""The outcome of a change that goes to the normalized table (:func:`tally`)."""


def tally(rows: DataFrame) -> DataFrame:
    """``outcome, count``: changes written (:data:`WRITTEN`) and quarantined rows by reason.

    The counts of :func:`outputs`' changes and quarantine in one aggregation of a few
    narrow columns of :attr:`Sequenced.rows`.
    """
    kept = ~F.col("consumed") & ~F.col("pending") & ~F.col("orphan")
    is_change = F.col("_pos").isNotNull() & kept
    change_bad = F.col("change_error").isNotNull() | F.col("is_replay")
    message_bad = first_of_message() & (F.col("message_error").isNotNull() | F.col("orphan"))
    outcomes = F.array(
        F.when(is_change & ~change_bad, F.lit(WRITTEN)),
        F.when(is_change & change_bad, F.coalesce(F.col("change_error"), F.lit(ERR_REPLAY))),
        F.when(message_bad, F.coalesce(F.col("message_error"), F.lit(ERR_ORPHAN))),
    )
    return (
        rows.select(F.explode(outcomes).alias("outcome"))
        .where(F.col("outcome").isNotNull())
        .groupBy("outcome")
        .count()
    )


__all__ = [
    "ERR_REPLAY",
    "POSITION_COLUMNS",
    "STATE",
    "WRITTEN",
    "Sequenced",
    "empty_state",
    "explode_changes",
    "outputs",
    "sequence",
    "tally",
]

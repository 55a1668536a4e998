"""Per-partition sequencing of parsed messages: replays, IBM segment ordinals, split updates.

Within one Kafka partition walcast writes changes in commit order, so the position
``(commit_lsn_num, ordinal)`` strictly increases from message to message, except when
the daemon restarts and sends again the transactions it had not acknowledged. That holds
per **source** (the ``walcast.source`` header, :mod:`pipeline.kafka`): two databases (or
two slots) writing to one topic interleave their messages, and their positions are not
comparable (two servers' LSNs; two slots of one server at different points of the WAL).
So everything below is per topic, partition and source: a sequence is a source's messages
in one partition. Hence:

* **Replays**: a change whose position is not above every position seen before it in its
  partition (earlier in the batch, or in earlier batches: the partition's high-water
  mark) is a replay and is dropped from the output (it goes to the quarantine with
  reason ``replay``, so nothing disappears silently). Changes without a position
  (formats or producers that carry no ordinal) are never treated as replays.
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
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.formats.base import ERR_ORPHAN, ERR_REPLAY, Parser, changed_between
from pipeline.model import CHANGE, MESSAGE, NORMALIZED

STATE = StructType(
    [
        StructField("kafka_topic", StringType(), False),
        StructField("kafka_partition", IntegerType(), False),
        StructField("source", StringType(), True),
        StructField("hwm_lsn", LongType(), True),
        StructField("hwm_ordinal", LongType(), True),
        StructField("run_lsn", LongType(), True),
        StructField("run_segment", IntegerType(), True),
        StructField("run_next", LongType(), True),
        StructField("pending_json", StringType(), True),
        StructField("pending_key", StringType(), True),
        StructField("pending_offset", LongType(), True),
        StructField("pending_timestamp", TimestampType(), True),
        StructField("pending_kafka_key", BinaryType(), True),
        StructField("pending_value", BinaryType(), True),
    ]
)

QUARANTINE_DETAIL = StructType(
    [
        StructField("reason", StringType(), False),
        StructField("detail", StringType(), True),
    ]
)

_PART = ("kafka_topic", "kafka_partition")
_SEQ = (*_PART, "source")
"""One sequence: a source's messages in one Kafka partition (see the module docstring)."""


def empty_state(spark: SparkSession) -> DataFrame:
    """A state with no partition seen yet."""
    return spark.createDataFrame([], STATE)


def _pseudo_messages(state: DataFrame, parser: Parser) -> DataFrame:
    """The state as pseudo messages to put before a batch's messages."""
    null_changes = F.array().cast(MESSAGE["changes"].dataType)

    def row(sort_key: int, **cols: Column) -> DataFrame:
        out = []
        for f in MESSAGE.fields:
            if f.name in cols:
                col = cols[f.name]
            elif f.name in _SEQ:
                col = F.col(f.name)
            else:
                col = F.lit(None)
            out.append(col.cast(f.dataType).alias(f.name))
        return state.select(*out).withColumn("sort_key", F.lit(sort_key).cast("long"))

    parts = [
        row(
            -3,
            commit_lsn_num=F.col("hwm_lsn"),
            first_ordinal=F.col("hwm_ordinal"),
            change_count=F.lit(1),
            segment=F.lit(0) if parser.segmented else F.lit(None),
            changes=null_changes,
        ).where(F.col("hwm_lsn").isNotNull())
    ]
    if parser.segmented:
        parts.append(
            row(
                -2,
                commit_lsn_num=F.col("run_lsn"),
                change_count=F.col("run_next"),
                segment=F.col("run_segment"),
                changes=null_changes,
            ).where(F.col("run_lsn").isNotNull())
        )
    if parser.paired:
        parts.append(
            row(
                -1,
                kafka_offset=F.col("pending_offset"),
                kafka_timestamp=F.col("pending_timestamp"),
                kafka_key=F.col("pending_kafka_key"),
                kafka_value=F.col("pending_value"),
                change_count=F.lit(1),
                pair_role=F.lit("before"),
                pair_key=F.col("pending_key"),
                changes=F.array(F.from_json(F.col("pending_json"), CHANGE)),
            ).where(F.col("pending_key").isNotNull())
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


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


@dataclass(frozen=True, slots=True)
class Sequenced:
    """A batch's messages after sequencing (lazy DataFrames).

    ``messages``: the real messages with the flags :func:`changes_of` and
    :func:`message_problems` read (``is_pseudo``, ``base``, ``is_replay``, ``consumed``,
    ``pending``, ``orphan``). ``positions``: every row, the state's pseudo messages
    included, with what :func:`next_state` and :func:`offsets_of` read (``pos_last`` …).
    ``cached``: what was persisted for the batch (free it with ``unpersist``).
    """

    messages: DataFrame
    positions: DataFrame
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
    """Messages (with the state's pseudo messages) annotated for output and next state.

    Added columns: ``is_pseudo``, ``base`` (records of earlier segments of the run),
    ``pos_last`` (struct lsn/ordinal, null without a position; in ``positions``),
    ``is_replay``, ``consumed`` (a before half merged into its successor), ``pending`` (a
    before half carried to the next batch), ``orphan``. ``kafka_key``/``kafka_value`` are
    kept only where the quarantine or the next state reads them
    (:func:`_without_unneeded_raw`).

    The window pass needs each Kafka partition's messages in one task, in order: a
    shuffle and a sort. A paired format (DataWorks) merges a before image into the next
    message, so its whole messages go through the window. Every other format's window
    reads only :data:`POSITION_COLUMNS`: the messages are cached as parsed (``persist``)
    and the few rows the window flags (replays, IBM messages continuing a run of earlier
    segments) are joined back, by broadcast up to :data:`BROADCAST_FLAGS` (measured on 1M canal
    changes, local[2]: the whole-row shuffle wrote 340 MB and its sort took 11 s).
    """
    slim = _without_unneeded_raw(messages, parser).withColumn("is_pseudo", F.lit(False))
    pseudo = _pseudo_messages(state, parser).withColumn("is_pseudo", F.col("sort_key") < 0)
    if parser.paired:
        annotated = _annotate(slim.unionByName(pseudo), parser)
        if persist:
            annotated = annotated.persist()
        return Sequenced(
            messages=annotated.where(~F.col("is_pseudo")),
            positions=annotated,
            cached=(annotated,) if persist else (),
        )
    if persist:
        slim = slim.persist()
    narrow = [*POSITION_COLUMNS, "is_pseudo"]
    positions = _annotate(slim.select(*narrow).unionByName(pseudo.select(*narrow)), parser)
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
    flagged = positions.where(
        ~F.col("is_pseudo") & (F.col("is_replay") | (message_base != 0))
    ).select(*_PART, "sort_key", F.col("is_replay").alias("_replay"), message_base.alias("_base"))
    flags = flagged.count()
    if flags == 0:
        joined = slim.withColumns({"is_replay": F.lit(False), "base": in_message})
    else:
        side = F.broadcast(flagged) if flags <= BROADCAST_FLAGS else flagged
        joined = (
            slim.join(side, [*_PART, "sort_key"], "left")
            .withColumn("is_replay", F.coalesce(F.col("_replay"), F.lit(False)))
            .withColumn("base", F.coalesce(F.col("_base"), F.lit(0).cast("long")) + in_message)
            .drop("_replay", "_base")
        )
    return Sequenced(
        messages=joined.withColumns(
            {"consumed": F.lit(False), "pending": F.lit(False), "orphan": F.lit(False)}
        ),
        positions=positions,
        cached=(slim, positions) if persist else (),
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


def next_state(positions: DataFrame, parser: Parser) -> DataFrame:
    """The state after the batch, one row per topic and partition (:data:`STATE`).

    ``positions`` is :attr:`Sequenced.positions`. A pending before half (paired formats
    only) is carried with its change as JSON, written for that one row only.
    """
    fields: list[Column | str] = ["commit_lsn_num", "segment", "base", "change_count"]
    if parser.paired:
        fields += [
            "pending",
            "pair_key",
            "kafka_offset",
            "kafka_timestamp",
            "kafka_key",
            "kafka_value",
            F.when(F.col("pending"), F.to_json(F.element_at("changes", 1))).alias("pending_json"),
        ]
    last = F.max_by(F.struct(*fields), "sort_key")
    agg = positions.groupBy(*_SEQ).agg(F.max("pos_last").alias("hwm"), last.alias("last"))
    open_run = (
        F.lit(parser.segmented) & F.col("last.segment").isNotNull() & (F.col("last.segment") != 0)
    )

    def last_pending(name: str) -> Column:
        """``last.<name>`` when the last message is a pending before half (paired only)."""
        if not parser.paired:
            return F.lit(None)
        return F.when(F.coalesce(F.col("last.pending"), F.lit(False)), F.col(f"last.{name}"))

    cols = {
        "kafka_topic": F.col("kafka_topic"),
        "kafka_partition": F.col("kafka_partition"),
        "source": F.col("source"),
        "hwm_lsn": F.col("hwm.lsn"),
        "hwm_ordinal": F.col("hwm.ordinal"),
        "run_lsn": F.when(open_run, F.col("last.commit_lsn_num")),
        "run_segment": F.when(open_run, F.col("last.segment")),
        "run_next": F.when(open_run, F.col("last.base") + F.col("last.change_count")),
        "pending_json": last_pending("pending_json"),
        "pending_key": last_pending("pair_key"),
        "pending_offset": last_pending("kafka_offset"),
        "pending_timestamp": last_pending("kafka_timestamp"),
        "pending_kafka_key": last_pending("kafka_key"),
        "pending_value": last_pending("kafka_value"),
    }
    return agg.select(*[cols[f.name].cast(f.dataType).alias(f.name) for f in STATE.fields])


def offsets_of(positions: DataFrame) -> DataFrame:
    """Per topic and partition, the first and last Kafka offset of the batch's messages."""
    real = positions.where(~F.col("is_pseudo"))
    return real.groupBy(*_PART).agg(
        F.min("kafka_offset").alias("first"), F.max("kafka_offset").alias("last")
    )


def changes_of(messages: DataFrame, parser: Parser) -> DataFrame:
    """Every change of the kept messages, with its Kafka position and flags.

    ``messages`` is :attr:`Sequenced.messages`. Columns: the NORMALIZED columns plus
    ``error``, ``error_detail``, ``is_replay``.
    """
    kept = messages.where(~F.col("consumed") & ~F.col("pending") & ~F.col("orphan"))
    exploded = (
        kept.select(
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            "kafka_timestamp",
            "is_replay",
            "base",
            "source",
            "load",
            header_ordinal().alias("_header_ordinal"),
            F.col("record_index").alias("_message_index"),
            # _outer: with posexplode, Spark infers a filter size(changes) > 0 and pushes it
            # below the parser's projection, which then builds every change twice (measured:
            # +9.5 s on 1M canal changes). The outer form's null rows are dropped after it.
            F.posexplode_outer("changes").alias("_pos", "c"),
        )
        .where(F.col("_pos").isNotNull())
        .withColumn("record_index", F.coalesce(F.col("_message_index"), F.lit(0)) + F.col("_pos"))
    )
    ordinal = (
        F.col("base") + F.col("c.ordinal")
        if parser.segmented
        else F.coalesce(F.col("c.ordinal"), F.col("_header_ordinal"))
    )
    cols = []
    for f in NORMALIZED.fields:
        if f.name == "ordinal":
            col = ordinal
        elif f.name == "commit_date":
            col = F.to_date(F.col("c.commit_time"))
        elif f.name in (
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            "kafka_timestamp",
            "record_index",
            "source",
            "load",
        ):
            col = F.col(f.name)
        else:
            col = F.col("c." + f.name)
        cols.append(col.cast(f.dataType).alias(f.name))
    return exploded.select(
        *cols,
        F.col("c.error").alias("error"),
        F.col("c.error_detail").alias("error_detail"),
        "is_replay",
    )


def message_problems(messages: DataFrame) -> DataFrame:
    """Messages wholly quarantined: unreadable ones and orphan halves.

    ``messages`` is :attr:`Sequenced.messages`.
    """
    bad = messages.where(F.col("error").isNotNull() | F.col("orphan"))
    reason = F.coalesce(F.col("error"), F.lit(ERR_ORPHAN))
    detail = F.coalesce(
        F.col("error_detail"),
        F.when(F.col("orphan"), F.lit("update before-image without its after-image")),
    )
    return bad.select("*", reason.alias("reason"), detail.alias("detail"))


__all__ = [
    "ERR_REPLAY",
    "POSITION_COLUMNS",
    "STATE",
    "Sequenced",
    "changes_of",
    "empty_state",
    "message_problems",
    "next_state",
    "offsets_of",
    "sequence",
]

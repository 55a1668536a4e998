"""The sequencing state that crosses micro-batches, and the batch summary that makes it.

Part of :mod:`pipeline.sequencing` (its docstring states the rules): the state's schema
(:data:`STATE`, one row per topic, partition and source), the pseudo messages it becomes
before a batch's messages, and :func:`summary`, the one aggregation of the window's
output that yields the next state, the Kafka offsets read and the count of flagged
messages, collected to the driver (a row per sequence: small).
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`, `StructField(name, type, True)`)
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from pipeline.formats.base import Parser
from pipeline.local_frames import local_empty
from pipeline.model import CHANGE, MESSAGE

PENDING = {
    "pending_key": "pair_key",
    "pending_offset": "kafka_offset",
    "pending_timestamp": "kafka_timestamp",
    "pending_kafka_key": "kafka_key",
    "pending_value": "kafka_value",
}
"""The :data:`~pipeline.model.MESSAGE` fields of a pending before half (paired formats)
that the state keeps, by their :data:`STATE` name; each keeps its MESSAGE type. With
``pending_json`` (the half's change) they are the whole pending half."""

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
        *[StructField(name, MESSAGE[field].dataType, True) for name, field in PENDING.items()],
    ]
)

PART = ("kafka_topic", "kafka_partition")
SEQ = (*PART, "source")
"""One sequence: a source's messages in one Kafka partition (see the module docstring)."""


def empty_state(spark: SparkSession) -> DataFrame:
    """A state with no partition seen yet."""
    return local_empty(spark, STATE)


def pseudo_messages(state: DataFrame, parser: Parser) -> DataFrame:
    """The state as pseudo messages to put before a batch's messages."""
    null_changes = F.array().cast(MESSAGE["changes"].dataType)

    def row(sort_key: int, present: str, **cols: Column) -> DataFrame:
        """One MESSAGE row with ``sort_key`` per state row whose ``present`` is not null.

        The :data:`SEQ` columns are the state's, ``cols`` give others (``changes``
        defaults to an empty array), every other field is null; all cast to MESSAGE types.
        """
        cols = {"changes": null_changes, **cols}
        out = []
        for f in MESSAGE.fields:
            if f.name in cols:
                col = cols[f.name]
            elif f.name in SEQ:
                col = F.col(f.name)
            else:
                col = F.lit(None)
            out.append(col.cast(f.dataType).alias(f.name))
        return (
            state.select(*out)
            .withColumn("sort_key", F.lit(sort_key).cast("long"))
            .where(F.col(present).isNotNull())
        )

    parts = [
        row(
            -3,
            "hwm_lsn",
            commit_lsn_num=F.col("hwm_lsn"),
            first_ordinal=F.col("hwm_ordinal"),
            change_count=F.lit(1),
            segment=F.lit(0) if parser.segmented else F.lit(None),
        )
    ]
    if parser.segmented:
        parts.append(
            row(
                -2,
                "run_lsn",
                commit_lsn_num=F.col("run_lsn"),
                change_count=F.col("run_next"),
                segment=F.col("run_segment"),
            )
        )
    if parser.paired:
        parts.append(
            row(
                -1,
                "pending_key",
                change_count=F.lit(1),
                pair_role=F.lit("before"),
                changes=F.array(F.from_json(F.col("pending_json"), CHANGE)),
                **{field: F.col(name) for name, field in PENDING.items()},
            )
        )
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


@dataclass(frozen=True, slots=True)
class Summary:
    """What :func:`summary` gives: the next state and what the batch read."""

    state: DataFrame
    """The :data:`STATE` rows after the batch (read from the cached aggregate)."""
    offsets: DataFrame
    """``kafka_topic, kafka_partition, first, last``: the Kafka offsets of the batch's
    messages (from the cached aggregate)."""
    flags: int
    """How many messages ``flagged`` selects."""
    cached: DataFrame
    """The aggregate, persisted: free it with ``unpersist`` once the state is saved."""


def summary(positions: DataFrame, parser: Parser, flagged: Column | None) -> Summary:
    """The next state (:data:`STATE`), the offsets read and the count of ``flagged`` rows.

    ``positions``: one row per message, the state's pseudo messages included, with what
    the window pass adds (``pos_last``, ``base``, and for a paired format ``pending`` and
    ``pending_json``: the pending half's change as JSON). One aggregation per topic,
    partition and source (a row each), persisted; the count is collected (which computes
    it). The state stays in the JVM: collected to Python and made a DataFrame again, it
    would need Python workers (a PySpark local DataFrame is a Python RDD: measured, their
    start took 7-18 s of the two task slots of a loaded local[2] batch) and take its
    timestamps through Python's local time.
    """
    fields: list[Column | str] = ["commit_lsn_num", "segment", "base", "change_count"]
    if parser.paired:
        fields += ["pending", *PENDING.values(), "pending_json"]
    real_offset = F.when(~F.col("is_pseudo"), F.col("kafka_offset"))
    agg = positions.groupBy(*SEQ).agg(
        F.max("pos_last").alias("hwm"),
        F.max_by(F.struct(*fields), "sort_key").alias("last"),
        F.min(real_offset).alias("_first"),
        F.max(real_offset).alias("_last"),
        (F.count_if(flagged) if flagged is not None else F.lit(0)).alias("_flags"),
    )
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
        **{name: last_pending(field) for name, field in PENDING.items()},
    }
    summed = agg.select(
        *[cols[f.name].cast(f.dataType).alias(f.name) for f in STATE.fields],
        "_first",
        "_last",
        "_flags",
    ).persist()
    flags = sum(int(r[0]) for r in summed.select("_flags").collect())
    offsets = (
        summed.where(F.col("_first").isNotNull())  # null: a partition only the state knows
        .groupBy(*PART)
        .agg(F.min("_first").alias("first"), F.max("_last").alias("last"))
    )
    return Summary(
        state=summed.select(*STATE.fieldNames()), offsets=offsets, flags=flags, cached=summed
    )


__all__ = [
    "PART",
    "PENDING",
    "SEQ",
    "STATE",
    "Summary",
    "empty_state",
    "pseudo_messages",
    "summary",
]

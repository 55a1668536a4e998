"""Kafka access for the jobs: the streaming source, batch reads and topic checks.

The streaming source is Spark's built-in ``kafka`` source (``spark-sql-kafka-0-10``);
its rows have ``key, value, topic, partition, offset, timestamp`` (and more), which is
what every parser takes. ``failOnDataLoss`` stays ``true`` by default: offsets that
vanished (retention) must stop the job rather than skip changes silently.

Records also carry what walcast's Kafka headers say (:func:`with_walcast_headers`, read
with the source's ``includeHeaders``): ``source`` (the ``walcast.source`` header: which
database and slot the message came from, :mod:`capture.state.identity`), ``load`` (the
``walcast.xid`` header is ``0``: the message holds rows of a load chunk, whose xid is 0,
never a real transaction's), ``header_lsn`` (``walcast.commit_lsn``, the commit LSN of
the transaction or the load chunk the message belongs to, as a 64-bit number) and
``header_ordinal`` (``walcast.ordinal``, on messages of one change). Messages of other
producers have none of these headers: null source, not a load, no position.
``header_change_lsn`` is ``walcast.change_lsn`` (the WAL position of the message's first
change, :mod:`pipeline.model`). ``header_layout`` is ``walcast.layout`` (the version of
the table layout the change was encoded with, :mod:`pipeline.layouts`).
``header_oldkey``/``header_newkey`` are the Debezium connector's ``__debezium.oldkey`` and
``__debezium.newkey`` headers (the halves of a primary-key change, which walcast's
``--format debezium`` writes too; :mod:`pipeline.formats.debezium.decode`), as text.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(False)`)
from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import pgtext

RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
"""The Kafka source's columns every parser reads."""
HEADER_COLUMNS = (
    "source",
    "load",
    "header_lsn",
    "header_ordinal",
    "header_oldkey",
    "header_newkey",
    "header_change_lsn",
    "header_layout",
)
"""The columns :func:`with_walcast_headers` derives from walcast's headers."""
RECORD_COLUMNS = (*RAW_COLUMNS, *HEADER_COLUMNS)
"""A record as the jobs hand it to a parser."""


def with_walcast_headers(records: DataFrame) -> DataFrame:
    """``records`` with :data:`HEADER_COLUMNS`, from its ``headers`` column when it has one.

    A frame without ``headers`` (built by hand, or read without ``includeHeaders``) gets
    a null ``source``, ``load`` false and null header columns where it lacks them.
    """
    if "headers" not in records.columns:
        missing = {
            "source": F.lit(None).cast("string"),
            "load": F.lit(False),
            "header_lsn": F.lit(None).cast("long"),
            "header_ordinal": F.lit(None).cast("long"),
            "header_oldkey": F.lit(None).cast("string"),
            "header_newkey": F.lit(None).cast("string"),
            "header_change_lsn": F.lit(None).cast("long"),
            "header_layout": F.lit(None).cast("string"),
        }
        return records.withColumns({k: v for k, v in missing.items() if k not in records.columns})
    # One small map per record (built by generated code; a lambda over the array would
    # be interpreted per element). Sessions set mapKeyDedupPolicy=LAST_WIN.
    found = F.map_from_entries(F.col("headers"))

    def header(name: str) -> Column:
        return F.element_at(found, F.lit(name)).cast("string")

    return records.withColumns(
        {
            "source": header("walcast.source"),
            "load": F.coalesce(header("walcast.xid") == F.lit("0"), F.lit(False)),
            "header_lsn": pgtext.lsn_number(header("walcast.commit_lsn")),
            "header_ordinal": F.when(
                header("walcast.ordinal").rlike("^[0-9]{1,18}$"),
                header("walcast.ordinal").cast("long"),
            ),
            "header_oldkey": header("__debezium.oldkey"),
            "header_newkey": header("__debezium.newkey"),
            "header_change_lsn": pgtext.lsn_number(header("walcast.change_lsn")),
            "header_layout": header("walcast.layout"),
        }
    )


def topic_exists(bootstrap: str, topic: str, timeout: float = 30.0) -> bool:
    """Whether ``topic`` exists on the cluster (asks the brokers' metadata, creates nothing).

    No answer within ``timeout`` seconds is :class:`~pipeline.errors.KafkaUnavailableError`.
    """
    from pipeline.preflight import existing_topics  # noqa: PLC0415

    return topic in existing_topics(bootstrap, {}, timeout)


def read_stream(
    spark: SparkSession,
    bootstrap: str,
    topics: Sequence[str],
    *,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
    pattern: str | None = None,
    min_partitions: int | None = None,
) -> DataFrame:
    """A streaming DataFrame of records (columns :data:`RECORD_COLUMNS`).

    Of ``topics``, or of the topics matching ``pattern`` (``subscribePattern``).
    ``min_partitions`` (the source's ``minPartitions``) splits a batch's large Kafka
    partitions into offset ranges read by separate tasks, so a topic with fewer partitions
    than cores is still parsed on every core (IBM's single queue topic); order does not
    suffer, as sequencing sorts each Kafka partition by offset.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("startingOffsets", starting_offsets)
    )
    if pattern is not None:
        reader = reader.option("subscribePattern", pattern)
    else:
        reader = reader.option("subscribe", ",".join(topics))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    reader = reader.option("includeHeaders", "true")
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return with_walcast_headers(reader.load()).select(*RECORD_COLUMNS)


def read_batch(
    spark: SparkSession,
    bootstrap: str,
    topics: Sequence[str],
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Every record currently in ``topics`` (a batch read, earliest to latest)."""
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
    )
    reader = reader.option("includeHeaders", "true")
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return with_walcast_headers(reader.load()).select(*RECORD_COLUMNS)

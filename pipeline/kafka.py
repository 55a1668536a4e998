"""Kafka access for the jobs: the streaming source, batch reads and topic checks.

The streaming source is Spark's built-in ``kafka`` source (``spark-sql-kafka-0-10``);
its rows have ``key, value, topic, partition, offset, timestamp`` (and more), which is
what every parser takes. ``failOnDataLoss`` stays ``true`` by default: offsets that
vanished (retention) must stop the job rather than skip changes silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

RECORD_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


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
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load().select(*RECORD_COLUMNS)


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
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load().select(*RECORD_COLUMNS)

"""The normalize job: Kafka topics of one format → the normalized change table (Parquet).

Per micro-batch (``foreachBatch``):

1. parse the batch's records with the format's parser (layouts read from the layout
   topic, a compacted Kafka topic, at the start of the batch);
2. sequence them per partition (:mod:`pipeline.sequencing`: IBM segment ordinals,
   DataWorks split updates, replay detection against the state of earlier batches);
3. write the normalized changes (partitioned by ``schema``, ``table``, ``commit_date``)
   and the quarantine (partitioned by ``reason``) through exactly-once file sinks
   (:mod:`pipeline.sinks`), then the sequencing state (:mod:`pipeline.state`).

Restart safety: Spark's checkpoint fixes each batch's Kafka offsets before the batch
runs; a batch that ran but was not committed runs again with the same offsets and the
same starting state, and both sinks skip a batch id they already committed. So a
restarted job neither skips a change nor writes one twice.

:func:`normalize_frame` is the same transformation on a static DataFrame of Kafka
records (tests, batch back-fills).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline import kafka, quarantine, sequencing
from pipeline.formats import parser_for
from pipeline.formats.base import Parser
from pipeline.layouts import read_layouts
from pipeline.model import PARTITION_COLUMNS
from pipeline.sinks import ExactlyOnceParquet
from pipeline.state import StateStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NormalizeResult:
    """The three outputs of one batch (lazy DataFrames)."""

    changes: DataFrame
    quarantine: DataFrame
    state: DataFrame
    cached: tuple[DataFrame, ...] = ()
    """Intermediate DataFrames persisted for the batch; :meth:`release` frees them."""

    def release(self) -> None:
        """Unpersist the intermediate DataFrames."""
        for df in self.cached:
            df.unpersist()


def normalize_frame(
    records: DataFrame,
    parser: Parser,
    layouts: DataFrame,
    state: DataFrame | None = None,
    *,
    persist: bool = False,
) -> NormalizeResult:
    """Normalize a DataFrame of Kafka records, given the layouts and the state before it.

    ``records`` has the Kafka source's ``key, value, topic, partition, offset, timestamp``.

    ``persist`` caches the sequenced messages, which all three outputs read (call
    :meth:`NormalizeResult.release` afterwards). The changes are not cached: exploding
    them again from the cache for the quarantine costs less than building a second
    cache of every change (measured: about 15% of a canal batch).
    """
    spark = records.sparkSession
    before = state if state is not None else sequencing.empty_state(spark)
    messages = parser.parse(records, layouts)
    sequenced = sequencing.sequence(messages, before, parser)
    if persist:
        sequenced = sequenced.persist()
    changes = sequencing.changes_of(sequenced, parser)
    rejected = quarantine.from_messages(sequencing.message_problems(sequenced), parser.name)
    return NormalizeResult(
        changes=quarantine.good_changes(changes),
        quarantine=rejected.unionByName(quarantine.from_changes(changes)),
        state=sequencing.next_state(sequenced, parser),
        cached=(sequenced,) if persist else (),
    )


@dataclass(slots=True)
class NormalizeJob:
    """Everything the normalize job needs; :meth:`start` runs it."""

    bootstrap: str
    topics: Sequence[str]
    format: str
    output: str
    checkpoint: str
    quarantine: str | None = None
    """Default: ``<output>_quarantine``."""
    layout_topic: str | None = None
    """Default: ``<first topic>.layouts`` (empty string: no layouts)."""
    parser_options: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    processing_time: str | None = None
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    query_name: str | None = None

    @property
    def quarantine_path(self) -> str:
        """Where the quarantine goes."""
        return self.quarantine or self.output.rstrip("/") + "_quarantine"

    @property
    def layout_topic_name(self) -> str | None:
        """The layout topic read per batch (None: none)."""
        if self.layout_topic is None:
            return f"{self.topics[0]}.layouts"
        return self.layout_topic or None

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the streaming query (returns at once; ``awaitTermination`` to wait)."""
        spark.conf.set("spark.sql.ansi.enabled", "false")
        spark.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
        parser = parser_for(self.format, self.parser_options)
        changes_sink = ExactlyOnceParquet(spark, self.output, PARTITION_COLUMNS)
        quarantine_sink = ExactlyOnceParquet(
            spark, self.quarantine_path, quarantine.PARTITION_COLUMNS
        )
        store = StateStore(spark, self.checkpoint)
        layout_topic = self.layout_topic_name

        def run_batch(batch: DataFrame, batch_id: int) -> None:
            # The sequenced messages are cached (normalize_frame), so the records are
            # read once, except by a parser that scans them twice.
            records = batch.persist() if parser.scans_records_twice else batch
            try:
                layouts = read_layouts(spark, self.bootstrap, layout_topic).cache()
                result = normalize_frame(
                    records, parser, layouts, store.load(batch_id), persist=True
                )
                changes_sink.add_batch(batch_id, result.changes)
                quarantine_sink.add_batch(batch_id, result.quarantine)
                store.save(batch_id, result.state)
                result.release()
                layouts.unpersist()
            finally:
                if records is not batch:
                    records.unpersist()
            log.info("normalize batch %d done", batch_id)

        stream = kafka.read_stream(
            spark,
            self.bootstrap,
            self.topics,
            starting_offsets=self.starting_offsets,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            options=self.kafka_options,
        )
        writer = (
            stream.writeStream.foreachBatch(run_batch)
            .option("checkpointLocation", self.checkpoint)
            .queryName(self.query_name or f"walcast-normalize-{self.format}")
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        elif self.processing_time:
            writer = writer.trigger(processingTime=self.processing_time)
        return writer.start()

    def run(self, spark: SparkSession) -> None:
        """Start and wait until the query ends (with ``available_now``: all data read)."""
        query = self.start(spark)
        query.awaitTermination()
        error = query.exception()
        if error is not None:  # pragma: no cover - awaitTermination raises first
            raise RuntimeError(str(error))

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

Where a batch's time goes (canal, 300k changes, local[2], task CPU from Spark's event
log; ``bench/spark_normalize.py`` and ``bench/README.md``): one job reads Kafka, parses,
explodes the changes into the cached frame and shuffles their narrow positions to the
window (34-43 s CPU, about 2x the minimal job's read, parse and Parquet write); the
window and the aggregate that yields the next state take 2-4 s; writing the changes
from the cache 12-16 s; the rest (layouts, tally, state, an empty quarantine batch) 2-3
s. So per change: about 165-215 us of CPU against 65-90 us for the minimal job (115-130
us in later batches of a continuous run, the JIT warm); the parser's expressions and the
cache build are the bulk. Decisions that follow:

* the records are read and parsed once: every output reads the cached frame
  (:mod:`pipeline.sequencing`), and the counts come from one aggregation
  (:func:`pipeline.sequencing.tally`), not one job per output;
* a batch with nothing quarantined writes an empty quarantine batch without reading the
  changes again;
* no PySpark local DataFrame (``createDataFrame`` of Python values) in a batch: it is a
  Python RDD, whose reading starts Python workers (measured on the loaded machine: 7-18 s
  of the two task slots); empty frames and the state are made in the JVM
  (:mod:`pipeline.local_frames`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from capture.errors import WalcastError
from pipeline import kafka, preflight, quarantine, sequencing
from pipeline.errors import WrongFormatError, run_job
from pipeline.formats import parser_for
from pipeline.formats.base import ERR_MALFORMED, Parser
from pipeline.layouts import layout_topic_name, read_layouts, warn_sourceless
from pipeline.local_frames import local_empty
from pipeline.model import PARTITION_COLUMNS
from pipeline.quarantine import QUARANTINE
from pipeline.sinks import ExactlyOnceParquet
from pipeline.state import StateStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NormalizeResult:
    """The outputs of one batch (DataFrames: sequencing has run, the rest is lazy)."""

    changes: DataFrame
    quarantine: DataFrame
    state: DataFrame
    """The sequencing state after the batch (read from a cached aggregate: save it before
    :meth:`release`)."""
    offsets: DataFrame
    """The Kafka offsets read: ``kafka_topic``, ``kafka_partition``, ``first``, ``last``."""
    tally: DataFrame
    """``outcome, count``: changes written (``sequencing.WRITTEN``) and quarantined rows
    per reason, in one aggregation (:func:`pipeline.sequencing.tally`)."""
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

    ``records`` has the Kafka source's ``key, value, topic, partition, offset, timestamp``
    and, when read by :mod:`pipeline.kafka`, what walcast's headers say (a frame without
    them is taken as messages without those headers).

    The messages are parsed and their changes exploded once, into one frame that every
    output reads (:func:`pipeline.sequencing.sequence`); ``persist`` caches it (call
    :meth:`NormalizeResult.release` afterwards). Sequencing runs here (one Spark job:
    the next state, the offsets and the flagged messages are collected).
    """
    spark = records.sparkSession
    records = kafka.with_walcast_headers(records)
    before = state if state is not None else sequencing.empty_state(spark)
    messages = parser.parse(records, layouts)
    sequenced = sequencing.sequence(messages, before, parser, persist=persist)
    changes, problems = sequencing.outputs(sequenced.rows, parser)
    return NormalizeResult(
        changes=quarantine.good_changes(changes),
        quarantine=quarantine.from_messages(problems, parser.name).unionByName(
            quarantine.from_changes(changes)
        ),
        state=sequenced.state,
        offsets=sequenced.offsets,
        tally=sequencing.tally(sequenced.rows),
        cached=sequenced.cached,
    )


@dataclass(slots=True)
class BatchTotals:
    """What the job did so far: batches, changes written, quarantined messages by reason."""

    batches: int = 0
    written: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Changes written plus messages quarantined."""
        return self.written + sum(self.reasons.values())

    def add(self, written: int, reasons: Mapping[str, int]) -> None:
        """Count one batch."""
        self.batches += 1
        self.written += written
        for reason, n in reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n


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
    """Default: ``walcast.schemas``, where ``walcast run`` writes (empty: none).

    Read only if it exists: a reader never creates it."""
    parser_options: Mapping[str, str] = field(default_factory=dict)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    processing_time: str | None = None
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    query_name: str | None = None
    topic_pattern: str | None = None
    """A regex of topics to read (Spark's ``subscribePattern``), instead of ``topics``."""
    read_committed: bool = True
    """Read at ``isolation.level=read_committed``: ``walcast run --exactly-once`` writes
    Kafka transactions, whose aborted messages must not be read (no cost otherwise)."""
    min_partitions: int | None = None
    """Spark tasks a batch's records are read by, at least (the Kafka source's
    ``minPartitions``): None = 4 x the session's default parallelism, 0 = one task per
    Kafka partition. Splitting lets every core parse a topic whose records sit in one
    partition (IBM's queue topic; measured, 200k IBM changes in local[2]: 7.7k rows/s
    unsplit, 8.0k at 4 tasks, 9.3k at 8; canal over two partitions: unchanged)."""
    kafka_timeout: float = 30.0
    """How long the start waits for a broker to answer before failing with one line."""
    max_quarantine_ratio: float = 0.5
    """Fail when more than this share of the messages is malformed, on the first batch or
    over the whole run (the likely cause: a wrong ``--format``)."""
    report: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr))
    """Where the per-batch lines and the summary go."""
    totals: BatchTotals = field(default_factory=BatchTotals, init=False)
    """What the running (or finished) query did."""
    failure: WalcastError | None = field(default=None, init=False)
    """The job's own error, raised inside a batch (Spark wraps it)."""
    cluster_topics: set[str] | None = field(default=None, init=False)
    """The cluster's topics, once :meth:`check` asked (before any Spark session)."""

    def check(self) -> set[str]:
        """Ask Kafka whether the topics exist (one line on a mistake; no JVM needed)."""
        if self.cluster_topics is None:
            self.cluster_topics = preflight.check_topics(
                self.bootstrap,
                self.topics,
                self.topic_pattern,
                self.kafka_options,
                self.kafka_timeout,
            )
        return self.cluster_topics

    @property
    def quarantine_path(self) -> str:
        """Where the quarantine goes."""
        return self.quarantine or self.output.rstrip("/") + "_quarantine"

    @property
    def layout_topic_name(self) -> str | None:
        """The layout topic read per batch (None: none)."""
        return layout_topic_name(self.layout_topic)

    @property
    def source_options(self) -> dict[str, str]:
        """The Kafka source's options: isolation level, then the user's ``kafka_options``."""
        from capture.kafka.security import client_settings, java_options  # noqa: PLC0415

        isolation = "read_committed" if self.read_committed else "read_uncommitted"
        security = java_options(client_settings())  # WALCAST__KAFKA__*, as walcast run's
        return {"kafka.isolation.level": isolation, **security, **self.kafka_options}

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
        names = self.check()
        layout_topic = self.layout_topic_name
        if layout_topic is not None and layout_topic not in names:
            self.report(
                f"walcast spark normalize: no layout topic {layout_topic!r} (yet): column "
                "types come from the messages (IBM needs the layouts: --layout-topic)"
            )
        totals = self.totals = BatchTotals()

        def run_batch(batch: DataFrame, batch_id: int) -> None:
            # The batch's changes are cached (normalize_frame), so the records are read
            # once, except by a parser that scans them twice.
            started = time.monotonic()
            records = batch.persist() if parser.scans_records_twice else batch
            try:
                layouts = read_layouts(
                    spark, self.bootstrap, layout_topic, timeout=self.kafka_timeout
                ).cache()
                if totals.batches == 0:
                    warn_sourceless(layouts, layout_topic, "normalize", self.report)
                result = normalize_frame(
                    records, parser, layouts, store.load(batch_id), persist=True
                )
                reasons = {str(row[0]): int(row[1]) for row in result.tally.collect()}
                written = reasons.pop(sequencing.WRITTEN, 0)
                offsets = _offsets_text(result.offsets.collect())
                first = totals.batches == 0
                totals.add(written, reasons)
                self._check_quarantine(totals, reasons, written, first=first)
                changes_sink.add_batch(batch_id, result.changes)
                # Nothing quarantined: an empty batch, without reading the changes again
                # (the sink's log needs every batch id).
                quarantine_sink.add_batch(
                    batch_id,
                    result.quarantine if reasons else local_empty(spark, QUARANTINE),
                )
                store.save(batch_id, result.state)
                result.release()
                layouts.unpersist()
            except WalcastError as exc:  # ours (a wrong format, Kafka gone): Spark wraps it
                self.failure = exc
                raise
            finally:
                if records is not batch:
                    records.unpersist()
            seconds = time.monotonic() - started
            self.report(
                f"walcast spark normalize: batch {batch_id}: {written:,} changes written, "
                f"quarantined {_reasons_text(reasons)}, "
                f"{rate_text(written + sum(reasons.values()), seconds)} rows/s; offsets {offsets}"
            )

        stream = kafka.read_stream(
            spark,
            self.bootstrap,
            self.topics,
            starting_offsets=self.starting_offsets,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            options=self.source_options,
            pattern=self.topic_pattern,
            min_partitions=(
                4 * spark.sparkContext.defaultParallelism
                if self.min_partitions is None
                else self.min_partitions
            ),
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

    def _check_quarantine(
        self, totals: BatchTotals, reasons: Mapping[str, int], written: int, *, first: bool
    ) -> None:
        """WrongFormatError when too many messages are malformed.

        Judged on this batch if it is the first, else on the whole run; the batch is then
        not written.
        """
        malformed, seen = (
            (reasons.get(ERR_MALFORMED, 0), written + sum(reasons.values()))
            if first
            else (totals.reasons.get(ERR_MALFORMED, 0), totals.rows)
        )
        if seen and malformed / seen > self.max_quarantine_ratio:
            raise WrongFormatError(
                f"{malformed:,} of {seen:,} messages of {self._source_text()} do not parse as "
                f"{self.format} (more than --max-quarantine-ratio {self.max_quarantine_ratio:g})",
                hint="check --format (and --parser-option); nothing of this batch was written",
            )

    def _source_text(self) -> str:
        if self.topic_pattern is not None:
            return f"the topics matching {self.topic_pattern!r}"
        return ", ".join(repr(t) for t in self.topics)

    def run(self, spark: SparkSession) -> None:
        """Start and wait until the query ends (with ``available_now``: all data read).

        A failure is one WalcastError: the job's own (a wrong format), or Spark's first line.
        """
        run_job(self, spark, "normalize", self._summary)

    def _summary(self, seconds: float) -> str:
        """The line :meth:`run` ends with: what the whole run did in ``seconds``."""
        totals = self.totals
        batches = "batch" if totals.batches == 1 else "batches"
        changes = "change" if totals.written == 1 else "changes"
        return (
            f"walcast spark normalize: done: {totals.batches} {batches}, {totals.written:,} "
            f"{changes} written to {self.output}, quarantined "
            f"{_reasons_text(totals.reasons)}, {rate_text(totals.rows, seconds)} rows/s "
            f"in {seconds:.1f} s"
        )


def rate_text(rows: int, seconds: float) -> str:
    """Rows per second as a batch line shows it (no decimals from 100 on)."""
    rate = rows / max(seconds, 1e-3)
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}"


OFFSETS_SHOWN = 6
"""Partitions named in a batch line; more are counted (``+N more``)."""


def _offsets_text(ranges: Sequence[Row]) -> str:
    """``topic[partition] first-last, …`` of a batch's Kafka records (sorted)."""
    if not ranges:
        return "none"
    items = sorted((r["kafka_topic"], r["kafka_partition"], r["first"], r["last"]) for r in ranges)
    text = ", ".join(f"{t}[{p}] {a}-{b}" for t, p, a, b in items[:OFFSETS_SHOWN])
    if len(items) > OFFSETS_SHOWN:
        text += f" (+{len(items) - OFFSETS_SHOWN} more partitions)"
    return text


def _reasons_text(reasons: Mapping[str, int]) -> str:
    if not any(reasons.values()):
        return "none"
    return ", ".join(f"{n:,} {reason}" for reason, n in sorted(reasons.items()) if n)

"""The ``walcast run`` loop: slot → encoders → Kafka, acknowledging only what Kafka confirmed.

Per replication session::

    poll the slot ─► for each output format: encode ─► produce (key, headers) ─┐
         ▲                                                                     │
         └── acknowledge ◄── DeliveryTracker ◄── delivery reports ◄────────────┘

Invariants:

* The slot's flushed LSN only advances to the end of the newest transaction whose
  messages, in every format, Kafka has confirmed, and every earlier one too.
* A full producer queue (``BufferError``) or a broker outage pauses reading from the
  slot; delivery reports keep being served and status updates keep flowing, so the
  walsender does not time out. Nothing is dropped (``message.timeout.ms=0``).
* A lost PostgreSQL connection is retried with exponential backoff; the server resends
  from the confirmed LSN, so changes after it may be delivered twice. Every message carries
  its commit LSN and ordinal (headers ``walcast.commit_lsn``, ``walcast.ordinal``), so
  consumers drop replays: duplicates are bounded by what was unacknowledged.
* A message Kafka rejects for good (too large, not authorized) stops the daemon with an
  error naming the table, the transaction and the fix; the slot stays before it.
* SIGTERM/SIGINT: stop reading, wait for every delivery, acknowledge, exit 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import psycopg
import structlog
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from capture import dsn as dsn_util
from capture.daemon.config import DaemonConfig, OutputConfig, topic_name
from capture.daemon.delivery import DeliveryFailedError, DeliveryTracker, TransactionDelivery
from capture.daemon.metrics import Metrics, serve
from capture.daemon.split import split_key_update
from capture.errors import ConnectionLostError, RetryPolicy, WalcastError
from capture.events import (
    ChangeEvent,
    LogicalMessageEvent,
    StreamItem,
    Table,
    TransactionBegin,
    TransactionCommit,
    pg_ts_to_datetime,
)
from capture.formats import Encoder, format_class
from capture.formats.base import EncodedMessage
from capture.formats.ibm import layout_record
from capture.logging import kafka_logger
from capture.lsn import format_lsn
from capture.replication.setup import tables_without_full_identity
from capture.source import ChangeSource, SourceConfig

log = structlog.get_logger("walcast.daemon")

HEARTBEAT_PREFIX: Final = "walcast.heartbeat"
SHUTDOWN_FLUSH_TIMEOUT: Final = 120.0
METRICS_REFRESH: Final = 5.0


class KafkaDeliveryError(WalcastError):
    """Kafka rejected a message for good; the slot stays before its transaction."""

    exit_code = 6


@dataclass(slots=True)
class _Output:
    config: OutputConfig
    encoder: Encoder
    topics: dict[tuple[str | None, str | None], str] = field(default_factory=dict)
    messages: int = 0
    """Messages produced since the metrics were last updated (kept off the hot path)."""
    bytes: int = 0

    def topic(self, message: EncodedMessage, database: str) -> str:
        key = (message.schema, message.table)
        topic = self.topics.get(key)
        if topic is None:
            template = (
                self.config.topic if message.table is not None else self.config.transaction_topic
            )
            topic = topic_name(
                template.format(
                    format=self.config.format,
                    database=database,
                    schema=message.schema or "",
                    table=message.table or "",
                )
            )
            self.topics[key] = topic
        return topic


class Daemon:
    """One ``walcast run`` process."""

    def __init__(self, config: DaemonConfig, stop: Callable[[], bool]) -> None:
        self.config = config
        self.stop = stop
        self.metrics = Metrics()
        self.tracker = DeliveryTracker()
        self.producer: Producer | None = None
        self._warned_identity = False
        self._side: psycopg.Connection[Any] | None = None
        self._last_heartbeat = 0.0
        self._last_refresh = 0.0
        self._acked = 0
        self._last_commit_ts: dict[int, int] = {}
        self._paused = False
        self._changes = 0
        self._last_table: Table | None = None
        self._published_layouts: dict[str, object] = {}
        """schema.table → version of the layout last published (a new Relation message
        with the same layout needs no new record)."""

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        """Stream until stopped; return the exit code."""
        config = self.config
        server = None
        if config.metrics_port:
            server = serve(self.metrics, config.metrics_host, config.metrics_port)
            log.info("metrics_listening", host=config.metrics_host, port=server.server_port)
        self.producer = Producer(config.producer_settings(), logger=kafka_logger())
        self._ensure_schema_topic()
        backoff = 0.5
        try:
            while not self.stop():
                try:
                    self._session()
                    backoff = 0.5
                except ConnectionLostError as exc:
                    self.metrics.reconnects.inc()
                    self.metrics.healthy = False
                    log.warning("source_lost", error=exc.one_line(), retry_in=backoff)
                    self._wait(backoff)
                    backoff = min(backoff * 2, config.reconnect_max_backoff)
                except WalcastError as exc:
                    if exc.retry is RetryPolicy.TRANSIENT:
                        log.warning("transient_error", error=exc.one_line(), retry_in=backoff)
                        self._wait(backoff)
                        backoff = min(backoff * 2, config.reconnect_max_backoff)
                        continue
                    raise
        finally:
            if server is not None:
                server.shutdown()
            if self._side is not None:
                self._side.close()
        return 0

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stop():
            self._serve_deliveries(0.1)

    def _source_config(self) -> SourceConfig:
        config = self.config
        holds = any(format_class(o.format).needs_transaction_size for o in config.outputs)
        return SourceConfig(
            dsn=config.full_dsn(),
            slot=config.slot,
            publications=config.publications,
            create_slot=config.create_slot,
            create_publication=config.create_publication,
            publish_tables=config.publish_tables,
            proto_version=config.proto_version,
            binary=config.binary,
            streaming=config.streaming,
            two_phase=config.two_phase,
            status_interval=config.status_interval,
            spill_dir=config.spill_dir,
            hold_transactions=holds,
        )

    def _session(self) -> None:
        """One replication session, until stopped or the connection is lost."""
        config = self.config
        source = ChangeSource(self._source_config(), key_resolver=self._primary_key)
        self._warn_identity()
        outputs = [
            _Output(o, format_class(o.format)(source.format_options(o.settings)))
            for o in config.outputs
        ]
        database = source.server.database
        # The new stream starts from the slot's confirmed LSN and knows no acknowledgement
        # yet: replayed transactions must be acknowledged to it again once delivered.
        self._acked = 0
        self.metrics.healthy = True
        self.metrics.state = {"status": "streaming", "slot": config.slot}
        log.info("session_started", slot=config.slot, formats=[o.format for o in config.outputs])
        try:
            while not self.stop():
                for item in source.poll(0.2):
                    self._handle(item, outputs, source, database)
                self._after_batch(source, outputs, database)
        except ConnectionLostError:
            self.tracker.abandon_open()
            source.assembler.close()
            source.stream.close(timeout=0.5)
            raise
        except BaseException:
            self.tracker.abandon_open()
            source.close()
            raise
        self._shutdown(source, outputs, database)

    def _shutdown(self, source: ChangeSource, outputs: list[_Output], database: str) -> None:
        """Graceful stop: deliver everything, acknowledge it, disconnect."""
        assert self.producer is not None
        self.tracker.abandon_open()
        for output in outputs:
            self._produce(output, output.encoder.flush(), None, source, database)
        deadline = time.monotonic() + SHUTDOWN_FLUSH_TIMEOUT
        while len(self.producer) > 0 and time.monotonic() < deadline:
            self._serve_deliveries(0.2)
            source.stream.maybe_send_status()
        self._acknowledge(source)
        self._count(outputs)
        undelivered = len(self.producer)
        source.close()
        log.info(
            "stopped",
            acked_lsn=format_lsn(self._acked),
            undelivered=undelivered,
        )
        if undelivered:
            raise KafkaDeliveryError(
                f"stopped with {undelivered} messages Kafka never confirmed; the slot stays at "
                f"{format_lsn(self._acked)} and they are sent again on the next start",
                hint="check that the Kafka brokers are reachable",
            )

    # -- the stream -----------------------------------------------------------------------------

    def _handle(
        self, item: StreamItem, outputs: list[_Output], source: ChangeSource, database: str
    ) -> None:
        tracker = self.tracker
        if type(item) is ChangeEvent:
            self._changes += 1
            if item.table is not self._last_table:
                self._publish_layout(item.table)
            txn = tracker.current
            events = split_key_update(item) if self.config.split_key_updates else (item,)
            for event in events:
                for output in outputs:
                    self._produce(output, output.encoder.change(event), txn, source, database)
            return
        if isinstance(item, TransactionBegin):
            txn = tracker.begin(item.commit_lsn, time.monotonic())
            self._last_commit_ts[item.commit_lsn] = item.commit_ts
            for output in outputs:
                self._produce(output, output.encoder.begin(item), txn, source, database)
        elif isinstance(item, TransactionCommit):
            txn = tracker.current
            for output in outputs:
                self._produce(output, output.encoder.commit(item), txn, source, database)
            tracker.close(item.end_lsn)
            self.metrics.transactions.inc()
        elif isinstance(item, LogicalMessageEvent):
            if item.prefix == HEARTBEAT_PREFIX:
                return
            for output in outputs:
                messages = output.encoder.logical_message(item)
                self._produce(output, messages, tracker.current, source, database)

    def _publish_layout(self, table: Table) -> None:
        """Publish the table's layout to the schema topic before its first change.

        Consumers of formats without column names (IBM delimited) learn layouts from
        there. Published synchronously: it is rare (once per Relation message), and the
        layout must be in Kafka before the data that needs it.
        """
        self._last_table = table
        if not self.config.schema_topic:
            return
        record = layout_record(table)
        name = table.qualified_name
        if self._published_layouts.get(name) == record.get("version"):
            return
        assert self.producer is not None
        reports: list[object] = []
        self.producer.produce(
            self.config.schema_topic,
            orjson.dumps(record),
            name.encode(),
            on_delivery=lambda err, _msg: reports.append(err),
        )
        deadline = time.monotonic() + 120
        while not reports and time.monotonic() < deadline and not self.stop():
            self.producer.poll(0.05)
        errors = [str(e) for e in reports if e is not None] or (
            [] if reports else ["not confirmed within 120 s"]
        )
        if errors:
            raise KafkaDeliveryError(
                f"cannot publish the layout of {table.qualified_name} to "
                f"{self.config.schema_topic!r}: {errors[0]}",
                hint="check the schema topic's ACLs and configuration",
            )
        self._published_layouts[name] = record.get("version")
        log.info("layout_published", table=table.qualified_name, version=record.get("version"))

    def _ensure_schema_topic(self) -> None:
        """Create the schema topic as a compacted topic if it does not exist."""
        topic = self.config.schema_topic
        if not topic:
            return
        settings = {
            k: v
            for k, v in self.config.producer_settings().items()
            if k.startswith(("bootstrap.", "security.", "sasl.", "ssl."))
        }
        admin = AdminClient(settings)
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=1, config={"cleanup.policy": "compact"})],
            request_timeout=15,
        )
        for future in futures.values():
            try:
                future.result(timeout=30)
                log.info("schema_topic_created", topic=topic)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    log.warning("schema_topic_not_created", topic=topic, error=error.str())

    def _produce(
        self,
        output: _Output,
        messages: list[EncodedMessage],
        txn: TransactionDelivery | None,
        source: ChangeSource,
        database: str,
    ) -> None:
        if not messages:
            return
        producer = self.producer
        assert producer is not None
        callback = txn.delivered if txn is not None else None
        for message in messages:
            topic = output.topic(message, database)
            headers = message.kafka_headers()
            while True:
                try:
                    producer.produce(
                        topic, message.value, message.key, on_delivery=callback, headers=headers
                    )
                    if self._paused:
                        self._paused = False
                        log.info("backpressure_resumed")
                    break
                except BufferError:
                    self._backpressure(source)
                except KafkaException as exc:
                    raise self._rejected(exc.args[0], message, topic) from None
            if txn is not None:
                txn.outstanding += 1
            output.messages += 1
            output.bytes += len(message.value)

    def _backpressure(self, source: ChangeSource) -> None:
        """The producer queue is full: serve deliveries, keep the walsender alive."""
        if not self._paused:
            self._paused = True
            self.metrics.paused.inc()
            log.warning(
                "backpressure_paused",
                in_flight=len(self.producer) if self.producer is not None else 0,
                detail="producer queue full (broker slow or down); reading from the slot paused",
            )
        self._serve_deliveries(0.5)
        self._acknowledge(source)
        source.stream.maybe_send_status()
        if self.stop():
            return

    def _rejected(
        self, error: KafkaError, message: EncodedMessage, topic: str
    ) -> KafkaDeliveryError:
        where = (
            f"table {message.schema}.{message.table}" if message.table else "a transaction message"
        )
        lsn = format_lsn(message.commit_lsn) if message.commit_lsn is not None else "?"
        hint = "fix the broker or topic configuration and restart; nothing was acknowledged past it"
        if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            hint = (
                "raise the topic's max.message.bytes and kafka.producer message.max.bytes, or "
                "make messages smaller (e.g. ibm.max_message_size); restart to resend"
            )
        return KafkaDeliveryError(
            f"Kafka rejected a {len(message.value)}-byte message for {where} (xid {message.xid}, "
            f"commit LSN {lsn}) on topic {topic!r}: {error.str()}",
            hint=hint,
        )

    def _serve_deliveries(self, timeout: float) -> None:
        if self.producer is not None:
            self.producer.poll(timeout)

    def _acknowledge(self, source: ChangeSource) -> None:
        try:
            acked = self.tracker.ackable(time.monotonic())
        except DeliveryFailedError as exc:
            txn = exc.transaction
            hint = (
                "raise the topic's max.message.bytes (and kafka.producer message.max.bytes), "
                "or make messages smaller; restart to resend"
                if txn.too_large
                else "fix the broker/topic configuration (ACLs, limits) and restart"
            )
            raise KafkaDeliveryError(
                f"Kafka rejected a message of the transaction committed at "
                f"{format_lsn(txn.commit_lsn)}: {exc}; nothing was acknowledged past it",
                hint=hint,
            ) from None
        for latency in self.tracker.latencies:
            self.metrics.delivery_latency.observe(latency)
        self.tracker.latencies.clear()
        if acked != self._acked:
            self._acked = acked
            source.acknowledge(acked)
            self.metrics.acked_lsn.set(acked)

    def _after_batch(self, source: ChangeSource, outputs: list[_Output], database: str) -> None:
        self._serve_deliveries(0)
        self._acknowledge(source)
        self._count(outputs)
        now = time.monotonic()
        interval = self.config.heartbeat_interval
        if interval and now - self._last_heartbeat >= interval:
            self._last_heartbeat = now
            self._heartbeat(source, outputs, database)
        if now - self._last_refresh >= METRICS_REFRESH:
            self._last_refresh = now
            self._refresh_metrics(source)

    def _count(self, outputs: list[_Output]) -> None:
        """Move the hot path's plain counters into the Prometheus metrics."""
        if self._changes:
            self.metrics.changes.inc(self._changes)
            self._changes = 0
        for output in outputs:
            if output.messages:
                self.metrics.messages.labels(output.config.format).inc(output.messages)
                self.metrics.bytes.labels(output.config.format).inc(output.bytes)
                output.messages = output.bytes = 0

    def _heartbeat(self, source: ChangeSource, outputs: list[_Output], database: str) -> None:
        """Emit a heartbeat: a logical message, and each format's own heartbeat record.

        The non-transactional logical message makes the slot advance on a quiet database.
        """
        side = self._side_connection()
        if side is not None:
            try:
                side.execute("SELECT pg_logical_emit_message(false, %s, '')", (HEARTBEAT_PREFIX,))
            except psycopg.Error as exc:
                log.warning("heartbeat_failed", error=str(exc).strip().splitlines()[0])
                self._drop_side()
        now_us = time.time_ns() // 1000
        for output in outputs:
            self._produce(
                output, output.encoder.heartbeat(source.stream.received_lsn, now_us), None,
                source, database,
            )  # fmt: skip

    def _refresh_metrics(self, source: ChangeSource) -> None:
        metrics = self.metrics
        stream = source.stream
        metrics.lag_bytes.set(max(stream.received_lsn - self._acked, 0))
        metrics.in_flight.set(len(self.producer) if self.producer is not None else 0)
        oldest = self.tracker.oldest_pending()
        if oldest is None:
            metrics.lag_seconds.set(0)
        else:
            ts = self._last_commit_ts.get(oldest.commit_lsn)
            if ts is not None:
                lag = time.time() - pg_ts_to_datetime(ts).timestamp()
                metrics.lag_seconds.set(max(lag, 0.0))
        self._last_commit_ts = {
            k: v
            for k, v in self._last_commit_ts.items()
            if k >= (oldest.commit_lsn if oldest else 0)
        }
        metrics.state = {
            "status": "streaming",
            "slot": self.config.slot,
            "acked_lsn": format_lsn(self._acked),
            "received_lsn": format_lsn(stream.received_lsn),
            "pending_transactions": self.tracker.pending_transactions,
        }
        side = self._side_connection()
        if side is None:
            return
        try:
            row = side.execute(
                "SELECT pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (self.config.slot,),
            ).fetchone()
        except psycopg.Error:
            self._drop_side()
            return
        if row and row[0] is not None:
            metrics.retained_wal.set(float(row[0]))

    # -- side connection (heartbeats, metrics, primary keys) ------------------------------------

    def _side_connection(self) -> psycopg.Connection[Any] | None:
        if self._side is None or self._side.closed:
            try:
                self._side = psycopg.connect(
                    self.config.full_dsn(), autocommit=True, connect_timeout=5
                )
            except psycopg.Error as exc:
                log.warning(
                    "side_connection_failed",
                    target=dsn_util.describe(self.config.dsn),
                    error=dsn_util.scrub(str(exc), self.config.full_dsn()).strip().splitlines()[-1],
                )
                self._side = None
        return self._side

    def _drop_side(self) -> None:
        if self._side is not None:
            self._side.close()
        self._side = None

    def _primary_key(self, relation_id: int, _schema: str, _table: str) -> tuple[str, ...] | None:
        side = self._side_connection()
        if side is None:
            return None
        try:
            rows = side.execute(
                "SELECT a.attname FROM pg_index i "
                "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
                (relation_id,),
            ).fetchall()
        except psycopg.Error:
            self._drop_side()
            return None
        return tuple(str(r[0]) for r in rows) or None

    def _warn_identity(self) -> None:
        if self._warned_identity:
            return
        self._warned_identity = True
        side = self._side_connection()
        if side is None:
            return
        tables: list[str] = []
        for publication in self.config.publications:
            tables += tables_without_full_identity(side, publication)
        if tables:
            log.warning(
                "replica_identity_not_full",
                tables=sorted(set(tables)),
                formats=[o.format for o in self.config.outputs],
                detail="updates carry no old values and deletes only the key for these tables; "
                "ALTER TABLE ... REPLICA IDENTITY FULL gives the complete before images these "
                "formats carry",
            )

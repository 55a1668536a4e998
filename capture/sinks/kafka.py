"""The Kafka sink: produce every output's messages, report deliveries, survive outages.

Invariants:

* Every message is produced with the unit's :meth:`~capture.position.Unit.delivered`
  as its delivery report, so the ledger passes a unit only once Kafka confirmed all of it.
* The producer never gives up on a message in the daemon (``message.timeout.ms=0``): a
  broker outage fills the queue, and a full queue (``BufferError``) pauses the pump inside
  :meth:`KafkaSink.send` while deliveries are served and ``wait_hook`` keeps the replication
  connection alive. Nothing is dropped; a stop request abandons the unit being produced.
* A message Kafka refuses for good (too large, not authorised) is a failure on its unit:
  the pump stops with :meth:`KafkaSink.refused`'s one-line error and the slot stays before it.
* Table layouts go to the compacted schema topic before the first change of the table under
  that layout, and are confirmed before the change is produced; the wait serves deliveries
  and ``wait_hook`` like any other, and has no deadline (an outage is a pause).
* A message with a null key (Debezium's records of a table without a primary key, its
  TRUNCATE records; DataWorks' transaction and heartbeat records) goes to partition
  :data:`NULL_KEY_PARTITION` of its topic, whatever the ``partitioner`` setting: the
  partitioner would send each to a random partition, and then neither would a keyless
  table keep its commit order nor would a message sent again after a crash (same
  position) land in the partition of its first copy, where consumers find replays (per
  source and partition, README). Keyed messages follow the partitioner.
* Once a source is bound (:meth:`KafkaSink.bind_source`), every message carries its identity
  in the :data:`~capture.state.identity.SOURCE_HEADER` header, and layout records are keyed
  ``<source>/<schema>.<table>`` and name it (``"source"``), so two sources sharing the
  topics never take each other's layouts (:mod:`capture.state.identity`). A sink bound to one
  source refuses another (:class:`SourceChangedError`).
* librdkafka's own log lines never reach the terminal raw, and a ``security.protocol``
  the listener does not speak is one error (:mod:`capture.kafka.client`).
* An outage (Kafka confirms nothing while messages wait, or a broker, a read of walcast's
  own topics or the transactional producer's start meets no broker) is reported by the
  sink alone, whichever request met it: one ``kafka_unreachable`` error naming the brokers
  and librdkafka's cause once it lasted ``error_after`` seconds (``kafka.connect_timeout``),
  then the same line every :data:`OUTAGE_REPORT_EVERY` seconds while it lasts;
  ``kafka_reachable`` follows when Kafka answers again. With nothing waiting, a report is
  made only after a metadata request (:meth:`KafkaSink.reachable`) confirmed that no broker
  answers, so a stale outage is never reported.
* Every librdkafka call that can block has a bound (issue 35): ``poll``/``flush`` take
  the caller's timeout (0-0.2 s in the pump's loop, 0.2 s steps in :meth:`KafkaSink.drain`
  and the back-pressure wait), ``list_topics`` :data:`PROBE_TIMEOUT` or the caller's
  (``reachable``: the daemon's ``KAFKA_PROBE``), the admin client's futures their request
  timeout plus 5 s; the exactly-once sink's transaction calls take
  :data:`~capture.sinks.kafka_eos.WAIT_STEP`. The waits made of these steps (a full queue,
  a layout's confirmation, a drain, a commit) call ``wait_hook`` between steps, which sees
  a stop (``StopRequested``); an outage inside them is reported by the sink after
  ``kafka.connect_timeout`` and turns ``/healthz`` 503 after ``daemon.unhealthy_after``.
  A stop's drain is bounded by the daemon's flush time (``SHUTDOWN_FLUSH_TIMEOUT``).
* SASL authentication failures are terminal: the next call raises :class:`KafkaSinkError`.
* So is a ``security.protocol`` the listener does not speak (:class:`ProtocolWatch`): a TLS
  client at a plaintext listener, or a plaintext client at a TLS one, fails the same way on
  every attempt, and librdkafka reports it only as a transport failure that it retries for
  ever. The next :meth:`KafkaSink.reachable`, :meth:`~KafkaSink.service` (any call that
  checks the client) raises :class:`ProtocolMismatchError` naming the setting instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, Final

import orjson
import structlog
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from capture.errors import KafkaSinkError, WalcastError
from capture.events import ChangeEvent, Table
from capture.formats.base import EncodedMessage
from capture.formats.layout import layout_record
from capture.interfaces import Output
from capture.kafka.client import (
    FATAL_CODES,
    OUTAGE_CODES,
    ClientLog,
    ProtocolMismatchError,
    ProtocolWatch,
    SourceChangedError,
    cause,
    client_logger,
    describe_brokers,
    fatal_error,
)
from capture.kafka.security import missing_acl
from capture.lsn import format_lsn
from capture.position import DeliveryCount, Unit
from capture.state.identity import SOURCE_HEADER, SourceIdentity

log = structlog.get_logger("walcast.kafka")

NULL_KEY_PARTITION: Final = 0
"""The partition of every message with a null key (module docstring)."""

LAYOUT_PARTITION: Final = 0
"""The schema topic's partition every layout record goes to (publish order = offset order)."""

_DENIED_TOPIC: Final = re.compile(r"Topic authorization failed \(topic '([^']+)'")
"""A delivery failure (as :meth:`Unit.delivered` words it) for want of a topic ACL."""

OUTAGE_REPORT_EVERY: Final = 60.0
"""Seconds between two ``kafka_unreachable`` lines of one outage."""
PROBE_TIMEOUT: Final = 1.0
"""Seconds a metadata request may take when the sink checks whether an outage is over."""

__all__ = [
    "KafkaSink",
    "KafkaSinkError",
    "ProtocolMismatchError",
    "ProtocolWatch",
    "SourceChangedError",
    "client_logger",
    "fatal_error",
]


class KafkaSink:
    """Produces to Kafka with per-unit delivery accounting (see the module docstring)."""

    def __init__(
        self,
        settings: dict[str, Any],
        *,
        schema_topic: str | None = None,
        error_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        source: SourceIdentity | None = None,
    ) -> None:
        self.settings = settings
        self.source: SourceIdentity | None = None
        """The source whose messages this sink produces (None: not bound yet)."""
        self._source_header: tuple[str, bytes] | None = None
        self.brokers = describe_brokers(settings)
        self.schema_topic = schema_topic or None
        self.error_after = error_after
        self._clock = clock
        self._fatal: KafkaError | None = None
        self._outage_since: float | None = None
        self._outage_reported = False
        self._reported_at = 0.0
        """When the outage was last reported."""
        self._last_error = ""
        """librdkafka's words for the current outage (empty: none known)."""
        self._paused = False
        self.pauses = 0
        """Times the pump paused on a full queue."""
        self.last_delivery = clock()
        """When Kafka last confirmed a message (or the sink started)."""
        self.confirmations = DeliveryCount()
        """Delivery reports of the messages :meth:`send` produced (an outage ends with one)."""
        self._confirmations_seen = 0
        self._published_layouts: dict[str, object] = {}
        self.wait_hook: Callable[[], None] = lambda: None
        self.protocol = ProtocolWatch(settings.get("security.protocol"), settings)
        """Watches the client for a ``security.protocol`` the listener does not speak."""
        self._client_log = ClientLog(self.protocol)
        self.producer = Producer(
            {**settings, "logger": self._client_log, "error_cb": self._client_error}
        )
        if source is not None:
            self.bind_source(source)

    def bind_source(self, source: SourceIdentity) -> None:
        """Produce as ``source`` from now on (the same source again is a no-op).

        Raises :class:`SourceChangedError` for another source: the DSN now reaches another
        cluster or database (a restore, a wrong failover target), whose changes must not go
        out under the old source's name, nor its positions be compared with the old ones.
        """
        if self.source is not None and self.source != source:
            raise SourceChangedError(
                f"the server now is {source.describe()}, but this walcast streamed "
                f"{self.source.describe()}; it stops rather than mix the two",
                hint="check --dsn (a multi-host DSN must list one cluster's servers); start "
                "walcast again to stream the new source",
            )
        self.source = source
        self._source_header = (SOURCE_HEADER, source.key.encode())

    # -- client errors and outages ------------------------------------------------------------

    def _client_error(self, error: KafkaError) -> None:
        """Handle librdkafka's error callback (from poll): outages, refusals of the client."""
        code = error.code()
        text = error.str()
        self.protocol.note(text)
        # "1/1 brokers are down" follows the failure that says why: keep the why.
        if code != KafkaError._ALL_BROKERS_DOWN or not self._last_error:  # noqa: SLF001
            self._last_error = text
        if code in FATAL_CODES or error.fatal():
            self._fatal = error
        elif code in OUTAGE_CODES and self._outage_since is None:
            self._outage_since = self._clock()

    def _serve(self, timeout: float, *, flush: bool = False) -> int:
        """``poll`` (or ``flush``) the producer; a fatal client error becomes one line.

        confluent-kafka raises a fatal error (an idempotence or transaction failure, being
        fenced) from ``poll``/``flush`` instead of handing it to ``error_cb``, and delivery
        reports served in that same call then fail with a ``SystemError`` chained to it (or
        the call fails with a bare ``SystemError``).
        """
        try:
            if flush:
                return int(self.producer.flush(timeout))
            return int(self.producer.poll(timeout))
        except (KafkaException, SystemError) as exc:
            error = fatal_error(exc)
            if error is not None:
                self._fatal = error
                self._check()
            raise self._client_failed(exc) from None

    def _client_failed(self, exc: BaseException) -> WalcastError:
        """The error to stop with when the Kafka client itself failed (no Kafka error)."""
        return KafkaSinkError(
            f"the Kafka client failed: {exc}",
            hint="restart walcast; nothing was acknowledged past what Kafka confirmed",
        )

    def _check(self, *, unanswered: bool = False) -> None:
        """Raise for a refused client; report an outage once it lasted ``error_after``.

        A ``security.protocol`` the listener does not speak is a refused client too
        (:class:`ProtocolMismatchError`), however long ago the line that showed it arrived.
        ``unanswered``: the caller's request just met no broker (no need to ask again
        before reporting).
        """
        if self.protocol.found is not None:
            raise self.protocol.found
        if self._fatal is not None:
            code = self._fatal.code()
            raise KafkaSinkError(
                f"Kafka at {self.brokers} refused walcast: {self._fatal.str()}",
                hint="check kafka.sasl_mechanism, kafka.sasl_username and the password, "
                "and the client's ACLs"
                if code in FATAL_CODES
                else "the producer cannot go on; restart walcast (nothing was acknowledged "
                "past what Kafka confirmed)",
            )
        in_flight = len(self.producer)
        now = self._clock()
        reports = self.confirmations.reports
        if reports != self._confirmations_seen or (in_flight == 0 and self._outage_since is None):
            if reports != self._confirmations_seen:
                self.protocol.answered()
            self._confirmations_seen = reports
            self.last_delivery = now
            self._outage_over(in_flight)
        elif in_flight and self._outage_since is None and now - self.last_delivery > 1.0:
            self._outage_since = self.last_delivery
        since = self._outage_since
        if since is None:
            return
        if self._outage_reported:
            due = now - self._reported_at >= OUTAGE_REPORT_EVERY
        else:
            due = now - since >= self.error_after
        if not due:
            return
        if in_flight == 0 and not unanswered and self._answers():  # a broker answers
            self._outage_over(0)
            return
        self._report_outage(now, since, in_flight)

    def _report_outage(self, now: float, since: float, in_flight: int) -> None:
        """One ``kafka_unreachable`` line: the first of an outage, or a reminder."""
        seconds = round(now - since)
        why = f" ({cause(self._last_error)})" if self._last_error else ""
        if self._outage_reported:
            detail = (
                f"Kafka at {self.brokers} still does not answer, for {seconds} s now{why}; "
                "walcast keeps every change and waits (this line repeats once a minute)"
            )
        else:
            detail = (
                f"Kafka at {self.brokers} has not answered for {seconds} s{why}; walcast "
                "keeps every change and waits (the slot is not advanced); check "
                "kafka.bootstrap_servers and that the brokers run (this line repeats once a "
                "minute while Kafka stays away)"
            )
        self._outage_reported = True
        self._reported_at = now
        log.error(
            "kafka_unreachable",
            brokers=self.brokers,
            seconds=seconds,
            in_flight=in_flight,
            last_error=cause(self._last_error) if self._last_error else None,
            detail=detail,
        )

    def _outage_over(self, in_flight: int) -> None:
        """Kafka answered: an outage (reported or not) is over."""
        if self._outage_reported:
            log.info("kafka_reachable", brokers=self.brokers, in_flight=in_flight)
        self._outage_since = None
        self._outage_reported = False
        self._last_error = ""

    def _answers(self) -> bool:
        """Whether a broker answers a metadata request within :data:`PROBE_TIMEOUT`."""
        try:
            self.producer.list_topics(timeout=PROBE_TIMEOUT)
        except KafkaException as exc:
            self._last_error = self._last_error or str(exc)
            return False
        self.protocol.answered()
        return True

    def note_unreachable(self, error: str) -> None:
        """Kafka failed a request other than a delivery (a read of the load's progress topic).

        The same outage as undelivered messages: it is timed from the first such failure and
        reported once, as ``kafka_unreachable``, by :meth:`_check` (the sink is the one owner
        of the outage report, whichever request met the outage). ``error`` is the outage's
        cause unless librdkafka's own words (the error callback's) are known.
        """
        self._last_error = self._last_error or error
        if self._outage_since is None:
            self._outage_since = self._clock()
        self._check(unanswered=True)

    def note_reachable(self) -> None:
        """Kafka answered a request other than a delivery: an outage with nothing in flight ends.

        The producer is served first: its queue also counts the log lines and callbacks it
        holds for the next poll, which are not messages in flight.
        """
        self._serve(0)
        if len(self.producer) == 0 and (self._outage_since is not None or self._outage_reported):
            self._outage_over(0)

    def clock(self) -> float:
        """The sink's clock (the time :attr:`last_delivery` is measured in)."""
        return self._clock()

    @property
    def in_flight(self) -> int:
        """Messages produced and not yet confirmed."""
        return len(self.producer)

    @property
    def outage_reported(self) -> bool:
        """Whether the current outage was reported (``kafka_unreachable``) already."""
        return self._outage_reported

    @property
    def last_error(self) -> str:
        """Librdkafka's cause of the current outage, as a line shows it (empty: none known)."""
        return cause(self._last_error) if self._last_error else ""

    @property
    def outage_seconds(self) -> float:
        """How long Kafka has confirmed nothing while messages wait (0 when it flows)."""
        since = self._outage_since
        return 0.0 if since is None else self._clock() - since

    # -- the sink interface ----------------------------------------------------------------------

    def open_unit(self, unit: Unit) -> None:
        """Nothing to do: each message is counted as it is produced."""

    def close_unit(self, unit: Unit) -> None:
        """Nothing to do: the unit is delivered when its last report arrives."""

    def send(self, output: Output, messages: list[EncodedMessage], unit: Unit | None) -> None:
        """Produce ``messages`` to ``output``'s topics; count them on ``unit``."""
        if not messages:
            return
        namer = output.namer
        assert namer is not None, "a Kafka output needs a topic namer"
        callback = None
        if unit is not None:
            unit.counter = self.confirmations
            callback = unit.delivered
        produce = self.producer.produce
        source = self._source_header
        table_topic = namer.topic
        for message in messages:
            kind = message.kind
            # namer.message_topic, without its call for everything but heartbeats (hot path)
            if kind == "heartbeat":
                topic = namer.message_topic(kind, message.schema, message.table)
            else:
                topic = table_topic(message.schema, message.table)
            headers = message.kafka_headers(source)
            key = message.key
            # a null key: one fixed partition (module docstring), not the partitioner's
            # random one, so a replay lands on its original
            partition = -1 if key is not None else NULL_KEY_PARTITION
            while True:
                try:
                    produce(
                        topic,
                        message.value,
                        key,
                        partition=partition,
                        on_delivery=callback,
                        headers=headers,
                    )
                    break
                except BufferError:
                    self._backpressure()
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.fatal() or error.code() == KafkaError._FATAL:  # noqa: SLF001
                        # The producer is in a fatal state (fenced, an idempotence failure):
                        # its own error reaches error_cb when it is served; that error, not
                        # this local one, is what the user needs to read.
                        self._serve(0)
                        if self._fatal is None:
                            self._fatal = error
                        self._check()
                    raise self._rejected(error, message, topic) from None
            if unit is not None:
                unit.outstanding += 1
            output.messages += 1
            output.bytes += len(message.value or b"")
        if self._paused:
            self._paused = False
            log.info("backpressure_resumed", in_flight=len(self.producer))

    def send_change(self, output: Output, event: ChangeEvent, unit: Unit | None) -> None:
        """Encode one change and produce its messages."""
        self.send(output, output.encoder.change(event), unit)

    def _backpressure(self) -> None:
        """The producer queue is full: serve deliveries and keep the source alive."""
        if not self._paused:
            self._paused = True
            self.pauses += 1
            log.warning(
                "backpressure_paused",
                in_flight=len(self.producer),
                detail="producer queue full (broker slow or down); reading from the slot paused",
            )
        self._serve(0.5)
        self._check()
        self.wait_hook()

    def publish(self, topic: str, key: bytes, value: bytes) -> None:
        """Produce a walcast record (load progress) to ``topic``; its delivery is not tracked."""
        self._produce_record(self._record_producer(), topic, value, key)

    def _produce_record(
        self,
        producer: Producer,
        topic: str,
        value: bytes,
        key: bytes,
        on_delivery: Callable[[KafkaError | None, object], None] | None = None,
        *,
        partition: int | None = None,
    ) -> None:
        """Produce one record of walcast's own, waiting for room in ``producer``'s queue.

        ``partition``: the partition to write to; None: the key's (the default partitioner).
        """
        while True:
            try:
                if partition is None:
                    producer.produce(topic, value, key, on_delivery=on_delivery)
                else:
                    producer.produce(topic, value, key, partition, on_delivery=on_delivery)
            except BufferError:
                if producer is self.producer:
                    self._backpressure()
                else:
                    producer.poll(0.2)
                    self.wait_hook()
            except KafkaException as exc:  # a fatal producer (a missing ACL): its own error
                error = exc.args[0]
                if not error.fatal() and error.code() != KafkaError._FATAL:  # noqa: SLF001
                    raise  # the caller's (a transaction's abortable state)
                if producer is self.producer:
                    self._serve(0)
                self.protocol.note(error.str())
                if self._fatal is None and error.fatal():
                    self._fatal = error
                self._check()
                raise KafkaSinkError(
                    f"Kafka at {self.brokers} did not take walcast's record on topic "
                    f"{topic!r}: {error.str()}",
                    hint="check the topic's ACLs and configuration",
                ) from None
            else:
                return

    def publish_confirmed(self, topic: str, key: bytes, value: bytes, timeout: float) -> bool:
        """Produce a walcast record and wait up to ``timeout`` s for Kafka to confirm it.

        Returns whether it was confirmed; raises :class:`KafkaSinkError` when Kafka refused it.
        """
        producer = self._record_producer()
        reports: list[KafkaError | None] = []
        deadline = self._clock() + timeout
        self._produce_record(producer, topic, value, key, lambda err, _msg: reports.append(err))
        while not reports and self._clock() < deadline:
            producer.poll(0.2)
            self._check()
            self.wait_hook()
        if reports and reports[0] is not None:
            if reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise self._denied(topic)
            raise KafkaSinkError(
                f"Kafka refused walcast's record on topic {topic!r}: {reports[0].str()}",
                hint="check the topic's ACLs and configuration",
            )
        return bool(reports)

    def _record_producer(self) -> Producer:
        """The producer of walcast's own records (outside any Kafka transaction)."""
        return self.producer

    def announce(self, table: Table) -> None:
        """Publish ``table``'s layout to the schema topic and wait for Kafka to confirm it.

        Keyed by table and version (compaction keeps every version a change message names
        in its ``walcast.layout`` header), and written to partition 0 whatever the topic's
        partition count, so that offset order is publish order for the readers
        (:mod:`pipeline.layouts`: the newest layout of a table is its highest offset).
        """
        if self.schema_topic is None:
            return
        record = layout_record(table)
        name = table.qualified_name
        version = record.get("version")
        if self._published_layouts.get(name) == version:
            return
        key = f"{name}/{version}"  # one key per version: compaction keeps each one
        if self.source is not None:
            record["source"] = self.source.key
            key = self.source.record_key(key)
        reports: list[KafkaError | None] = []
        self._produce_record(
            self.producer,
            self.schema_topic,
            orjson.dumps(record),
            key.encode(),
            lambda err, _msg: reports.append(err),
            partition=LAYOUT_PARTITION,
        )
        while not reports:
            self._serve(0.1)
            self._check()
            self.wait_hook()
        if reports[0] is not None:
            raise KafkaSinkError(
                f"cannot publish the layout of {name} to schema topic {self.schema_topic!r}: "
                f"{reports[0].str()}",
                hint="check the schema topic's ACLs and configuration (daemon.schema_topic)",
            )
        self._published_layouts[name] = version
        log.info("layout_published", table=name, version=version, topic=self.schema_topic)

    def service(self, timeout: float) -> None:
        """Serve delivery reports (and client errors)."""
        self._serve(timeout)
        self._check()

    def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` for every delivery; return how many are unconfirmed."""
        deadline = self._clock() + timeout
        while len(self.producer) > 0 and self._clock() < deadline:
            self._serve(0.2)
            self._check()
            self.wait_hook()
        return len(self.producer)

    def refused(self, unit: Unit) -> WalcastError:
        """The one-line error for a unit with a refused message."""
        denied = _DENIED_TOPIC.search(unit.failures[0]) if unit.failures else None
        if denied is not None:
            return self._denied(denied.group(1))
        hint = (
            "raise the topic's max.message.bytes (and kafka.producer message.max.bytes), or "
            "make messages smaller; restart to resend"
            if unit.too_large
            else "fix the broker or topic configuration (ACLs, limits) and restart; nothing "
            "was acknowledged past it"
        )
        return KafkaSinkError(
            f"Kafka rejected a message of the transaction (or load chunk) committed at "
            f"{format_lsn(unit.commit_lsn)}: {unit.failures[0]}; nothing was acknowledged "
            "past it",
            hint=hint,
        )

    def _rejected(self, error: KafkaError, message: EncodedMessage, topic: str) -> KafkaSinkError:
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
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return self._denied(topic)
        size = len(message.value or b"")
        return KafkaSinkError(
            f"Kafka rejected a {size}-byte message for {where} (xid {message.xid}, "
            f"commit LSN {lsn}) on topic {topic!r}: {error.str()}",
            hint=hint,
        )

    def _denied(self, topic: str) -> KafkaSinkError:
        """Kafka refused a write to ``topic`` for want of an ACL: which one.

        Kafka says "Topic authorization failed" both for a missing WRITE and, for a topic
        that does not exist yet, a missing CREATE (walcast makes topics with its first
        write): a topic the metadata lists needs WRITE, any other CREATE.
        """
        try:
            listed = topic in self.producer.list_topics(timeout=PROBE_TIMEOUT).topics
        except KafkaException:
            listed = True
        if listed:
            return missing_acl("Write", "Topic", topic, self.settings)
        return missing_acl(
            "Create",
            "Topic",
            topic,
            self.settings,
            why=" (it does not exist, and walcast makes a topic with its first write)",
        )

    def close(self) -> None:
        """Nothing to release beyond the producer (dropped with the sink)."""

    # -- topics -----------------------------------------------------------------------------------

    def ensure_compacted_topic(self, topic: str, *, timeout: float = 15.0) -> None:
        """Create ``topic`` compacted if missing (the schema and progress topics).

        Failure is a warning: the topic may exist already, or be created by an operator.
        """
        admin_settings: dict[str, Any] = {
            k: v
            for k, v in self.settings.items()
            if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client."))
        }
        admin_settings["logger"] = client_logger()
        admin = AdminClient(admin_settings)
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=1, config={"cleanup.policy": "compact"})],
            request_timeout=timeout,
        )
        for future in futures.values():
            try:
                future.result(timeout=timeout + 5)
                log.info("topic_created", topic=topic, cleanup_policy="compact")
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() in (
                    KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                ):
                    denied = missing_acl("Create", "Topic", topic, self.settings)
                    log.warning("topic_not_created", topic=topic, error=denied.message)
                elif error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    log.warning("topic_not_created", topic=topic, error=error.str())
            except Exception as exc:  # noqa: BLE001 - a timeout of the admin future
                log.warning("topic_not_created", topic=topic, error=str(exc) or "timed out")

    def reachable(self, timeout: float) -> bool:
        """Whether a broker answers a metadata request within ``timeout`` seconds.

        No answer starts the outage clock (see :meth:`note_unreachable`), from the request,
        and serves the client's queue once, so that its error callback and log lines say
        why: a ``security.protocol`` the listener does not speak raises
        :class:`ProtocolMismatchError` here rather than start a wait that cannot end. The
        lines served here are read but not logged: the caller reports the outcome (the
        daemon's ``kafka_unreachable_at_start``, a command's one line), and librdkafka
        repeats them while it retries.
        """
        started = self._clock()
        try:
            self.producer.list_topics(timeout=timeout)
        except KafkaException as exc:
            if self._outage_since is None:
                self._outage_since = started
            self._client_log.quiet = True
            try:
                self.producer.poll(0)  # the error callback names the cause (_last_error)
            finally:
                self._client_log.quiet = False
            self._last_error = self._last_error or str(exc)
            if self.protocol.found is not None:
                raise self.protocol.found from None
            return False
        self.protocol.answered()
        return True

"""Exactly-once Kafka sink (``walcast run --exactly-once``): Kafka transactions per batch.

:class:`TransactionalKafkaSink` is the :class:`~capture.sinks.kafka.KafkaSink` (same
topics, encoders, layouts, back-pressure, outage reporting) with a transactional producer.
A read_committed consumer sees every change exactly once, across ``kill -9`` at any
point, broker restarts and a second daemon on the slot.

Invariants (the design and its reasons: ``docs/adr/0001-exactly-once.md``):

* one transactional producer per source (``transactional.id`` from the source's identity);
  ``init_transactions`` runs once the replication stream holds the slot and fences any
  older instance;
* a Kafka transaction holds whole units of the stream (PostgreSQL transactions, load
  chunks, logical messages), committed at a unit boundary after :data:`COMMIT_INTERVAL`
  seconds or :data:`COMMIT_MESSAGES` messages, when the source is idle, and at a stop;
  load progress records alone go through the non-transactional producer (:meth:`publish`);
* delivery = commit: a unit is passed by the ledger only once its Kafka transaction
  committed, and each transaction ends with the offsets record of its last unit
  (:mod:`capture.state.offsets`), read back at start to skip the slot's replay;
* every wait is made of calls of at most :data:`WAIT_STEP` seconds with ``wait_hook``
  between them; a PostgreSQL transaction is never split across Kafka transactions (its
  bound is ``transaction.timeout.ms``, :data:`DEFAULT_TRANSACTION_TIMEOUT_MS`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from typing import Any, Final

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer

from capture.errors import SetupError, WalcastError
from capture.events import ChangeEvent, Table
from capture.formats.base import EncodedMessage
from capture.interfaces import Output, StopRequested
from capture.kafka.security import missing_acl
from capture.lsn import format_lsn
from capture.position import Unit
from capture.replication.slots import slot_holder, source_identity
from capture.sinks import eos_errors
from capture.sinks.kafka import KafkaSink, KafkaSinkError, client_logger, fatal_error
from capture.state.identity import SourceIdentity
from capture.state.offsets import DEFAULT_OFFSETS_TOPIC, OffsetRecord, read_offset

log = structlog.get_logger("walcast.kafka")

COMMIT_INTERVAL: Final = 0.5
"""Seconds after which the Kafka transaction is committed at the next unit boundary."""
COMMIT_MESSAGES: Final = 50_000
"""Messages after which the Kafka transaction is committed at the next unit boundary."""
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 900_000
"""``transaction.timeout.ms`` unless ``kafka.producer`` sets it: the broker's default
``transaction.max.timeout.ms`` (15 min), the largest a default broker accepts."""
ABORT_TIMEOUT: Final = 10.0
"""Seconds :meth:`TransactionalKafkaSink.abort` tries before leaving the transaction to the
next instance's ``init_transactions`` (or the broker's timeout)."""
WAIT_STEP: Final = 0.5
"""The longest single blocking call: ``wait_hook`` runs at least this often."""
CRASH_AFTER_COMMITS_ENV: Final = "WALCAST_TEST_CRASH_AFTER_COMMITS"
"""Failure injection for tests, never for users: with ``N`` set, the process ends at once
(``os._exit(CRASH_EXIT_CODE)``: nothing flushed, nothing acknowledged, as a ``kill -9``)
right after its N-th Kafka transaction commit, before the slot hears of it. This places a
crash exactly between a commit and its acknowledgement, where a kill lands only by chance."""
CRASH_EXIT_CODE: Final = 99


class TransactionalKafkaSink(KafkaSink):
    """A :class:`KafkaSink` whose messages are committed in Kafka transactions."""

    def __init__(
        self,
        settings: dict[str, Any],
        *,
        identity: Callable[[], SourceIdentity],
        offsets_topic: str = DEFAULT_OFFSETS_TOPIC,
        schema_topic: str | None = None,
        error_after: float = 30.0,
        slot_holder: Callable[[], int | None] | None = None,
        commit_interval: float = COMMIT_INTERVAL,
        commit_messages: int = COMMIT_MESSAGES,
        stop: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """A sink for the source ``identity()`` names."""
        settings = dict(settings)
        timeout_ms = int(settings.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        settings["transaction.timeout.ms"] = timeout_ms
        # A message may wait as long as its transaction may live (librdkafka requires
        # message.timeout.ms <= transaction.timeout.ms; 0, "forever", is not allowed).
        settings["message.timeout.ms"] = timeout_ms
        super().__init__(settings, schema_topic=schema_topic, error_after=error_after, clock=clock)
        self.offsets_topic = offsets_topic
        self.transaction_timeout = timeout_ms / 1000
        self.commit_interval = commit_interval
        self.commit_messages = commit_messages
        self._identity_of = identity
        """Asked once the producer is needed, unless :meth:`bind_source` named the source."""
        self._slot_holder = slot_holder
        """The pid of another process streaming the slot; checked when the producer is needed
        before this process holds the slot (None: no check)."""
        self._stop = stop
        self.generation: str | None = None
        """The slot's generation (:mod:`capture.state.identity`): offsets records carry it, and
        only a record of this generation is read back. Set before :meth:`start_session`."""
        self.committed: OffsetRecord | None = None
        """What Kafka holds for this source (read at start, then each commit's record)."""
        self.commits = 0
        crash_after = os.environ.get(CRASH_AFTER_COMMITS_ENV, "")
        self._crash_after = int(crash_after) if crash_after.isdigit() else None
        self.aborts = 0
        self._plain = self.producer
        self._discarded: Producer | None = None
        """The base class's non-transactional producer: answers ``reachable`` and metadata
        until the transactional one exists, and after :meth:`abort` dropped it."""
        self._generation = 0
        self._sessions = 0
        """Sessions started: before the first, this process does not hold the slot yet."""
        self._ready = False
        """``init_transactions`` succeeded and the offsets record was read."""
        self._offsets_topic_checked = False
        # The open Kafka transaction.
        self._in_txn = False
        self._txn_started = 0.0
        self._txn_messages = 0
        self._units: list[Unit] = []
        self._open: Unit | None = None
        """The unit whose messages are being produced (open_unit without close_unit)."""
        self._partial = False
        """A unit was abandoned mid-way inside the transaction: it must not commit."""
        self._due = False
        self._sent = False
        """Something was produced since the last :meth:`service` (the source is not idle)."""
        self._record: OffsetRecord | None = None
        """The offsets record produced into the transaction (None: not yet)."""
        self.timeline: int | None = None
        """The streaming server's timeline, written into offsets records."""
        self._record_error: KafkaError | None = None

    @classmethod
    def for_source(
        cls,
        settings: dict[str, Any],
        *,
        dsn: str,
        slot: str,
        offsets_topic: str = DEFAULT_OFFSETS_TOPIC,
        schema_topic: str | None = None,
        error_after: float = 30.0,
        stop: Callable[[], bool] = lambda: False,
    ) -> TransactionalKafkaSink:
        """The sink of ``walcast run --exactly-once`` for ``slot`` on the server ``dsn``."""
        return cls(
            settings,
            identity=functools.partial(source_identity, dsn, slot),
            slot_holder=functools.partial(slot_holder, dsn, slot),
            offsets_topic=offsets_topic or DEFAULT_OFFSETS_TOPIC,
            schema_topic=schema_topic,
            error_after=error_after,
            stop=stop,
        )

    # -- sessions -------------------------------------------------------------------------

    def start_session(self, keep_alive: Callable[[], None]) -> int | None:
        """Make the producer ready (this process now streams the slot).

        Returns the commit LSN of the last unit Kafka holds (None: nothing, or a stop was
        requested meanwhile). ``keep_alive`` keeps the new replication stream alive during
        the waits.
        """

        def hook() -> None:
            keep_alive()
            if self._stop():
                raise StopRequested

        self.wait_hook = hook
        self._sessions += 1
        try:
            self._initialise(guard=False)
        except StopRequested:
            return None
        committed = self.committed
        return committed.commit_lsn if committed is not None else None

    def abort(self, reason: str) -> None:
        """End the session's Kafka transaction, never raising (the session failed).

        Tries ``abort_transaction`` for at most :data:`ABORT_TIMEOUT` seconds (no
        ``wait_hook``: the session's source may be gone). When that does not settle it (the
        broker is away, a commit was under way, the producer is fenced), the producer is
        dropped: the next :meth:`start_session` creates one with the same
        ``transactional.id``, whose ``init_transactions`` fences this one and settles its
        transaction, and reads back what Kafka committed, exactly as after a restart.
        """
        if not self._in_txn:
            return
        self._log_abort(reason)
        if self._fatal is None and self._abort_transaction(self._clock() + ABORT_TIMEOUT):
            return
        producer = self.producer
        with contextlib.suppress(KafkaException, SystemError, RuntimeError):  # best effort
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)
        self._forget_transaction()
        self._discarded = producer  # destroyed when the next one is dropped
        self.producer = self._plain
        self._ready = False
        self._fatal = None

    def _abort_transaction(self, deadline: float) -> bool:
        """``abort_transaction`` in short calls until ``deadline``; True when it is settled."""
        while True:
            try:
                self.producer.abort_transaction(WAIT_STEP)
                break
            except KafkaException as exc:
                if not exc.args[0].retriable() or self._clock() > deadline:
                    return False
        with contextlib.suppress(KafkaException, SystemError):  # a fatal error comes back later
            self.producer.poll(0)  # the purged messages' reports
        self._forget_transaction()
        return True

    def _forget_transaction(self) -> None:
        """Drop the aborted transaction's state.

        Its units keep their commit token (never delivered: the slot stays before them),
        their purge reports are not refusals, its layouts are gone.
        """
        for unit in self._units:
            unit.failures.clear()
            unit.too_large = False
        self._reset_transaction()
        self._published_layouts.clear()

    # -- the sink interface --------------------------------------------------------------

    def open_unit(self, unit: Unit) -> None:
        """Commit first if due (a unit boundary); count the unit's commit as a message."""
        if self._open is not None:
            self._partial = True  # the previous unit was abandoned mid-way
        elif self._due and self._in_txn:
            self._commit(None)
        if not self._in_txn:
            self._begin()
        unit.outstanding += 1  # released by the commit
        self._units.append(unit)
        self._open = unit

    def close_unit(self, unit: Unit) -> None:  # noqa: ARG002 - the protocol's signature
        """The unit is complete; the transaction commits at the next boundary when due."""
        self._open = None
        if (
            self._txn_messages >= self.commit_messages
            or self._clock() - self._txn_started >= self.commit_interval
        ):
            self._due = True

    def send(self, output: Output, messages: list[EncodedMessage], unit: Unit | None) -> None:
        """Produce ``messages`` inside the open Kafka transaction (one is begun if needed)."""
        if not messages:
            return
        if not self._in_txn:
            self._begin()
        KafkaSink.send(self, output, messages, unit)
        self._txn_messages += len(messages)
        self._sent = True

    def send_change(self, output: Output, event: ChangeEvent, unit: Unit | None) -> None:
        """Encode one change and produce its messages."""
        self.send(output, output.encoder.change(event), unit)

    def _record_producer(self) -> Producer:
        """Walcast's records (load progress) go through the non-transactional producer.

        A progress record is written after the chunks it counts were committed, never with
        them, so a transaction would not make it atomic with them; outside transactions it
        needs no producer ready before this process holds the slot (the initial load's
        record is written before the slot exists), and the progress topic, which daemons
        of both modes may share, holds no transaction markers.
        """
        return self._plain

    def announce(self, table: Table) -> None:
        """Publish the table's layout inside the transaction (aborted with it, if so)."""
        if self.schema_topic is not None and not self._in_txn:
            self._begin()
        KafkaSink.announce(self, table)

    def service(self, timeout: float) -> None:
        """Serve deliveries; commit at a boundary when due, or when the source is idle."""
        KafkaSink.service(self, timeout)
        if self.producer is not self._plain:
            self._plain.poll(0)  # walcast records' reports
        if self._in_txn:
            now = self._clock()
            age = now - self._txn_started
            if self._open is None:
                if self._due or not self._sent or age >= self.commit_interval:
                    self._commit(None)
            elif age >= self.transaction_timeout:
                raise self._too_large(self._open)
        self._sent = False

    def drain(self, timeout: float) -> int:
        """Commit what is complete, or abort a transaction holding a partial unit.

        Returns the number of messages not committed (0 when the transaction committed, or
        held only what is sent again after a restart anyway), plus the walcast records
        (:meth:`publish`) Kafka has not confirmed.
        """
        deadline = self._clock() + timeout
        undelivered = self._drain_transaction(deadline)
        while len(self._plain) > 0 and self._clock() < deadline:
            self._plain.flush(WAIT_STEP)
            self.wait_hook()
        return undelivered + len(self._plain)

    def _drain_transaction(self, deadline: float) -> int:
        if not self._in_txn:
            return 0
        if self._open is not None or self._partial:
            self._log_abort("stopped inside a PostgreSQL transaction; it is sent again on restart")
            if self._abort_transaction(deadline):
                return 0
            return max(len(self.producer), 1)
        try:
            if self._commit(deadline):
                return 0
        except eos_errors.KafkaTransactionAbortedError as exc:
            self.abort(exc.one_line())
            return 1
        return max(len(self.producer), 1)

    def refused(self, unit: Unit) -> WalcastError:
        """A timed-out message aborts the transaction (retried); a refused one stops."""
        if all("timed out" in failure for failure in unit.failures):
            return eos_errors.KafkaTransactionAbortedError(
                f"Kafka did not confirm a message of the transaction committed at "
                f"{format_lsn(unit.commit_lsn)} within transaction.timeout.ms: "
                f"{unit.failures[0]}",
                hint="walcast aborts the Kafka transaction and resumes from what Kafka committed",
            )
        return KafkaSink.refused(self, unit)

    def _backpressure(self) -> None:
        """A full queue inside a transaction: as the base, plus the transaction's deadline."""
        KafkaSink._backpressure(self)  # noqa: SLF001 - our own base class
        if (
            self._in_txn
            and self._open is not None
            and self._clock() - self._txn_started >= self.transaction_timeout
        ):
            raise self._too_large(self._open)

    # -- client errors ------------------------------------------------------------------

    def _check(self, *, unanswered: bool = False) -> None:
        """As the base; being fenced by another instance gets its own line."""
        fatal = self._fatal
        if fatal is not None and fatal.code() in eos_errors.FENCED_CODES:
            raise self._fenced(fatal)
        KafkaSink._check(self, unanswered=unanswered)  # noqa: SLF001 - our own base class

    def _client_failed(self, exc: BaseException) -> WalcastError:
        """The client failed without a Kafka error: the session starts again.

        The producer is dropped and the next session starts from what Kafka committed (a
        fenced zombie then finds its slot taken).
        """
        return eos_errors.KafkaTransactionAbortedError(
            f"the Kafka client failed inside the transaction ending at {self._position()}: {exc}",
            hint="walcast aborts it and resumes from what Kafka committed",
        )

    def _generation_error(self, generation: int, error: KafkaError) -> None:
        """Client errors of the current producer only (a discarded one is fenced by design)."""
        if generation == self._generation:
            self._client_error(error)

    def _fenced(self, error: KafkaError) -> KafkaSinkError:
        return eos_errors.fenced(self.source, error)

    # -- the transaction ------------------------------------------------------------------

    def _initialise(self, *, guard: bool) -> None:
        """Create the transactional producer, fence older instances, read the offsets."""
        if self._ready:
            return
        identity = self.source
        if identity is None:
            identity = self._identity_of()
            self.bind_source(identity)
        if guard and self._slot_holder is not None:
            pid = self._slot_holder()
            if pid is not None:
                raise SetupError(
                    f"replication slot {identity.slot!r} is in use by another process "
                    f"(PID {pid}); exactly-once mode will not fence the walcast that streams it",
                    hint="stop the other consumer, or use a different --slot",
                )
        if not self._offsets_topic_checked:
            self.ensure_compacted_topic(self.offsets_topic)
            self._offsets_topic_checked = True
        self._generation += 1
        self._fatal = None
        producer = Producer(
            {
                **self.settings,
                "transactional.id": identity.transactional_id,
                "logger": client_logger(),
                "error_cb": functools.partial(self._generation_error, self._generation),
            }
        )
        self.producer = producer
        started = self._clock()
        while True:
            try:
                producer.init_transactions(WAIT_STEP)
                break
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable():
                    raise self._init_failed(error) from None
            if self._outage_since is None:  # no broker answered yet: an outage
                self._outage_since = started
            self._check(unanswered=True)  # reported as any other outage
            self.wait_hook()
        self.note_reachable()
        self.committed = read_offset(
            self.settings,
            self.offsets_topic,
            identity.key,
            generation=self.generation,
            tick=self.wait_hook,
            unreachable=self.note_unreachable,
        )
        self._ready = True
        committed = self.committed
        log.info(
            "exactly_once_ready",
            transactional_id=identity.transactional_id,
            offsets_topic=self.offsets_topic,
            committed_lsn=format_lsn(committed.commit_lsn) if committed is not None else None,
            seconds=round(self._clock() - started, 2),
        )

    def _init_failed(self, error: KafkaError) -> KafkaSinkError:
        if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            tid = self.source.transactional_id if self.source is not None else "walcast-"
            return missing_acl("Write", "TransactionalId", tid, self.settings, also="Describe")
        timeout_ms = int(self.transaction_timeout * 1000)
        return eos_errors.init_failed(self.source, self.brokers, error, timeout_ms)

    def _begin(self) -> None:
        if not self._ready:
            try:
                self._initialise(guard=self._sessions == 0)
            except StopRequested:
                raise eos_errors.KafkaTransactionAbortedError(
                    "stopped while waiting for Kafka's transaction coordinator"
                ) from None
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            if exc.args[0].fatal():
                self._fatal = exc.args[0]
            self._check()
            raise eos_errors.KafkaTransactionAbortedError(
                f"Kafka transaction could not begin: {exc.args[0].str()}"
            ) from None
        self._in_txn = True
        self._txn_started = self._clock()
        self._txn_messages = 0
        self._due = False

    def _reset_transaction(self) -> None:
        self._in_txn = False
        self._units = []
        self._open = None
        self._partial = False
        self._due = False
        self._txn_messages = 0
        self._record = None
        self._record_error = None

    def _commit(self, deadline: float | None) -> bool:
        """Commit the open transaction; False when ``deadline`` passed first (still open).

        Raises :class:`KafkaTransactionAbortedError` (retried) when the transaction cannot
        commit, :class:`KafkaSinkError` when Kafka refused a message or fenced us.
        """
        if self._partial:
            raise eos_errors.KafkaTransactionAbortedError(
                "a PostgreSQL transaction was abandoned inside the Kafka transaction"
            )
        self._failed_unit()
        producer = self.producer
        identity = self.source
        if self._record is None and self._units and identity is not None:
            record = OffsetRecord.closing(
                identity, self._units, generation=self.generation, timeline=self.timeline
            )
            self._produce_record(
                producer,
                self.offsets_topic,
                record.to_json(),
                identity.key.encode(),
                self._record_delivered,
            )
            self._record = record
        while len(producer) > 0:
            self._serve(WAIT_STEP, flush=True)
            self._check()
            self._failed_unit()
            if deadline is not None and self._clock() > deadline:
                return False
            self.wait_hook()
        while True:
            try:
                producer.commit_transaction(WAIT_STEP)
                break
            except (KafkaException, SystemError) as exc:
                fatal = fatal_error(exc)
                if fatal is not None:
                    self._fatal = fatal
                    self._check()
                if not isinstance(exc, KafkaException):
                    raise self._client_failed(exc) from None
                error = exc.args[0]
                if not error.retriable():
                    self._failed_unit()
                    if self._record_error is not None:
                        raise self._record_refused(self._record_error) from None
                    raise eos_errors.KafkaTransactionAbortedError(
                        f"Kafka could not commit the transaction ending at "
                        f"{self._position()}: {error.str()}",
                        hint="walcast aborts it and resumes from what Kafka committed",
                    ) from None
            self._check()
            if deadline is not None and self._clock() > deadline:
                return False
            self.wait_hook()
        for unit in self._units:
            unit.outstanding -= 1
        if self._record is not None:
            self.committed = self._record
        self.commits += 1
        if self._crash_after is not None and self.commits >= self._crash_after:
            os._exit(CRASH_EXIT_CODE)  # failure injection: see CRASH_AFTER_COMMITS_ENV
        self.last_delivery = self._clock()
        self._reset_transaction()
        return True

    def _record_delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is not None and not error.retriable():
            self._record_error = error

    def _record_refused(self, error: KafkaError) -> KafkaSinkError:
        return eos_errors.record_refused(self.offsets_topic, error)

    def _failed_unit(self) -> None:
        for unit in self._units:
            if unit.failures:
                raise self.refused(unit)

    def _position(self) -> str:
        return format_lsn(self._units[-1].commit_lsn) if self._units else "(no unit)"

    def _too_large(self, unit: Unit) -> WalcastError:
        away = self.outage_seconds > 0
        return eos_errors.too_large(
            unit.commit_lsn, self.brokers, self.transaction_timeout, kafka_away=away
        )

    def _log_abort(self, reason: str) -> None:
        self.aborts += 1
        log.warning(
            "kafka_transaction_aborted",
            reason=reason,
            units=len(self._units),
            messages=self._txn_messages,
            committed_lsn=(
                format_lsn(self.committed.commit_lsn) if self.committed is not None else None
            ),
            detail="nothing of it is visible at read_committed; the slot was not confirmed "
            "past it, and it is sent again",
        )

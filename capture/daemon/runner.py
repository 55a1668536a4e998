"""``walcast run``: the daemon. A front door of the pump, plus what only a daemon does.

The pump (:mod:`capture.pump`) moves the slot's changes through every output format into the
:class:`~capture.sinks.kafka.KafkaSink`; its :class:`~capture.position.PositionLedger`, kept
across reconnects, decides what the slot may confirm. This module adds:

* the session loop: a lost PostgreSQL connection (:class:`~capture.errors.ConnectionLostError`
  and every other ``TRANSIENT`` error) is retried with exponential backoff, while Kafka
  deliveries keep being served; the server resends from the confirmed LSN, so changes after
  it may be delivered twice, each carrying its commit LSN and ordinal (detectable replays).
  ``TERMINAL`` errors (bad config, authentication, a refused message) stop the daemon;
* a daemon that has never reached PostgreSQL (issue 25.7): a wrong host or port is far
  more likely than an outage at the very start, so it does not retry for ever. Decisions:
  the first failed attempt is one ``source_lost`` warning saying how long walcast keeps
  trying, later ones are debug events; once ``source.connect_timeout`` seconds (default 30)
  passed since the start without one successful connection, the daemon stops with one
  line (:class:`NeverConnectedError`: the target without its password, libpq's cause, the
  setting; exit code 4, a connection error's). ``0`` retries for ever, as libpq's
  ``connect_timeout=0`` waits for ever (orchestrators that start walcast before the
  database). A refusal (a wrong password, pg_hba.conf) is terminal at once, as always. Once
  one connection succeeded, every loss is retried for as long as the daemon runs. An
  attempt takes at most libpq's own connect timeout (10 s), so the stop comes at most that
  long after ``connect_timeout``;
* every wait says so at once (issue 38.3): the first session logs ``source_connecting``
  (the server, without its password) before its first attempt, whose failure is a
  ``source_lost`` warning; while Kafka does not answer at the start, ``kafka_waiting``
  names the brokers and librdkafka's cause after the first probe (half a second), then once
  a minute until the sink's own ``kafka_unreachable`` (after ``kafka.connect_timeout``)
  takes over, also once a minute. A daemon that has not reached PostgreSQL repeats its
  ``source_lost`` warning once a minute too (debug events between);
* preconditions first (issue 38.4): each session checks everything that can fail on the
  PostgreSQL side (:mod:`capture.daemon.preconditions`), then waits for Kafka, and only
  then writes a slot generation or a load record and creates the slot or publication: a
  start that fails leaves nothing behind;
* Kafka at the start (issue 25.8): each session first reaches PostgreSQL (so a wrong DSN is
  found while Kafka is down too), then waits until a broker answers
  (:meth:`Daemon._await_kafka`: one metadata request a second through the sink's producer,
  no other client, no replication connection open meanwhile), and only then reads
  walcast's state topics and opens the stream. The sink reports the outage (one
  ``kafka_unreachable`` line after ``kafka.connect_timeout``, then one a minute); reads of
  the state topics wait for Kafka with one consumer rather than fail and restart the
  session. The compacted state topics are created once Kafka first answers;
* a reconnect after a network cut may find the slot still held by this daemon's own
  previous walsender: :mod:`capture.daemon.walsenders` ends it (only when provably its own);
  a promotion (a failover) is checked against the timelines (:mod:`capture.daemon.timelines`);
* heartbeats: a non-transactional logical message every ``heartbeat_interval`` (the slot
  advances on a quiet database) and each format's own heartbeat record;
* side work never blocks the stream (issue 35): the heartbeat's logical message, the lag
  and retained-WAL samples run in a thread of their own (:mod:`capture.daemon.sidework`);
  every side query, there or in a session's set-up (catalog, walsender bookkeeping), is
  bounded by ``daemon.side_query_timeout`` (:mod:`capture.replication.side`): a stuck one is
  abandoned with one warning event and its connection reopened;
* metrics and health (:mod:`capture.daemon.health`, served by :mod:`capture.daemon.metrics`):
  ``/healthz`` says degraded once nothing moved for ``unhealthy_after`` seconds while work
  waits (Kafka confirmed nothing while messages wait, or the server has WAL the pump has not
  received), and while a lost session is being retried;
* start-up checks: topic names of every published table, rendered and checked for
  collisions before anything is produced.

SIGTERM/SIGINT: stop reading, wait up to :data:`SHUTDOWN_FLUSH_TIMEOUT` for every delivery,
acknowledge, exit 0. Messages still unconfirmed then are not lost: the slot stays before
them and the next start sends them again. Every wait of the daemon's thread is bounded
(side queries, connection attempts, the stream's receive timeout, Kafka's waits, which
see a stop), so a stop is seen within seconds; should one still not end,
:data:`STOP_DEADLINE` seconds after the request the process ends at once with one
``stop_forced`` error line and exit code :data:`FORCED_EXIT` (nothing is lost either: the
slot was only acknowledged for what Kafka confirmed).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

import structlog

from capture.assembly import LoadPlan, OutputPlan, connect_source, replication_pipeline
from capture.config.model import DaemonConfig
from capture.daemon.health import Health, received_lsn
from capture.daemon.metrics import Metrics, serve
from capture.daemon.preconditions import check_source
from capture.daemon.sidework import SideWork
from capture.daemon.timelines import TimelineWatch
from capture.daemon.walsenders import OwnWalsenders
from capture.dsn import describe as dsn_describe
from capture.errors import (
    ConfigError,
    ConnectionLostError,
    RetryPolicy,
    SlotInUseError,
    WalcastError,
)
from capture.load_mode import MIN_SERVER_FOR_LOADS, SnapshotMode
from capture.lsn import format_lsn
from capture.position import PositionLedger
from capture.pump import Output, Pump, Source, needs_transaction_sizes
from capture.replication import catalog, slots
from capture.replication.connect import connect
from capture.replication.side import SideConnection
from capture.sinks.kafka import KafkaSink
from capture.sinks.kafka_eos import TransactionalKafkaSink  # exactly-once
from capture.skip_committed import SkipCommitted  # exactly-once
from capture.snapshot.initial import record_initial_load, resolve_mode
from capture.snapshot.loading_source import LoadProgress, LoadSettings
from capture.source import ReplicationSource
from capture.state.identity import SourceIdentity
from capture.state.progress import KafkaProgress, ProgressUnavailableError

log = structlog.get_logger("walcast.daemon")

SHUTDOWN_FLUSH_TIMEOUT: Final = 60.0
STOP_DEADLINE: Final = SHUTDOWN_FLUSH_TIMEOUT + 30.0
"""Seconds after SIGTERM/SIGINT by which the process has ended, whatever it waits for: the
flush time, plus time for the load's records and the connections to close."""
FORCED_EXIT: Final = 1
"""Exit code of a stop that :data:`STOP_DEADLINE` had to force."""
OUTAGE_SHUTDOWN_TIMEOUT: Final = 5.0
"""How long a stop waits for deliveries while Kafka is known to be unreachable."""
METRICS_REFRESH: Final = 5.0
MESSAGE_ENVELOPE_BYTES: Final = 1024
"""What a Kafka message carries besides its value (key, headers, record overhead)."""
DEFAULT_MESSAGE_MAX_BYTES: Final = 1_000_000
"""librdkafka's default ``message.max.bytes``."""
PROGRESS_RECORD_TIMEOUT: Final = 60.0
"""How long the start waits for Kafka to confirm that an initial load was recorded."""
KAFKA_PROBE: Final = 1.0
"""Seconds one metadata request may take while the start waits for Kafka."""
FIRST_KAFKA_PROBE: Final = 0.5
"""The first request's: a start that waits for Kafka says so within a second."""
WAIT_REPORT_EVERY: Final = 60.0
"""Seconds between two lines of one wait (for Kafka, or for PostgreSQL never reached)."""


class NeverConnectedError(WalcastError):
    """``walcast run`` did not reach PostgreSQL within ``source.connect_timeout`` of its start."""

    exit_code = ConnectionLostError.exit_code


class Daemon:
    """One ``walcast run`` process."""

    def __init__(self, config: DaemonConfig, stop: Callable[[], bool]) -> None:
        self.config = config
        self.stop = stop
        self.metrics = Metrics()
        self.ledger = PositionLedger()
        self.side = SideConnection(config.full_dsn(), timeout=config.side_query_timeout)
        self.sink: KafkaSink | None = None
        self.health = Health(self, config, self.side)
        self.metrics.probe = self.health.probe
        self.side_work = SideWork(
            self.side,
            heartbeat_interval=config.heartbeat_interval,
            sample=self.health.sample,
            sample_interval=max(min(METRICS_REFRESH, config.unhealthy_after / 4), 0.5),
        )
        self._claimed: dict[str, tuple[str, str, str | None, str | None]] = {}
        self._walsenders = OwnWalsenders(self.side, config.source.slot)
        self._timelines = TimelineWatch(config.source.slot)
        self._warned_identity = False
        self._last_heartbeat = 0.0
        self._last_refresh = 0.0
        self._stop_watch = threading.Thread(
            target=self._watch_stop, name="walcast-stop-watch", daemon=True
        )
        self._ended = threading.Event()
        """Set when :meth:`run` returns or raises: the stop watch has nothing left to do."""
        self._load_mode: SnapshotMode | None = None
        self._reached_postgres = False
        """A connection to PostgreSQL succeeded once in this process."""
        self._failed_starts = 0
        """Sessions that failed before PostgreSQL was reached once."""
        self._said_source_lost = 0.0
        """When the last ``source_lost`` warning of a never-reached PostgreSQL was logged."""
        self._topics_checked = False
        self.finished = False
        """``initial-only``: the load is done and delivered; the daemon exits."""

    # -- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        """Stream until stopped; return the exit code."""
        config = self.config
        server = None
        self._stop_watch.start()
        if config.metrics_port:
            try:
                server = serve(self.metrics, config.metrics_host, config.metrics_port)
            except OSError as exc:
                raise ConfigError(
                    f"daemon.metrics_port: cannot serve metrics on "
                    f"{config.metrics_host}:{config.metrics_port}: {exc.strerror}",
                    hint="another process (a second walcast?) uses the port; pick another "
                    "with --metrics-port, or 0 to disable metrics",
                ) from None
            log.info("metrics_listening", host=config.metrics_host, port=server.server_port)
        settings = config.producer_settings()
        error_after = config.kafka_connect_timeout
        if config.exactly_once:  # -- exactly-once (capture.sinks.kafka_eos)
            self.sink = TransactionalKafkaSink.for_source(
                settings,
                dsn=config.full_dsn(),
                slot=config.source.slot,
                offsets_topic=config.offsets_topic,
                schema_topic=config.schema_topic,
                error_after=error_after,
                stop=self.stop,
            )
        else:
            self.sink = KafkaSink(
                settings, schema_topic=config.schema_topic, error_after=error_after
            )
        started = time.monotonic()
        backoff = 0.5
        try:
            while not self.stop() and not self.finished:
                try:
                    self._session()
                    backoff = 0.5
                except WalcastError as exc:
                    if exc.retry is not RetryPolicy.TRANSIENT:
                        raise
                    wait = self._retry_in(exc, backoff, started)
                    backoff = min(backoff * 2, config.reconnect_max_backoff)
                    self._wait(wait)
        finally:
            self._ended.set()
            self.side_work.close()
            if server is not None:
                server.shutdown()
            self.side.close()
        return 0

    def _watch_stop(self) -> None:
        """End the process :data:`STOP_DEADLINE` seconds after a stop request.

        Runs in a thread of its own, so a wait of the daemon's thread cannot hold it; see
        the module docstring. Does nothing once :meth:`run` has ended (an embedding
        process lives on).
        """
        while not self.stop():
            if self._ended.wait(0.2):
                return
        if self._ended.wait(STOP_DEADLINE):
            return
        log.error(
            "stop_forced",
            error=f"walcast did not stop within {STOP_DEADLINE:g} s of the request; it ends "
            "now, the slot stays at the last position Kafka confirmed and the next start "
            "resumes there",
        )
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(FORCED_EXIT)

    def _retry_in(self, exc: WalcastError, backoff: float, started: float) -> float:
        """Seconds to wait before the next session after ``exc`` (a transient error).

        Raises :class:`NeverConnectedError` when PostgreSQL was never reached and
        ``source.connect_timeout`` is over (see the module docstring).
        """
        config = self.config
        lost = isinstance(exc, ConnectionLostError)
        if lost:
            self.metrics.reconnects.inc()
        if isinstance(exc, ProgressUnavailableError):
            self._kafka_down(exc.one_line())
        self.metrics.healthy = False
        self.metrics.state = {
            "status": "reconnecting",
            "slot": config.source.slot,
            "detail": f"the session ended and is retried: {exc.one_line()}",
        }
        limit = config.connect_timeout
        if self._reached_postgres or not limit:
            event = "source_lost" if lost else "retrying"
            log.warning(event, error=exc.one_line(), retry_in=backoff)
            return backoff
        elapsed = time.monotonic() - started
        if elapsed >= limit:
            raise self._never_connected(exc, elapsed) from None
        wait = min(backoff, limit - elapsed)
        self._failed_starts += 1
        now = time.monotonic()
        if self._failed_starts == 1 or now - self._said_source_lost >= WAIT_REPORT_EVERY:
            self._said_source_lost = now  # a warning, then debug events, a warning a minute
            log.warning(
                "source_lost",
                error=exc.one_line(),
                retry_in=wait,
                detail=f"walcast has not reached PostgreSQL yet; it keeps trying for "
                f"{limit:g} s ({config.mention('source.connect_timeout')}), then stops",
            )
        else:
            log.debug("retrying", error=exc.one_line(), retry_in=wait)
        return wait

    def _never_connected(self, exc: WalcastError, elapsed: float) -> NeverConnectedError:
        config = self.config
        limit = config.connect_timeout
        if "source.connect_timeout" in config.origins:
            setting = f"{config.mention('source.connect_timeout')}: {limit:g} s"
        else:
            setting = f"source.connect_timeout, default {limit:g} s"
        return NeverConnectedError(
            f"{exc.message}; walcast gave up after {elapsed:.0f} s without reaching "
            f"PostgreSQL once ({setting})",
            hint=f"check {config.mention('source.dsn')} (host, port, dbname) and that the "
            "server runs; to keep trying for ever (a database that starts after walcast), "
            "set source.connect_timeout = 0 (--connect-timeout 0)",
        )

    def _kafka_down(self, error: str) -> None:
        """Kafka did not answer before a session could start: the sink times and reports it."""
        assert self.sink is not None
        self.sink.note_unreachable(error)
        down = self.sink.outage_seconds
        if down >= self.config.unhealthy_after:
            self.metrics.healthy = False
            self.metrics.state = {
                "status": "degraded",
                "slot": self.config.source.slot,
                "detail": f"Kafka at {self.sink.brokers} has not answered for {round(down)} s",
            }

    def _await_kafka(self) -> bool:
        """Wait until a Kafka broker answers; False when a stop was requested first.

        One metadata request every :data:`KAFKA_PROBE` seconds through the sink's own
        producer (no other client is made while Kafka is away); the sink reports the outage
        on its schedule. The compacted state topics are created the first time Kafka answers.
        """
        sink = self.sink
        assert sink is not None
        probe, said = FIRST_KAFKA_PROBE, None
        while not sink.reachable(probe):
            probe = KAFKA_PROBE
            if self.stop():
                return False
            now = time.monotonic()
            if not sink.outage_reported and (said is None or now - said >= WAIT_REPORT_EVERY):
                said = now  # then the sink's kafka_unreachable, once a minute, takes over
                why = f" ({sink.last_error})" if sink.last_error else ""
                log.warning(
                    "kafka_waiting",
                    brokers=sink.brokers,
                    last_error=sink.last_error or None,
                    detail=f"waiting for Kafka at {sink.brokers}{why}: walcast reads nothing "
                    "from the slot until a broker answers; check kafka.bootstrap_servers and "
                    "that the brokers run (this line repeats once a minute)",
                )
            self._kafka_down("no broker answered a metadata request")
        sink.note_reachable()
        if not self._topics_checked:
            self._topics_checked = True
            for topic in (self.config.schema_topic, self.config.snapshot_topic):
                if topic:
                    sink.ensure_compacted_topic(topic)
        return True

    def _wait(self, seconds: float) -> None:
        """Back off between sessions while Kafka deliveries keep being served."""
        assert self.sink is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stop():
            self.sink.service(0.1)

    def _session(self) -> None:
        """One replication session, until stopped or the connection is lost."""
        config = self.config
        sink = self.sink
        assert sink is not None
        identity, slot_found, version = self._identify()
        # Everything that can fail is checked before anything is written (issue 38.4).
        check_source(
            config.source_config(hold_transactions=False),
            loading=version >= MIN_SERVER_FOR_LOADS
            and (
                config.snapshot in (SnapshotMode.INITIAL, SnapshotMode.INITIAL_ONLY)
                or (config.snapshot is SnapshotMode.AUTO and not slot_found)
            ),
        )
        if not self._await_kafka():
            return
        sink.bind_source(identity)
        progress, settings = self._load_plan(sink, identity, slot_found=slot_found, version=version)
        load = None
        if settings is not None:  # the records are read before the stream starts
            load = LoadPlan(settings, progress, progress.load(), self._load_progress)
        if isinstance(sink, TransactionalKafkaSink):  # exactly-once: offsets of this slot's life
            sink.generation = progress.generation
        formats = [o.format for o in config.outputs]
        try:
            replication = connect_source(
                config.source_config(hold_transactions=needs_transaction_sizes(formats)),
                formats,
                self.side,
                load=bool(load),
            )
        except SlotInUseError as exc:
            if not self._walsenders.end_if_ours(exc.pid, self._wait):
                raise
            raise ConnectionLostError(
                f"slot {config.source.slot!r} was still held by this walcast's previous connection "
                f"(walsender PID {exc.pid}, cut off from it); walcast ended it",
                hint="walcast resumes from the slot's confirmed position",
            ) from None
        self._walsenders.remember(replication.stream.backend_pid)
        self._timelines.check(
            replication.stream,
            self.ledger.highest_commit_lsn,
            exactly_once=isinstance(sink, TransactionalKafkaSink),
        )
        if isinstance(sink, TransactionalKafkaSink):  # a fresh ledger: the last session's
            self.ledger = PositionLedger()  # uncommitted units were aborted
        limit = int(sink.settings.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
        pipeline = replication_pipeline(
            replication,
            [
                OutputPlan(o.format, o.settings, o.topic, o.transaction_topic)
                for o in config.outputs
            ],
            sink,
            self.ledger,
            load=load,
            stop=self.stop,
            max_message_bytes=limit - MESSAGE_ENVELOPE_BYTES,
            claimed=self._claimed,
            feed=lambda source: self._exactly_once(source, replication),
            split_key_updates=config.split_key_updates,
        )
        pump = pipeline.pump
        try:
            self._check_tables(pipeline.outputs)
            self.metrics.healthy = True
            self.metrics.state = {"status": "streaming", "slot": config.source.slot}
            sink.note_reachable()
            log.info("session_started", slot=config.source.slot, formats=formats)
            self.side_work.start()
            pump.run(self.stop, after_batch=lambda: self._after_batch(pump))
        except ConnectionLostError as exc:
            self.ledger.abandon_open()
            if isinstance(sink, TransactionalKafkaSink):  # exactly-once
                sink.abort(exc.one_line())
            if pipeline.loading is not None:
                pipeline.loading.close_readers()
            replication.assembler.close()
            replication.stream.close(timeout=0.5)
            raise
        except BaseException as exc:
            self.ledger.abandon_open()
            if isinstance(sink, TransactionalKafkaSink):  # exactly-once
                sink.abort(exc.one_line() if isinstance(exc, WalcastError) else repr(exc))
            pipeline.close()
            raise
        self.finished = pipeline.source.finished
        self._shutdown(pump, pipeline.source)

    def _exactly_once(self, source: Source, replication: ReplicationSource) -> Source:
        """``source``, with exactly-once's replay skipping around it.

        Now that the slot is ours: fence older producers, read what Kafka holds, skip the
        slot's replay of it. At-least-once: ``source`` as it is.
        """
        sink = self.sink
        if not isinstance(sink, TransactionalKafkaSink):
            return source
        sink.timeline = replication.stream.timeline
        last = sink.start_session(replication.keep_alive)
        bound = self._timelines.skip_bound(replication.stream, sink.committed, last)
        return SkipCommitted(source, bound)

    def _identify(self) -> tuple[SourceIdentity, bool, int]:
        """Who the source is (``IDENTIFY_SYSTEM``), whether its slot exists, the server version."""
        config = self.config
        if not self._reached_postgres and not self._failed_starts:
            limit = config.connect_timeout
            log.info(
                "source_connecting",
                target=dsn_describe(config.full_dsn()),
                detail=f"connecting to PostgreSQL at {dsn_describe(config.full_dsn())}"
                + (f" (walcast keeps trying for {limit:g} s)" if limit else ""),
            )
        with connect(config.full_dsn()) as conn:
            self._reached_postgres = True
            version = conn.info.server_version
            found = slots.find_slot(conn, config.source.slot) is not None
        return slots.source_identity(config.full_dsn(), config.source.slot), found, version

    def _load_plan(
        self, sink: KafkaSink, identity: SourceIdentity, *, slot_found: bool, version: int
    ) -> tuple[KafkaProgress, LoadSettings | None]:
        """Where the source's state is kept, its generation, and the load settings.

        When this session creates the slot, a new generation is written and confirmed first
        (:mod:`capture.state.progress`), then the initial load (``auto``: initial when
        the slot is created now), also confirmed: the slot never exists without them.
        None settings: the server cannot load (PostgreSQL 13).
        """
        config = self.config
        topic = config.snapshot_topic
        progress = KafkaProgress(
            {
                k: v
                for k, v in sink.settings.items()
                if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client."))
            },
            topic,
            identity,
            sink.publish,
            stop=self.stop,
            publish_confirmed=sink.publish_confirmed,
            unreachable=sink.note_unreachable,
        )
        creating = not slot_found and config.source.create_slot
        if creating:
            if not progress.start_generation(PROGRESS_RECORD_TIMEOUT):
                raise ConnectionLostError(
                    f"Kafka at {sink.brokers} did not confirm the new slot's generation on "
                    f"topic {topic!r}",
                    hint="walcast retries; the slot is created once Kafka confirms it",
                )
        else:
            progress.read_generation()
        mode = resolve_mode(config.snapshot, creating_slot=creating, server_version=version)
        if version < MIN_SERVER_FOR_LOADS:
            if creating and config.snapshot is SnapshotMode.AUTO:
                log.warning(
                    "initial_load_unavailable",
                    slot=config.source.slot,
                    detail="loading existing rows needs PostgreSQL 14 or newer; walcast "
                    "streams the changes made from now on only",
                )
            return progress, None
        if self._load_mode is None or mode is not SnapshotMode.NEVER:
            self._load_mode = mode
        if (
            mode is not SnapshotMode.NEVER
            and record_initial_load(progress)
            and sink.drain(PROGRESS_RECORD_TIMEOUT)
        ):
            raise ConnectionLostError(
                f"Kafka at {sink.brokers} did not confirm the initial load's record "
                f"on topic {topic!r}",
                hint="walcast retries; the slot is created once Kafka confirms it",
            )
        settings = LoadSettings(
            self._load_mode,
            config.snapshot_workers,
            config.snapshot_chunk_rows,
        )
        return progress, settings

    def _load_progress(self, progress: LoadProgress) -> None:
        """Load progress: metrics, and an event per table every few seconds."""
        self.metrics.snapshot_rows.labels(progress.table).set(progress.rows)
        self.metrics.snapshot_rows_estimated.labels(progress.table).set(progress.estimated_rows)
        log.info(
            "snapshot_progress",
            table=progress.table,
            rows=progress.rows,
            estimated_rows=progress.estimated_rows,
            rows_per_second=round(progress.rows_per_second),
            done=progress.done,
            detail=progress.describe(),
        )

    def _shutdown(self, pump: Pump, source: Source) -> None:
        """Graceful stop: deliver everything, acknowledge it, disconnect."""
        self.metrics.state = {"status": "stopping", "slot": self.config.source.slot}
        assert self.sink is not None
        timeout = OUTAGE_SHUTDOWN_TIMEOUT if self.sink.outage_seconds else SHUTDOWN_FLUSH_TIMEOUT
        undelivered = pump.finish(timeout)
        self.health.count(pump)
        source.close()
        log.info("stopped", acked_lsn=format_lsn(pump.acked_lsn), undelivered=undelivered)
        if undelivered:
            assert self.sink is not None
            log.warning(
                "stopped_with_undelivered",
                undelivered=undelivered,
                brokers=self.sink.brokers,
                detail=f"Kafka confirmed not all messages within {timeout:.0f} s; the slot "
                f"stays at {format_lsn(pump.acked_lsn)} and they are sent again on the next "
                "start",
            )

    # -- start-up checks ---------------------------------------------------------------------

    def _check_tables(self, outputs: list[Output]) -> None:
        """Warn about tables without full before images; refuse colliding topic names."""
        tables = self.side.run(
            lambda conn: catalog.publication_tables(conn, self.config.source.publications)
        )
        if tables is None:
            return
        for output in outputs:
            assert output.namer is not None
            output.namer.check([(t.schema, t.name) for t in tables])
        if self._warned_identity:
            return
        self._warned_identity = True
        refused = self.side.run(
            lambda conn: catalog.refused_writes(conn, self.config.source.publications)
        )
        if refused:
            log.warning(
                "publication_refuses_writes",
                tables=[f"{table} ({why})" for table, _, why in refused],
                publications=sorted({p for _, p, _ in refused}),
                detail="PostgreSQL refuses the application's UPDATE/DELETE statements on these "
                "tables while they are in the publication ('cannot update table ... because it "
                "does not have a replica identity and publishes updates'); give each a primary "
                f"key or REPLICA IDENTITY FULL (ALTER TABLE {refused[0][0]} REPLICA IDENTITY "
                "FULL), or drop it from the publication",
            )
        partial = sorted(t.qualified_name for t in tables if t.replica_identity != "full")
        if partial:
            log.warning(
                "replica_identity_not_full",
                tables=partial,
                formats=[o.format for o in outputs],
                detail="updates carry no old values and deletes only the key for these tables; "
                "ALTER TABLE ... REPLICA IDENTITY FULL gives the complete before images these "
                "formats carry",
            )

    # -- periodic work ----------------------------------------------------------------------

    def _after_batch(self, pump: Pump) -> None:
        self.health.count(pump)
        now = time.monotonic()
        interval = self.config.heartbeat_interval
        if interval and now - self._last_heartbeat >= interval:
            self._last_heartbeat = now
            self._heartbeat(pump)
        if now - self._last_refresh >= METRICS_REFRESH:
            self._last_refresh = now
            self.health.refresh(pump)

    def _heartbeat(self, pump: Pump) -> None:
        """Each format's heartbeat records (the logical message is side work's)."""
        now_us = time.time_ns() // 1000
        received = received_lsn(pump)
        for output in pump.outputs:
            pump.sink.send(output, output.encoder.heartbeat(received, now_us), None)

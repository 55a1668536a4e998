"""What ``walcast run`` reports about itself: Prometheus metrics and ``/healthz``.

:class:`Health` moves the pump's plain hot-path counters into the Prometheus metrics after
each batch (:meth:`Health.count`, which also notes the pump's progress), refreshes the
gauges (lag, in flight) every few seconds (:meth:`Health.refresh`), asks the server, from
the side-work thread and never from the pump's loop, where its WAL is and how much the slot
retains (:meth:`Health.sample`), and judges ``/healthz`` live, in the metrics thread
(:meth:`Health.probe`). It reads the daemon's current sink and ledger at each call, since a
session replaces them; it never changes what the daemon does.

``/healthz`` is 503 (with the reason in its ``detail``) when nothing moved for
``daemon.unhealthy_after`` seconds while work waits, judged at request time so that a pump
blocked anywhere is seen:

* Kafka: messages wait for a confirmation (or commit) and none came;
* the stream: the server has WAL the daemon has not received (the server's WAL position,
  sampled on the side connection, is past the highest position the pump received) and
  the pump has neither received anything nor had a delivery confirmed since. The
  walsender reports its position at least every ``daemon.status_interval`` seconds on a
  live stream, so ``unhealthy_after`` must stay above it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from capture.events import pg_ts_to_datetime
from capture.lsn import format_lsn
from capture.replication import slots
from capture.skip_committed import SkipCommitted  # exactly-once
from capture.snapshot import LoadingSource
from capture.source import ReplicationSource

if TYPE_CHECKING:
    from capture.config.model import DaemonConfig
    from capture.daemon.metrics import Metrics
    from capture.position import PositionLedger
    from capture.pump import Pump
    from capture.replication.side import SideConnection
    from capture.sinks.kafka import KafkaSink


class Watched(Protocol):
    """What :class:`Health` reads of the daemon (both may change between sessions)."""

    metrics: Metrics
    ledger: PositionLedger
    sink: KafkaSink | None


class Health:
    """The daemon's metrics and health, computed from what it holds."""

    def __init__(self, daemon: Watched, config: DaemonConfig, side: SideConnection) -> None:
        self._daemon = daemon
        self._config = config
        self._side = side
        self.received = 0
        """The highest WAL position any session's pump received (written by the pump's
        thread only)."""
        self.progress_at = time.monotonic()
        """When :attr:`received` last moved (monotonic seconds)."""
        self._behind: tuple[int, float] | None = None
        """(server WAL position, when first seen) while the server was seen ahead of
        :attr:`received` (written by the side-work thread only)."""

    def count(self, pump: Pump) -> None:
        """Move the hot path's plain counters into the Prometheus metrics."""
        metrics = self._daemon.metrics
        if pump.changes:
            metrics.changes.inc(pump.changes)
            pump.changes = 0
        if pump.transactions:
            metrics.transactions.inc(pump.transactions)
            pump.transactions = 0
        for output in pump.outputs:
            if output.messages:
                metrics.messages.labels(output.format).inc(output.messages)
                metrics.bytes.labels(output.format).inc(output.bytes)
                output.messages = output.bytes = 0
        for latency in self._daemon.ledger.latencies:
            metrics.delivery_latency.observe(latency)
        self._daemon.ledger.latencies.clear()
        metrics.acked_lsn.set(pump.acked_lsn)
        received = received_lsn(pump)
        if received > self.received:
            self.received = received
            self.progress_at = time.monotonic()

    def sample(self) -> None:
        """Ask the server where its WAL is and what the slot retains (side-work thread).

        Bounded by the side connection (``daemon.side_query_timeout``); no answer leaves
        the previous sample in place.
        """
        found = self._side.run(lambda conn: slots.find_slot(conn, self._config.source.slot))
        if found is None:
            return
        retained = found.wal_retained
        if retained is not None:
            self._daemon.metrics.retained_wal.set(retained)
        received = self.received
        behind = self._behind
        if behind is not None and received >= behind[0]:
            behind = None
        if found.current_lsn > received and behind is None:
            behind = (found.current_lsn, time.monotonic())
        self._behind = behind

    def refresh(self, pump: Pump) -> None:
        """The gauges: lag (bytes, seconds), in flight, pauses, retained WAL, and the state."""
        metrics = self._daemon.metrics
        sink = self._daemon.sink
        assert sink is not None
        received = received_lsn(pump)
        metrics.lag_bytes.set(max(received - pump.acked_lsn, 0))
        metrics.in_flight.set(sink.in_flight)
        metrics.paused.inc(sink.pauses - metrics.paused_seen)
        metrics.paused_seen = sink.pauses
        oldest = self._daemon.ledger.oldest_pending()
        metrics.lag_seconds.set(
            commit_lag_seconds(oldest.commit_ts) if oldest is not None and oldest.commit_ts else 0
        )
        unhealthy_after = self._config.unhealthy_after
        outage = sink.outage_seconds
        metrics.healthy = not (sink.in_flight and outage >= unhealthy_after)
        metrics.state = {
            "status": "streaming" if metrics.healthy else "degraded",
            "slot": self._config.source.slot,
            "acked_lsn": format_lsn(pump.acked_lsn),
            "received_lsn": format_lsn(received),
            "pending_transactions": self._daemon.ledger.pending,
            "in_flight": sink.in_flight,
            "seconds_without_delivery": round(outage, 1),
        }
        if not metrics.healthy:
            metrics.state["detail"] = (
                f"Kafka at {sink.brokers} confirmed nothing for {outage:.0f} s "
                f"(daemon.unhealthy_after={unhealthy_after:g})"
            )

    def probe(self) -> tuple[bool, dict[str, Any]]:
        """``/healthz`` at request time (the metrics thread): is the daemon stuck.

        Unhealthy when something was produced and not yet confirmed (at-least-once) or
        committed (exactly-once) and Kafka has confirmed nothing for ``unhealthy_after``
        seconds, or when the server has WAL the pump has not received and the pump made
        no progress (nothing received, nothing confirmed) for ``unhealthy_after`` seconds:
        the pump may be blocked inside a wait that refreshes nothing else, so this is
        judged here, live, in every mode. Reads only.
        """
        sink = self._daemon.sink
        if sink is None:
            return True, {}
        now = time.monotonic()
        limit = self._config.unhealthy_after
        waiting = sink.in_flight > 0 or self._daemon.ledger.waiting
        quiet = max(sink.clock() - sink.last_delivery, 0.0) if waiting else 0.0
        # While messages wait, a confirmation is progress (a pump paused on a full queue
        # receives nothing); otherwise only receiving is (an idle sink counts as delivered).
        last_progress = max(self.progress_at, now - quiet) if waiting else self.progress_at
        live: dict[str, Any] = {
            "seconds_without_delivery": round(quiet, 1),
            "seconds_without_progress": round(now - last_progress, 1),
        }
        if waiting and quiet >= limit:
            live["status"] = "degraded"
            live["detail"] = (
                f"Kafka at {sink.brokers} has confirmed nothing for {quiet:.0f} s while "
                f"changes wait (daemon.unhealthy_after={limit:g})"
            )
            return False, live
        behind = self._behind
        if behind is not None and self.received < behind[0]:
            stuck = now - max(behind[1], last_progress)
            if stuck >= limit:
                live["status"] = "degraded"
                live["detail"] = (
                    f"the server has WAL to send (at {format_lsn(behind[0])}) and walcast "
                    f"received nothing past {format_lsn(self.received)} for {stuck:.0f} s: "
                    "the replication connection or the pump is stuck "
                    f"(daemon.unhealthy_after={limit:g})"
                )
                return False, live
        return True, live


def received_lsn(pump: Pump) -> int:
    """The last WAL position the replication source received (under its wrappers)."""
    source = pump.source
    if isinstance(source, SkipCommitted):  # exactly-once
        source = source.inner
    if isinstance(source, LoadingSource):
        source = source.inner
    assert isinstance(source, ReplicationSource)
    return source.received_lsn


def commit_lag_seconds(commit_ts: int) -> float:
    """Seconds from a commit (µs since 2000-01-01) to now."""
    return max(time.time() - pg_ts_to_datetime(commit_ts).timestamp(), 0.0)

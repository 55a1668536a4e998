"""What ``walcast run`` reports about itself: Prometheus metrics and ``/healthz``.

:class:`Health` moves the pump's plain hot-path counters into the Prometheus metrics after
each batch (:meth:`Health.count`), refreshes the gauges (lag, in flight, retained WAL) every
few seconds (:meth:`Health.refresh`) and judges ``/healthz`` live, in the metrics thread
(:meth:`Health.probe`). It reads the daemon's current sink and ledger at each call, since a
session replaces them; it never changes what the daemon does.
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
    from capture.daemon.config import DaemonConfig
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
        retained = self._side.run(lambda conn: slots.wal_retained(conn, self._config.source.slot))
        if retained is not None:
            metrics.retained_wal.set(retained)
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
        seconds: the pump may be blocked inside a wait that refreshes nothing else, so this
        is judged here, live, in every mode. Reads only.
        """
        sink = self._daemon.sink
        if sink is None:
            return True, {}
        waiting = sink.in_flight > 0 or self._daemon.ledger.waiting
        quiet = max(sink.clock() - sink.last_delivery, 0.0) if waiting else 0.0
        limit = self._config.unhealthy_after
        live: dict[str, Any] = {"seconds_without_delivery": round(quiet, 1)}
        if waiting and quiet >= limit:
            live["status"] = "degraded"
            live["detail"] = (
                f"Kafka at {sink.brokers} has confirmed nothing for {quiet:.0f} s while "
                f"changes wait (daemon.unhealthy_after={limit:g})"
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

"""Prometheus metrics and the health endpoint of ``walcast run``.

``GET /metrics`` serves the Prometheus text format; ``GET /healthz`` answers 200 with a
small JSON document while the daemon streams and Kafka confirms deliveries, 503 otherwise.
Rates (events/s, bytes/s) are the counters' ``rate()`` in Prometheus.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class Metrics:
    """The daemon's metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.changes = Counter("walcast_changes", "Row changes read from the slot", registry=r)
        self.transactions = Counter(
            "walcast_transactions", "Committed transactions read from the slot", registry=r
        )
        self.messages = Counter(
            "walcast_messages_produced", "Messages handed to Kafka", ["format"], registry=r
        )
        self.bytes = Counter(
            "walcast_bytes_produced", "Message value bytes handed to Kafka", ["format"], registry=r
        )
        self.in_flight = Gauge(
            "walcast_messages_in_flight", "Messages produced but not yet confirmed", registry=r
        )
        self.delivery_latency = Histogram(
            "walcast_delivery_latency_seconds",
            "From a transaction's first produce to the confirmation of all its messages",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.lag_bytes = Gauge(
            "walcast_replication_lag_bytes",
            "Server WAL end minus the acknowledged LSN",
            registry=r,
        )
        self.lag_seconds = Gauge(
            "walcast_replication_lag_seconds",
            "Now minus the commit time of the newest fully delivered transaction (0 when idle)",
            registry=r,
        )
        self.retained_wal = Gauge(
            "walcast_slot_retained_wal_bytes",
            "WAL the server keeps for the slot (current WAL LSN minus restart_lsn)",
            registry=r,
        )
        self.acked_lsn = Gauge("walcast_acked_lsn", "Acknowledged LSN (as a number)", registry=r)
        self.reconnects = Counter(
            "walcast_reconnects", "Reconnections to PostgreSQL after a lost stream", registry=r
        )
        self.paused = Counter(
            "walcast_backpressure_pauses",
            "Times reading paused on a full producer queue",
            registry=r,
        )
        self.snapshot_rows = Gauge(
            "walcast_snapshot_rows",
            "Rows of the table loaded so far by the current load",
            ["table"],
            registry=r,
        )
        self.snapshot_rows_estimated = Gauge(
            "walcast_snapshot_rows_estimated",
            "Rows the table holds, estimated from pg_class.reltuples, for the current load",
            ["table"],
            registry=r,
        )
        self.paused_seen = 0
        """Back-pressure pauses already counted (the sink keeps the running total)."""
        self.healthy = True
        self.state: dict[str, Any] = {"status": "starting"}
        self.probe: Callable[[], tuple[bool, dict[str, Any]]] | None = None
        """Asked at each ``/healthz`` request (from the server's thread): whether the
        daemon is healthy now, and fields that override :attr:`state`. It must only read."""
        self.last_progress = time.monotonic()

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Health now: the daemon's own verdict, unless the probe finds it stuck.

        When the daemon's own verdict is unhealthy (a session being retried), its status
        and detail stand, and the probe adds only its ``seconds_…`` (the last progress,
        which ``walcast status --health-url`` shows).
        """
        if self.probe is None:
            return self.healthy, {}
        healthy, live = self.probe()
        if not self.healthy:
            return False, {k: v for k, v in live.items() if k.startswith("seconds_")}
        return healthy, live


class _Handler(http.server.BaseHTTPRequestHandler):
    metrics: ClassVar[Metrics]

    def do_GET(self) -> None:
        if self.path.startswith("/metrics"):
            body = generate_latest(self.metrics.registry)
            self._reply(200, CONTENT_TYPE_LATEST, body)
        elif self.path.startswith("/healthz"):
            healthy, live = self.metrics.health()
            body = orjson.dumps({**self.metrics.state, **live, "healthy": healthy})
            self._reply(200 if healthy else 503, "application/json", body)
        else:
            self._reply(404, "text/plain", b"not found\n")

    def _reply(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base
        """Keep access logs out of the daemon's event log."""


def serve(metrics: Metrics, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """Serve /metrics and /healthz from a daemon thread; returns the server (port 0 = any)."""
    handler = type("MetricsHandler", (_Handler,), {"metrics": metrics})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="walcast-metrics", daemon=True).start()
    return server

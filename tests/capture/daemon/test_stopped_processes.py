"""A stopped process (SIGSTOP) on either side of ``walcast run`` (issue 35).

A stopped process keeps its sockets open and the kernel keeps acknowledging what fits in
their buffers, so nothing errors: only walcast's own bounds notice. The bounds are
shortened through their settings, as in ``test_frozen_network.py``.

* The walsender stopped: /healthz 503 saying the server has WAL to send (and ``walcast
  status --health-url`` showing it, with the seconds since the last progress), the stream lost
  after ``source.receive_timeout``, the session retried (the slot is held by the stopped
  walsender, which acts on walcast's ``pg_terminate_backend`` only once continued); after
  SIGCONT the walsender acts on walcast's ``pg_terminate_backend`` and walcast resumes,
  200 again, nothing lost.
* The Kafka broker stopped (a broker of the test's own): /healthz 503 saying Kafka confirms
  nothing, recovery after SIGCONT, nothing lost; SIGTERM while it is stopped ends the
  daemon within its flush time, and a later run delivers everything.

Each test sends SIGCONT in a ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from capture.daemon.runner import SHUTDOWN_FLUSH_TIMEOUT
from tests.capture.daemon.test_frozen_network import BOUNDS
from tests.capture.daemon.test_network_faults import (
    SERVICES,
    Case,
    _events,
    _health,
    _own_kafka,
    _wait_for,
)
from tests.support.ports import free_port
from tests.support.scenario import walcast

pytestmark = pytest.mark.integration


def _until(port: int, code: int, since: float, limit: float) -> dict:
    """Poll /healthz until it answers ``code``; its body."""
    got, body = _health(port)
    while got != code:
        assert time.monotonic() - since < limit, (got, body)
        time.sleep(0.3)
        got, body = _health(port)
    return body


def _status(case: Case, port: int) -> dict:
    """``walcast status --health-url … --json``'s ``daemon``, through the CLI."""
    url = f"http://127.0.0.1:{port}/healthz"
    done = walcast("status", "--dsn", case.dsn, "--slot", case.slot, "--health-url", url, "--json")
    assert done.returncode == 0, done.stderr
    text = walcast("status", "--dsn", case.dsn, "--slot", case.slot, "--health-url", url)
    assert text.returncode == 0, text.stderr
    daemon = json.loads(done.stdout)["daemon"]
    assert f"daemon at {url}: " in text.stdout, text.stdout
    assert "last progress" in text.stdout, text.stdout
    if "NOT healthy" in text.stdout:  # each run asks anew: the reason may have moved on
        assert "\n  why             " in text.stdout, text.stdout
    return daemon


def _streaming(case: Case, dsn: str, port: int, **bounds: str) -> RunningDaemon:
    env = {**BOUNDS, **{f"WALCAST__{k.upper()}": v for k, v in bounds.items()}}
    daemon = case.daemon("run", dsn, "--metrics-port", str(port), env=env)
    _wait_for(daemon, "session_started", 90)
    case.insert(5)
    wait_caught_up(dsn, case.slot, current_lsn(dsn), daemon, timeout=60)
    assert _health(port)[0] == 200
    return daemon


@pytest.fixture
def case(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> Iterator[Case]:
    made = Case(pg_dsn, kafka_bootstrap, tmp_path)
    yield made
    made.close()


def test_a_stopped_walsender_is_503_then_the_stream_resumes_after_sigcont(case: Case) -> None:
    port = free_port()
    daemon = _streaming(case, case.dsn, port, source__receive_timeout="6")
    stopped: int | None = None
    try:
        stopped = case.walsender()
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        stopped_at, stopped_wall = time.monotonic(), datetime.now(UTC)
        case.insert(10)  # written while the walsender is stopped
        body = _until(port, 503, stopped_at, 6)  # daemon.unhealthy_after=3, before the loss
        noticed = time.monotonic() - stopped_at
        assert "the server has WAL to send" in body["detail"], body
        shown = _status(case, port)  # walcast status shows the daemon's last progress
        assert shown["healthy"] is False, shown
        assert shown["seconds_without_progress"] >= 3, shown
        assert shown["detail"], shown  # the WAL to send, or already the retried session
        _wait_for(daemon, "source_lost", 6 + 5)  # source.receive_timeout=6
        lost = _events(daemon, "source_lost")[0]
        lost_at = (datetime.fromisoformat(lost["timestamp"]) - stopped_wall).total_seconds()
        assert "source.receive_timeout" in lost["error"], lost
        assert lost_at < 6 + 3, lost_at
        time.sleep(3)  # the session is retried while the stopped walsender holds the slot
        code, retrying = _health(port)
        assert code == 503, retrying
        assert retrying["detail"], retrying
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        continued = time.monotonic()
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=30)
        recovered = time.monotonic() - continued
        assert _events(daemon, "own_walsender_ended"), daemon.log()[-3000:]
        _until(port, 200, continued, 30)
        shown = _status(case, port)
        assert shown["healthy"] is True, shown
        assert shown["status"] == "streaming", shown
        assert shown["seconds_without_progress"] < 3, shown
        print(  # the closing note's numbers (pytest -s)
            f"stopped walsender: 503 after {noticed:.1f} s ({body['detail']}); lost after "
            f"{lost_at:.1f} s; while retried: {retrying['detail']}; caught up "
            f"{recovered:.1f} s after SIGCONT"
        )
        assert recovered < 20
        assert daemon.stop(timeout=30) == 0, daemon.log()[-3000:]
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if daemon.process.poll() is None:
            daemon.kill()
    assert case.ids_in_kafka() == set(range(1, 16))


@pytest.fixture
def own_kafka() -> Iterator[tuple[str, int]]:
    """A broker of this test's own (stopping the shared one would stop everyone's tests)."""
    state = Path(f"/tmp/wc-stop-{uuid.uuid4().hex[:6]}")
    bootstrap, env = _own_kafka(state)
    pid = int((state / "kafka" / "kafka.pid").read_text().strip())
    try:
        yield bootstrap, pid
    finally:
        os.kill(pid, signal.SIGCONT)
        subprocess.run(
            [str(SERVICES), "stop", "kafka"], env=env, capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(state, ignore_errors=True)


def test_a_stopped_broker_is_503_then_delivery_resumes_and_sigterm_is_honoured(
    pg_dsn: str, tmp_path: Path, own_kafka: tuple[str, int]
) -> None:
    bootstrap, broker = own_kafka
    case = Case(pg_dsn, bootstrap, tmp_path)
    port = free_port()
    daemon = _streaming(case, pg_dsn, port)
    try:
        os.kill(broker, signal.SIGSTOP)
        stopped_at = time.monotonic()
        case.insert(10)  # produced while the broker is stopped
        body = _until(port, 503, stopped_at, 3 + 10)
        noticed = time.monotonic() - stopped_at
        assert "confirmed nothing" in body["detail"], body
        time.sleep(2)
        assert _health(port)[0] == 503
        os.kill(broker, signal.SIGCONT)
        continued = time.monotonic()
        wait_caught_up(pg_dsn, case.slot, current_lsn(pg_dsn), daemon, timeout=60)
        recovered = time.monotonic() - continued
        _until(port, 200, continued, 30)
        # SIGTERM while the broker is stopped: the daemon ends within its flush time.
        os.kill(broker, signal.SIGSTOP)
        case.insert(5)
        _until(port, 503, time.monotonic(), 3 + 10)
        asked = time.monotonic()
        code = daemon.stop(timeout=SHUTDOWN_FLUSH_TIMEOUT + 5)
        took = time.monotonic() - asked
        os.kill(broker, signal.SIGCONT)
        print(  # the closing note's numbers (pytest -s)
            f"stopped broker: 503 after {noticed:.1f} s ({body['detail']}); caught up "
            f"{recovered:.1f} s after SIGCONT; SIGTERM while stopped: exit {code} after "
            f"{took:.1f} s"
        )
        assert took < SHUTDOWN_FLUSH_TIMEOUT, took
        # Kafka confirmed nothing: the slot stays before those changes (sent again later).
        assert code == 0, daemon.log()[-3000:]
        assert "stopped_with_undelivered" in daemon.log(), daemon.log()[-3000:]
    finally:
        os.kill(broker, signal.SIGCONT)
        if daemon.process.poll() is None:
            daemon.kill()
    again = case.daemon("again", pg_dsn, "--metrics-port", "0", env=BOUNDS)
    try:
        wait_caught_up(pg_dsn, case.slot, current_lsn(pg_dsn), again, timeout=60)
        assert again.stop(timeout=30) == 0, again.log()[-3000:]
    finally:
        if again.process.poll() is None:
            again.kill()
        ids = case.ids_in_kafka()
        case.close()
    assert ids == set(range(1, 21))

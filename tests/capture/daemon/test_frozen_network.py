"""A frozen network between walcast and PostgreSQL, through ``walcast run`` (issue 35).

The fault relay (:mod:`tests.support.relay`) stops forwarding without closing anything, as
a hung proxy or a NAT that lost its flow does; the kernel still acknowledges what fits in
its buffers, so TCP keepalives and ``tcp_user_timeout`` never fire and only walcast's own
bounds can notice. The bounds are shortened for the tests through their settings:
``daemon.side_query_timeout`` 2 s, ``source.receive_timeout`` 3 s,
``daemon.unhealthy_after`` 3 s, ``daemon.reconnect_max_backoff`` 1 s.

* A frozen side connection (the heartbeat's): the stream goes on, one warning, /healthz 200.
* The walsender's link frozen: /healthz 503 saying the server has WAL to send, before the
  stream's receive timeout; then walcast resumes on a new connection, nothing lost.
* The whole relay frozen, then thawed: /healthz 503 with its reason while stuck, the stream
  resumes after the thaw, 200 again, nothing lost.
* SIGTERM while the relay is frozen: the daemon ends at once (exit 0); a later run
  delivers what it had not, nothing lost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from tests.capture.daemon.test_network_faults import (
    Case,
    _health,
    _wait_for,
)
from tests.support.ports import free_port
from tests.support.relay import FaultRelay, Link

pytestmark = pytest.mark.integration

BOUNDS = {
    "WALCAST__DAEMON__SIDE_QUERY_TIMEOUT": "2",
    "WALCAST__SOURCE__RECEIVE_TIMEOUT": "3",
    "WALCAST__DAEMON__UNHEALTHY_AFTER": "3",
    "WALCAST__DAEMON__RECONNECT_MAX_BACKOFF": "1",
}


@pytest.fixture
def relayed(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[Case, FaultRelay]]:
    case = Case(pg_dsn, kafka_bootstrap, tmp_path)
    params = conninfo_to_dict(pg_dsn)
    relay = FaultRelay(str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
    yield case, relay
    relay.close()
    case.close()


def _start(case: Case, relay: FaultRelay, port: int) -> RunningDaemon:
    through = make_conninfo(case.dsn, host="127.0.0.1", port=str(relay.port))
    daemon = case.daemon("run", through, "--metrics-port", str(port), env=BOUNDS)
    _wait_for(daemon, "session_started", 60)
    case.insert(5)
    wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=30)
    return daemon


def _side_link(case: Case, relay: FaultRelay, timeout: float = 10) -> Link:
    """The relay link of walcast's side connection (its one ordinary backend that stays).

    Only walcast's connections go through the relay; the test's own go to the server.
    """
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(case.dsn, autocommit=True) as conn:
            ports = [
                int(r[0])
                for r in conn.execute(
                    "SELECT client_port FROM pg_stat_activity WHERE backend_type = "
                    "'client backend' AND client_port IS NOT NULL"
                ).fetchall()
            ]
        links = [link for p in ports if (link := relay.link_of_backend(p)) is not None]
        if len(links) == 1:
            return links[0]
        assert time.monotonic() < deadline, f"side connection not found: {ports}"
        time.sleep(0.3)


def test_a_frozen_side_connection_never_stops_the_stream(
    relayed: tuple[Case, FaultRelay],
) -> None:
    case, relay = relayed
    port = free_port()
    daemon = _start(case, relay, port)
    try:
        before = len(daemon.log())
        _side_link(case, relay).freeze()  # the heartbeat's next query never gets an answer
        for _ in range(4):  # rows keep flowing while it hangs
            case.insert(5)
            time.sleep(1)
            code, body = _health(port)
            assert code == 200, body
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=20)
        _wait_for(daemon, "side_query_abandoned", 10)
        time.sleep(3)  # heartbeats go on over a new side connection, without new warnings
        case.insert(5)
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=20)
        assert _health(port)[0] == 200
        after = daemon.log()[before:].splitlines()
        warnings = [e for e in map(json.loads, after) if e["level"] in ("warning", "error")]
        assert [e["event"] for e in warnings] == ["side_query_abandoned"], warnings
        assert "daemon.side_query_timeout" in warnings[0]["detail"]
        assert daemon.stop(timeout=30) == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    assert case.ids_in_kafka() == set(range(1, 31))


def test_a_frozen_walsender_link_is_503_with_its_reason_and_the_stream_resumes(
    relayed: tuple[Case, FaultRelay],
) -> None:
    case, relay = relayed
    port = free_port()
    through = make_conninfo(case.dsn, host="127.0.0.1", port=str(relay.port))
    env = {**BOUNDS, "WALCAST__SOURCE__RECEIVE_TIMEOUT": "8"}
    daemon = case.daemon("run", through, "--metrics-port", str(port), env=env)
    try:
        _wait_for(daemon, "session_started", 60)
        case.insert(5)
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=30)
        walsender = case.walsender()
        assert walsender is not None
        with psycopg.connect(case.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT client_port FROM pg_stat_activity WHERE pid = %s", (walsender,)
            ).fetchone()
        assert row is not None
        link = relay.link_of_backend(int(row[0]))
        assert link is not None
        link.freeze()  # the walsender's link only: a hung proxy in front of the stream
        frozen_at = time.monotonic()
        case.insert(10)
        code, body = _health(port)
        while code == 200:
            assert time.monotonic() - frozen_at < 8, body  # before the receive timeout
            time.sleep(0.3)
            code, body = _health(port)
        unhealthy_after = time.monotonic() - frozen_at
        assert code == 503, body
        assert "the server has WAL to send" in body["detail"], body
        assert "daemon.unhealthy_after=3" in body["detail"], body
        # walcast gives the stream up after source.receive_timeout and resumes on a new
        # connection while the old one stays frozen (its walsender ended as its own).
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=30)
        recovered = time.monotonic() - frozen_at
        while _health(port)[0] != 200:
            assert time.monotonic() - frozen_at < 40, _health(port)
            time.sleep(0.3)
        print(
            f"frozen walsender link: 503 after {unhealthy_after:.1f} s ({body['detail']}); "
            f"caught up {recovered:.1f} s after the freeze"
        )
        assert recovered < 8 + 15
        assert daemon.stop(timeout=30) == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    assert case.ids_in_kafka() == set(range(1, 16))


def test_a_frozen_relay_is_503_while_stuck_and_the_stream_resumes_after_it(
    relayed: tuple[Case, FaultRelay],
) -> None:
    case, relay = relayed
    port = free_port()
    daemon = _start(case, relay, port)
    try:
        assert _health(port)[0] == 200
        relay.freeze()
        frozen_at = time.monotonic()
        case.insert(20)  # written while walcast cannot reach the server
        code, body = _health(port)
        while code == 200:
            assert time.monotonic() - frozen_at < 20, body
            time.sleep(0.3)
            code, body = _health(port)
        unhealthy_after = time.monotonic() - frozen_at
        assert code == 503, body
        assert body["healthy"] is False, body
        assert body["detail"], body
        time.sleep(max(0.0, 6 - unhealthy_after))  # stuck for a while
        assert _health(port)[0] == 503
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        relay.thaw()
        thawed_at = time.monotonic()
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=30)
        recovered = time.monotonic() - thawed_at
        while _health(port)[0] != 200:
            assert time.monotonic() - thawed_at < 30, _health(port)
            time.sleep(0.3)
        print(  # the closing note's numbers (pytest -s)
            f"frozen relay: 503 after {unhealthy_after:.1f} s ({body['detail']}); "
            f"caught up {recovered:.1f} s after the thaw"
        )
        assert recovered < 25
        assert daemon.stop(timeout=30) == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    assert case.ids_in_kafka() == set(range(1, 26))


def test_sigterm_ends_a_daemon_behind_a_frozen_relay(relayed: tuple[Case, FaultRelay]) -> None:
    case, relay = relayed
    daemon = _start(case, relay, free_port())
    try:
        relay.freeze()
        case.insert(10)  # waits in the slot
        time.sleep(4)  # the side query and the stream are stuck behind the relay
        asked = time.monotonic()
        code = daemon.stop(timeout=20)
        took = time.monotonic() - asked
        print(f"SIGTERM behind a frozen relay: exit {code} after {took:.1f} s")
        assert code == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    relay.thaw()
    again = case.daemon("again", case.dsn, "--metrics-port", "0", env=BOUNDS)
    try:
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), again, timeout=60)
        assert again.stop(timeout=30) == 0, again.log()[-3000:]
    finally:
        if again.process.poll() is None:
            again.kill()
    assert case.ids_in_kafka() == set(range(1, 16))

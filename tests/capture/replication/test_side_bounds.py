"""The side connection's bound, through the fault relay (issue 35).

Every call returns within its timeout whatever the network does: a frozen link is
abandoned with one warning and the next call opens a new connection; a dropped link is one
failed call; a slow one is only slow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from structlog.testing import capture_logs

from capture.replication.side import SideConnection
from tests.support.relay import FaultRelay

pytestmark = pytest.mark.integration


@pytest.fixture
def relay(pg_dsn: str) -> Iterator[FaultRelay]:
    params = conninfo_to_dict(pg_dsn)
    made = FaultRelay(str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
    yield made
    made.close()


def _side(pg_dsn: str, relay: FaultRelay, timeout: float) -> SideConnection:
    through = make_conninfo(pg_dsn, host="127.0.0.1", port=str(relay.port))
    return SideConnection(through, timeout=timeout)


def _one(side: SideConnection) -> object:
    return side.run(lambda conn: conn.execute("SELECT 1").fetchone())


def test_a_frozen_link_is_abandoned_within_the_bound_and_replaced(
    pg_dsn: str, relay: FaultRelay
) -> None:
    side = _side(pg_dsn, relay, timeout=1.0)
    try:
        assert _one(side) == (1,)
        (link,) = relay.links
        link.freeze()
        with capture_logs() as events:
            started = time.monotonic()
            assert _one(side) is None
            took = time.monotonic() - started
            assert _one(side) == (1,)  # a new connection, through a new link
            assert _one(side) == (1,)
        assert took < 1.5, took
        assert side.abandoned == 1
        warnings = [e for e in events if e["log_level"] == "warning"]
        assert [e["event"] for e in warnings] == ["side_query_abandoned"], events
        assert "daemon.side_query_timeout" in warnings[0]["detail"]
        assert "side_connection_recovered" in [e["event"] for e in events]
        assert len(relay.links) == 2
    finally:
        side.close()


def test_a_frozen_server_path_never_holds_a_caller(pg_dsn: str, relay: FaultRelay) -> None:
    side = _side(pg_dsn, relay, timeout=1.0)
    relay.freeze()  # new connections are accepted and then hear nothing
    try:
        with capture_logs() as events:
            for _ in range(3):
                started = time.monotonic()
                assert _one(side) is None
                assert time.monotonic() - started < 1.5
        warnings = [e for e in events if e["log_level"] == "warning"]
        assert len(warnings) == 1, events  # one trouble, one warning
        relay.thaw()
        deadline = time.monotonic() + 15  # an attempt still waiting on libpq's connect
        while _one(side) != (1,):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        side.close()


def test_a_dropped_link_is_one_failed_call_and_a_slow_one_only_slow(
    pg_dsn: str, relay: FaultRelay
) -> None:
    side = _side(pg_dsn, relay, timeout=3.0)
    try:
        assert _one(side) == (1,)
        relay.drop()
        with capture_logs() as events:
            assert _one(side) is None
            assert _one(side) == (1,)
        assert [e["event"] for e in events if e["log_level"] == "warning"] == [
            "side_query_failed"
        ], events
        relay.delay = 0.2
        started = time.monotonic()
        assert _one(side) == (1,)
        assert time.monotonic() - started >= 0.4  # there and back
    finally:
        side.close()

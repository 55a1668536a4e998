"""A frozen network during a load, through ``walcast run --create-slot`` (issue 35).

The fault relay (:mod:`tests.support.relay`) freezes the link of the load's reader while it
streams a chunk of a 30,000-row table (``walcast run --create-slot``). A reader waiting for
its chunk's rows sends nothing, so neither ``tcp_user_timeout`` nor keepalives (answered by
the relay's kernel) ever end its wait, and the pump waited on it for as long as the link
stayed frozen: now walcast gives the read up after ``source.receive_timeout`` (3 s here),
the session is retried and the load goes on over a new connection. /healthz is 503 while
stuck and 200 after; every row of the table arrives.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.kit.daemon import current_lsn, wait_caught_up
from tests.capture.daemon.test_frozen_network import BOUNDS
from tests.capture.daemon.test_network_faults import (
    Case,
    _events,
    _health,
    _wait_for,
)
from tests.support import scenario as sc
from tests.support.ports import free_port
from tests.support.relay import FaultRelay, Link

pytestmark = pytest.mark.integration

ROWS = 30_000


@pytest.fixture
def loaded(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[Case, FaultRelay]]:
    case = Case(pg_dsn, kafka_bootstrap, tmp_path)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        sc.drop_slot(conn, case.slot)  # walcast creates it, and loads the table
        conn.execute(
            f"INSERT INTO {case.table} SELECT g, repeat('v', 100) FROM generate_series(1, %s) g",
            (ROWS,),
        )
    case.next_id = ROWS + 1
    params = conninfo_to_dict(pg_dsn)
    relay = FaultRelay(str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
    yield case, relay
    relay.close()
    case.close()


def _reader_link(case: Case, relay: FaultRelay, timeout: float = 60) -> Link:
    """The relay link of walcast's load reader while a chunk's COPY is open."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(case.dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT client_port FROM pg_stat_activity WHERE query LIKE 'COPY (SELECT%%' "
                "AND state IN ('active', 'idle in transaction') AND client_port IS NOT NULL"
            ).fetchone()
            link = None if row is None else relay.link_of_backend(int(row[0]))
            if link is not None:
                return link
            assert time.monotonic() < deadline, "no chunk read seen"
            time.sleep(0.02)


def test_a_frozen_chunk_read_is_503_and_the_load_resumes_within_the_bound(
    loaded: tuple[Case, FaultRelay],
) -> None:
    case, relay = loaded
    port = free_port()
    through = make_conninfo(case.dsn, host="127.0.0.1", port=str(relay.port))
    relay.delay = 0.02  # a slow link, so that a chunk's COPY is seen while it runs
    daemon = case.daemon(
        "run", through, "--create-slot", "--metrics-port", str(port),
        "--snapshot-workers", "1", "--snapshot-chunk-rows", "5000", env=BOUNDS,
    )  # fmt: skip
    link: Link | None = None
    try:
        link = _reader_link(case, relay)
        link.freeze()  # the reader's link only: the stream goes on and reaches the chunk
        frozen_at = time.monotonic()
        relay.delay = 0.0
        case.insert(10)  # changes written meanwhile
        code, body = _health(port)
        while code == 200:
            assert time.monotonic() - frozen_at < 15, body
            time.sleep(0.3)
            code, body = _health(port)
        unhealthy_after = time.monotonic() - frozen_at
        assert code == 503, body
        assert body["detail"], body
        # The read stuck behind the relay is given up after source.receive_timeout (3 s),
        # as a silent stream is: the session is retried and the chunk read again.
        _wait_for(daemon, "source_lost", 3 + 6)
        lost_at = time.monotonic() - frozen_at
        lost = _events(daemon, "source_lost")[0]["error"]
        assert "received nothing for 3 s" in lost, lost
        assert "the read of chunk" in lost, lost
        _wait_for(daemon, "snapshot_table_done", 60)
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=60)
        recovered = time.monotonic() - frozen_at
        link.thaw()  # the old link goes on (its reader was abandoned)
        while _health(port)[0] != 200:
            assert time.monotonic() - frozen_at < 60, _health(port)
            time.sleep(0.3)
        print(  # the closing note's numbers (pytest -s)
            f"frozen chunk read: 503 after {unhealthy_after:.1f} s ({body['detail']}); "
            f"read given up after {lost_at:.1f} s ({lost}); load done and caught up "
            f"{recovered:.1f} s after the freeze"
        )
        assert recovered < 40
        assert daemon.stop(timeout=30) == 0, daemon.log()[-3000:]
    finally:
        if link is not None:
            link.thaw()
        if daemon.process.poll() is None:
            daemon.kill()
    assert case.ids_in_kafka() == set(range(1, ROWS + 11))

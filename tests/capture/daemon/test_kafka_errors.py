"""Kafka unreachable or refusing, met through the CLI as a user meets it.

Every case ends in one clear line (or, for the daemon, one ``kafka_unreachable`` event and
a pause), in bounded time, with no raw librdkafka ``%3|`` line and no traceback.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest

from bench.kit.daemon import RunningDaemon, confirmed_lsn
from tests.support.ports import free_port
from tests.support.scenario import drop_slot, walcast

pytestmark = pytest.mark.integration


def test_produce_test_stream_against_a_dead_broker_fails_in_one_line(refused: int) -> None:
    dead = f"127.0.0.1:{refused}"
    start = time.monotonic()
    done = walcast(
        "produce-test-stream", "--format", "canal", "--count", "10",
        "--kafka", dead, "--topic", "never", timeout=60,
    )  # fmt: skip
    assert time.monotonic() - start < 30
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"walcast: error: --kafka: no Kafka broker answered at {dead}")
    assert "%3|" not in done.stderr + done.stdout


def test_run_on_a_taken_metrics_port_names_the_setting(pg_dsn: str, kafka_bootstrap: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = walcast(
            "run", "--dsn", pg_dsn, "--slot", "unused", "--publication", "unused",
            "--bootstrap-servers", kafka_bootstrap, "--format", "json",
            "--metrics-port", str(port), timeout=60,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("walcast: error: daemon.metrics_port: cannot serve metrics")
    assert "Traceback" not in done.stderr


def test_topics_kafka_takes_as_one_stop_the_start_naming_both_tables(
    pg_dsn: str, kafka_bootstrap: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    pub, slot = f"coll_pub_{tag}", f"coll_slot_{tag}"
    schemas = (f"c{tag}", f"c{tag}_order")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schemas[0]}")
        conn.execute(f"CREATE SCHEMA {schemas[1]}")
        conn.execute(f"CREATE TABLE {schemas[0]}.order_items (id int PRIMARY KEY)")
        conn.execute(f"CREATE TABLE {schemas[1]}.items (id int PRIMARY KEY)")
        conn.execute(
            f"CREATE PUBLICATION {pub} FOR TABLE {schemas[0]}.order_items, {schemas[1]}.items"
        )
    try:
        done = walcast(
            "run", "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--create-slot",
            "--snapshot", "never", "--bootstrap-servers", kafka_bootstrap, "--format", "json",
            "--metrics-port", "0", timeout=120,
        )  # fmt: skip
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("walcast: error: the topics of table"), done.stderr
        assert f"{schemas[0]}.order_items" in last
        assert f"{schemas[1]}.items" in last
        assert "walcast-{format}-{schema}-{table}" in last
        assert "Traceback" not in done.stderr
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            for schema in schemas:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_run_against_a_dead_broker_pauses_reports_once_and_stops_cleanly(
    pg_dsn: str, tmp_path: Path, refused: int
) -> None:
    dead = f"127.0.0.1:{refused}"
    tag = uuid.uuid4().hex[:8]
    table, pub, slot = f"dead_{tag}", f"dead_pub_{tag}", f"dead_slot_{tag}"
    port = free_port()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--snapshot", "never",
        "--bootstrap-servers", dead, "--format", "json", "--metrics-port", str(port),
        "--heartbeat-interval", "0",
        log_path=tmp_path / "run.log",
        env={"WALCAST__KAFKA__CONNECT_TIMEOUT": "3", "WALCAST__DAEMON__UNHEALTHY_AFTER": "3"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while '"event": "kafka_unreachable"' not in daemon.log():
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            assert time.monotonic() < deadline, daemon.log()[-3000:]
            time.sleep(0.5)
        time.sleep(5)
        assert daemon.process.poll() is None  # a pause, not an exit
        log = daemon.log()
        assert log.count('"event": "kafka_unreachable"') == 1
        assert '"event": "kafka_reachable"' not in log  # client events are not deliveries
        assert dead in log
        assert "%3|" not in log
        assert all(line.startswith("{") for line in log.splitlines() if line.strip())
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert info.value.code == 503
        health = json.loads(info.value.read())
        assert health["status"] == "degraded"
        assert dead in health["detail"]
        before = confirmed_lsn(pg_dsn, slot)
        start = time.monotonic()
        assert daemon.stop(timeout=60) == 0
        assert time.monotonic() - start < 20
        assert confirmed_lsn(pg_dsn, slot) == before  # nothing acknowledged past Kafka
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE {table}")

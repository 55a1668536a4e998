"""Network faults and hung servers, through ``walcast run`` on real services.

* A cut of the client side of the connection (a firewall, NAT or load balancer): the
  server does not notice and its walsender keeps the slot; walcast reconnects, ends its own
  previous walsender (never another consumer's) and resumes at once.
* A hung walsender (SIGSTOP): nothing arrives, not even keepalives; walcast notices after
  ``source.receive_timeout``, says so, reconnects, and loses nothing.
* ``/healthz`` turns 503 while Kafka is away and changes wait, in exactly-once mode too.
* Kafka down at start: the replication connection never times out on the server.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from tests.support import scenario as sc
from tests.support.ports import free_port
from tests.support.proxy import CuttableProxy

pytestmark = pytest.mark.integration
SERVICES = sc.REPO / "scripts" / "local-services"


class Case:
    """A table, a publication and a slot; daemons streaming it as json into Kafka."""

    def __init__(self, dsn: str, bootstrap: str, tmp: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.dsn, self.bootstrap, self.tmp = dsn, bootstrap, tmp
        self.table, self.pub, self.slot = f"net_{tag}", f"net_pub_{tag}", f"net_slot_{tag}"
        self.prefix = f"net_{tag}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {self.table} (id int PRIMARY KEY, v text)")
            conn.execute(f"CREATE PUBLICATION {self.pub} FOR TABLE {self.table}")
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
        self.next_id = 1

    def daemon(self, name: str, dsn: str, *extra: str, env: dict[str, str] | None = None):
        args = [
            "--dsn", dsn, "--slot", self.slot, "--publication", self.pub,
            "--bootstrap-servers", self.bootstrap, "--format", "json",
            "--topic", self.prefix + ".{table}", "--transaction-topic", self.prefix,
            "--schema-topic", self.prefix + ".schemas", "--heartbeat-interval", "1", *extra,
        ]  # fmt: skip
        env = {"WALCAST__DAEMON__STATUS_INTERVAL": "1", **(env or {})}
        return RunningDaemon(*args, log_path=self.tmp / f"{name}.log", env=env)

    def insert(self, rows: int) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            for _ in range(rows):
                conn.execute(f"INSERT INTO {self.table} VALUES (%s, 'v')", (self.next_id,))
                self.next_id += 1

    def walsender(self) -> int | None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def ids_in_kafka(self) -> set[int]:
        records = k.read_all(self.bootstrap, [f"{self.prefix}.{self.table}"])
        return {int(orjson.loads(r.value)["after"]["id"]) for r in records}

    def close(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NOT NULL",
                (self.slot,),
            )
            time.sleep(0.5)
            sc.drop_slot(conn, self.slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {self.pub}")
            conn.execute(f"DROP TABLE IF EXISTS {self.table}")


@pytest.fixture
def case(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> Iterator[Case]:
    made = Case(pg_dsn, kafka_bootstrap, tmp_path)
    yield made
    made.close()


def _events(daemon: RunningDaemon, name: str) -> list[dict]:
    return [json.loads(line) for line in daemon.log().splitlines() if f'"event": "{name}"' in line]


def _wait_for(daemon: RunningDaemon, event: str, timeout: float, count: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while len(_events(daemon, event)) < count:
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        assert time.monotonic() < deadline, f"no {event} within {timeout} s\n{daemon.log()[-3000:]}"
        time.sleep(0.2)


def test_a_cut_connection_is_resumed_without_waiting_for_the_server(case: Case) -> None:
    params = conninfo_to_dict(case.dsn)
    proxy = CuttableProxy(str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
    through = make_conninfo(case.dsn, host="127.0.0.1", port=str(proxy.port))
    daemon = case.daemon("run", through, "--metrics-port", "0")
    try:
        _wait_for(daemon, "session_started", 60)
        case.insert(20)
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon)
        before = case.walsender()
        assert before is not None
        proxy.cut()  # the server keeps the old walsender: it holds the slot
        cut_at = time.monotonic()
        case.insert(20)
        _wait_for(daemon, "own_walsender_ended", 30)
        (ended,) = _events(daemon, "own_walsender_ended")
        assert ended["pid"] == before
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=60)
        # Resumed long before the server's wal_sender_timeout (60 s) would have freed it.
        assert time.monotonic() - cut_at < 30
        assert case.walsender() not in (None, before)
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        proxy.close()
    assert case.ids_in_kafka() == set(range(1, 41))


def test_a_hung_walsender_is_noticed_and_the_connection_retried(case: Case) -> None:
    daemon = case.daemon(
        "run", case.dsn, "--metrics-port", "0", env={"WALCAST__SOURCE__RECEIVE_TIMEOUT": "5"}
    )
    frozen: int | None = None
    try:
        _wait_for(daemon, "session_started", 60)
        case.insert(5)
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon)
        frozen = case.walsender()
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)
        case.insert(5)  # written while the walsender hangs
        _wait_for(daemon, "source_lost", 30)
        lost = _events(daemon, "source_lost")[0]
        assert "received nothing (not even a keepalive)" in lost["error"], lost
        assert "source.receive_timeout" in lost["error"], lost
        os.kill(frozen, signal.SIGCONT)
        frozen = None
        wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon, timeout=90)
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
        if daemon.process.poll() is None:
            daemon.kill()
    assert case.ids_in_kafka() == set(range(1, 11))


def _own_kafka(state: Path) -> tuple[str, dict[str, str]]:
    env = {**os.environ, "WALCAST_SERVICES_DIR": str(state)}
    env.pop("WALCAST_KAFKA_PORT", None)
    done = subprocess.run(
        [str(SERVICES), "start", "kafka"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith("export ")
    )
    return shlex.split(exports["WALCAST_TEST_KAFKA"])[0], env


def _kafka(command: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        [str(SERVICES), command, "kafka"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_healthz_turns_503_while_kafka_is_away_in_every_mode(
    pg_dsn: str, tmp_path: Path, mode: str
) -> None:
    state = Path(f"/tmp/wc-net-{uuid.uuid4().hex[:6]}")  # a broker of this test's own
    bootstrap, env = _own_kafka(state)
    case = Case(pg_dsn, bootstrap, tmp_path)
    port = free_port()
    extra = ["--metrics-port", str(port)]
    if mode == "exactly-once":
        extra.append("--exactly-once")
    daemon = case.daemon("run", pg_dsn, *extra, env={"WALCAST__DAEMON__UNHEALTHY_AFTER": "5"})
    try:
        _wait_for(daemon, "session_started", 90)
        case.insert(5)
        wait_caught_up(pg_dsn, case.slot, current_lsn(pg_dsn), daemon)
        assert _health(port)[0] == 200
        _kafka("stop", env)
        case.insert(5)  # waits for Kafka
        deadline = time.monotonic() + 40
        code, body = _health(port)
        while code == 200:
            assert time.monotonic() < deadline, body
            time.sleep(0.5)
            code, body = _health(port)
        assert code == 503, body
        assert body["healthy"] is False
        assert body["seconds_without_delivery"] >= 5, body
        _kafka("start", env)
        wait_caught_up(pg_dsn, case.slot, current_lsn(pg_dsn), daemon, timeout=120)
        deadline = time.monotonic() + 30
        while _health(port)[0] != 200:
            assert time.monotonic() < deadline, _health(port)
            time.sleep(0.5)
        assert daemon.stop() == 0, daemon.log()[-3000:]
        assert case.ids_in_kafka() == set(range(1, 11))
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        case.close()
        subprocess.run(
            [str(SERVICES), "stop", "kafka"], env=env, capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(state, ignore_errors=True)


def test_kafka_down_at_start_never_times_the_walsender_out(pg_dsn: str, tmp_path: Path) -> None:
    state = Path(f"/tmp/wc-net-{uuid.uuid4().hex[:6]}")
    bootstrap, env = _own_kafka(state)
    case = Case(pg_dsn, bootstrap, tmp_path)
    case.insert(3)  # pending in the slot before walcast starts
    _kafka("stop", env)
    # The server gives up on a silent walsender after 5 s for this connection.
    short = f"{pg_dsn} options='-c wal_sender_timeout=5s'"
    daemon = case.daemon("run", short, "--metrics-port", "0")
    try:
        time.sleep(25)
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        _kafka("start", env)
        wait_caught_up(pg_dsn, case.slot, current_lsn(pg_dsn), daemon, timeout=120)
        assert daemon.stop() == 0, daemon.log()[-3000:]
        assert "replication timeout" not in daemon.log()
        assert not [e for e in _events(daemon, "source_lost") if "timeout" in e["error"]]
        assert case.ids_in_kafka() == {1, 2, 3}
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        case.close()
        subprocess.run(
            [str(SERVICES), "stop", "kafka"], env=env, capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(state, ignore_errors=True)

"""``walcast run`` when PostgreSQL or Kafka is not there at the start (issue 25.7, 25.8).

Met as a user meets them: ``python -m capture run`` in a subprocess, stderr read line by line
(JSON events, then at most one ``walcast: error:`` line).

* PostgreSQL never reached: one line after ``source.connect_timeout`` (exit 4), naming the
  target without its password, libpq's cause and the setting as it was given; ``0`` keeps
  trying; a daemon that connected once keeps reconnecting; a refused login stops at once.
* Kafka away at the start: one ``kafka_waiting`` line at once (issue 38.3), one
  ``kafka_unreachable`` line after ``kafka.connect_timeout``, then one a minute, nothing
  else (no librdkafka line, no session restart, no replication connection held), and the
  stream starts once Kafka answers.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from tests.support.ports import free_port
from tests.support.scenario import drop_slot, walcast

pytestmark = pytest.mark.integration


def _split(stderr: str) -> tuple[list[dict], list[str]]:
    """stderr as (JSON events, ``walcast: error:`` lines); nothing else may be there."""
    events, errors = [], []
    for line in stderr.splitlines():
        if not line.strip():
            continue
        if line.startswith("walcast: error: "):
            errors.append(line.removeprefix("walcast: error: "))
        else:
            events.append(json.loads(line))  # a raw library line fails here
    return events, errors


class ReopenableProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` while up; while down nothing listens."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port), reuse_port=True)
        threading.Thread(target=self._accept, args=(self._server,), daemon=True).start()

    def down(self) -> None:
        """Stop listening and close every connection (the server side sees them end)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def stream(pg_dsn: str) -> Iterator[tuple[str, str, str]]:
    """A table, its publication and a slot: (table, publication, slot)."""
    tag = uuid.uuid4().hex[:8]
    table, pub, slot = f"start_{tag}", f"start_pub_{tag}", f"start_slot_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    yield table, pub, slot
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        drop_slot(conn, slot)
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def _slot_active(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return bool(row and row[0])


def _wait_for(daemon: RunningDaemon, event: str, timeout: float, count: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while daemon.log().count(f'"event": "{event}"') < count:
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        assert time.monotonic() < deadline, f"no {event}:\n{daemon.log()[-3000:]}"
        time.sleep(0.2)


# -- PostgreSQL never reached (item 7) -------------------------------------------------------

SECRET = "N3ver-S3cret"


@pytest.mark.parametrize("given", ["flag", "environment", "file"])
def test_never_reaching_postgres_stops_after_connect_timeout_with_one_line(
    given: str, kafka_bootstrap: str, tmp_path: Path, refused: int
) -> None:
    port = refused
    dsn = f"host=127.0.0.1 port={port} dbname=app user=cdc password={SECRET}"
    env = {"WALCAST_DSN": dsn}
    args = ["--slot", "s", "--publication", "p", "--bootstrap-servers", kafka_bootstrap,
            "--format", "json", "--metrics-port", "0"]  # fmt: skip
    if given == "flag":
        args += ["--connect-timeout", "3"]
        named = "--connect-timeout: 3 s"
    elif given == "environment":
        env["WALCAST__SOURCE__CONNECT_TIMEOUT"] = "3"
        named = "WALCAST__SOURCE__CONNECT_TIMEOUT: 3 s"
    else:
        config = tmp_path / "walcast.toml"
        config.write_text("[source]\nconnect_timeout = 3\n")
        args += ["--config", str(config)]
        named = f"source.connect_timeout in {config}: 3 s"
    start = time.monotonic()
    done = walcast("run", *args, env=env, timeout=90)
    elapsed = time.monotonic() - start
    assert done.returncode == 4, done.stderr
    assert 3 <= elapsed < 20, elapsed
    assert SECRET not in done.stdout + done.stderr
    events, errors = _split(done.stderr)
    assert len(errors) == 1, done.stderr
    line = errors[0]
    assert line.startswith(
        f"cannot connect to PostgreSQL (host=127.0.0.1 port={port} dbname=app user=cdc): "
        "Connection refused"
    ), line
    assert f"walcast gave up after 3 s without reaching PostgreSQL once ({named})" in line
    assert "set source.connect_timeout = 0 (--connect-timeout 0)" in line
    warnings = [e for e in events if e["level"] in ("warning", "error")]
    assert [e["event"] for e in warnings] == ["source_lost"], done.stderr
    assert "keeps trying for 3 s" in warnings[0]["detail"]


def test_hosts_that_are_all_the_wrong_role_stop_after_connect_timeout(
    pg_dsn: str, kafka_bootstrap: str
) -> None:
    """A multi-host DSN whose hosts are all standbys (issue 22): libpq refuses each for
    ``target_session_attrs``; one line after ``source.connect_timeout``, libpq's reason.

    The test asks the (primary) test server for a standby: the same refusal, mirrored.
    """
    dsn = make_conninfo(pg_dsn, target_session_attrs="standby")
    start = time.monotonic()
    done = walcast(
        "run", "--dsn", dsn, "--slot", "s", "--publication", "p", "--bootstrap-servers",
        kafka_bootstrap, "--format", "json", "--metrics-port", "0", "--connect-timeout", "3",
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert 3 <= time.monotonic() - start < 20
    _, errors = _split(done.stderr)
    assert len(errors) == 1, done.stderr
    assert "server is not in hot standby mode" in errors[0], errors[0]
    assert "walcast gave up after 3 s without reaching PostgreSQL once" in errors[0]


def test_the_default_connect_timeout_is_named_as_a_default(
    kafka_bootstrap: str, refused: int
) -> None:
    """30 s when nothing sets it (the line says it is the default)."""
    port = refused
    start = time.monotonic()
    done = walcast(
        "run", "--dsn", f"host=127.0.0.1 port={port} dbname=app user=cdc", "--slot", "s",
        "--publication", "p", "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--metrics-port", "0", timeout=120,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert 30 <= time.monotonic() - start < 50
    _, errors = _split(done.stderr)
    assert len(errors) == 1
    assert "(source.connect_timeout, default 30 s)" in errors[0]


def test_connect_timeout_0_keeps_trying(kafka_bootstrap: str, refused: int) -> None:
    port = refused
    done = walcast(
        "run", "--dsn", f"host=127.0.0.1 port={port} dbname=app user=cdc", "--slot", "s",
        "--publication", "p", "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--metrics-port", "0", "--connect-timeout", "0", stop_after=8,
    )  # fmt: skip
    events, errors = _split(done.stderr)
    assert errors == []
    lost = [e for e in events if e["event"] == "source_lost"]
    assert len(lost) >= 3, done.stderr  # 0.5 + 1 + 2 + 4 s: a warning each, as before


def test_a_daemon_that_connected_once_keeps_reconnecting(
    pg_dsn: str, kafka_bootstrap: str, stream: tuple[str, str, str], tmp_path: Path
) -> None:
    table, pub, slot = stream
    params = conninfo_to_dict(pg_dsn)
    proxy = ReopenableProxy((str(params.get("host", "127.0.0.1")), int(params.get("port", 5432))))
    proxy.up()
    through = make_conninfo(pg_dsn, host="127.0.0.1", port=str(proxy.port))
    daemon = RunningDaemon(
        "--dsn", through, "--slot", slot, "--publication", pub, "--snapshot", "never",
        "--bootstrap-servers", kafka_bootstrap, "--format", "json", "--metrics-port", "0",
        "--topic", f"{slot}.{{table}}", "--heartbeat-interval", "1", "--connect-timeout", "2",
        log_path=tmp_path / "run.log",
    )  # fmt: skip
    try:
        _wait_for(daemon, "session_started", 60)
        proxy.down()  # the server is gone for four times connect_timeout
        time.sleep(8)
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        assert "source_lost" in daemon.log()
        proxy.up()
        _wait_for(daemon, "session_started", 60, count=2)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} VALUES (1)")
        wait_caught_up(pg_dsn, slot, current_lsn(pg_dsn), daemon, timeout=60)
        assert daemon.stop(timeout=60) == 0
        _, errors = _split(daemon.log())
        assert errors == []
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        proxy.down()


class _WrongPassword:
    """A PostgreSQL that refuses every password (28P01), as a real server words it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with suppress(OSError), conn:
                conn.settimeout(10)
                while True:
                    size = struct.unpack("!i", conn.recv(4, socket.MSG_WAITALL))[0]
                    body = conn.recv(size - 4, socket.MSG_WAITALL)
                    if struct.unpack("!i", body[:4])[0] in (80877103, 80877104):  # SSL, GSS
                        conn.sendall(b"N")
                        continue
                    break
                fields = b"".join(
                    code + text.encode() + b"\0"
                    for code, text in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", "28P01"),
                                       (b"M", 'password authentication failed for user "cdc"'))
                ) + b"\0"  # fmt: skip
                conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)

    def close(self) -> None:
        self.server.close()


def test_a_refused_login_stops_at_once(kafka_bootstrap: str) -> None:
    server = _WrongPassword()
    try:
        start = time.monotonic()
        done = walcast(
            "run", "--slot", "s", "--publication", "p", "--bootstrap-servers", kafka_bootstrap,
            "--format", "json", "--metrics-port", "0", "--connect-timeout", "60",
            env={"WALCAST_DSN": f"host=127.0.0.1 port={server.port} dbname=app user=cdc "
                                f"password={SECRET} sslmode=disable"},
            timeout=90,
        )  # fmt: skip
        assert time.monotonic() - start < 10
    finally:
        server.close()
    assert done.returncode == 3, done.stderr
    events, errors = _split(done.stderr)
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("the server refused the password of role 'cdc'")
    assert not [e for e in events if e["event"] in ("source_lost", "retrying")]
    assert SECRET not in done.stderr


# -- Kafka away at the start (item 8) --------------------------------------------------------


def test_kafka_down_at_the_start_is_one_line_then_one_a_minute(
    pg_dsn: str, stream: tuple[str, str, str], tmp_path: Path, refused: int
) -> None:
    _, pub, slot = stream
    dead = f"127.0.0.1:{refused}"
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--snapshot", "never",
        "--bootstrap-servers", dead, "--format", "json", "--metrics-port", "0",
        log_path=tmp_path / "run.log", env={"WALCAST__KAFKA__CONNECT_TIMEOUT": "3"},
    )  # fmt: skip
    started = time.monotonic()
    try:
        _wait_for(daemon, "kafka_unreachable", 20)
        first = time.monotonic() - started
        assert first < 12, first  # within kafka.connect_timeout (and the start of Python)
        assert not _slot_active(pg_dsn, slot)  # no replication connection held meanwhile
        time.sleep(max(0.0, 70 - (time.monotonic() - started)))
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        assert not _slot_active(pg_dsn, slot)
        stopping = time.monotonic()
        assert daemon.stop(timeout=60) == 0
        assert time.monotonic() - stopping < 10
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    log = daemon.log()
    events, errors = _split(log)
    assert errors == []
    assert "%3|" not in log
    seen = [(e["event"], e["level"]) for e in events]
    reports = [e for e in events if e["event"] == "kafka_unreachable"]
    assert [e["seconds"] for e in reports] in ([3, 63], [3, 64], [4, 64]), reports
    assert all(dead in e["detail"] and "Connection refused" in e["detail"] for e in reports)
    assert "repeats once a minute" in reports[0]["detail"]
    # Nothing else of note: no librdkafka line, no session restarted, no stream opened.
    # The wait is named at once (issue 38.3), then reported after kafka.connect_timeout.
    assert [s for s in seen if s[1] in ("warning", "error")] == [
        ("kafka_waiting", "warning"),
        ("kafka_unreachable", "error"),
        ("kafka_unreachable", "error"),
    ]
    assert not {"kafka_client", "retrying", "source_lost", "session_started"} & {
        e["event"] for e in events
    }


def test_the_stream_starts_once_kafka_answers(
    pg_dsn: str, kafka_bootstrap: str, stream: tuple[str, str, str], tmp_path: Path
) -> None:
    table, pub, slot = stream
    host, _, port = kafka_bootstrap.rpartition(":")
    proxy = ReopenableProxy((host, int(port)))  # down: nothing listens on its port yet
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", slot, "--publication", pub, "--snapshot", "never",
        "--bootstrap-servers", f"127.0.0.1:{proxy.port}", "--format", "json",
        "--topic", f"{slot}.{{table}}", "--metrics-port", "0", "--heartbeat-interval", "1",
        log_path=tmp_path / "run.log", env={"WALCAST__KAFKA__CONNECT_TIMEOUT": "2"},
    )  # fmt: skip
    try:
        _wait_for(daemon, "kafka_unreachable", 30)
        proxy.up()
        _wait_for(daemon, "session_started", 60)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} VALUES (1)")
        wait_caught_up(pg_dsn, slot, current_lsn(pg_dsn), daemon, timeout=60)
        assert daemon.stop(timeout=60) == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        proxy.down()
    events, errors = _split(daemon.log())
    assert errors == []
    names = [e["event"] for e in events]
    assert names.count("kafka_unreachable") == 1
    assert names.count("session_started") == 1
    assert names.index("kafka_unreachable") < names.index("kafka_reachable")
    assert names.index("kafka_reachable") < names.index("session_started")
    assert "kafka_client" not in names

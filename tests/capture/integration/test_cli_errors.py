"""Bad input gets one line naming the problem and the fix, a non-zero exit, no traceback."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.support import scenario as sc

pytestmark = pytest.mark.integration
SERVICES = sc.REPO / "scripts" / "local-services"


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("walcast: error: ")
    assert "hint:" in line
    for needle in needles:
        assert needle in line
    return line


@pytest.fixture
def names(pg_dsn: str):
    tag = uuid.uuid4().hex[:8]
    slot, pub = f"walcast_err_{tag}", f"walcast_err_pub_{tag}"
    yield slot, pub
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        sc.drop_slot(conn, slot)
        conn.execute(f'DROP PUBLICATION IF EXISTS "{pub}"')


def tail(dsn: str, slot: str, pub: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return sc.walcast(
        "tail", "--dsn", dsn, "--slot", slot, "--publication", pub, *extra, timeout=60
    )


def without_password_warning(
    done: subprocess.CompletedProcess[str],
) -> subprocess.CompletedProcess[str]:
    """``done`` less the one ``walcast: warning:`` line a password in ``--dsn`` gets."""
    lines = done.stderr.splitlines(keepends=True)
    warnings = [line for line in lines if line.startswith("walcast: warning: --dsn holds a")]
    assert len(warnings) == 1, done.stderr
    rest = "".join(line for line in lines if line not in warnings)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, rest)


def test_unreachable_server(names) -> None:
    slot, pub = names
    done = tail("host=127.0.0.1 port=1 dbname=x user=y password=hunter2", slot, pub)
    line = assert_one_line_error(
        without_password_warning(done), "cannot connect to PostgreSQL", "port=1", "--dsn"
    )
    assert "hunter2" not in done.stderr + done.stdout
    assert line


def test_malformed_dsn(names) -> None:
    slot, pub = names
    done = tail("host=x this is not a dsn password=hunter2", slot, pub)
    assert_one_line_error(without_password_warning(done), "--dsn")
    assert "hunter2" not in done.stderr


def test_missing_publication(pg_dsn: str, names) -> None:
    slot, pub = names
    done = tail(pg_dsn, slot, pub, "--create-slot")
    assert_one_line_error(done, f"publication {pub!r} does not exist", "--create-publication")


def test_missing_slot(pg_dsn: str, names) -> None:
    slot, pub = names
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE PUBLICATION "{pub}" FOR ALL TABLES')
    done = tail(pg_dsn, slot, pub)
    assert_one_line_error(done, f"replication slot {slot!r} does not exist", "--create-slot")


def test_slot_with_another_plugin(pg_dsn: str, names) -> None:
    slot, pub = names
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE PUBLICATION "{pub}" FOR ALL TABLES')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
    done = tail(pg_dsn, slot, pub)
    assert_one_line_error(done, "'test_decoding'", "'pgoutput'")


def test_slot_busy_in_another_process(pg_dsn: str, names) -> None:
    slot, pub = names
    first = subprocess.Popen(
        [sys.executable, "-m", "capture", "tail", "--dsn", pg_dsn, "--slot", slot,
         "--publication", pub, "--create-slot", "--create-publication"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=sc.REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with psycopg.connect(pg_dsn) as conn:
                row = conn.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
            if row and row[0]:
                break
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            time.sleep(0.2)
        else:
            pytest.fail("first tail never became active")
        done = tail(pg_dsn, slot, pub)
        assert_one_line_error(done, f"replication slot {slot!r} is in use", f"PID {row[0]}")
    finally:
        first.terminate()
        assert first.wait(timeout=30) == 0, "SIGTERM must end tail cleanly with exit 0"


def test_unknown_format_lists_valid_ones(pg_dsn: str, names) -> None:
    slot, pub = names
    done = tail(pg_dsn, slot, pub, "--format", "xml")
    assert done.returncode != 0
    assert "unknown format 'xml'; valid formats: json, canal" in done.stderr
    assert "Traceback" not in done.stderr


def test_proto_version_too_new_for_server(pg_dsn: str, names) -> None:
    slot, pub = names
    with psycopg.connect(pg_dsn) as conn:
        version = int(conn.execute("SHOW server_version_num").fetchone()[0])
    if version >= 160000:
        pytest.skip("the server supports every protocol version")  # not silent: reported by -ra
    done = tail(pg_dsn, slot, pub, "--proto-version", "4", "--create-slot", "--create-publication")
    assert_one_line_error(done, "--proto-version 4 needs PostgreSQL 16", "--proto-version 3")


@pytest.fixture(scope="module")
def replica_level_dsn():
    """A second, real server with wal_level=replica (its own state dir, stopped after).

    The state dir is made with mkdtemp (pytest's tmp dirs are private to root, and the
    server runs as another OS user).
    """
    state = tempfile.mkdtemp(prefix="walcast-replica-pg-")
    Path(state).chmod(0o755)
    env = {**os.environ, "WALCAST_SERVICES_DIR": str(state), "WALCAST_PG_WAL_LEVEL": "replica"}
    env.pop("WALCAST_PG_PORT", None)
    started = subprocess.run(
        [str(SERVICES), "start", "pg"], capture_output=True, text=True, env=env, timeout=300,
        check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    dsn = next(
        shlex.split(line.partition("=")[2])[0]
        for line in started.stdout.splitlines()
        if line.startswith("export WALCAST_TEST_DSN=")
    )
    yield dsn
    subprocess.run([str(SERVICES), "stop", "pg"], capture_output=True, env=env, check=False)
    shutil.rmtree(state, ignore_errors=True)


def test_wal_level_replica(replica_level_dsn: str, names) -> None:
    slot, pub = names
    done = tail(replica_level_dsn, slot, pub, "--create-slot", "--create-publication")
    assert_one_line_error(
        done, "wal_level is 'replica'", "logical replication needs wal_level=logical",
        "ALTER SYSTEM SET wal_level = logical",
    )  # fmt: skip


# -- passwords: never from the file, one warning from --dsn (issue 22.5) ------------------

SECRET = "Pw22-S3cr3t"
PLACES = ("$PGPASSWORD", "~/.pgpass")
RUN_PLACES = (*PLACES, "source.password_env", "source.password_file")


@pytest.mark.parametrize(
    "command",
    [
        ("tail", "--slot", "s", "--publication", "p"),
        ("status",),
        ("slot", "drop", "--slot", "s"),
        ("snapshot", "--table", "a.b"),
    ],
    ids=["tail", "status", "slot-drop", "snapshot"],
)
@pytest.mark.parametrize(
    "password", [f"password={SECRET}", f"password='{SECRET} x'"], ids=["plain", "quoted"]
)
def test_a_password_in_the_dsn_flag_gets_one_warning(
    command: tuple[str, ...], password: str
) -> None:
    dsn = f"host=127.0.0.1 port=1 dbname=x user=y {password}"
    done = sc.walcast(*command, "--dsn", dsn, timeout=60)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    warnings = [line for line in lines if line.startswith("walcast: warning: ")]
    assert len(warnings) == 1, done.stderr
    assert "--dsn holds a password" in warnings[0]
    assert "visible to every user of this machine (ps)" in warnings[0]
    assert all(place in warnings[0] for place in PLACES), warnings[0]
    assert lines[0] == warnings[0]  # said before anything else happens
    assert_one_line_error(without_password_warning(done), "cannot connect to PostgreSQL")
    assert SECRET.split("-")[1] not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "command",
    [("tail", "--slot", "s", "--publication", "p"), ("status",), ("snapshot", "--table", "a.b")],
    ids=["tail", "status", "snapshot"],
)
def test_a_password_in_walcast_dsn_is_taken_silently(command: tuple[str, ...]) -> None:
    dsn = f"host=127.0.0.1 port=1 dbname=x user=y password={SECRET}"
    done = sc.walcast(*command, env={"WALCAST_DSN": dsn}, timeout=60)
    assert "warning" not in done.stderr
    assert_one_line_error(done, "cannot connect to PostgreSQL")
    assert SECRET not in done.stdout + done.stderr


def _events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


def test_run_warns_of_a_password_in_the_dsn_flag_only(tmp_path: Path) -> None:
    flags = ("--slot", "s", "--publication", "p", "--bootstrap-servers", "b:9092",
             "--format", "json", "--print-config")  # fmt: skip
    dsn = f"host=db user=cdc password={SECRET}"
    done = sc.walcast("run", "--dsn", dsn, *flags, timeout=60)
    assert done.returncode == 0, done.stderr
    (event,) = _events(done.stderr)
    assert (event["event"], event["level"]) == ("password_in_command_line", "warning")
    assert all(place in event["detail"] for place in RUN_PLACES), event
    assert "(ps)" in event["detail"]
    assert SECRET not in done.stdout + done.stderr
    for env in ({"WALCAST_DSN": dsn}, {"WALCAST__SOURCE__DSN": dsn}):
        quiet = sc.walcast("run", *flags, env=env, timeout=60)
        assert quiet.returncode == 0, quiet.stderr
        assert quiet.stderr == ""
        assert "password=********" in quiet.stdout
        assert SECRET not in quiet.stdout


@pytest.mark.parametrize(
    "dsn",
    [f"host=db user=cdc password={SECRET}", f"postgresql://cdc:{SECRET}@db/app"],
    ids=["keyword", "uri"],
)
def test_run_refuses_a_password_in_the_files_dsn(tmp_path: Path, dsn: str) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(
        f'[source]\ndsn = "{dsn}"\nslot = "s"\npublications = ["p"]\n'
        '[kafka]\nbootstrap_servers = "b:9092"\n[[outputs]]\nformat = "json"\n'
    )
    done = sc.walcast("run", "--config", str(config), timeout=60)
    line = assert_one_line_error(done, "source.dsn: ", "holds a password", *RUN_PLACES)
    assert done.returncode == 2
    assert SECRET not in done.stdout + done.stderr
    assert line


def test_deprecated_degraded_after_and_the_new_flags_through_the_cli() -> None:
    done = sc.walcast(
        "run", "--slot", "s", "--publication", "p", "--bootstrap-servers", "b:9092",
        "--format", "json", "--print-config", "--no-failover-slot", "--receive-timeout", "45",
        env={"WALCAST_DSN": "host=db user=cdc", "WALCAST__DAEMON__DEGRADED_AFTER": "7"},
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\nfailover_slot = false\n" in done.stdout
    assert "\nreceive_timeout = 45.0\n" in done.stdout
    assert "\nunhealthy_after = 7.0\n" in done.stdout
    (event,) = _events(done.stderr)
    assert event["event"] == "setting_deprecated"
    assert (event["setting"], event["replaced_by"]) == (
        "daemon.degraded_after",
        "daemon.unhealthy_after",
    )
    bad = sc.walcast(
        "run", "--slot", "s", "--publication", "p", "--bootstrap-servers", "b:9092",
        "--format", "json", "--receive-timeout", "0.5", env={"WALCAST_DSN": "host=db"},
        timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip() == "walcast: error: --receive-timeout: 0.5 must be at least 1"


class _AuthServer:
    """A PostgreSQL that refuses every login: a wrong password, or none given.

    Just the start of the wire protocol: SSL/GSS requests are refused, the startup message is
    answered with an ErrorResponse (28P01, as PostgreSQL words it) or a cleartext password
    request, which libpq without a password ends with ``fe_sendauth: no password supplied``.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            while True:
                size = struct.unpack("!i", _read(conn, 4))[0]
                body = _read(conn, size - 4)
                if struct.unpack("!i", body[:4])[0] in (80877103, 80877104):  # SSL, GSS
                    conn.sendall(b"N")
                    continue
                break
            if self.mode == "wrong":
                fields = b"".join(
                    code + text.encode() + b"\0"
                    for code, text in (
                        (b"S", "FATAL"), (b"V", "FATAL"), (b"C", "28P01"),
                        (b"M", 'password authentication failed for user "wc_user"'),
                    )
                ) + b"\0"  # fmt: skip
                conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
            else:
                conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # cleartext password, please
            conn.recv(1024)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.server.close()


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("wrong", "the server refused the password of role 'wc_user'"),
        ("missing", "the server wants a password for role 'wc_user' and none was given"),
    ],
)
@pytest.mark.parametrize("command", ["tail", "run"])
def test_failed_login_hints_never_suggest_the_dsn_flag(
    mode: str, needle: str, command: str
) -> None:
    server = _AuthServer(mode)
    try:
        dsn = f"host=127.0.0.1 port={server.port} dbname=x user=wc_user sslmode=disable"
        env = {"PGPASSWORD": "", "PGPASSFILE": "/nonexistent", "WALCAST_DSN": dsn}
        if command == "tail":
            done = sc.walcast("tail", "--slot", "s", "--publication", "p", env=env, timeout=60)
            lines = [line for line in done.stderr.splitlines() if line.strip()]
        else:
            done = sc.walcast(
                "run", "--slot", "s", "--publication", "p", "--bootstrap-servers",
                "127.0.0.1:1", "--format", "json", "--metrics-port", "0", env=env, timeout=90,
            )  # fmt: skip
            lines = [line for line in done.stderr.splitlines() if not line.startswith("{")]
        assert done.returncode == 3, done.stderr
        assert len(lines) == 1, done.stderr
        line = lines[0]
        assert line.startswith("walcast: error: " + needle), line
        assert "$PGPASSWORD" in line
        assert "~/.pgpass" in line
        assert "--dsn" not in line.partition("(hint:")[2], line
        assert "password=" not in line
    finally:
        server.close()

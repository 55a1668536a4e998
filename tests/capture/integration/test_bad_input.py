"""Bad input through the CLI, as a user meets it: one line, a non-zero exit, no secret.

Every case runs ``python -m capture ...`` against real servers: the shared PostgreSQL, the
shared Kafka, and a second PostgreSQL of this module's own whose pg_hba.conf asks every role
but the superuser for a password (so that wrong passwords and missing privileges are
real). Each case asserts: exactly one ``walcast: error:`` line (and, for ``tail``, nothing
else on stderr; ``run`` may also log JSON events), a non-zero exit, no traceback, and that
no part of the marked password appears anywhere in stdout or stderr.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bench.kit import wire
from tests.capture.integration.fake_walsender import FakeWalsender
from tests.support import scenario as sc

pytestmark = pytest.mark.integration
SERVICES = sc.REPO / "scripts" / "local-services"
MARK = "S3CR3T"
"""Part of every password below; it must never be printed, whole or in part."""
PASSWORD = f"Wk7{MARK}m4rk"
SPACED = f"Wk7{MARK} m4rk{MARK}"
"""A password with a space: libpq cannot parse it unquoted, and quotes its second word."""
PASSWORD_WARNING = "walcast: warning: --dsn holds a password"


# -- helpers


def walcast(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> Run:
    started = time.monotonic()
    done = sc.walcast(*args, env=env, timeout=timeout)
    return Run(done, time.monotonic() - started)


class Run:
    """A finished CLI run and what a user saw."""

    def __init__(self, done: subprocess.CompletedProcess[str], seconds: float) -> None:
        self.done = done
        self.seconds = seconds

    @property
    def output(self) -> str:
        return self.done.stdout + self.done.stderr

    def error_line(self, *needles: str, json_logs: bool = False, hint: bool = True) -> str:
        """Assert the one-line-error contract; return the line."""
        done = self.done
        assert done.returncode != 0, self.output
        assert "Traceback" not in self.output, self.output
        assert MARK not in self.output, self.output
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        # A password in --dsn gets one warning line (issue 22.5); it never shows the password.
        lines = [line for line in lines if not line.startswith(PASSWORD_WARNING)]
        errors = [line for line in lines if line.startswith("walcast: error: ")]
        assert len(errors) == 1, done.stderr
        others = [line for line in lines if line not in errors]
        if json_logs:
            for line in others:
                json.loads(line)  # structlog events only, never a raw library line
        else:
            assert not others, done.stderr
        line = errors[0]
        assert "hint:" in line or not hint, line
        for needle in needles:
            assert needle in line, line
        return line


def dsn_of(base: str, **overrides: str) -> str:
    """``base`` with some key=value settings replaced (values quoted for libpq)."""
    params = dict(part.split("=", 1) for part in shlex.split(base))
    params.update(overrides)
    return " ".join(f"{k}='{v}'" if " " in v else f"{k}={v}" for k, v in params.items())


@pytest.fixture(scope="module")
def locked() -> Iterator[dict[str, str]]:
    """A second, real server where every role but walcast needs a password.

    Roles: ``wc_repl`` (REPLICATION, SELECT on the table), ``wc_norepl`` (no REPLICATION),
    ``wc_nosel`` (REPLICATION, no SELECT); all with password :data:`PASSWORD`. Table
    ``public.t`` and publication ``p`` exist. Yields DSNs by role (without password) and
    ``superuser``.
    """
    state = tempfile.mkdtemp(prefix="walcast-locked-pg-")
    Path(state).chmod(0o755)
    env = {**os.environ, "WALCAST_SERVICES_DIR": state}
    env.pop("WALCAST_PG_PORT", None)
    started = subprocess.run(
        [str(SERVICES), "start", "pg"], capture_output=True, text=True, env=env, timeout=300,
        check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    superuser = next(
        shlex.split(line.partition("=")[2])[0]
        for line in started.stdout.splitlines()
        if line.startswith("export WALCAST_TEST_DSN=")
    )
    try:
        hba = Path(state) / "pg" / "data" / "pg_hba.conf"
        owner = hba.stat()
        hba.write_text(
            "local all all trust\nlocal replication all trust\n"
            "host all walcast 127.0.0.1/32 trust\nhost replication walcast 127.0.0.1/32 trust\n"
            "host all all 127.0.0.1/32 scram-sha-256\n"
            "host replication all 127.0.0.1/32 scram-sha-256\n"
        )
        os.chown(hba, owner.st_uid, owner.st_gid)
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE TABLE t (id integer PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t VALUES (1, 'one')")
            conn.execute("CREATE PUBLICATION p FOR TABLE t")
            for role, attributes in (
                ("wc_repl", "REPLICATION"), ("wc_norepl", ""), ("wc_nosel", "REPLICATION"),
            ):  # fmt: skip
                conn.execute(f"CREATE ROLE {role} LOGIN {attributes} PASSWORD '{PASSWORD}'")
            conn.execute("GRANT SELECT ON t TO wc_repl")
        yield {
            "superuser": superuser,
            **{role: dsn_of(superuser, user=role) for role in ("wc_repl", "wc_norepl", "wc_nosel")},
        }
    finally:
        subprocess.run([str(SERVICES), "stop", "pg"], capture_output=True, env=env, check=False)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def slot_name(locked: dict[str, str]) -> Iterator[str]:
    name = f"wc_bad_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(locked["superuser"], autocommit=True) as conn:
        sc.drop_slot(conn, name)


def tail(dsn: str, slot: str, *extra: str, publication: str = "p") -> Run:
    return walcast(
        "tail", "--dsn", dsn, "--slot", slot, "--publication", publication,
        "--snapshot", "never", *extra,
    )  # fmt: skip


def run(dsn: str, slot: str, kafka: str, *extra: str, env: dict[str, str] | None = None) -> Run:
    return walcast(
        "run", "--dsn", dsn, "--slot", slot, "--publication", "p", "--bootstrap-servers", kafka,
        "--format", "json", "--metrics-port", "0", *extra, env=env, timeout=120,
    )  # fmt: skip


# -- passwords never printed (issue 12 item 4)


@pytest.mark.parametrize(
    ("dsn_template", "needle"),
    [
        ("host=127.0.0.1 port=1 dbname=walcast user=wc_repl password={SPACED}", "dsn: not a"),
        ("host=127.0.0.1 port=1 dbname=walcast user=wc_repl password = {SPACED} sslmode=disable",
         "dsn: not a"),
        ("postgresql://wc_repl:Wk7%zz{MARK}@127.0.0.1:1/walcast", "invalid percent-encoded"),
        ("postgresql://wc_repl:{PASSWORD}@127.0.0.1:1/walcast?password=x%zz{MARK}",
         "invalid percent-encoded"),
        ("postgresql://wc_repl:{PASSWORD}@[::1/walcast", "dsn: not a"),
        ("host=127.0.0.1 port=1 dbname=walcast user=wc_repl password={PASSWORD}",
         "cannot connect to PostgreSQL"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["tail", "run", "run-env", "status"])
def test_no_password_in_any_dsn_error(
    dsn_template: str, needle: str, command: str, kafka_bootstrap: str
) -> None:
    dsn = dsn_template.format(SPACED=SPACED, MARK=MARK, PASSWORD=PASSWORD)
    unreachable = needle == "cannot connect to PostgreSQL"
    if unreachable and command != "tail":
        # The daemon retries a server it cannot reach (transient): stop it after a while.
        env = {"WALCAST_DSN": dsn} if command == "run-env" else None
        flags = () if command == "run-env" else ("--dsn", dsn)
        done = sc.walcast(
            "run", *flags, "--slot", "wc_bad_never_created", "--publication", "p",
            "--bootstrap-servers", kafka_bootstrap, "--format", "json", "--metrics-port", "0",
            env=env, stop_after=6,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert MARK not in output, output
        assert "Traceback" not in output, output
        events = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
        lost = [e for e in events if e["event"] == "source_lost"]
        assert lost, done.stderr
        assert "cannot connect to PostgreSQL" in lost[0]["error"]
        return
    if command == "tail":
        done = tail(dsn, "wc_bad_never_created")
        done.error_line(needle)
    elif command == "status":
        done = walcast("status", "--dsn", dsn)
        done.error_line(hint=False)
    elif command == "run":
        done = run(dsn, "wc_bad_never_created", kafka_bootstrap)
        done.error_line(needle, json_logs=True)
    else:  # the DSN from the environment, as containers pass it
        done = walcast(
            "run", "--slot", "wc_bad_never_created", "--publication", "p",
            "--bootstrap-servers", kafka_bootstrap, "--format", "json", "--metrics-port", "0",
            env={"WALCAST_DSN": dsn}, timeout=120,
        )  # fmt: skip
        # the line names the setting as it was given: $WALCAST_DSN, not --dsn
        done.error_line(needle.replace("dsn: not a", "$WALCAST_DSN: not a"), json_logs=True)


def test_no_password_from_the_environment_in_other_commands(kafka_bootstrap: str) -> None:
    secrets = {"PGPASSWORD": PASSWORD, "KAFKA_PASSWORD": PASSWORD, "WALCAST_DSN": f"x {SPACED}"}
    produce = walcast(
        "produce-test-stream", "--format", "json", "--count", "5", "--kafka", "127.0.0.1:1",
        "--topic", "walcast.bad", env=secrets,
    )  # fmt: skip
    produce.error_line("127.0.0.1:1", hint=False)
    consume = walcast(
        "consume", "--bootstrap-servers", "127.0.0.1:1", "--topic", "nothing", "--idle-timeout",
        "3", env=secrets,
    )  # fmt: skip
    assert MARK not in consume.output
    assert "Traceback" not in consume.output


# -- refusals are terminal (item 5)


def test_wrong_password_is_one_line_for_tail(locked: dict[str, str], slot_name: str) -> None:
    done = tail(dsn_of(locked["wc_repl"], password=f"wrong{MARK}"), slot_name)
    done.error_line("refused the password of role 'wc_repl'", "retrying cannot help")
    assert done.done.returncode == 3


def test_missing_password_is_one_line(locked: dict[str, str], slot_name: str) -> None:
    env = {"PGPASSFILE": "/nonexistent", "PGPASSWORD": ""}
    done = walcast(
        "tail", "--dsn", locked["wc_repl"], "--slot", slot_name, "--publication", "p",
        env=env,
    )  # fmt: skip
    done.error_line("wants a password for role 'wc_repl'")


def test_run_with_a_wrong_password_exits_instead_of_retrying(
    locked: dict[str, str], slot_name: str, kafka_bootstrap: str
) -> None:
    done = run(
        dsn_of(locked["wc_repl"], password=f"wrong{MARK}"), slot_name, kafka_bootstrap,
        "--create-slot",
    )  # fmt: skip
    done.error_line("refused the password of role 'wc_repl'", json_logs=True)
    assert done.done.returncode == 3
    assert done.seconds < 60
    assert '"retrying"' not in done.done.stderr
    assert '"source_lost"' not in done.done.stderr


def test_run_with_the_password_from_an_environment_variable(
    locked: dict[str, str], slot_name: str, kafka_bootstrap: str
) -> None:
    done = run(
        locked["wc_repl"], slot_name, kafka_bootstrap,
        env={"WALCAST__SOURCE__PASSWORD_ENV": "MY_PG_PASSWORD", "MY_PG_PASSWORD": f"no{MARK}"},
    )  # fmt: skip
    done.error_line("refused the password of role 'wc_repl'", json_logs=True)


def test_a_role_without_replication_creating_a_slot(locked: dict[str, str], slot_name: str) -> None:
    done = tail(dsn_of(locked["wc_norepl"], password=PASSWORD), slot_name, "--create-slot")
    done.error_line(
        f"role 'wc_norepl' may not create replication slot '{slot_name}'",
        "ALTER ROLE wc_norepl WITH REPLICATION",
    )


def test_a_role_without_replication_streaming(locked: dict[str, str], slot_name: str) -> None:
    with psycopg.connect(locked["superuser"], autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot_name,))
    done = tail(dsn_of(locked["wc_norepl"], password=PASSWORD), slot_name)
    done.error_line(
        "role 'wc_norepl' may not open a replication connection",
        "ALTER ROLE wc_norepl WITH REPLICATION",
    )


def test_run_as_a_role_without_replication_exits(
    locked: dict[str, str], slot_name: str, kafka_bootstrap: str
) -> None:
    done = run(dsn_of(locked["wc_norepl"], password=PASSWORD), slot_name, kafka_bootstrap,
               "--create-slot")  # fmt: skip
    done.error_line("wc_norepl", "REPLICATION", json_logs=True)
    assert done.seconds < 60


def test_a_role_without_select_loading_the_table(locked: dict[str, str], slot_name: str) -> None:
    done = walcast(
        "tail", "--dsn", dsn_of(locked["wc_nosel"], password=PASSWORD), "--slot", slot_name,
        "--publication", "p", "--create-slot", "--snapshot", "initial", "--max-events", "1",
    )  # fmt: skip
    done.error_line("permission denied for table t", hint=False)  # (the load's own message)


# -- the server's own error (item 9)


def _wait_active(dsn: str, slot: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.2)
    pytest.fail(f"slot {slot} never became active")


def test_a_publication_dropped_while_streaming(pg_dsn: str) -> None:
    tag = uuid.uuid4().hex[:8]
    table, pub, slot = f"wc_bad_t_{tag}", f"wc_bad_p_{tag}", f"wc_bad_s_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        command = [
            sys.executable, "-m", "capture", "tail", "--dsn", pg_dsn, "--slot", slot,
            "--publication", pub, "--snapshot", "never",
        ]  # fmt: skip
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=sc.REPO
        ) as process:
            _wait_active(pg_dsn, slot, process)
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(f"DROP PUBLICATION {pub}")
                conn.execute(f"INSERT INTO {table} VALUES (1)")
            out, err = process.communicate(timeout=60)
        done = Run(subprocess.CompletedProcess(command, process.returncode, out, err), 0.0)
        done.error_line(
            f'the server said: publication "{pub}" does not exist (SQLSTATE 42704)',
            f"slot '{slot}'",
        )
        assert done.done.returncode == 3
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP TABLE {table}")


@pytest.fixture(scope="module")
def sql_ascii_dsn(pg_dsn: str) -> Iterator[str]:
    name = f"wc_ascii_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    dsn = dsn_of(pg_dsn, dbname=name)
    yield dsn
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = %s",
            (name,),
        )
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_a_sql_ascii_database_streams_utf8_and_stops_at_the_first_invalid_text(
    sql_ascii_dsn: str,
) -> None:
    with psycopg.connect(sql_ascii_dsn, autocommit=True) as conn:
        conn.execute("SET client_encoding = 'UTF8'")
        conn.execute("CREATE TABLE t (id integer PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION p FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        conn.execute("INSERT INTO t VALUES (1, 'café ☕')")
    good = tail(sql_ascii_dsn, "s", "--max-events", "1")
    assert good.done.returncode == 0, good.output
    assert json.loads(good.done.stdout)["after"] == {"id": "1", "v": "café ☕"}
    with psycopg.connect(sql_ascii_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (2, convert_from('\\xff'::bytea, 'SQL_ASCII'))")
    bad = tail(sql_ascii_dsn, "s")
    bad.error_line('invalid byte sequence for encoding "UTF8": 0xff', "SQLSTATE 22021")


def test_an_invalidated_slot_names_the_reason_and_the_fix(
    locked: dict[str, str], slot_name: str, kafka_bootstrap: str
) -> None:
    superuser = locked["superuser"]
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot_name,))
        try:
            for _ in range(6):  # more WAL than the slot may keep: the server invalidates it
                conn.execute("INSERT INTO t SELECT g, repeat('x', 200) FROM "
                             "generate_series(1000, 20000) g ON CONFLICT DO NOTHING")  # fmt: skip
                conn.execute("DELETE FROM t WHERE id >= 1000")
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
            lost = conn.execute(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot_name,)
            ).fetchone()
        finally:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")
    assert lost == ("lost",)
    for front_door in (tail(superuser, slot_name), run(superuser, slot_name, kafka_bootstrap)):
        line = front_door.error_line(
            f"replication slot {slot_name!r} was invalidated by the server",
            "max_slot_wal_keep_size",
            "can no longer be streamed",
            json_logs=True,
        )
        assert f"walcast slot drop --slot {slot_name} --yes" in line
        assert "--snapshot initial" in line
        assert front_door.done.returncode == 3


# -- set-up refusals (item 10)


def test_a_missing_publication_is_refused_up_front(locked: dict[str, str], slot_name: str) -> None:
    done = tail(dsn_of(locked["wc_repl"], password=PASSWORD), slot_name, "--create-slot",
                publication="nope")  # fmt: skip
    done.error_line("publication 'nope' does not exist", "--create-publication")


def test_creating_a_publication_without_the_privilege(
    locked: dict[str, str], slot_name: str
) -> None:
    done = tail(
        dsn_of(locked["wc_repl"], password=PASSWORD), slot_name, "--create-slot",
        "--create-publication", publication="wc_new_pub",
    )  # fmt: skip
    done.error_line("cannot create publication 'wc_new_pub' as role 'wc_repl'", "superuser")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))


# -- messages the decoder accepts but that do not fit (item 11), from a fake walsender

REL = wire.relation(16384, "public", "t", [(1, "id", 23, -1), (0, "v", 25, -1)])
GOOD = [
    (0x100, wire.begin(0x130, 0, 700)),
    (0x108, REL),
    (0x110, wire.insert(16384, [("t", b"1"), ("t", b"a")])),
    (0x130, wire.commit(0x130, 0x138, 0)),
]


def _bad_transaction(*messages: bytes, ts: int = 0) -> list[tuple[int, bytes]]:
    lsn = 0x200
    out = [(lsn, wire.begin(0x2F0, ts, 701))]
    for message in messages:
        lsn += 0x10
        out.append((lsn, message))
    return [*out, (0x2F0, wire.commit(0x2F0, 0x2F8, ts))]


@pytest.mark.parametrize(
    ("stream", "needles"),
    [
        pytest.param(
            _bad_transaction(wire.insert(16384, [("t", b"2"), ("t", b"b"), ("t", b"c")])),
            [
                "cannot decode pgoutput message 'I', WAL position 0/210, relation public.t",
                "the tuple has 3 columns",
                "describes 2",
            ],
            id="more-columns-than-the-relation",
        ),
        pytest.param(
            _bad_transaction(wire.insert(16384, [("t", b"2"), ("t", b"caf\xe9")])),
            ["WAL position 0/210, relation public.t column v", "not valid UTF-8"],
            id="text-that-is-not-utf8",
        ),
        pytest.param(
            _bad_transaction(wire.delete(16384, [("t", b"1"), ("t", b"a")], old_kind="K")),
            ["relation public.t column v", "old key image carries a value"],
            id="a-key-image-with-a-non-key-value",
        ),
        pytest.param(
            _bad_transaction(wire.insert(16384, [("t", b"2"), ("t", b"b")]), ts=2**62),
            ["message 'B' at offset 9, WAL position 0/200", "outside years 1 to 9999"],
            id="begin-time-2**62",
        ),
        pytest.param(
            _bad_transaction(wire.truncate([99999])),
            ["change for relation OID 99999 at WAL position 0/210"],
            id="truncate-of-an-unknown-relation",
        ),
        pytest.param(
            _bad_transaction(wire.insert(16384, [("b", b"\x07"), ("t", b"b")])),
            ["WAL position 0/210, relation public.t column id", "binary int4 value has 1 bytes"],
            id="a-1-byte-binary-int4",
        ),
        pytest.param(
            _bad_transaction(wire.insert(16384, [("b", b"\x00\x00\x00\x07"), ("b", b"\xff")])),
            ["WAL position 0/2F0, relation public.t column v", "not a valid text"],
            id="binary-text-that-is-not-utf8",
        ),
    ],
)
def test_a_message_that_does_not_fit_stops_the_stream_before_its_position(
    stream: list[tuple[int, bytes]], needles: list[str]
) -> None:
    server = FakeWalsender([*GOOD, *stream])
    try:
        done = walcast(
            "tail", "--dsn", server.dsn, "--slot", server.slot, "--publication", "p",
            "--snapshot", "never", "--proto-version", "1",
        )  # fmt: skip
    finally:
        server.close()
    done.error_line(*needles)
    assert done.done.returncode == 5
    assert server.flushed, "walcast sent no status update"
    assert max(server.flushed) < 0x200  # nothing of the bad transaction acknowledged

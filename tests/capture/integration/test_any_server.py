"""Any server, as its DBA set it up: every command gives the bytes a default server gives.

A DBA sets session defaults per database (``ALTER DATABASE … SET``) and per role (``ALTER
ROLE … SET``); walcast pins its own session on every connection
(:mod:`capture.replication.session`). Each case here sets one such default (or many at
once), then runs the CLI as a user would, as a role with only ``REPLICATION`` and
``SELECT`` on the published tables: ``tail`` with a load and then streaming, ``run`` with a
load and streaming into Kafka, ``status``, ``snapshot`` and ``slot drop``. The output must
equal what the same data gives with no such setting, document for document, apart from the
fields that say where and when a change happened (``xid``, ``commit_lsn``,
``commit_time``): each case runs on its own slot, so those differ by construction.

The data holds a value of every kind a session setting changes the text of (dates,
timestamps around a DST switch, intervals, floats, bytea, backslashes, non-ASCII text,
arrays of them) and a table large enough that a tiny ``statement_timeout`` or
``idle_in_transaction_session_timeout`` would end its load.

Encodings: a LATIN1 database gives the UTF-8 bytes of a UTF-8 one; an SQL_ASCII database
holding bytes that are not UTF-8 is refused in one line (the policy of
:mod:`capture.replication.session`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon
from tests.support.failover import Node, pg_os_user
from tests.support.ports import free_port
from tests.support.scenario import REPO, walcast

pytestmark = pytest.mark.integration

NEUTRAL = (
    "-c DateStyle=ISO -c IntervalStyle=postgres -c TimeZone=UTC -c extra_float_digits=1 "
    "-c bytea_output=hex -c standard_conforming_strings=on -c search_path=public "
    "-c statement_timeout=0 -c lock_timeout=0 -c idle_in_transaction_session_timeout=0 "
    "-c default_transaction_read_only=off -c client_min_messages=warning "
    "-c client_encoding=UTF8 -c synchronous_commit=on"
)
"""The test's own sessions (set-up and workload) ignore the DBA defaults under test."""

BULK_ROWS = 20_000
"""Rows of ``s.bulk``: a load that outlasts a tiny statement or idle-in-transaction timeout."""

TYPES_DDL = """
CREATE TABLE s.types (
    id int PRIMARY KEY,
    d date, ts timestamp, tstz timestamptz, t time, ttz timetz, iv interval,
    f4 float4, f8 float8, n numeric, b bytea, txt text, ok bool, j jsonb,
    ds date[], tstzs timestamptz[], ivs interval[], f8s float8[], bs bytea[]
)
"""

ROWS: list[tuple[Any, ...]] = [
    (1, "2024-02-29", "2024-03-31 02:30:00", "2024-03-31 00:59:59.999999+00", "23:59:59.5",
     "12:00:00+05:45", "1 year 2 mons 3 days 04:05:06.7", 0.1, 1.0000000000000002,
     "12345678901234567890.0000000001", b"\x00\\\xde\xad", "back\\slash 'quote' é ü ß",
     True, '{"a": [1, 2.5, "x\\\\y"]}', "{2024-01-02,1999-12-31}",
     '{"2024-10-27 00:30:00+00","2024-10-27 01:30:00+00"}',
     '{"-1 days +02:03:04","P1Y2M"}', "{1e-7,-0,1.7976931348623157e308}",
     '{"\\\\x00ff",NULL}'),
    (2, "0001-01-01 BC", "294276-12-31 23:59:59.999999", "infinity", "00:00:00",
     "00:00:00-03:30", "-178000000 years", 3.4028235e38, 5e-324, "-0.000001",
     b"", "", False, "[]", "{}", "{}", "{}", "{}", "{}"),
    (3, None, None, None, None, None, None, None, None, None, None, None, None, None, None,
     None, None, None, None),
]  # fmt: skip
"""Existing rows (the load); none with a value a setting could make ambiguous to parse."""

SETTINGS: list[tuple[str, str]] = [
    ("DateStyle", "SQL, DMY"), ("DateStyle", "SQL, MDY"), ("DateStyle", "German, DMY"),
    ("DateStyle", "German, MDY"), ("DateStyle", "Postgres, DMY"), ("DateStyle", "Postgres, MDY"),
    ("IntervalStyle", "postgres_verbose"), ("IntervalStyle", "sql_standard"),
    ("IntervalStyle", "iso_8601"),
    ("TimeZone", "Asia/Kathmandu"), ("TimeZone", "America/St_Johns"),
    ("TimeZone", "Europe/Berlin"),
    ("extra_float_digits", "-15"), ("extra_float_digits", "0"), ("extra_float_digits", "3"),
    ("bytea_output", "escape"), ("standard_conforming_strings", "off"),
    ("search_path", ""), ("search_path", "no_such_schema"),
    ("statement_timeout", "5ms"), ("lock_timeout", "1ms"),
    ("idle_in_transaction_session_timeout", "10ms"), ("idle_session_timeout", "300ms"),
    ("default_transaction_read_only", "on"), ("default_transaction_isolation", "serializable"),
    ("default_transaction_deferrable", "on"), ("client_min_messages", "debug5"),
    ("client_encoding", "LATIN1"),
]  # fmt: skip
"""Defaults a DBA may set, each tried alone (database level; the role level is below)."""

POSITION_FIELDS = ("xid", "commit_lsn", "commit_time")


@dataclass
class Source:
    """A database prepared like a user's: schema ``s``, publication ``pub``, role ``cdc``."""

    admin_dsn: str
    """The superuser's DSN to this database (the test's own set-up and workload)."""
    cdc_dsn: str
    """The CDC role's DSN: LOGIN REPLICATION, SELECT on the published tables, nothing else."""
    database: str
    role: str

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_dsn, autocommit=True, options=NEUTRAL)

    def setting(self, name: str, value: str, *, on: str = "database") -> None:
        """``ALTER DATABASE|ROLE … SET name = value`` (the role's, in any database)."""
        target = (
            sql.SQL("DATABASE {}").format(sql.Identifier(self.database))
            if on == "database"
            else sql.SQL("ROLE {}").format(sql.Identifier(self.role))
        )
        with self.admin() as conn:
            conn.execute(
                sql.SQL("ALTER {} SET {} = {}").format(
                    target, sql.Identifier(name), sql.Literal(value)
                )
            )

    def reset(self) -> None:
        with self.admin() as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} RESET ALL").format(sql.Identifier(self.database))
            )
            conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(sql.Identifier(self.role)))

    def drop_slot(self, slot: str) -> None:
        with self.admin() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (slot,),
            )

    def slot_exists(self, slot: str) -> bool:
        with self.admin() as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
        return row is not None


def _database(admin_dsn: str, name: str, encoding: str, role: str, *, bulk: bool = True) -> Source:
    with psycopg.connect(admin_dsn, autocommit=True, options=NEUTRAL) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING {} LC_COLLATE 'C' LC_CTYPE 'C'"
            ).format(sql.Identifier(name), sql.Literal(encoding))
        )
    source = Source(
        make_conninfo(admin_dsn, dbname=name),
        make_conninfo(admin_dsn, dbname=name, user=role),
        name,
        role,
    )
    with source.admin() as conn:
        conn.execute("CREATE SCHEMA s")
        conn.execute(TYPES_DDL)
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(ROWS[0]))
            cur.executemany(f"INSERT INTO s.types VALUES ({marks})", ROWS)
        conn.execute("CREATE TABLE s.bulk (id int PRIMARY KEY, v text NOT NULL)")
        if bulk:
            conn.execute(
                "INSERT INTO s.bulk SELECT g, repeat(md5(g::text), 3) "
                "FROM generate_series(1, %s) g",
                (BULK_ROWS,),
            )
        conn.execute("CREATE PUBLICATION pub FOR TABLE s.types, s.bulk")
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA s TO {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT SELECT ON s.types, s.bulk TO {}").format(sql.Identifier(role)))
    return source


def workload(source: Source) -> int:
    """Changes after the load, leaving the tables as they were; returns how many."""
    with source.admin() as conn:
        with conn.transaction():
            conn.execute(
                "INSERT INTO s.types (id, d, tstz, iv, f8, b, txt) VALUES "
                "(100, '2023-12-31', '2024-03-10 02:30:00-05', '-1 days +02:00:00', 0.3, "
                "'\\x5c', 'ä\\\\n'), (101, NULL, NULL, 'PT1S', 'NaN', NULL, NULL)"
            )
        conn.execute(
            "UPDATE s.types SET ts = '2000-01-01 00:00:00', ivs = '{\"1 mon -1 days\"}' "
            "WHERE id = 100"
        )
        conn.execute("DELETE FROM s.types WHERE id IN (100, 101)")
    return 5


def _comparable(lines: list[str]) -> list[Any]:
    """The documents without their positions: the load as a sorted multiset (its chunks may
    arrive in any order across tables and readers), then the changes in their order."""
    documents = [json.loads(line) for line in lines]
    for document in documents:
        for name in POSITION_FIELDS:
            document.pop(name, None)
    load = sorted(json.dumps(d, sort_keys=True) for d in documents if d["op"] == "snapshot")
    return [*load, *(d for d in documents if d["op"] != "snapshot")]


def tail(source: Source, tmp_path: Path, *, expect_rows: int) -> list[dict[str, Any]]:
    """``walcast tail`` as the CDC role: a new slot, its load, then :func:`workload`."""
    slot = f"any_{uuid.uuid4().hex[:10]}"
    changes = 5
    loaded = len(ROWS) + expect_rows
    stderr = tmp_path / f"{slot}.err"
    command = [
        sys.executable, "-m", "capture", "tail", "--dsn", source.cdc_dsn, "--slot", slot,
        "--publication", "pub", "--create-slot", "--snapshot", "initial", "--format", "json",
        "--max-events", str(loaded + changes),
    ]  # fmt: skip
    lines: list[str] = []
    try:
        with (
            stderr.open("w") as err,
            subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO
            ) as process,
        ):
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if len(lines) == loaded:
                    workload(source)
            code = process.wait(timeout=120)
        errors = stderr.read_text()
        assert code == 0, errors
        assert "Traceback" not in errors, errors
        assert len(lines) == loaded + changes, errors
    finally:
        source.drop_slot(slot)
    return _comparable(lines)


@pytest.fixture(scope="module")
def sources(pg_dsn: str) -> Iterator[dict[str, Source]]:
    tag = uuid.uuid4().hex[:8]
    role = f"cdc_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True, options=NEUTRAL) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN REPLICATION NOSUPERUSER").format(sql.Identifier(role))
        )
    made: dict[str, Source] = {}
    try:
        made["utf8"] = _database(pg_dsn, f"any_utf8_{tag}", "UTF8", role)
        made["latin1"] = _database(pg_dsn, f"any_latin1_{tag}", "LATIN1", role)
        yield made
    finally:
        with psycopg.connect(pg_dsn, autocommit=True, options=NEUTRAL) as conn:
            for source in made.values():
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(source.database)
                    )
                )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def expected(sources: dict[str, Source], tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """What a default server gives: the UTF-8 database with no setting of the DBA's."""
    return tail(sources["utf8"], tmp_path_factory.mktemp("default"), expect_rows=BULK_ROWS)


def _differences(got: list[Any], want: list[Any]) -> str:
    for index, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"document {index}: {a} != {b}"
    return f"{len(got)} documents != {len(want)}"


@pytest.mark.parametrize(("name", "value"), SETTINGS, ids=[f"{n}={v}" for n, v in SETTINGS])
def test_tail_gives_the_default_bytes_whatever_the_database_sets(
    sources: dict[str, Source], expected: list[Any], tmp_path: Path, name: str, value: str
) -> None:
    source = sources["utf8"]
    source.setting(name, value)
    try:
        got = tail(source, tmp_path, expect_rows=BULK_ROWS)
    finally:
        source.reset()
    assert got == expected, _differences(got, expected)


def test_a_role_s_defaults_and_a_contradicting_database_change_nothing(
    sources: dict[str, Source], expected: list[Any], tmp_path: Path
) -> None:
    source = sources["utf8"]
    for name, value in SETTINGS:
        if name not in {"DateStyle", "TimeZone", "IntervalStyle", "extra_float_digits"}:
            source.setting(name, value, on="role")
    source.setting("DateStyle", "German, DMY", on="role")
    source.setting("DateStyle", "SQL, MDY")  # the role's contradicts the database's
    source.setting("TimeZone", "America/St_Johns", on="role")
    source.setting("TimeZone", "Asia/Kathmandu")
    source.setting("IntervalStyle", "iso_8601", on="role")
    source.setting("extra_float_digits", "-15", on="role")
    try:
        got = tail(source, tmp_path, expect_rows=BULK_ROWS)
    finally:
        source.reset()
    assert got == expected, _differences(got, expected)


def test_a_latin1_database_gives_the_utf8_bytes_of_a_utf8_one(
    sources: dict[str, Source], expected: list[Any], tmp_path: Path
) -> None:
    got = tail(sources["latin1"], tmp_path, expect_rows=BULK_ROWS)
    assert got == expected, _differences(got, expected)


def _hostile(source: Source) -> None:
    """Many of :data:`SETTINGS` at once, on the database and on the role."""
    for name, value in SETTINGS:
        if name in {"DateStyle", "TimeZone"}:
            continue
        source.setting(name, value)
    source.setting("DateStyle", "SQL, DMY")
    source.setting("TimeZone", "Asia/Kathmandu")
    source.setting("DateStyle", "German", on="role")
    source.setting("statement_timeout", "5ms", on="role")
    source.setting("default_transaction_read_only", "on", on="role")


def test_run_status_snapshot_and_slot_drop_on_a_hostile_server(
    sources: dict[str, Source],
    expected: list[Any],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    source = sources["utf8"]
    tag = uuid.uuid4().hex[:8]
    slot, prefix = f"any_run_{tag}", f"any_{tag}"
    _hostile(source)
    daemon = RunningDaemon(
        "--dsn", source.cdc_dsn, "--slot", slot, "--publication", "pub", "--create-slot",
        "--bootstrap-servers", kafka_bootstrap, "--topic", prefix + ".{schema}.{table}",
        "--transaction-topic", prefix + ".tx", "--schema-topic", prefix + ".schemas",
        "--format", "json", "--metrics-port", "0", "--heartbeat-interval", "1",
        log_path=tmp_path / "run.log",
    )  # fmt: skip
    try:
        want = len(ROWS) + BULK_ROWS
        _wait_for_messages(kafka_bootstrap, prefix, want, daemon)
        # the DBA changes a default while walcast runs; walcast's sessions are cut and reopened
        source.setting("DateStyle", "Postgres, MDY")
        source.setting("IntervalStyle", "sql_standard", on="role")
        with source.admin() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (source.role,),
            )
        workload(source)
        _wait_for_messages(kafka_bootstrap, prefix, want + 5, daemon)

        status = walcast("status", "--dsn", source.cdc_dsn, "--slot", slot, "--json")
        assert status.returncode == 0, status.stderr
        assert slot in status.stdout
        requested = walcast(
            "snapshot", "--dsn", source.cdc_dsn, "--table", "s.types", "--slot", slot
        )
        assert requested.returncode == 0, requested.stderr
        _wait_for_messages(kafka_bootstrap, prefix, want + 5 + len(ROWS), daemon)
    finally:
        code = daemon.stop()
    log = daemon.log()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    records = k.read_all(kafka_bootstrap, _data_topics(kafka_bootstrap, prefix))
    got = _comparable([r.value.decode() for r in records])
    reloaded = [d for d in expected if isinstance(d, str) and '"table": "types"' in d]
    key = json.dumps
    assert len(reloaded) == len(ROWS)
    assert sorted(map(key, got)) == sorted(map(key, [*expected, *reloaded]))

    dropped = walcast("slot", "drop", "--dsn", source.cdc_dsn, "--slot", slot, "--yes")
    source.reset()
    assert dropped.returncode == 0, dropped.stderr
    assert not source.slot_exists(slot)


def _data_topics(bootstrap: str, prefix: str) -> list[str]:
    return k.topics(bootstrap, prefix + ".s.")


def _wait_for_messages(bootstrap: str, prefix: str, count: int, daemon: RunningDaemon) -> None:
    deadline = time.monotonic() + 120
    seen = 0
    while time.monotonic() < deadline:
        if daemon.process.poll() is not None:
            raise AssertionError(f"walcast run exited:\n{daemon.log()[-3000:]}")
        seen = len(k.read_all(bootstrap, _data_topics(bootstrap, prefix), timeout=20))
        if seen >= count:
            return
        time.sleep(1)
    raise AssertionError(f"{seen} of {count} messages\n{daemon.log()[-3000:]}")


def test_sql_ascii_bytes_that_are_not_utf8_are_refused_in_one_line(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``tail`` and ``run`` load a value that is not UTF-8: exit 5 and one line, not retried."""
    tag = uuid.uuid4().hex[:8]
    role = f"cdc_asc_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True, options=NEUTRAL) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN REPLICATION").format(sql.Identifier(role)))
    source = _database(pg_dsn, f"any_ascii_{tag}", "SQL_ASCII", role, bulk=False)
    try:
        with source.admin() as conn:
            conn.execute("INSERT INTO s.bulk VALUES (1, E'caf\\351')")
        tail = walcast(
            "tail", "--dsn", source.cdc_dsn, "--slot", f"asc_{tag}", "--publication", "pub",
            "--create-slot", "--snapshot", "initial", "--format", "json", "--max-events", "10",
            timeout=120,
        )  # fmt: skip
        source.drop_slot(f"asc_{tag}")
        run = walcast(
            "run", "--dsn", source.cdc_dsn, "--slot", f"asc_run_{tag}", "--publication", "pub",
            "--create-slot", "--snapshot", "initial-only", "--format", "json",
            "--bootstrap-servers", kafka_bootstrap, "--topic", f"asc_{tag}.{{schema}}.{{table}}",
            "--schema-topic", f"asc_{tag}.schemas", "--metrics-port", "0",
            timeout=120,
        )  # fmt: skip
        source.drop_slot(f"asc_run_{tag}")
        for done in (tail, run):
            assert done.returncode == 5, done.stderr
            assert "Traceback" not in done.stderr, done.stderr
            errors = [
                line
                for line in done.stderr.strip().splitlines()
                if line.startswith("walcast: error:")
            ]
            assert len(errors) == 1, done.stderr
            assert "load of s.bulk: a text value is not valid UTF-8" in errors[0], errors[0]
            assert "retries" not in errors[0], errors[0]
        # a text key that is not UTF-8, with one-row chunks: a chunk's bound is that key
        with source.admin() as conn:
            conn.execute("CREATE TABLE s.named (k text PRIMARY KEY)")
            conn.execute("INSERT INTO s.named VALUES ('a'), (E'caf\\351'), ('z')")
            conn.execute("CREATE PUBLICATION pub_named FOR TABLE s.named")
            conn.execute(sql.SQL("GRANT SELECT ON s.named TO {}").format(sql.Identifier(role)))
        keyed = walcast(
            "tail", "--dsn", source.cdc_dsn, "--slot", f"asc_k_{tag}", "--publication",
            "pub_named", "--create-slot", "--snapshot", "initial", "--format", "json",
            "--snapshot-chunk-rows", "1", "--max-events", "10", timeout=120,
        )  # fmt: skip
        source.drop_slot(f"asc_k_{tag}")
        assert keyed.returncode == 5, keyed.stderr
        assert "load of s.named: a text value is not valid UTF-8" in keyed.stderr, keyed.stderr
    finally:
        with psycopg.connect(pg_dsn, autocommit=True, options=NEUTRAL) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(source.database)
                )
            )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_load_without_select_names_the_table_and_the_grant(
    sources: dict[str, Source], tmp_path: Path
) -> None:
    source = sources["utf8"]
    with source.admin() as conn:
        conn.execute(sql.SQL("REVOKE SELECT ON s.bulk FROM {}").format(sql.Identifier(source.role)))
    slot = f"any_nosel_{uuid.uuid4().hex[:8]}"
    try:
        done = walcast(
            "tail", "--dsn", source.cdc_dsn, "--slot", slot, "--publication", "pub",
            "--create-slot", "--snapshot", "initial", "--format", "json", "--max-events", "1000000",
            timeout=120,
        )  # fmt: skip
    finally:
        source.drop_slot(slot)
        with source.admin() as conn:
            conn.execute(
                sql.SQL("GRANT SELECT ON s.bulk TO {}").format(sql.Identifier(source.role))
            )
    errors = [line for line in done.stderr.splitlines() if line.startswith("walcast: error:")]
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(errors) == 1, done.stderr
    assert "s.bulk" in errors[0], errors[0]
    assert "GRANT SELECT" in errors[0], errors[0]


# -- the server's own limits ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[Node]:
    """A server of its own with two replication slots and one walsender."""
    import os  # noqa: PLC0415

    bin_dir = Path(os.environ.get("WALCAST_TEST_PG_BIN", ""))
    assert (bin_dir / "initdb").exists(), "WALCAST_TEST_PG_BIN: scripts/local-services start pg"
    root = Path(tempfile.mkdtemp(prefix="walcast-tiny-"))
    user = pg_os_user()
    if user is not None:
        shutil.chown(root, user, user)
    node = Node("tiny", bin_dir, root, free_port(), user)
    node.run(bin_dir / "initdb", "-D", node.data, "-U", "walcast", "--auth=trust", "-E", "UTF8")
    node.write(
        "postgresql.auto.conf",
        f"wal_level = logical\nmax_replication_slots = 2\nmax_wal_senders = 1\n"
        f"listen_addresses = '127.0.0.1'\nport = {node.port}\nunix_socket_directories = ''\n",
    )
    node.start()
    try:
        yield node
    finally:
        with contextlib.suppress(Exception):
            node.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def test_no_replication_slot_left_is_one_line_naming_max_replication_slots(
    tiny_server: Node,
) -> None:
    for name in ("taken1", "taken2"):
        tiny_server.query(
            "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,), dbname="postgres"
        )
    try:
        done = walcast(
            "tail", "--dsn", tiny_server.dsn("postgres"), "--slot", "mine", "--publication",
            "p", "--create-slot", "--create-publication", "--max-events", "1", timeout=60,
        )  # fmt: skip
    finally:
        for name in ("taken1", "taken2"):
            tiny_server.query("SELECT pg_drop_replication_slot(%s)", (name,), dbname="postgres")
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("walcast: error:")]
    assert len(errors) == 1, done.stderr
    assert "max_replication_slots = 2" in errors[0], errors[0]
    assert "Traceback" not in done.stderr


def test_no_walsender_left_is_one_line_naming_max_wal_senders(tiny_server: Node) -> None:
    tiny_server.query(
        "SELECT pg_create_logical_replication_slot('held', 'test_decoding')", dbname="postgres"
    )
    holder = subprocess.Popen(
        [
            str(tiny_server.bin / "pg_recvlogical"),
            "-d",
            tiny_server.dsn("postgres"),
            "--slot",
            "held",
            "--start",
            "-f",
            "/dev/null",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not tiny_server.value("SELECT count(*) FROM pg_stat_replication", dbname="postgres"):
            assert time.monotonic() < deadline, "pg_recvlogical did not start"
            time.sleep(0.2)
        done = walcast(
            "tail", "--dsn", tiny_server.dsn("postgres"), "--slot", "held2", "--publication",
            "p", "--create-slot", "--create-publication", "--max-events", "1", timeout=60,
        )  # fmt: skip
    finally:
        holder.terminate()
        holder.wait(timeout=30)
        with contextlib.suppress(Exception):
            tiny_server.query("SELECT pg_drop_replication_slot('held')", dbname="postgres")
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("walcast: error:")]
    assert len(errors) == 1, done.stderr
    assert "max_wal_senders" in errors[0], errors[0]
    assert "Traceback" not in done.stderr

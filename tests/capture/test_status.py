"""``walcast status`` and ``walcast slot drop`` through the CLI, against a real PostgreSQL."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
import pytest

from capture.replication.catalog import PublishedTable
from capture.replication.slots import SlotStatus
from capture.status import (
    failover_readiness,
    human_bytes,
    render,
    table_note,
    wal_level_problem,
    wal_risk,
)
from tests.support.scenario import REPO, walcast

SECRET = "St4tus-S3cret"


@dataclass
class Names:
    schema: str
    pub: str
    slot: str


@pytest.fixture
def names(pg_dsn: str) -> Iterator[Names]:
    tag = uuid.uuid4().hex[:8]
    made = Names(f"st_{tag}", f"st_pub_{tag}", f"st_slot_{tag}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {made.schema}")
        conn.execute(
            f"CREATE TABLE {made.schema}.orders (id int, line int, PRIMARY KEY (id, line))"
        )
        conn.execute(f"CREATE TABLE {made.schema}.notes (body text)")
        conn.execute(
            f"CREATE PUBLICATION {made.pub} FOR TABLE {made.schema}.orders, {made.schema}.notes"
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (made.slot,))
        conn.execute("SET synchronous_commit = on")  # the server's WAL position includes it
        conn.execute(f"INSERT INTO {made.schema}.orders SELECT g, 1 FROM generate_series(1, 500) g")
    try:
        yield made
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (made.slot,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {made.pub}")
            conn.execute(f"DROP SCHEMA {made.schema} CASCADE")


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    # A password in --dsn gets one warning line first (issue 22.5).
    lines = [line for line in lines if not line.startswith("walcast: warning: --dsn holds a")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("walcast: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert SECRET not in done.stdout + done.stderr
    return lines[0]


def slot_exists(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        return row.fetchone() is not None


@pytest.mark.integration
def test_status_shows_the_slot_and_the_publication(pg_dsn: str, names: Names) -> None:
    done = walcast("status", "--dsn", pg_dsn, "--slot", names.slot, "--publication", names.pub)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"slot {names.slot} (pgoutput, database " in out
    assert "inactive (no consumer connected)" in out
    assert "time unknown (slot inactive)" in out
    assert "WAL retained" in out
    assert "WAL risk" in out
    assert f"publication {names.pub} (insert, update, delete, truncate; 2 tables)" in out
    assert f"{names.schema}.orders" in out
    assert "id, line" in out
    notes = next(line for line in out.splitlines() if f"{names.schema}.notes" in line)
    assert "UPDATE and DELETE refused: no primary key" in notes
    assert "wal_level" not in out  # the test server's is logical: nothing to say


@pytest.mark.integration
def test_status_health_url_of_no_daemon_is_one_line_and_a_bad_url_an_error(
    pg_dsn: str, names: Names
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/healthz"
    done = walcast("status", "--dsn", pg_dsn, "--slot", names.slot, "--health-url", url)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("daemon at ")]
    assert line.startswith(f"daemon at {url}: unreachable ("), line
    assert "refused" in line, line
    done = walcast("status", "--dsn", pg_dsn, "--slot", names.slot, "--health-url", url, "--json")
    daemon = json.loads(done.stdout)["daemon"]
    assert daemon["reachable"] is False, daemon
    one_line_error(
        walcast("status", "--dsn", pg_dsn, "--health-url", f"127.0.0.1:{port}"),
        "--health-url",
        "not an http(s) URL",
    )


@pytest.mark.integration
def test_status_json(pg_dsn: str, names: Names) -> None:
    done = walcast(
        "status", "--dsn", pg_dsn, "--slot", names.slot, "--publication", names.pub, "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["wal_level"] == "logical"
    (slot,) = report["slots"]
    again = walcast("status", "--dsn", pg_dsn, "--slot", names.slot, "--slot", names.slot, "--json")
    assert [s["slot"] for s in json.loads(again.stdout)["slots"]] == [names.slot]
    assert slot["slot"] == names.slot
    assert slot["plugin"] == "pgoutput"
    assert (slot["active"], slot["active_pid"], slot["lag_seconds"]) == (False, None, None)
    assert slot["lag_bytes"] > 0  # the 500 inserted rows are behind the confirmed position
    assert slot["wal_retained_bytes"] >= slot["lag_bytes"]
    assert slot["confirmed_flush_lsn"].count("/") == 1
    assert slot["wal_risk"] in ("ok", "unbounded")
    (pub,) = report["publications"]
    tables = {t["table"]: t for t in pub["tables"]}
    assert tables[f"{names.schema}.orders"] == {
        "table": f"{names.schema}.orders",
        "replica_identity": "default",
        "primary_key": ["id", "line"],
        "note": None,
    }
    assert tables[f"{names.schema}.notes"]["note"].startswith("UPDATE and DELETE refused")
    everything = json.loads(walcast("status", "--dsn", pg_dsn, "--json").stdout)
    assert names.slot in {s["slot"] for s in everything["slots"]}
    assert names.pub in {p["publication"] for p in everything["publications"]}


@pytest.mark.integration
def test_status_errors_are_one_line(pg_dsn: str, names: Names) -> None:
    one_line_error(
        walcast("status", "--dsn", pg_dsn, "--slot", names.slot, "--slot", f"{names.slot}_x"),
        f"--slot {names.slot}_x: no such replication slot",
        names.slot,
    )
    one_line_error(
        walcast("status", "--dsn", pg_dsn, "--publication", "no_such_pub_here"),
        "--publication no_such_pub_here: no such publication",
        names.pub,
    )
    one_line_error(
        walcast("status", "--dsn", f"host=127.0.0.1 port=1 user=x password={SECRET}"),
        "cannot connect to PostgreSQL",
    )
    one_line_error(
        walcast("status", "--dsn", f"host=127.0.0.1 password={SECRET} nonsense"), "--dsn"
    )
    one_line_error(walcast("status", env={"WALCAST_DSN": ""}), "--dsn: no connection string")
    one_line_error(
        walcast("slot", "drop", "--dsn", pg_dsn, "--slot", f"{names.slot}_x", "--yes"),
        f"--slot {names.slot}_x: no such replication slot",
    )


@pytest.fixture(scope="module")
def replica_level_dsn() -> Iterator[str]:
    """A throwaway second server with wal_level=replica (its own state dir and port).

    Started by scripts/local-services like the shared one, never touching it; stopped and
    removed after the module. The state dir is made with mkdtemp and opened to others: the
    server runs as another OS user.
    """
    state = tempfile.mkdtemp(prefix="walcast-status-replica-")
    Path(state).chmod(0o755)
    env = {**os.environ, "WALCAST_SERVICES_DIR": state, "WALCAST_PG_WAL_LEVEL": "replica"}
    env.pop("WALCAST_PG_PORT", None)
    services = str(REPO / "scripts" / "local-services")
    try:
        started = subprocess.run(
            [services, "start", "pg"], capture_output=True, text=True, env=env, timeout=300,
            check=False,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        yield next(
            shlex.split(line.partition("=")[2])[0]
            for line in started.stdout.splitlines()
            if line.startswith("export WALCAST_TEST_DSN=")
        )
    finally:
        subprocess.run([services, "stop", "pg"], capture_output=True, env=env, check=False)
        shutil.rmtree(state, ignore_errors=True)


WAL_LEVEL_LINE = (
    "wal_level is 'replica' on this server: logical replication needs wal_level=logical "
    "(hint: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL)"
)


@pytest.mark.integration
def test_status_says_when_wal_level_is_not_logical(replica_level_dsn: str) -> None:
    done = walcast("status", "--dsn", replica_level_dsn)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == WAL_LEVEL_LINE  # first, before the (empty) slot list it explains
    assert lines[1] == ""
    assert lines[2] == (
        "no logical replication slots in database walcast (none can exist until wal_level "
        "is logical)"
    )
    report = json.loads(walcast("status", "--dsn", replica_level_dsn, "--json").stdout)
    assert (report["wal_level"], report["slots"]) == ("replica", [])


def test_wal_level_problem_names_every_level_but_logical() -> None:
    assert wal_level_problem("logical") is None
    assert wal_level_problem(None) is None  # not reported: nothing is claimed
    assert wal_level_problem("replica") == WAL_LEVEL_LINE
    minimal = wal_level_problem("minimal")
    assert minimal is not None
    assert minimal.startswith("wal_level is 'minimal' on this server")
    report = {"database": "app", "wal_level": "minimal", "slots": [], "publications": []}
    assert render(report).splitlines()[:3] == [
        minimal,
        "",
        (
            "no logical replication slots in database app (none can exist until wal_level is "
            "logical)"
        ),
    ]
    report["wal_level"] = "logical"
    assert render(report).splitlines()[0] == "no logical replication slots in database app"


@pytest.mark.integration
def test_slot_drop_needs_yes_and_refuses_an_active_slot(pg_dsn: str, names: Names) -> None:
    done = walcast("slot", "drop", "--dsn", pg_dsn, "--slot", names.slot)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert f"would drop slot {names.slot} (pgoutput" in done.stderr
    assert "add --yes to drop it" in done.stderr
    assert slot_exists(pg_dsn, names.slot)

    recvlogical = Path(os.environ.get("WALCAST_TEST_PG_BIN", "")) / "pg_recvlogical"
    assert recvlogical.exists(), f"{recvlogical} is missing (set WALCAST_TEST_PG_BIN)"
    consumer = subprocess.Popen(
        [
            str(recvlogical), "--dbname", pg_dsn, "--slot", names.slot, "--start",
            "--file", os.devnull, "--option", "proto_version=1",
            "--option", f"publication_names={names.pub}",
        ],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                    (names.slot,),
                ).fetchone()
            if row and row[0]:
                break
            assert consumer.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.2)
        line = one_line_error(
            walcast("slot", "drop", "--dsn", pg_dsn, "--slot", names.slot, "--yes"),
            f"slot {names.slot} is active (pid {row[0]}",
        )
        assert "stop its consumer first" in line
        assert slot_exists(pg_dsn, names.slot)
    finally:
        consumer.terminate()
        consumer.wait(timeout=30)

    deadline = time.monotonic() + 30
    while True:
        done = walcast("slot", "drop", "--dsn", pg_dsn, "--slot", names.slot, "--yes")
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # the walsender may take a moment to release the slot
    assert done.returncode == 0, done.stderr
    assert f"dropped slot {names.slot}" in done.stderr
    assert not slot_exists(pg_dsn, names.slot)


# -- the verdicts, without a server ----------------------------------------------------------

SLOT = SlotStatus(
    name="s", slot_type="logical", plugin="pgoutput", database="db", temporary=False,
    active_pid=None, confirmed_flush_lsn=100, restart_lsn=90, current_lsn=200,
    wal_status="reserved", safe_wal_size=4096, two_phase=False, write_lag=None,
    flush_lag=None, replay_lag=None, reply_time=None,
)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "keep", "level"),
    [
        ({}, 1 << 30, "ok"),
        ({"safe_wal_size": None}, None, "unbounded"),
        ({"wal_status": "extended"}, 1 << 30, "ok"),
        ({"wal_status": "unreserved", "safe_wal_size": -10}, 1 << 30, "at-risk"),
        ({"wal_status": "lost", "restart_lsn": None}, 1 << 30, "lost"),
        ({"wal_status": None, "safe_wal_size": None}, None, "unknown"),
    ],
)
def test_wal_risk(change: dict, keep: int | None, level: str) -> None:
    slot = replace(SLOT, **change)
    found, detail = wal_risk(slot, keep)
    assert found == level
    assert detail
    assert "\n" not in detail
    if level == "ok":
        assert "4.0 KiB more WAL" in detail


def test_lag_and_sizes() -> None:
    assert (SLOT.lag_bytes, SLOT.wal_retained) == (100, 110)
    assert replace(SLOT, restart_lsn=None).wal_retained is None
    assert human_bytes(512) == "512 bytes"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 1024**3) == "3.0 GiB"


def test_table_notes() -> None:
    keyless = PublishedTable(1, "s", "t", "default", ())
    assert table_note(keyless, ("insert",)) is None
    assert table_note(keyless, ("insert", "delete")) == (
        "DELETE refused: no primary key (add one, or REPLICA IDENTITY FULL)"
    )
    assert table_note(replace(keyless, replica_identity="full"), ("update",)) is None
    assert "REPLICA IDENTITY NOTHING" in str(
        table_note(replace(keyless, replica_identity="nothing", primary_key=("id",)), ("update",))
    )


@pytest.mark.parametrize(
    ("change", "version", "guards", "level"),
    [
        ({}, 160000, {}, "unsupported"),
        ({"failover": False}, 170000, {"sb": True}, "not-ready"),
        ({"failover": True}, 170000, {}, "at-risk"),
        ({"failover": True}, 170000, {"sb": False}, "at-risk"),
        ({"failover": True}, 180000, {"sb": True}, "ready"),
        ({"in_recovery": True, "synced": True}, 170000, {}, "synced"),
        ({"in_recovery": True, "synced": False}, 170000, {}, "not-synced"),
        ({"slot_type": "physical", "plugin": None}, 170000, {}, "-"),
    ],
)
def test_failover_readiness(change: dict, version: int, guards: dict, level: str) -> None:
    found, detail = failover_readiness(replace(SLOT, **change), version, guards)
    assert found == level
    assert detail
    assert "\n" not in detail
    if level == "unsupported":
        assert "--create-slot" in detail  # what a user on 13-16 does after a promotion
    if level == "ready":
        assert "sb" in detail

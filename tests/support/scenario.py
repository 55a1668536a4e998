"""Run the shared capture scenario (tests/data/scenario_*.sql) on a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

DATA = Path(__file__).resolve().parent.parent / "data"
REPO = DATA.parent.parent
SCHEMA = "walcast_it"
SESSION = (
    "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'; "
    "SET extra_float_digits = 1; SET bytea_output = 'hex'"
)


def psql_path() -> str:
    pg_bin = os.environ.get("WALCAST_TEST_PG_BIN")
    return str(Path(pg_bin) / "psql") if pg_bin else "psql"


# Values a PostgreSQL 13 server rejects (numeric Infinity came in 14), and what the
# scenario has there instead on 13; each must occur once in its file.
_BEFORE_14 = {
    "scenario_changes.sql": (("3, 0, 0, 0, 'Infinity',", "3, 0, 0, 0, 'NaN',"),
                             ("'{-Infinity}'", "'{NaN}'")),
}  # fmt: skip


def server_major(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version // 10000


def run_sql_file(dsn: str, name: str) -> None:
    """Run one scenario file with psql: statement by statement, each its own transaction
    unless the file says BEGIN/COMMIT (one multi-statement query would be one transaction)."""
    script = (DATA / name).read_text()
    if name in _BEFORE_14 and server_major(dsn) < 14:
        for old, new in _BEFORE_14[name]:
            assert script.count(old) == 1, (name, old)
            script = script.replace(old, new)
    done = subprocess.run(
        [psql_path(), dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"],
        input=script,
        text=True,
        capture_output=True,
        check=False,
        timeout=600,
        # The test server runs with synchronous_commit=off; decoding only sees flushed WAL.
        env={**os.environ, "PGOPTIONS": "-c synchronous_commit=on"},
    )
    assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"


def drop_slot(conn: psycopg.Connection, name: str) -> None:
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (name,),
    )


def drop_stale_slots(dsn: str) -> None:
    """Drop the inactive ``walcast_it_%`` slots (of runs that ended without cleanup).

    Only at the start of a test run (``tests/conftest.py``): during one, an inactive slot
    may be one another xdist worker has prepared and not yet read.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        for (old,) in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'walcast_it_%' "
            "AND NOT active"
        ).fetchall():
            drop_slot(conn, old)


@dataclass
class Scenario:
    dsn: str
    publication: str
    reference_slot: str
    slots: dict[str, str]


def prepare(dsn: str, slot_names: list[str]) -> Scenario:
    """Create the tables, a publication and slots at one point in the WAL."""
    run_sql_file(dsn, "scenario_schema.sql")
    tag = uuid.uuid4().hex[:8]
    publication = f"walcast_it_pub_{tag}"
    slots = {name: f"walcast_it_{name}_{tag}" for name in slot_names}
    reference = f"walcast_it_td_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Only the scenario's schema where the server can say so (15+): tests on other
        # xdist workers write other schemas of the same database meanwhile, and the
        # reference (test_decoding) is read for this schema only. 13 and 14 run serially.
        in_schema = conn.info.server_version >= 150000
        tables = f"TABLES IN SCHEMA {SCHEMA}" if in_schema else "ALL TABLES"
        conn.execute(f"CREATE PUBLICATION {publication} FOR {tables}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (reference,))
        for slot in slots.values():
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    return Scenario(dsn, publication, reference, slots)


def cleanup(scenario: Scenario) -> None:
    with psycopg.connect(scenario.dsn, autocommit=True) as conn:
        for slot in [scenario.reference_slot, *scenario.slots.values()]:
            drop_slot(conn, slot)
        conn.execute(f"DROP PUBLICATION IF EXISTS {scenario.publication}")


def reference_lines(scenario: Scenario) -> list[str]:
    """What test_decoding reports for the scenario's WAL."""
    with psycopg.connect(scenario.dsn, autocommit=True) as conn:
        conn.execute(SESSION)
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, 'include-xids', '1', "
            "'include-timestamp', '1', 'skip-empty-xacts', '1')",
            (scenario.reference_slot,),
        ).fetchall()
    return [r[0] for r in rows]


def walcast(
    *args: str,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    stop_after: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the walcast CLI in a subprocess, as a user would.

    With ``stop_after``, send SIGTERM after that many seconds (a graceful stop) and
    require exit code 0.
    """
    command = [sys.executable, "-m", "capture", *args]
    environment = {**os.environ, **(env or {})}
    if stop_after is None:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=REPO,
            env=environment,
        )
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=environment,
    ) as process:
        try:
            out, err = process.communicate(timeout=stop_after)
        except subprocess.TimeoutExpired:
            process.terminate()
            out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, err
        return subprocess.CompletedProcess(command, process.returncode, out, err)


def tail_events(dsn: str, slot: str, publication: str, max_events: int, *extra: str) -> list[dict]:
    done = walcast(
        "tail", "--dsn", dsn, "--slot", slot, "--publication", publication, "--format", "json",
        "--max-events", str(max_events), *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]

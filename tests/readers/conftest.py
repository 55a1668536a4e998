"""Fixtures of the reader tests: the harness JVM, the capture scenario and a test stream.

* ``readers``: one harness JVM for the session (:mod:`tests.readers.harness`).
* ``capture_run``: the shared capture scenario (``tests/data/scenario_schema.sql`` and
  ``scenario_changes.sql``, every type walcast supports) run on the real server in a schema of
  its own, PostgreSQL's view of it from ``test_decoding`` and the catalog, and the messages
  ``walcast tail`` prints for it in each format variant the readers need.
* ``debezium_outputs``: the capture scenario read by the real Debezium connector and by
  walcast's ``debezium`` format (:mod:`tests.readers.debezium_outputs`), in a database of
  its own (dropped afterwards with its slots).
* ``stream_run``: a 2,000-change ``walcast produce-test-stream`` over all eight synthetic
  tables in the same variants, and the changes it is made of.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.readers import reference
from tests.readers.debezium_outputs import Outputs, run_both
from tests.readers.expect import CANAL_ADAPTER_SETTINGS
from tests.readers.harness import READERS, ReaderHarness, build
from tests.support import scenario as sc
from tests.support import test_decoding

# Format variants: (format, settings). Each reader reads the variant its users configure.
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    # Flink's canal-json rejects any type but INSERT/UPDATE/DELETE/CREATE.
    "canal-flink": ("canal", ("canal.truncate=skip",)),
    "canal-adapter": ("canal", CANAL_ADAPTER_SETTINGS),
    "dts-avro": ("dts-avro", ()),
    "dataworks": ("dataworks", ()),
}
STREAM_COUNT = 2000
STREAM_TABLES = 8

_COUNTS: dict[tuple[str, str], tuple[int, int]] = {}


@dataclass
class Run:
    """Changes as PostgreSQL reported them, and walcast's messages for them per variant."""

    label: str
    database: str
    changes: list[reference.RefChange]
    messages: dict[str, list[str]]


@pytest.fixture(scope="session")
def readers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReaderHarness]:
    harness = ReaderHarness(build(), tmp_path_factory.mktemp("readers"))
    try:
        yield harness
    finally:
        _COUNTS.update(harness.counts)
        harness.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Reader x input: messages read out of messages given (the issue's closing table)."""
    if not _COUNTS:
        return
    terminalreporter.section("vendor readers: messages read / given")
    for (reader, label), (read, given) in sorted(_COUNTS.items()):
        terminalreporter.write_line(f"{READERS[reader]} | {label} | {read}/{given}")


def _lines(output: str) -> list[str]:
    """One message a line: split on newlines only (str.splitlines also splits on U+0085,
    which a canal latin1 bytea value can hold)."""
    return output.split("\n")[:-1] if output else []


def _options(settings: tuple[str, ...]) -> list[str]:
    return [arg for s in settings for arg in ("--format-option", s)]


def _run_sql(dsn: str, path: Path) -> None:
    subprocess.run(
        [sc.psql_path(), dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "PGOPTIONS": "-c synchronous_commit=on"},
    )


@pytest.fixture(scope="session")
def capture_run(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tag = uuid.uuid4().hex[:8]
    schema = f"walcast_rd_{tag}"
    work = tmp_path_factory.mktemp("capture")
    scripts = {}
    for name in ("scenario_schema.sql", "scenario_changes.sql"):
        text = (sc.DATA / name).read_text().replace("walcast_it", schema)
        scripts[name] = work / name
        scripts[name].write_text(text)
    publication = f"walcast_rd_pub_{tag}"
    td_slot = f"walcast_rd_td_{tag}"
    slots = {v: f"walcast_rd_{v.replace('-', '_')}_{tag}" for v in VARIANTS}
    _run_sql(pg_dsn, scripts["scenario_schema.sql"])
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE PUBLICATION {publication} FOR TABLES IN SCHEMA {schema}")
            create = "SELECT pg_create_logical_replication_slot(%s, %s)"
            conn.execute(create, (td_slot, "test_decoding"))
            for slot in slots.values():
                conn.execute(create, (slot, "pgoutput"))
            database = conn.info.dbname
        _run_sql(pg_dsn, scripts["scenario_changes.sql"])
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sc.SESSION)
            lines = [
                row[0]
                for row in conn.execute(
                    "SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, "
                    "'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1')",
                    (td_slot,),
                )
            ]
            tables = reference.catalog_tables(conn, schema)
        changes = reference.from_test_decoding(test_decoding.parse(lines, schema=schema), tables)
        processes = {}
        for variant, (fmt, settings) in VARIANTS.items():
            out = (work / f"{variant}.out").open("wb")
            processes[variant] = (
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "capture", "tail", "--dsn", pg_dsn),
                        *("--slot", slots[variant], "--publication", publication),
                        *("--format", fmt, *_options(settings)),
                        *("--max-events", str(len(changes))),
                    ],
                    stdout=out,
                    stderr=subprocess.PIPE,
                    cwd=sc.REPO,
                    executable=sys.executable,
                ),
                out,
            )
        messages = {}
        for variant, (process, out) in processes.items():
            _, err = process.communicate(timeout=600)
            out.close()
            assert process.returncode == 0, err.decode(errors="replace")
            messages[variant] = _lines((work / f"{variant}.out").read_text(encoding="utf-8"))
        yield Run("capture scenario", database, changes, messages)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for slot in [td_slot, *slots.values()]:
                sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {publication}")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(scope="session")
def stream_run() -> Run:
    changes = reference.from_synthetic(STREAM_COUNT, seed=0, tables=STREAM_TABLES)
    messages = {}
    for variant, (fmt, settings) in VARIANTS.items():
        done = sc.walcast(
            "produce-test-stream", "--format", fmt, "--count", str(STREAM_COUNT),
            "--tables", str(STREAM_TABLES), *_options(settings),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        messages[variant] = _lines(done.stdout)
    return Run(f"produce-test-stream --count {STREAM_COUNT}", "shop", changes, messages)


@pytest.fixture(scope="session")
def debezium_outputs(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outputs]:
    name = f"walcast_dbzc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield run_both(make_conninfo(pg_dsn, dbname=name), tmp_path_factory.mktemp("debezium"))
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
            ).fetchall():
                sc.drop_slot(conn, slot)
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))

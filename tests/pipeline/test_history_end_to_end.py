"""History and as-of reads end to end: PostgreSQL → ``walcast run`` → Kafka → normalize →
``materialize --history`` → ``read_table(as_of_lsn=…)`` and ``walcast spark show``.

One table (``walcast_e2e.hist``, a TOASTed ``body`` stored out of line) in a database of
its own, streamed by one daemon in walcast's json format. The workload: a row updated three
times in one transaction, key changes whose TOASTed body is not sent (one of them twice in
one transaction), a delete and a re-insert, a delete and re-insert in one transaction.
After each transaction ``SELECT *`` and ``pg_current_wal_lsn()`` are recorded; the history
read back as of each recorded LSN must equal what PostgreSQL held then, and the current
table ``SELECT *`` at the end. The CLI cases are run as a user runs them (a subprocess,
one ``walcast: error:`` line each).

Faults on the way: after the second transaction the daemon is killed (``kill -9``) and
started again (it may send changes again: normalize drops them as replays); after the
third, the table is loaded again (``walcast snapshot --table``) while streaming; the
changes are normalized in two runs (before the kill and at the end), and materialize runs
one file per batch as a user's process that is killed (``kill -9``) once its first batch
committed, then again to the end from its checkpoint. The state table's own versions
(no history needed, :mod:`pipeline.delta_versions`) must hold the source exactly at the
moment between the two normalize runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from capture.lsn import parse_lsn
from pipeline.delta_versions import recorded_commits, version_as_of
from pipeline.errors import AsOfError
from pipeline.lineage import LINEAGE_NAMES
from pipeline.materialize import MaterializeJob, read_table
from pipeline.normalize import NormalizeJob
from pipeline.stores import table_paths
from pipeline.tables import read_history
from tests.pipeline.test_cli import assert_one_line_error
from tests.pipeline.test_end_to_end import (
    SCHEMA,
    RunningDaemon,
    _daemon_args,
    _wait_for,
    current_lsn,
    source_rows,
    wait_caught_up,
)
from tests.support import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
"""The fixture runs a daemon and two Spark jobs: on the shared 2-core machine (load 20-30)
that took more than the default 600 s."""

TABLE = "hist"
WORKLOAD = (
    (
        "INSERT INTO hist VALUES (1, 1, 'one', repeat('a', 5000)), "
        "(2, 1, 'two', repeat('b', 5000)), (3, 1, 'three', NULL), (4, 1, 'four', NULL), "
        "(5, 1, 'five', repeat('e', 5000))"
    ),
    # one row updated three times, another's key changed twice, in one transaction
    (
        "BEGIN; UPDATE hist SET v = 2 WHERE id = 1; UPDATE hist SET v = 3 WHERE id = 1; "
        "UPDATE hist SET v = 4, note = 'uno' WHERE id = 1; UPDATE hist SET id = 20 WHERE id = 2; "
        "UPDATE hist SET id = 21, v = 7 WHERE id = 20; COMMIT"
    ),
    "DELETE FROM hist WHERE id = 3",
    (
        "BEGIN; INSERT INTO hist VALUES (3, 9, 'again', NULL); "
        "UPDATE hist SET id = 50 WHERE id = 5; COMMIT"
    ),
    (
        "BEGIN; DELETE FROM hist WHERE id = 4; INSERT INTO hist VALUES (4, 2, 'new four', NULL); "
        "UPDATE hist SET note = 'moved' WHERE id = 50; COMMIT"
    ),
)
"""Each statement one transaction; a moment is recorded after each."""
SENTINEL = "UPDATE hist SET v = 100 WHERE id = 1"
"""A last change after the last moment: the history's range then covers every moment."""


@dataclass(frozen=True)
class Moment:
    lsn: str
    """``pg_current_wal_lsn()`` right after a transaction committed."""
    rows: Counter


@dataclass(frozen=True)
class Run:
    dsn: str
    columns: list[str]
    moments: list[Moment]
    final: Counter
    state: str
    changes: str


def wal_lsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])


BEFORE_KILL = 1
"""The daemon and the first normalize run stop after the second transaction's moment."""
BEFORE_RELOAD = 2
"""The table is loaded again after the third transaction's moment."""


def materialize_killed_after_first_batch(
    changes: str, state: str, checkpoint: Path, log: Path, timeout: float = 900
) -> bool:
    """``walcast spark materialize --history`` as a user's process (one file per batch),
    killed with SIGKILL once its first batch committed; whether it was still running."""
    with log.open("ab") as out:
        job = subprocess.Popen(
            [
                sys.executable, "-m", "capture", "spark", "materialize", "--input", changes,
                "--output", state, "--checkpoint", str(checkpoint), "--delta", "--text",
                "--history", "--max-files-per-trigger", "1", "--available-now",
            ],
            stdout=out, stderr=out, cwd=sc.REPO, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        try:
            while not (checkpoint / "commits" / "0").exists():
                assert job.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.1)
            running = job.poll() is None
        finally:
            # the process group: walcast and its Spark driver JVM (a JVM left running
            # would go on writing the checkpoint beside the job restarted below)
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=60)
            gone = time.monotonic() + 60
            with contextlib.suppress(ProcessLookupError):  # raised once the group is empty
                while time.monotonic() < gone:
                    os.killpg(job.pid, 0)
                    time.sleep(0.1)
    return running


@pytest.fixture(scope="module")
def run(pg_dsn: str, kafka_bootstrap: str, spark, tmp_path_factory: pytest.TempPathFactory):
    tag = uuid.uuid4().hex[:8]
    database, slot, pub, prefix = (f"walcast_hist_{tag}", f"hist_{tag}", f"hist_{tag}", f"h_{tag}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    dsn = make_conninfo(pg_dsn, dbname=database)
    work = tmp_path_factory.mktemp("history")
    config = work / "outputs.toml"
    config.write_text(
        f'[[outputs]]\nformat = "json"\ntopic = "{prefix}.json.{{schema}}.{{table}}"\n'
        f'transaction_topic = "{prefix}.json"\n'
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(
            f"CREATE TABLE {SCHEMA}.{TABLE} (id int PRIMARY KEY, v int, note text, body text)"
        )
        conn.execute(f"ALTER TABLE {SCHEMA}.{TABLE} ALTER body SET STORAGE EXTERNAL")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLES IN SCHEMA {SCHEMA}")
    daemon = RunningDaemon(
        *_daemon_args(dsn, slot, pub, kafka_bootstrap, prefix, config), log_path=work / "run.log"
    )
    moments: list[Moment] = []
    changes, state = str(work / "changes"), str(work / "state")

    def normalize() -> None:
        NormalizeJob(
            bootstrap=kafka_bootstrap, topics=[f"{prefix}.json.{SCHEMA}.{TABLE}"],
            format="json", output=changes, checkpoint=str(work / "normalize-ckpt"),
            layout_topic=prefix + ".schemas", available_now=True, kafka_timeout=120,
        ).run(spark)  # fmt: skip

    try:
        _wait_for(daemon, "snapshot_table_done", 1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path = {SCHEMA}")
            # the test servers run with synchronous_commit off: a commit could return before
            # its record is written, and pg_current_wal_lsn() (the write position) would then
            # be before the commit it follows (seen: 0/5D266000 after a commit at 0/5D267610)
            conn.execute("SET synchronous_commit = on")
            for i, statement in enumerate(WORKLOAD):
                conn.execute(statement)
                columns, _, rows = source_rows(dsn, TABLE)
                moments.append(Moment(wal_lsn(dsn), rows))
                if i == BEFORE_KILL:
                    wait_caught_up(dsn, slot, current_lsn(dsn), daemon)
                    normalize()  # materialize's first file ends at this moment
                    daemon.kill()  # SIGKILL, then the same command again
                    daemon = RunningDaemon(
                        *_daemon_args(dsn, slot, pub, kafka_bootstrap, prefix, config),
                        log_path=work / "run.log",
                    )
                elif i == BEFORE_RELOAD:
                    reload = sc.walcast(
                        "snapshot", "--dsn", dsn, "--table", f"{SCHEMA}.{TABLE}", "--slot", slot,
                        timeout=60,
                    )  # fmt: skip
                    assert reload.returncode == 0, reload.stderr
                    _wait_for(daemon, "snapshot_table_done", 2)  # both runs log to run.log
            conn.execute(SENTINEL)
        wait_caught_up(dsn, slot, current_lsn(dsn), daemon)
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
    _, _, final = source_rows(dsn, TABLE)
    normalize()
    checkpoint = work / "materialize-ckpt"
    # untyped, so without the layouts: values compare as PostgreSQL's text
    killed = materialize_killed_after_first_batch(changes, state, checkpoint, work / "job.log")
    MaterializeJob(
        normalized=changes, state=state, checkpoint=str(checkpoint), typed=False,
        use_delta=True, history=True, available_now=True, max_files_per_trigger=1,
    ).run(spark)  # fmt: skip
    assert killed
    yield Run(dsn, columns, moments, final, state, changes)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def rows_of(frame, columns: list[str]) -> Counter:
    assert sorted(c for c in frame.columns if c not in LINEAGE_NAMES) == sorted(columns)
    return Counter(tuple(row[c] for c in columns) for row in frame.collect())


def test_history_as_of_each_recorded_lsn_equals_postgres(run: Run, spark) -> None:
    assert len(run.moments) == len(WORKLOAD)
    for i, moment in enumerate(run.moments):
        frame = read_table(spark, run.state, SCHEMA, TABLE, as_of_lsn=moment.lsn)
        assert rows_of(frame, run.columns) == moment.rows, (i, moment.lsn)
    assert rows_of(read_table(spark, run.state, SCHEMA, TABLE), run.columns) == run.final
    (path,) = table_paths(spark, run.state, SCHEMA, TABLE)  # the history is not a table
    history = read_history(spark, path)
    assert history is not None
    per_key = Counter(r["id"] for r in history.collect())
    # the reload (after the delete of 3) writes 1, 21, 4 and 5 once more: a version each.
    # 1: insert, the transaction of three updates, reload, sentinel; 2 and 20 never visible
    # after their transaction; 21 opened by the double key change, then the reload; 3
    # inserted twice; 4: insert, reload, delete and re-insert; 5: insert, reload; 50: its
    # move, its update. The changes the killed daemon sent again opened none.
    assert per_key == Counter({"1": 4, "2": 1, "21": 2, "3": 2, "4": 3, "5": 2, "50": 2})


def test_delta_versions_hold_the_source_between_two_batches(run: Run, spark) -> None:
    """Without the history: the state table's versions answer the moment that ended the
    first normalize run (materialize's first batch), exactly; the others fall inside a batch
    and are refused."""
    (path,) = table_paths(spark, run.state, SCHEMA, TABLE)
    commits = recorded_commits(spark, path)
    answered, refusals = [], []
    for i, moment in enumerate(run.moments):
        try:
            version = version_as_of(commits, parse_lsn(moment.lsn), f"{SCHEMA}.{TABLE}")
        except AsOfError as exc:
            refusals.append(str(exc))
            continue
        frame = spark.read.format("delta").option("versionAsOf", version).load(path)
        assert rows_of(frame, run.columns) == moment.rows, (i, moment.lsn, version)
        answered.append(i)
    assert BEFORE_KILL in answered, [(c.version, c.changes) for c in commits]
    assert all("applied changes on both sides of it" in r for r in refusals), refusals


def show(run: Run, *args: str, timeout: float = 900):
    return sc.walcast(
        "spark", "show", "--tables", run.state, "--table", f"{SCHEMA}.{TABLE}", *args,
        timeout=timeout,
    )  # fmt: skip


def test_show_as_of_lsn_prints_the_source_then(run: Run) -> None:
    moment = run.moments[2]
    done = show(run, "--as-of-lsn", moment.lsn)
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    got = Counter(tuple(r[c] for c in run.columns) for r in printed)
    assert got == moment.rows
    assert done.stderr.strip().endswith(f"as of {moment.lsn}: {len(printed)} rows"), done.stderr


def test_show_outside_the_history_is_one_line_naming_the_range(run: Run) -> None:
    first = parse_lsn(run.moments[0].lsn)
    for lsn in ("0/10", "FFFF/0"):
        done = show(run, "--as-of-lsn", lsn)
        assert done.returncode == 2
        assert_one_line_error(done, f"--as-of-lsn {lsn}", f"{SCHEMA}.{TABLE}'s history covers")
        low = done.stderr.split("covers ")[1].split(" to ")[0]
        assert parse_lsn(low) <= first


def test_show_a_malformed_lsn_or_time_is_one_line(run: Run) -> None:
    done = show(run, "--as-of-lsn", "16B3748")
    assert done.returncode == 2
    assert_one_line_error(done, "--as-of-lsn: '16B3748' is not an LSN", "X/Y")
    done = show(run, "--as-of-time", "yesterday")
    assert done.returncode == 2
    assert_one_line_error(done, "--as-of-time: 'yesterday' is not a time", "ISO 8601")


def test_history_on_parquet_is_refused_and_a_parquet_table_has_none(
    run: Run, tmp_path: Path
) -> None:
    done = sc.walcast(
        "spark", "materialize", "--input", run.changes, "--output", str(tmp_path / "p"),
        "--checkpoint", str(tmp_path / "c"), "--parquet", "--history", "--available-now",
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line_error(done, "--history needs Delta Lake or Iceberg tables", "--store iceberg")
    done = sc.walcast(
        "spark", "materialize", "--input", run.changes, "--output", str(tmp_path / "p"),
        "--checkpoint", str(tmp_path / "c"), "--parquet", "--available-now", timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = sc.walcast(
        "spark", "show", "--tables", str(tmp_path / "p"), "--table", f"{SCHEMA}.{TABLE}",
        "--as-of-lsn", run.moments[0].lsn, timeout=900,
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line_error(done, "a Parquet table, which keeps no history", "--history")

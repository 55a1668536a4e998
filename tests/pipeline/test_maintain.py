"""``walcast spark maintain``: compaction and expiry of the state tables (:mod:`pipeline.maintain`).

On hand-built changes (``test_history``'s transactions): tables of every store under one
output, each compacted with its content unchanged (state, history, the version an as-of
read picks); a compaction running in a loop beside batches being applied (the race
:mod:`pipeline.conflicts` retries); and the one-line errors, through the CLI where no
Spark is needed.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

import datetime as dt
import itertools
import threading
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from capture.errors import ConfigError
from pipeline import stores
from pipeline.asof import read_table_as_of
from pipeline.conflicts import is_conflict, retry_conflicts
from pipeline.iceberg_store import catalog_for, table_name
from pipeline.maintain import MaintainOptions, expiry_cutoff, find_tables, maintain
from pipeline.materialize import apply_batch, read_table
from pipeline.stores import table_path
from pipeline.tables import history_path, read_history
from tests.pipeline.test_cli import assert_one_line_error
from tests.pipeline.test_history import Txn, replay, workload
from tests.support import scenario as sc

SOURCE = "7312345678901234567/shop/walcast_slot"


def files_of(spark, root: str, schema: str) -> int:
    """The data files of the current version of ``schema.doc`` under ``root``."""
    if schema == "ice_db":
        name = table_name(catalog_for(spark, root), schema, "doc")
        return int(spark.sql(f"SELECT count(*) FROM {name}.files").first()[0])
    return len(read_table(spark, root, schema, "doc").inputFiles())


def state(frame) -> dict:
    return {r["id"]: (r["v"], r["body"]) for r in frame.collect()}


def batches_of(t: Txn, cuts: list[int]) -> list[list[dict]]:
    rows = list(t.rows)
    return [rows[a:b] for a, b in itertools.pairwise([0, *cuts, len(rows)])]


@pytest.mark.integration
def test_every_store_is_compacted_and_reads_the_same(spark, tmp_path) -> None:
    """Delta and Iceberg (each with its history) and Parquet tables under one output, one
    batch per transaction: maintain compacts Delta's and Iceberg's files, leaves Parquet,
    and every table, both histories and an as-of read from Delta's versions read the
    same."""
    root = str(tmp_path / "out")
    t = workload()
    batches = batches_of(t, [8, 11])
    stores = {"delta": "delta_db", "iceberg": "ice_db", "parquet": "pq_db"}
    for batch_id, part in enumerate(batches):
        t.rows = part
        changes = t.frame(spark)  # (empties t.rows)
        for store, schema in stores.items():
            frame = changes.withColumn("schema", F.lit(schema))
            apply_batch(
                spark, frame, root, batch_id, typed=False, history=store != "parquet",
                **({"store": "iceberg"} if store == "iceberg" else {"use_delta": store == "delta"}),
            )  # fmt: skip
    expected = replay(t.log, t.lsn)
    delta_path = table_path(root, "delta_db", "doc")
    ice_path = table_path(root, "ice_db", "doc")
    before = {name: files_of(spark, root, name) for name in stores.values()}

    def histories() -> list[list[tuple]]:
        kept = [read_history(spark, path) for path in (delta_path, ice_path)]
        return [sorted(map(tuple, h.collect())) for h in kept if h is not None]

    history_before = histories()
    assert len(history_before) == 2
    assert history_before[0] == history_before[1]  # the same versions in both stores
    found = {(f.label, f.store) for f in find_tables(spark, root)}
    assert found == {
        ("delta_db.doc", "delta"), ("delta_db._walcast_history.doc", "delta"),
        ("ice_db.doc", "iceberg"), ("ice_db._walcast_history.doc", "iceberg"),
        ("pq_db.doc", "parquet"),
    }  # fmt: skip
    # compaction here; the expiry (VACUUM, expire_snapshots) in the CLI run below
    lines = maintain(spark, root, MaintainOptions(expire=False), report=lambda _: None)
    assert len(lines) == 5, lines
    assert any("ice_db.doc (iceberg): compacted" in line for line in lines), lines
    assert any("ice_db._walcast_history.doc (iceberg): compacted" in line for line in lines)
    assert any("pq_db.doc (parquet): nothing to do" in line for line in lines), lines
    for schema in stores.values():
        assert state(read_table(spark, root, schema, "doc")) == expected, schema
    assert before["delta_db"] > 1, before
    assert before["ice_db"] > 1, before
    assert files_of(spark, root, "delta_db") == 1
    assert files_of(spark, root, "ice_db") == 1
    assert histories() == history_before
    # the history answers first; the versions still hold the last point (1600)
    last = read_table_as_of(spark, root, "delta_db", "doc", as_of_lsn=t.lsn - 100)
    assert state(last) == replay(t.log, t.lsn - 100)
    with pytest.raises(ConfigError, match=r"--table nope\.doc: no such table under"):
        maintain(spark, root, MaintainOptions(), only=["nope.doc"])
    only = maintain(spark, root, MaintainOptions(expire=False), only=["delta_db.doc"],
                    report=lambda _: None)  # fmt: skip
    assert sorted(line.split(": ")[1] for line in only) == [
        "delta_db._walcast_history.doc (delta)", "delta_db.doc (delta)",
    ]  # fmt: skip
    assert history_path(delta_path).endswith("_walcast_history/doc")
    # as a user runs it: one line per table on stdout, nothing of Delta's VACUUM
    done = sc.walcast("spark", "maintain", "--tables", root, "--no-compact", timeout=900)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert len(printed) == 5, done.stdout
    assert all(line.startswith("walcast spark maintain: ") for line in printed), printed
    assert sum("removed" in line for line in printed) == 4, printed  # not Parquet
    assert "Deleted" not in done.stderr, done.stderr


@pytest.mark.integration
def test_compaction_beside_batches_being_applied_loses_nothing(spark, tmp_path) -> None:
    """A thread compacts the Delta table in a loop while batches are MERGEd: whichever
    loses a race runs again, and the table ends equal to the replay."""
    root = str(tmp_path / "out")
    t = workload()
    batches = batches_of(t, [3, 8, 11, 13])
    t.rows = batches[0]
    apply_batch(spark, t.frame(spark), root, 0, use_delta=True, typed=False)
    stop = threading.Event()
    rounds: list[str] = []
    failures: list[BaseException] = []

    def compact() -> None:
        while not stop.is_set():
            try:
                rounds.extend(
                    maintain(spark, root, MaintainOptions(expire=False), report=lambda _: None)
                )
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failures.append(exc)
                return

    worker = threading.Thread(target=compact)
    worker.start()
    try:
        for batch_id, part in enumerate(batches[1:], start=1):
            t.rows = part
            apply_batch(spark, t.frame(spark), root, batch_id, use_delta=True, typed=False)
    finally:
        stop.set()
        worker.join(timeout=600)
    assert not failures, failures
    # it did compact between or during the batches (not only run on a compacted table)
    assert any("nothing to compact" not in line for line in rounds), rounds
    assert state(read_table(spark, root, "public", "doc")) == replay(t.log, t.lsn)


def test_conflicts_are_retried_and_other_failures_are_not() -> None:
    calls: list[int] = []

    def step() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(
                "[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added to the "
                "root of the table by a concurrent update"
            )
        return "done"

    assert retry_conflicts("public.doc (MERGE)", step, sleep=lambda _: None) == "done"
    assert len(calls) == 3
    iceberg = RuntimeError("ValidationException: Found conflicting files that can contain")
    assert is_conflict(iceberg)
    assert not is_conflict(RuntimeError("ValidationException: Cannot find field 'x'"))
    with pytest.raises(ValueError, match="bad"):
        retry_conflicts("x", lambda: (_ for _ in ()).throw(ValueError("bad")))
    always = RuntimeError("ConcurrentDeleteReadException: a file read was deleted")
    tries: list[int] = []

    def lose() -> None:
        tries.append(1)
        raise always

    with pytest.raises(RuntimeError, match="ConcurrentDeleteReadException"):
        retry_conflicts("x", lose, attempts=3, sleep=lambda _: None)
    assert len(tries) == 3


def test_the_expiry_never_passes_a_jobs_newest_snapshot() -> None:
    now = dt.datetime(2026, 12, 3, 12, tzinfo=dt.UTC)
    assert expiry_cutoff(now, 24, []) == now - dt.timedelta(hours=24)
    old_mark = now - dt.timedelta(days=30)
    assert expiry_cutoff(now, 24, [now - dt.timedelta(hours=1), old_mark]) == old_mark


def test_cli_errors_before_spark_are_one_line(tmp_path: Path) -> None:
    done = sc.walcast("spark", "maintain", "--tables", str(tmp_path), "--retain-hours", "0.5")
    assert done.returncode == 2
    assert_one_line_error(done, "--retain-hours 0.5: less than 1 hour", "at least 1")
    done = sc.walcast("spark", "maintain", "--tables", str(tmp_path / "nope"))
    assert done.returncode == 2
    assert_one_line_error(done, f"--tables {tmp_path / 'nope'}: no such directory")
    done = sc.walcast("spark", "maintain", "--tables", str(tmp_path), "--table", "orders")
    assert done.returncode == 2
    assert_one_line_error(done, "--table 'orders': expected SCHEMA.TABLE")


@pytest.mark.integration
def test_a_large_parquet_table_is_said_once(spark, tmp_path, monkeypatch, caplog) -> None:
    """Above the size, one warning per table and process: the whole table per batch."""
    monkeypatch.setattr(stores, "PARQUET_WARN_BYTES", 1)  # every table is "large"
    monkeypatch.setattr(stores, "_warned_large", set())
    root = str(tmp_path / "out")
    t = workload()
    for batch_id, part in enumerate(batches_of(t, [8])):
        t.rows = part
        apply_batch(spark, t.frame(spark), root, batch_id, use_delta=False, typed=False)
    said = [r.getMessage() for r in caplog.records if "rewrote the whole table" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("walcast spark materialize: public.doc: the Parquet store"), said
    assert "use --delta or --store iceberg" in said[0]

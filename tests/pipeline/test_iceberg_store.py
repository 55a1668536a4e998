"""The Iceberg store (``materialize --store iceberg``) on hand-built changes, and its CLI lines.

What the shared store tests (``test_materialize.py``, parametrized over every store) do
not cover: where the table lives (a Hadoop catalog on the output root, read back with
``read_table``), the batch ids its snapshots record, a batch applied again after a
restart (a keyless table would double its rows), a TRUNCATE, and the one-line errors
(an output that cannot be written, ``--change-data-feed``, a catalog that does not
answer). Its history tables are ``test_history.py``'s.
"""

from __future__ import annotations

import datetime as dt
import itertools
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.iceberg_store import (
    APP_ID,
    BATCH_ID,
    CHANGE_FEED_REFUSAL,
    STEP,
    catalog_for,
    last_commit,
    table_name,
)
from pipeline.lineage import LINEAGE_NAMES
from pipeline.local_frames import local_rows
from pipeline.materialize import ROW_KEY, apply_batch, read_table
from pipeline.model import NORMALIZED
from pipeline.stores import table_path
from tests.pipeline.test_cli import assert_one_line_error
from tests.support import scenario as sc

pytestmark = pytest.mark.integration

SOURCE = "7312345678901234567/shop/walcast_slot"


class Events:
    """Normalized changes of ``public.events (kind text, n int)``: no primary key."""

    def __init__(self) -> None:
        self._lsn: Iterator[int] = itertools.count(5000, 10)
        self.rows: list[dict] = []

    def _add(self, op: str, before: dict | None, after: dict | None) -> Events:
        lsn = next(self._lsn)
        self.rows.append(
            {
                "format": "test",
                "schema": "public",
                "table": "events",
                "op": op,
                "commit_lsn": f"0/{lsn:X}",
                "commit_lsn_num": lsn,
                "commit_time": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
                "ordinal": 1,
                "primary_key": [],
                "before": before,
                "after": after,
                "unchanged_toast": [],
                "column_types": {"kind": "text", "n": "int4"},
                "kafka_topic": "t",
                "kafka_partition": 0,
                "kafka_offset": lsn,
                "record_index": 0,
                "commit_date": dt.date(2024, 1, 1),
                "source": SOURCE,
            }
        )
        return self

    def insert(self, kind: str, n: int) -> Events:
        return self._add("insert", None, {"kind": kind, "n": str(n)})

    def delete(self, kind: str, n: int) -> Events:
        return self._add("delete", {"kind": kind, "n": str(n)}, None)

    def truncate(self) -> Events:
        return self._add("truncate", None, None)

    def frame(self, spark):
        full = [tuple(row.get(f.name) for f in NORMALIZED.fields) for row in self.rows]
        self.rows = []
        return local_rows(spark, full, NORMALIZED)


def rows(spark, root: str) -> Counter:
    frame = read_table(spark, root, "public", "events")
    return Counter((r["kind"], r["n"]) for r in frame.collect())


def test_a_keyless_table_lives_at_its_path_and_applies_each_batch_once(spark, tmp_path) -> None:
    """Equal rows are a multiset; a batch applied again (a restart) changes nothing."""
    root = str(tmp_path / "tables")
    events = Events()
    first = events.insert("a", 1).insert("a", 1).insert("b", 2).frame(spark)
    apply_batch(spark, first, root, 0, store="iceberg", typed=True, app_id="app")
    path = table_path(root, "public", "events", SOURCE)
    assert (Path(path) / "metadata" / "version-hint.text").exists()
    assert rows(spark, root) == Counter({("a", 1): 2, ("b", 2): 1})
    frame = read_table(spark, root, "public", "events")
    assert frame.columns == ["kind", "n", *LINEAGE_NAMES, ROW_KEY]
    assert dict(frame.dtypes)["n"] == "int"

    second = events.delete("a", 1).insert("c", 3).frame(spark).persist()
    apply_batch(spark, second, root, 1, store="iceberg", typed=True, app_id="app")
    after = Counter({("a", 1): 1, ("b", 2): 1, ("c", 3): 1})
    assert rows(spark, root) == after
    # the same batch again, as Spark replays an uncommitted batch after a crash
    apply_batch(spark, second, root, 1, store="iceberg", typed=True, app_id="app")
    assert rows(spark, root) == after
    name = table_name(catalog_for(spark, root), "public", "events", SOURCE)
    assert last_commit(spark, name, "app:" + path) == (1, 2)
    summaries = spark.sql(f"SELECT summary FROM {name}.snapshots").collect()
    marked = [s["summary"] for s in summaries if s["summary"].get(APP_ID) == "app:" + path]
    assert [(m[BATCH_ID], m[STEP]) for m in marked] == [("0", "merge"), ("1", "merge")]


def test_a_truncate_empties_the_table_once(spark, tmp_path) -> None:
    root = str(tmp_path / "tables")
    events = Events()
    apply_batch(spark, events.insert("a", 1).insert("b", 2).frame(spark), root, 0, store="iceberg")
    batch = events.insert("x", 9).truncate().insert("c", 3).frame(spark).persist()
    apply_batch(spark, batch, root, 1, store="iceberg")
    assert rows(spark, root) == Counter({("c", 3): 1})
    apply_batch(spark, batch, root, 1, store="iceberg")  # replayed: not doubled
    assert rows(spark, root) == Counter({("c", 3): 1})
    lineage = read_table(spark, root, "public", "events").first()
    assert lineage is not None
    assert lineage["_walcast_op"] == "insert"


def materialize(tmp_path: Path, *args: str, timeout: float = 300):
    (tmp_path / "in").mkdir(exist_ok=True)
    return sc.walcast(
        "spark", "materialize", "--input", str(tmp_path / "in"),
        "--checkpoint", str(tmp_path / "cp"), "--available-now", *args, timeout=timeout,
    )  # fmt: skip


def test_an_output_iceberg_cannot_write_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = materialize(tmp_path, "--output", str(blocker / "tables"), "--store", "iceberg")
    assert done.returncode == 2
    assert_one_line_error(done, "--output", "a-file/tables", "Iceberg warehouse")


def test_a_change_data_feed_with_iceberg_is_one_line(tmp_path: Path) -> None:
    done = materialize(
        tmp_path, "--output", str(tmp_path / "t"), "--store", "iceberg", "--change-data-feed"
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line_error(done, CHANGE_FEED_REFUSAL)


def test_a_catalog_that_does_not_answer_is_one_line_naming_its_uri(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    done = materialize(
        tmp_path, "--output", str(tmp_path / "t"), "--store", "iceberg",
        "--conf", "spark.sql.catalog.walcast=org.apache.iceberg.spark.SparkCatalog",
        "--conf", "spark.sql.catalog.walcast.type=rest",
        "--conf", f"spark.sql.catalog.walcast.uri={uri}",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert_one_line_error(done, f"spark.sql.catalog.walcast.uri={uri}", "cannot be reached")


@pytest.mark.parametrize(
    ("flags", "store", "use_delta"),
    [
        ((), None, None),
        (("--store", "iceberg"), "iceberg", False),
        (("--store", "delta"), "delta", True),
        (("--delta",), "delta", True),
        (("--parquet",), "parquet", False),
        (("--store", "parquet"), "parquet", False),
    ],
)
def test_the_store_flags_reach_the_job(
    flags: tuple[str, ...], store: str | None, use_delta: bool | None
) -> None:
    from pipeline import cli  # noqa: PLC0415
    from tests.pipeline.test_cli import MATERIALIZE, parsed  # noqa: PLC0415

    args = parsed(cli.add_materialize_arguments, *MATERIALIZE, "--checkpoint", "c", *flags)
    job = cli.materialize_job(args)
    assert (job.store, job.use_delta) == (store, use_delta)


def test_store_and_parquet_together_are_refused(tmp_path: Path) -> None:
    done = materialize(
        tmp_path, "--output", str(tmp_path / "t"), "--store", "iceberg", "--parquet"
    )  # fmt: skip
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr

"""History tables (SCD type 2) and as-of reads on hand-built normalized changes.

``public.doc (id bigint primary key, v int, body text)`` through :class:`Txn`, the
``Changes`` builder of ``test_materialize`` with transactions: several changes under one
commit LSN, numbered by their ordinal. Every case is checked as a user reads it back:
:func:`pipeline.asof.read_table_as_of` at each commit LSN must equal the state a plain
Python replay of the same changes says (:func:`replay`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path

import pytest

from capture.errors import ConfigError
from pipeline.asof import read_table_as_of
from pipeline.delta_versions import recorded_commits
from pipeline.errors import AsOfError
from pipeline.history import IS_CURRENT, VALID_FROM_LSN, VALID_TO_LSN, HistoryOrderError
from pipeline.history_store import apply_history
from pipeline.iceberg_store import APP_ID, BATCH_ID, catalog_for, table_name
from pipeline.lineage import COMMIT_LSN, COMMIT_TIME, OP
from pipeline.local_frames import local_rows
from pipeline.materialize import apply_batch, read_table
from pipeline.model import KAFKA_ORDER, LOG_ORDER
from pipeline.stores import TableSpec, table_path
from pipeline.tables import history_path, read_history
from tests.pipeline.test_materialize import BODY_A, BODY_B, Changes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
"""Each batch runs a dozen Spark jobs: on the shared 2-core machine (load 20-30) one test
took more than the default 600 s."""

SPEC = TableSpec("public", "doc", (("id", "string"), ("v", "string"), ("body", "string")), ("id",))


class Txn(Changes):
    """``Changes`` whose changes share a commit LSN until :meth:`commit`."""

    def __init__(self) -> None:
        super().__init__()
        self.lsn = 1000
        self.ordinal = 0
        self.log: list[dict] = []  # every change, for the replay

    def _add(self, op: str, before, after, toast) -> None:
        super()._add(op, before, after, toast)
        self.ordinal += 1
        row = self.rows[-1]
        row.update(
            commit_lsn_num=self.lsn,
            commit_lsn=f"0/{self.lsn:X}",
            ordinal=self.ordinal,
            kafka_offset=len(self.log),
            commit_time=dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=self.lsn),
        )
        self.log.append(dict(row))

    def commit(self) -> Txn:
        self.lsn += 100
        self.ordinal = 0
        return self

    def truncate(self) -> Txn:
        self._add("truncate", None, None, [])
        return self


def replay(log: list[dict], at: int) -> dict[str, tuple]:
    """The table after every change committed at or before LSN ``at``."""
    rows: dict[str, dict] = {}
    for c in sorted(log, key=lambda c: (c["commit_lsn_num"], c["ordinal"])):
        if c["commit_lsn_num"] > at:
            break
        if c["op"] == "truncate":
            rows.clear()
        elif c["op"] == "insert":
            rows[c["after"]["id"]] = dict(c["after"])
        elif c["op"] == "delete":
            rows.pop(c["before"]["id"], None)
        else:
            old = (c["before"] or c["after"])["id"]
            rows[c["after"]["id"]] = {**rows.pop(old, {}), **c["after"]}
    return {k: (r.get("v"), r.get("body")) for k, r in rows.items()}


def as_of(spark, root: str, lsn: int) -> dict[str, tuple]:
    frame = read_table_as_of(spark, root, "public", "doc", as_of_lsn=lsn)
    return {r["id"]: (r["v"], r["body"]) for r in frame.collect()}


def run_batches(spark, root: str, txn: Txn, batches: list[list[dict]], **kwargs) -> None:
    for batch_id, rows in enumerate(batches):
        txn.rows = rows
        apply_batch(
            spark, txn.frame(spark), root, batch_id, use_delta=True, typed=False, history=True,
            **kwargs,
        )  # fmt: skip


def commit_lsns(log: list[dict]) -> list[int]:
    return sorted({c["commit_lsn_num"] for c in log})


def check_every_lsn(spark, root: str, log: list[dict]) -> None:
    """The history as of every commit LSN equals the replay: read once and filtered here
    with the documented predicate, and through ``read_table_as_of`` at the first, a middle
    and the last commit (each read is a few Spark jobs)."""
    history = read_history(spark, table_path(root, "public", "doc")).collect()
    lsns = commit_lsns(log)
    for lsn in lsns:
        visible = {
            r["id"]: (r["v"], r["body"])
            for r in history
            if r[VALID_FROM_LSN] <= lsn and (r[VALID_TO_LSN] is None or r[VALID_TO_LSN] > lsn)
        }
        assert visible == replay(log, lsn), f"history as of {lsn}"
    for lsn in {lsns[0], lsns[len(lsns) // 2], lsns[-1]}:
        assert as_of(spark, root, lsn) == replay(log, lsn), f"read_table_as_of {lsn}"


def workload() -> Txn:
    t = Txn()
    t.insert(1, 1, BODY_A).insert(2, 1, BODY_B).insert(3, 1, BODY_A).commit()
    # one row updated three times in one transaction, another moved twice (TOAST unsent)
    t.update(1, 2).update(1, 3).update(1, 4).move(2, 20, 2).move(20, 21, 3).commit()
    t.delete(3).commit()
    t.insert(3, 7, BODY_B).update(21, 9).commit()  # re-insert
    t.delete(1).insert(1, 5, BODY_B).commit()  # delete and re-insert in one transaction
    t.insert(9, 1, BODY_A).delete(9).commit()  # never visible outside its transaction
    t.update(3, 8).commit()
    return t


@pytest.mark.parametrize(
    ("store", "cuts"),
    [("delta", ()), ("delta", (5, 7)), ("iceberg", (5, 7))],
    ids=["delta-one-batch", "delta-cut-in-transactions", "iceberg-cut-in-transactions"],
)
def test_history_as_of_every_commit_equals_the_replay(spark, tmp_path, store, cuts) -> None:
    """One batch, or batches cut inside a transaction (between two updates of one row, then
    between the two key changes of another): the same history either way; a batch applied
    again (a restart) changes nothing. Iceberg keeps the same history in an Iceberg table
    at the same place."""
    root = str(tmp_path / "state")
    t = workload()
    rows = list(t.rows)
    bounds = [0, *cuts, len(rows)]
    batches = [rows[a:b] for a, b in itertools.pairwise(bounds)]
    kwargs = {"store": store}
    run_batches(spark, root, t, batches, **kwargs)
    check_every_lsn(spark, root, t.log)
    path = history_path(table_path(root, "public", "doc"))
    kept = read_history(spark, table_path(root, "public", "doc"))
    assert kept is not None
    history = kept.collect()
    assert Path(path, "metadata" if store == "iceberg" else "_delta_log").is_dir()
    # one version per row and transaction it was visible after: 1 has 3 (insert, the
    # transaction's last update, the re-insert), 9 none
    versions: dict[str, int] = {}
    for r in history:
        versions[r["id"]] = versions.get(r["id"], 0) + 1
        assert r[IS_CURRENT] == (r[VALID_TO_LSN] is None)
        assert r[VALID_TO_LSN] is None or r[VALID_FROM_LSN] < r[VALID_TO_LSN]
    assert versions == {"1": 3, "2": 1, "21": 2, "3": 3}
    moved = {r["id"]: r for r in history if r["id"] == "21"}
    assert moved["21"]["body"] == BODY_B  # the TOASTed body followed the two key changes
    # the current table equals the history's current versions
    current = {
        r["id"]: (r["v"], r["body"]) for r in read_table(spark, root, "public", "doc").collect()
    }
    assert current == replay(t.log, t.lsn)
    if cuts:  # the last batch again, as a restarted job replays it: nothing changes
        t.rows = batches[-1]
        last = len(batches) - 1
        apply_batch(
            spark, t.frame(spark), root, last, use_delta=True, typed=False, history=True,
            **kwargs,
        )  # fmt: skip
        again = read_history(spark, table_path(root, "public", "doc"))
        assert again is not None
        assert sorted(map(tuple, again.collect())) == sorted(map(tuple, history))
    if store == "iceberg":  # each batch is one snapshot marked with the history's app id
        name = table_name(catalog_for(spark, root), "public", "doc", history=True)
        marks = [
            (r["summary"].get(APP_ID), r["summary"].get(BATCH_ID))
            for r in spark.sql(f"SELECT summary FROM {name}.snapshots").collect()
            if r["summary"].get(APP_ID)
        ]
        app = f"walcast-materialize:{table_path(root, 'public', 'doc')}:history"
        assert marks == [(app, str(i)) for i in range(len(batches))]


def test_truncate_closes_every_open_version(spark, tmp_path) -> None:
    root = str(tmp_path / "state")
    t = Txn()
    t.insert(1, 1, "a").insert(2, 1, "b").commit()
    first = list(t.rows)
    t.rows = []
    t.update(1, 2).commit().truncate().commit().insert(2, 3, "c").commit()
    run_batches(spark, root, t, [first, list(t.rows)])
    check_every_lsn(spark, root, t.log)


def test_tracked_columns_update_the_open_version_in_place(spark, tmp_path) -> None:
    root = str(tmp_path / "state")
    t = Txn()
    t.insert(1, 1, "a").commit()
    t._add("update", None, {"id": "1", "body": "b"}, [])  # body only: untracked
    t.commit()
    t.update(1, 2).commit()  # v: a new version
    run_batches(spark, root, t, [list(t.rows)], history_columns=("v",))
    history = sorted(
        (r[VALID_FROM_LSN], r["v"], r["body"], r[OP])
        for r in read_history(spark, table_path(root, "public", "doc")).collect()
    )
    assert history == [(1000, "1", "b", "update"), (1200, "2", "b", "update")]


def test_state_rows_carry_their_last_change(spark, tmp_path, store: bool) -> None:
    """Both stores: commit LSN, time and operation of the change that last wrote the row."""
    root = str(tmp_path / "state")
    t = Txn()
    t.insert(1, 1, BODY_A).insert(2, 1, BODY_B).commit()
    apply_batch(spark, t.frame(spark), root, 0, use_delta=store, typed=False)
    t.update(1, 2).move(2, 3, 2).commit()
    apply_batch(spark, t.frame(spark), root, 1, use_delta=store, typed=False)
    got = {
        r["id"]: (r[COMMIT_LSN], r[COMMIT_TIME], r[OP], r["body"])
        for r in read_table(spark, root, "public", "doc").collect()
    }
    at = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=1100)  # noqa: DTZ001 - PySpark: naive UTC
    assert got == {"1": (1100, at, "update", BODY_A), "3": (1100, at, "update", BODY_B)}


@pytest.fixture(params=["parquet", "delta"])
def store(request: pytest.FixtureRequest) -> bool:
    return request.param == "delta"


def test_history_needs_commit_lsns(spark, tmp_path) -> None:
    t = Txn()
    t.insert(1, 1, "a").commit()
    with pytest.raises(HistoryOrderError, match=r"public\.doc: --history orders versions"):
        apply_history(spark, str(tmp_path), SPEC, t.frame(spark), 0, "a", KAFKA_ORDER)
    assert LOG_ORDER != KAFKA_ORDER


def test_as_of_outside_the_history_names_the_range(spark, tmp_path) -> None:
    root = str(tmp_path / "state")
    t = Txn()
    t.insert(1, 1, "a").commit().update(1, 2).commit()
    run_batches(spark, root, t, [list(t.rows)])
    for lsn in (999, 1101):
        with pytest.raises(ConfigError, match=r"covers 0/3E8 to 0/44C"):
            read_table_as_of(spark, root, "public", "doc", as_of_lsn=lsn)
    got = read_table_as_of(
        spark, root, "public", "doc", as_of_time=dt.datetime(2024, 1, 1, 0, 17, 0, tzinfo=dt.UTC)
    ).collect()
    assert [(r["id"], r["v"]) for r in got] == [("1", "1")]


def test_delta_versions_answer_between_batches_and_refuse_inside_one(spark, tmp_path) -> None:
    """Without --history, a Delta table reads as of an LSN from its versions: exact at the
    points between two batches (each checked against the replay), refused inside a batch
    (a transaction cut in two: 0/578 lies inside) and outside the range; a batch applied
    again records nothing more."""
    root = str(tmp_path / "state")
    t = workload()
    rows = list(t.rows)
    # batches: txns 1000-1100 | 1200-1300 | the first change of 1400 | the rest (to 1600)
    batches = [rows[a:b] for a, b in itertools.pairwise([0, 8, 11, 12, len(rows)])]
    for batch_id, part in enumerate(batches):
        t.rows = part
        apply_batch(spark, t.frame(spark), root, batch_id, use_delta=True, typed=False)
    path = table_path(root, "public", "doc")
    commits = recorded_commits(spark, path)
    assert [(c.batch_id, c.changes.first_lsn, c.changes.last_lsn) for c in commits] == [
        (0, 1000, 1100), (1, 1200, 1300), (2, 1400, 1400), (3, 1400, 1600),
    ]  # fmt: skip
    for lsn, like in ((1100, 1100), (1199, 1100), (1300, 1300), (1600, 1600)):
        assert as_of(spark, root, lsn) == replay(t.log, like), lsn
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=1350)
    got = read_table_as_of(spark, root, "public", "doc", as_of_time=at).collect()
    assert {r["id"]: (r["v"], r["body"]) for r in got} == replay(t.log, 1300)
    for lsn, near in ((1000, "0/44C"), (1200, "0/44C or 0/514"), (1400, "0/514 or 0/640")):
        with pytest.raises(AsOfError, match=rf"both sides of it .* that one does: {near}$"):
            read_table_as_of(spark, root, "public", "doc", as_of_lsn=lsn)
    for lsn in (999, 1601):
        with pytest.raises(AsOfError, match=r"public\.doc's versions cover 0/3E8 to 0/640"):
            read_table_as_of(spark, root, "public", "doc", as_of_lsn=lsn)
    t.rows = batches[-1]  # the last batch again, as a restarted job replays it
    apply_batch(spark, t.frame(spark), root, len(batches) - 1, use_delta=True, typed=False)
    assert recorded_commits(spark, path) == commits


def layout_records(spark, *layouts: tuple[str, ...]):
    """Layout rows of ``public.doc``, one per column list, in that order (the last newest)."""
    from pipeline.layouts import parse_layouts  # noqa: PLC0415

    types = {"id": ("int8", 20), "v": ("int4", 23), "body": ("text", 25)}
    records = []
    for offset, names in enumerate(layouts):
        columns = [
            {
                "position": i + 1, "name": n, "type": types[n][0], "declared_type": types[n][0],
                "type_oid": types[n][1], "type_modifier": -1, "key": n == "id",
                "primary_key": n == "id", "rendering": "bare",
            }
            for i, n in enumerate(names)
        ]  # fmt: skip
        record = {
            "format": "ibm", "schema": "public", "table": "doc", "relation_id": 1,
            "version": f"{offset:016x}", "replica_identity": "default", "primary_key": ["id"],
            "field_count": 12 + 2 * len(names), "columns": columns,
        }  # fmt: skip
        records.append((json.dumps(record), offset, dt.datetime(2024, 1, 1)))  # noqa: DTZ001
    frame = local_rows(spark, records, "value string, offset long, timestamp timestamp")
    return parse_layouts(frame)


@pytest.mark.parametrize("typed", [False, True], ids=["text", "typed"])
def test_a_batch_spanning_a_drop_column_keeps_the_dropped_values(spark, tmp_path, typed) -> None:
    """One batch holds changes from before and after ``ALTER TABLE doc DROP COLUMN body``
    (the layouts say so: the newest has no ``body``). Versions from before the DROP keep
    their body (an as-of read then shows it); rows inserted after it are not kept out for
    not sending it, and keep none."""
    root = str(tmp_path / "state")
    t = Txn()
    t.insert(1, 1, "one").insert(2, 1, "two").commit()
    t.update(1, 2).commit()
    before_drop = t.lsn - 100
    t._add("insert", None, {"id": "3", "v": "5"}, [])  # after the DROP: no body
    t.commit()
    t._add("update", None, {"id": "2", "v": "6"}, [])
    t.commit()
    layouts = layout_records(spark, ("id", "v", "body"), ("id", "v"))
    apply_batch(spark, t.frame(spark), root, 0, layouts, use_delta=True, typed=typed, history=True)
    int_or_text = (lambda v: v) if typed else str

    def rows(frame) -> dict:
        return {int_or_text(r["id"]): (r["v"], r["body"]) for r in frame.collect()}

    one, two = int_or_text(1), int_or_text(2)
    then = read_table_as_of(spark, root, "public", "doc", as_of_lsn=before_drop)
    assert rows(then) == {one: (int_or_text(2), "one"), two: (int_or_text(1), "two")}
    state = read_table(spark, root, "public", "doc")
    assert "body" not in state.columns  # the source's columns now
    now = {int_or_text(r["id"]): r["v"] for r in state.collect()}
    assert now == {one: int_or_text(2), two: int_or_text(6), int_or_text(3): int_or_text(5)}
    history = read_history(spark, table_path(root, "public", "doc"))
    assert history is not None
    # inserted after the DROP: a version (not kept out), without a body
    assert [(r["v"], r["body"]) for r in history.collect() if r["id"] == int_or_text(3)] == [
        (int_or_text(5), None)
    ]


def readme_feed_example() -> str:
    """The downstream streaming job of pipeline/README.md, as printed there."""
    text = (Path(__file__).resolve().parents[2] / "pipeline" / "README.md").read_text()
    block = text.split("# TABLE: the state table's directory")[1].split("```")[0]
    return "# TABLE" + block


def test_change_data_feed_feeds_the_readme_streaming_job(spark, tmp_path) -> None:
    """--change-data-feed: the README's job reads every change, with walcast's columns."""
    root = str(tmp_path / "state")
    t = Txn()
    t.insert(1, 1, "a").insert(2, 1, "b").commit()
    apply_batch(spark, t.frame(spark), root, 0, use_delta=True, typed=False, change_data_feed=True)
    t.update(1, 2).delete(2).commit()
    apply_batch(spark, t.frame(spark), root, 1, use_delta=True, typed=False, change_data_feed=True)
    silver = str(tmp_path / "silver")
    scope = {
        "spark": spark,
        "TABLE": table_path(root, "public", "doc"),
        "CHECKPOINT": str(tmp_path / "feed-ckpt"),
        "SILVER": silver,
    }
    exec(readme_feed_example(), scope)
    got = sorted(
        (r["id"], r["v"], r["_change_type"], r[COMMIT_LSN], r[OP])
        for r in spark.read.format("delta").load(silver).collect()
    )
    assert got == [
        ("1", "1", "insert", 1000, "insert"),
        ("1", "2", "update_postimage", 1100, "update"),
        ("2", "1", "delete", 1000, "insert"),
        ("2", "1", "insert", 1000, "insert"),
    ]

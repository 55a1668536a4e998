"""A stream change at each point of a chunk's window, through the loading source.

:class:`~capture.snapshot.loading_source.LoadingSource` over a real
:class:`~capture.source.ReplicationSource` (a real PostgreSQL, a real slot) loads two
tables: ``k`` (a primary key, read in chunks of 10 rows, ids 2, 4, … 60) and ``bag`` (no key,
REPLICA IDENTITY FULL: one chunk, a multiset). The readers'
:class:`~capture.snapshot.reader.LoadHooks` commit, from another connection, one
transaction per table (an insert, an update, a delete and a key move) at one point of the
first read of a chunk (``k``'s second chunk; its changes also touch the loaded first chunk
and the third, not yet planned; ``bag``'s only chunk):

(a) before the chunk's watermark: streamed before the chunk, seen by the read;
(b) between the watermark and the read's snapshot: streamed after the chunk and seen by the
    read (``k``: applied again, idempotent; ``bag``: dropped from the stream);
(c) after the snapshot: streamed after the chunk, not seen by the read;
(d) the race: a transaction whose commit record precedes the watermark but which the
    read's snapshot does not see. For real, on a server of the test's own whose commits wait
    for a synchronous standby that never comes: such a commit is in the WAL (and streamed)
    but stays invisible until its wait is cancelled; the hook lets the watermark and the
    snapshot happen inside that wait, then cancels it. The chunk must be read again: the
    first read lacks the transaction, which the stream placed before the chunk. On the
    shared server, a stand-in: the hook reports a visible transaction as in progress in the
    read's snapshot, and the chunk is read again all the same.

Each time the fold of what the source yields (load rows and stream changes, in order; a
``bag`` load row with ordinal 1 starts the bag over) must equal ``SELECT *``, with no
duplicate row in ``bag``, and every chunk is read once except the raced ones, twice.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.kit.fold import Change, Tables
from capture.assembly import column_resolver, primary_key_resolver
from capture.errors import ConnectionLostError, WalcastError
from capture.events import ChangeEvent, LogicalMessageEvent, TransactionCommit
from capture.replication.side import SideConnection
from capture.snapshot import LoadingSource, LoadSettings, record_initial_load
from capture.snapshot.chunks import Chunk
from capture.snapshot.reader import LoadHooks, ReadSnapshot
from capture.source import ReplicationSource, SourceConfig
from capture.state.progress import MemoryProgress
from tests.support import failover
from tests.support.ports import free_port
from tests.support.scenario import drop_slot

pytestmark = pytest.mark.integration

CHUNK_ROWS = 10
TARGET = {"k": 2, "bag": 1}
"""The chunk of each table whose window the change is placed in."""
CHANGES = {
    "k": [
        "INSERT INTO {s}.k VALUES (25, 'new25'), (5, 'new5'), (55, 'new55')",
        "UPDATE {s}.k SET v = v || '+u' WHERE id IN (30, 10, 50)",
        "DELETE FROM {s}.k WHERE id IN (32, 12, 52)",
        "UPDATE {s}.k SET id = 7 WHERE id = 34",  # into the loaded chunk
        "UPDATE {s}.k SET id = 37 WHERE id = 14",  # from the loaded chunk into this one
        "UPDATE {s}.k SET id = 57 WHERE id = 36",  # into a chunk not yet planned
        "UPDATE {s}.k SET id = 39 WHERE id = 54",  # from there into this one
    ],
    "bag": [
        "INSERT INTO {s}.bag VALUES (100, 'new')",
        "UPDATE {s}.bag SET y = y || '+u' WHERE x = 3",
        "DELETE FROM {s}.bag WHERE x = 5",
        "UPDATE {s}.bag SET x = 107 WHERE x = 7",  # every value is its identity: a move
    ],
}
COLUMNS = {"k": ("id", "v"), "bag": ("x", "y")}
END_PREFIX = "walcast.test.end"
POINTS = ("before_watermark", "after_watermark", "after_snapshot")


# -- the hooks -------------------------------------------------------------------------------


class Placing(LoadHooks):
    """Commits a table's changes at ``point`` of the first read of its target chunk."""

    def __init__(self, dsn: str, schema: str, point: str) -> None:
        self.dsn, self.schema, self.point = dsn, schema, point
        self.reads: Counter[tuple[str, int]] = Counter()
        """Reads of each (table, chunk) whose snapshot was taken."""

    def due(self, chunk: Chunk, point: str) -> bool:
        name = chunk.table.name
        return (
            point == self.point
            and TARGET.get(name) == chunk.number
            and not self.reads[name, chunk.number]
        )

    def statements(self, chunk: Chunk) -> list[str]:
        return [s.format(s=self.schema) for s in CHANGES[chunk.table.name]]

    def commit(self, chunk: Chunk) -> int:
        """Commit the chunk's table's changes in one transaction; its xid (64 bits)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn, conn.transaction():
            for statement in self.statements(chunk):
                conn.execute(statement)
            row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
            assert row is not None
            return int(row[0])

    def before_watermark(self, chunk: Chunk) -> None:
        if self.due(chunk, "before_watermark"):
            self.commit(chunk)

    def after_watermark(self, chunk: Chunk) -> None:
        if self.due(chunk, "after_watermark"):
            self.commit(chunk)

    def after_snapshot(self, chunk: Chunk, snapshot: ReadSnapshot) -> ReadSnapshot:
        if self.due(chunk, "after_snapshot"):
            self.commit(chunk)
        self.reads[chunk.table.name, chunk.number] += 1
        return snapshot


class StandIn(Placing):
    """(d) on the shared server: a transaction committed before the watermark, reported as
    in progress in the first read's snapshot (which in truth sees it)."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(dsn, schema, "race")
        self.xids: dict[str, int] = {}

    def before_watermark(self, chunk: Chunk) -> None:
        if self.due(chunk, "race"):
            self.xids[chunk.table.name] = self.commit(chunk)

    def after_snapshot(self, chunk: Chunk, snapshot: ReadSnapshot) -> ReadSnapshot:
        if self.due(chunk, "race"):
            xid = self.xids[chunk.table.name]
            assert snapshot.sees(xid & 0xFFFF_FFFF)
            snapshot = dataclasses.replace(
                snapshot,
                xmin=min(snapshot.xmin, xid),
                in_progress=snapshot.in_progress | {xid},
            )
            assert not snapshot.sees(xid & 0xFFFF_FFFF)
        return super().after_snapshot(chunk, snapshot)


class SyncRepRace(Placing):
    """(d) for real: the transaction's commit waits for a synchronous standby that never
    comes (in the WAL and streamed, invisible) while the watermark is written and the
    snapshot taken; its wait is cancelled after the snapshot, before the rows are read."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(dsn, schema, "race")
        self.racing: dict[str, tuple[int, int, threading.Thread]] = {}
        self.errors: list[BaseException] = []
        self.pids: list[int] = []

    def before_watermark(self, chunk: Chunk) -> None:
        if not self.due(chunk, "race"):
            return
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute("SET synchronous_commit = on")
        pid = conn.info.backend_pid
        self.pids.append(pid)
        ready = threading.Event()
        xid: list[int] = []

        def race() -> None:
            try:
                with conn, conn.transaction():
                    for statement in self.statements(chunk):
                        conn.execute(statement)
                    row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
                    assert row is not None
                    xid.append(int(row[0]))
                    ready.set()
                # COMMIT returns once the wait is cancelled (with a WARNING, committed)
            except BaseException as exc:  # noqa: BLE001 - checked by the test
                self.errors.append(exc)
                ready.set()

        thread = threading.Thread(target=race, daemon=True)
        thread.start()
        assert ready.wait(30), "the racing transaction never got to its commit"
        assert xid, self.errors
        with psycopg.connect(self.dsn, autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while watcher.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone() != ("SyncRep",):
                assert time.monotonic() < deadline, "the racing commit never waited"
                time.sleep(0.01)
        self.racing[chunk.table.name] = (xid[0], pid, thread)

    def release(self) -> None:
        """End every racing transaction's wait."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for pid in self.pids:
                conn.execute("SELECT pg_cancel_backend(%s)", (pid,))

    def after_snapshot(self, chunk: Chunk, snapshot: ReadSnapshot) -> ReadSnapshot:
        if self.due(chunk, "race"):
            xid, pid, thread = self.racing[chunk.table.name]
            assert not snapshot.sees(xid & 0xFFFF_FFFF), f"the race did not happen: {snapshot}"
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_cancel_backend(%s)", (pid,))
            thread.join(30)
            assert not thread.is_alive()
        return super().after_snapshot(chunk, snapshot)


# -- loading, folding --------------------------------------------------------------------------


@dataclasses.dataclass
class Published:
    dsn: str
    schema: str
    publication: str


def publish(
    dsn: str, k: tuple[str, str] = ("id int PRIMARY KEY, v text", "2 * g, 'v' || 2 * g")
) -> Published:
    """A schema of its own with ``k`` (``k``'s columns, and its rows' values of ``g`` in
    1..30) and ``bag``, and a publication of both."""
    tag = uuid.uuid4().hex[:8]
    schema, pub = f"lw_{tag}", f"lw_pub_{tag}"
    columns, values = k
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.k ({columns})")
        conn.execute(f"INSERT INTO {schema}.k SELECT {values} FROM generate_series(1, 30) g")
        conn.execute(f"CREATE TABLE {schema}.bag (x int, y text)")
        conn.execute(f"ALTER TABLE {schema}.bag REPLICA IDENTITY FULL")
        conn.execute(f"INSERT INTO {schema}.bag SELECT g, 'b' || g FROM generate_series(1, 20) g")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {schema}.k, {schema}.bag")
    return Published(dsn, schema, pub)


def unpublish(published: Published) -> None:
    with psycopg.connect(published.dsn, autocommit=True) as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {published.publication}")
        conn.execute(f"DROP SCHEMA {published.schema} CASCADE")


@pytest.fixture
def shared(pg_dsn: str, pg_major: int) -> Iterator[Published]:
    if pg_major < 14:
        pytest.skip("loads need PostgreSQL 14 (the refusal: test_versions.py)")
    published = publish(pg_dsn)
    yield published
    unpublish(published)


def load(
    published: Published,
    hooks: LoadHooks,
    *,
    receive_timeout: float | None = None,
    workers: int = 1,
    tables: tuple[str, ...] = ("k", "bag"),
) -> list[Any]:
    """Everything the loading source yields, from the slot's creation until the load is
    done and a message written after it arrived."""
    slot = f"lw_slot_{uuid.uuid4().hex[:8]}"
    dsn = published.dsn
    config = SourceConfig(
        dsn,
        slot,
        [published.publication],
        create_slot=True,
        messages=True,
        receive_timeout=receive_timeout,
    )
    side = SideConnection(dsn)
    items: list[Any] = []
    try:
        replication = ReplicationSource(
            config, key_resolver=primary_key_resolver(side), column_resolver=column_resolver(side)
        )
        progress = MemoryProgress()
        record_initial_load(progress)
        delivered = [0]
        source = LoadingSource(
            replication,
            dsn=dsn,
            slot=slot,
            publications=[published.publication],
            settings=LoadSettings("initial", workers=workers, chunk_rows=CHUNK_ROWS),
            progress=progress,
            delivered_lsn=lambda: delivered[0],
            hooks=hooks,
        )
        try:
            ended = arrived = False
            deadline = time.monotonic() + 120
            while not arrived:
                assert time.monotonic() < deadline, items[-20:]
                for item in source.poll(0.2):
                    items.append(item)
                    if isinstance(item, TransactionCommit):  # "delivered" once yielded
                        delivered[0] = max(delivered[0], item.commit_lsn)
                    arrived |= (  # this load's end: every slot of the database has messages
                        isinstance(item, LogicalMessageEvent)
                        and item.prefix == END_PREFIX
                        and item.content == slot.encode()
                    )
                if not ended and not source.loading:
                    ended = True
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute(
                            "SELECT pg_logical_emit_message(false, %s, %s)", (END_PREFIX, slot)
                        )
            states = {r.table.rpartition(".")[2]: r.state for r in progress.records.values()}
            assert states == dict.fromkeys(("*", *tables), "done"), progress.records
        finally:
            source.close()
    finally:
        side.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            drop_slot(conn, slot)
    return items


def fold(items: list[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The tables as a consumer folds the yielded changes, in order (:mod:`bench.kit.fold`;
    before its load, the bag may go below zero: its load row with ordinal 1 starts it over)."""
    tables = Tables({"k": ("id",), "bag": None})
    for item in items:
        if isinstance(item, ChangeEvent):
            tables.apply(Change.from_event(item))
    assert not tables.below_zero(), f"rows removed more often than added: {tables.below_zero()}"
    return {t: sorted(tables.rows(t, COLUMNS[t])) for t in COLUMNS}


def selected(published: Published) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    with psycopg.connect(published.dsn, autocommit=True) as conn:
        for table, (a, b) in COLUMNS.items():
            rows = conn.execute(f"SELECT {a}::text, {b} FROM {published.schema}.{table}")
            out[table] = sorted(tuple(r) for r in rows.fetchall())
    return out


def check(published: Published, hooks: Placing, items: list[Any], *, raced: bool) -> None:
    folded, expected = fold(items), selected(published)
    assert len(set(folded["bag"])) == len(folded["bag"]), f"duplicate bag rows: {folded['bag']}"
    mismatched = [t for t in COLUMNS if folded[t] != expected[t]]
    assert not mismatched, "\n".join(
        f"{t}: folded {folded[t]}\n{' ' * len(t)}  select {expected[t]}" for t in mismatched
    )
    # the changes were placed, and are in the tables
    assert {("25", "new25"), ("7", "v34")} <= set(expected["k"])
    assert {("100", "new"), ("107", "b7")} <= set(expected["bag"])
    twice = dict.fromkeys(TARGET.items(), 2 if raced else 1)
    assert all(n == twice.get(key, 1) for key, n in hooks.reads.items()), hooks.reads
    assert set(twice) <= set(hooks.reads), hooks.reads


# -- (a), (b), (c) and the stand-in for (d), on the shared server --------------------------------


@pytest.mark.parametrize("point", POINTS)
def test_a_change_at_each_point_of_the_window(shared: Published, point: str) -> None:
    hooks = Placing(shared.dsn, shared.schema, point)
    items = load(shared, hooks)
    check(shared, hooks, items, raced=False)


def test_a_snapshot_that_misses_an_earlier_commit_is_read_again(shared: Published) -> None:
    hooks = StandIn(shared.dsn, shared.schema)
    items = load(shared, hooks)
    assert set(hooks.xids) == set(TARGET)
    check(shared, hooks, items, raced=True)


# -- (d) for real: a server of the test's own -----------------------------------------------------


@pytest.fixture(scope="module")
def sync_rep_server(pg_env: dict[str, str], pg_major: int) -> Iterator[str]:
    """A PostgreSQL whose commits, with ``synchronous_commit = on``, wait for a standby
    that never comes (``synchronous_commit = local`` by default); its DSN."""
    if pg_major < 14:
        pytest.skip("loads need PostgreSQL 14 (the refusal: test_versions.py)")
    bin_dir = pg_env.get("WALCAST_TEST_PG_BIN") or os.environ.get("WALCAST_TEST_PG_BIN")
    if not bin_dir:
        pytest.fail("WALCAST_TEST_PG_BIN is not set: the race test starts a server of its own")
    user = failover.pg_os_user()
    root = Path(tempfile.mkdtemp(prefix="walcast-race-", dir="/tmp"))
    root.chmod(0o755)
    (root / "pg").mkdir(mode=0o700)
    if user is not None:
        shutil.chown(root / "pg", user, user)
    node = failover.Node("race", Path(bin_dir), root / "pg", free_port(), user)
    try:
        node.run(
            node.bin / "initdb", "-D", node.data, "-A", "trust", "-U", failover.SUPERUSER,
            "--encoding=UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        node.write("pg_hba.conf", "host all all 127.0.0.1/32 trust\n"
                   "host replication all 127.0.0.1/32 trust\n")  # fmt: skip
        node.write(
            "postgresql.conf",
            f"\nport = {node.port}\nlisten_addresses = '127.0.0.1'\n"
            "unix_socket_directories = ''\nwal_level = logical\nmax_wal_senders = 10\n"
            "max_replication_slots = 10\nfsync = off\nsynchronous_commit = local\n"
            "synchronous_standby_names = 'walcast_race_never'\ntimezone = 'UTC'\n",
            append=True,
        )
        node.start()
        with psycopg.connect(node.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {failover.DATABASE}")
        yield node.dsn()
    finally:
        node.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def test_a_commit_the_snapshot_does_not_see_yet_makes_the_chunk_read_again(
    sync_rep_server: str,
) -> None:
    published = publish(sync_rep_server)
    hooks = SyncRepRace(sync_rep_server, published.schema)
    try:
        items = load(published, hooks)
        assert not hooks.errors, hooks.errors
        assert set(hooks.racing) == set(TARGET)
        check(published, hooks, items, raced=True)
    finally:
        hooks.release()  # (a racer left waiting would hold its locks)
        unpublish(published)


class FailingBeforeWatermark(LoadHooks):
    """The first read of ``k``'s second chunk fails before its watermark is written."""

    def __init__(self) -> None:
        self.failed = False

    def before_watermark(self, chunk: Chunk) -> None:
        if chunk.table.name == "k" and chunk.number == TARGET["k"] and not self.failed:
            self.failed = True
            raise RuntimeError("the emit of the watermark was refused")


def test_a_read_that_fails_before_its_watermark_stops_the_load_in_one_line(
    shared: Published,
) -> None:
    # No watermark will ever bring that read's error: it must not wait for one (a silent
    # stall), but end the load with the reader's error, naming the table and the chunk.
    hooks = FailingBeforeWatermark()
    started = time.monotonic()
    with pytest.raises(WalcastError) as raised:
        load(shared, hooks)
    assert hooks.failed
    assert time.monotonic() - started < 60
    assert "failed at chunk 2" in raised.value.message
    assert "the emit of the watermark was refused" in raised.value.message


class HangingBeforeWatermark(LoadHooks):
    """The first read of ``k``'s second chunk hangs before its watermark is written (as an
    emit whose answer never comes: a frozen network), until released."""

    def __init__(self) -> None:
        self.hung = False
        self.release = threading.Event()

    def before_watermark(self, chunk: Chunk) -> None:
        if chunk.table.name == "k" and chunk.number == TARGET["k"] and not self.hung:
            self.hung = True
            self.release.wait(120)


def test_a_read_that_hangs_before_its_watermark_ends_the_session_within_its_bound(
    shared: Published,
) -> None:
    # Nothing would ever bring that read's watermark or its error: the load must not wait
    # for it for ever, but give it up after the stream's receive timeout (retried).
    # WAL keeps coming meanwhile, so the stream itself is never the silent one
    hooks = HangingBeforeWatermark()
    ticking = threading.Event()

    def tick() -> None:
        with psycopg.connect(shared.dsn, autocommit=True) as conn:
            while not ticking.wait(0.3):
                conn.execute("SELECT pg_logical_emit_message(false, 'walcast.test.tick', '')")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConnectionLostError) as raised:
            load(shared, hooks, receive_timeout=3)
    finally:
        hooks.release.set()
        ticking.set()
        ticker.join(10)
    assert hooks.hung
    assert time.monotonic() - started < 30
    assert "the watermark of chunk 2 was not written within 3 s" in raised.value.message

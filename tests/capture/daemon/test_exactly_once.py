"""``walcast run --exactly-once`` under faults: every change exactly once at read_committed.

Every test loads a table while the daemon runs, injures it, lets it finish, and checks the
topic as a read_committed consumer sees it against PostgreSQL:

* zero duplicates: each (commit LSN, ordinal) appears once;
* zero losses, order kept: every row's ``v`` records its history (``v || ':' || n``), and
  the messages of a row, in partition order, must show that history step by step, ending at
  the row's value in PostgreSQL; the message count equals the number of changes made.

The faults: ``kill -9`` repeated, with evidence that the kills landed between produce and
commit (an open Kafka transaction holding messages) and between commit and slot
acknowledgement (Kafka's committed position past the slot's); a broker restart mid-load, on
a broker of the test's own; a second daemon on the slot (refused), and a frozen daemon whose
slot is taken over (fenced).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import orjson
import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.kit.daemon import RunningDaemon, confirmed_lsn, current_lsn, wait_caught_up
from capture.formats.ibm.records import split_records
from capture.lsn import format_lsn, parse_lsn
from capture.replication.slots import source_identity
from capture.sinks.kafka_eos import CRASH_AFTER_COMMITS_ENV, CRASH_EXIT_CODE
from capture.state.offsets import DEFAULT_OFFSETS_TOPIC, read_offset
from tests.capture.sinks.committed_reader import read
from tests.capture.sinks.transaction_log import Sample, commits, now_ms, unexplained
from tests.support import scenario as sc

pytestmark = pytest.mark.integration
SERVICES = sc.REPO / "scripts" / "local-services"


class Load:
    """``rows`` inserts in transactions of ``batch``, then two updates of every 7th row.

    Statements are idempotent (retried across lost connections) and ``pause`` apart, so
    that the load is a steady stream over several seconds.
    """

    def __init__(
        self, dsn: str, table: str, rows: int, *, batch: int = 100, pause: float = 0.02
    ) -> None:
        self.dsn, self.table, self.rows, self.batch, self.pause = dsn, table, rows, batch, pause
        self.rounds = 2
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def changes(self) -> int:
        return self.rows + self.rounds * (self.rows // 7)

    def start(self) -> Load:
        self.thread.start()
        return self

    def join(self, timeout: float = 600) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "load did not finish"
        assert self.error is None, self.error

    def _statements(self):
        for lo in range(1, self.rows + 1, self.batch):
            hi = min(lo + self.batch - 1, self.rows)
            insert = (
                f"INSERT INTO {self.table} SELECT g, 'r' || g "
                "FROM generate_series(%s::int, %s::int) g ON CONFLICT (id) DO NOTHING"
            )
            yield insert, (lo, hi)
        for n in range(1, self.rounds + 1):
            for lo in range(1, self.rows + 1, self.batch * 5):
                hi = min(lo + self.batch * 5 - 1, self.rows)
                update = (
                    f"UPDATE {self.table} SET v = v || ':' || %s::text "
                    "WHERE id BETWEEN %s AND %s AND id %% 7 = 0 AND v NOT LIKE '%%:' || %s::text"
                )
                yield update, (n, lo, hi, n)

    def _run(self) -> None:
        try:
            statements = list(self._statements())
            i = 0
            deadline = time.monotonic() + 600
            while i < len(statements) and time.monotonic() < deadline:
                try:
                    with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                        conn.execute("SET synchronous_commit = on")
                        while i < len(statements):
                            conn.execute(*statements[i])
                            i += 1
                            time.sleep(self.pause)
                except psycopg.OperationalError:
                    time.sleep(0.5)
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc


class Case:
    """One table, publication and slot; daemons started with ``--exactly-once``."""

    def __init__(self, dsn: str, bootstrap: str, tmp: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.dsn, self.bootstrap, self.tmp = dsn, bootstrap, tmp
        self.table, self.pub, self.slot = f"eos_{tag}", f"eos_pub_{tag}", f"eos_slot_{tag}"
        self.prefix = f"eos_{tag}"
        self.topic = f"{self.prefix}.json.{self.table}"
        self.ibm_topic = f"{self.prefix}.ibm"
        self.started: list[RunningDaemon] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {self.table} (id int PRIMARY KEY, v text NOT NULL)")
            conn.execute(f"CREATE PUBLICATION {self.pub} FOR TABLE {self.table}")
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
        identity = source_identity(dsn, self.slot)
        self.key, self.transactional_id = identity.key, identity.transactional_id

    def daemon(self, name: str, *extra: str, env: dict[str, str] | None = None) -> RunningDaemon:
        args = [
            "--dsn", self.dsn, "--slot", self.slot, "--publication", self.pub,
            "--bootstrap-servers", self.bootstrap, "--format", "json",
            "--topic", self.prefix + ".{format}.{table}",
            "--transaction-topic", self.prefix + ".{format}",
            "--schema-topic", self.prefix + ".schemas",
            "--metrics-port", "0", "--heartbeat-interval", "1", "--exactly-once", *extra,
        ]  # fmt: skip
        self.started.append(RunningDaemon(*args, log_path=self.tmp / f"{name}.log", env=env))
        return self.started[-1]

    def committed_lsn(self) -> int:
        """The commit LSN Kafka's offsets record holds for the slot (0: none)."""
        settings = {"bootstrap.servers": self.bootstrap}
        record = read_offset(settings, DEFAULT_OFFSETS_TOPIC, self.key)
        return 0 if record is None else record.commit_lsn

    def open_messages(self) -> int:
        """Messages in the data topic after its last stable offset (an open transaction)."""
        ends = []
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": f"eos-test-{uuid.uuid4().hex}",
                    "isolation.level": isolation,
                }
            )
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, 0), timeout=10, cached=False
                )
            except KafkaException:
                return 0  # the topic does not exist yet
            finally:
                consumer.close()
            ends.append(high)
        return ends[1] - ends[0]

    def close(self) -> None:
        for daemon in self.started:
            if daemon.process.poll() is None:
                daemon.process.send_signal(signal.SIGCONT)
                daemon.kill()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            sc.drop_slot(conn, self.slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {self.pub}")
            conn.execute(f"DROP TABLE IF EXISTS {self.table}")

    def verify(self, load: Load) -> None:
        """Zero duplicates, zero losses, per-row order, at read_committed."""
        records = read(self.bootstrap, [self.topic])
        positions = [r.position for r in records]
        duplicates = len(positions) - len(set(positions))
        assert duplicates == 0, f"{duplicates} duplicates at read_committed"
        history: dict[str, list[str]] = {}
        for record in sorted(records, key=lambda r: r.offset):
            row = orjson.loads(record.value)["after"]
            history.setdefault(row["id"], []).append(row["v"])
        with psycopg.connect(self.dsn) as conn:
            source = dict(conn.execute(f"SELECT id::text, v FROM {self.table}").fetchall())
        assert set(history) == set(source), "rows missing at read_committed"
        for row_id, versions in history.items():
            parts = [v.split(":") for v in versions]
            broken = f"row {row_id}: history lost, repeated or reordered: {versions}"
            assert parts[0] == [f"r{row_id}"], broken
            for prev, new in itertools.pairwise(parts):
                assert new[:-1] == prev, broken
                assert int(new[-1]) == (int(prev[-1]) if len(prev) > 1 else 0) + 1, broken
            assert versions[-1] == source[row_id], broken
        assert len(records) == load.changes

    def verify_ibm(self, load: Load) -> None:
        """The IBM output (whole transactions per message) is exactly once too."""
        records = read(self.bootstrap, [self.ibm_topic])
        positions = [r.position for r in records]
        assert len(positions) == len(set(positions)), "duplicate IBM messages at read_committed"
        assert sum(len(list(split_records(r.value))) for r in records) == load.changes


@pytest.fixture(autouse=True)
def _status_every_second(monkeypatch: pytest.MonkeyPatch) -> None:
    # Acknowledgements reach the server within a second (default: 10 s), so that a daemon
    # confirming the slot before its Kafka commit would lose changes at the next kill.
    monkeypatch.setenv("WALCAST__DAEMON__STATUS_INTERVAL", "1")


@pytest.fixture
def case(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path):
    made = Case(pg_dsn, kafka_bootstrap, tmp_path)
    yield made
    made.close()


def finish(case: Case, load: Load, daemon: RunningDaemon) -> None:
    load.join()
    # The daemon may be one started a moment ago over a slot already caught up: it must
    # be streaming (its signal handlers in place) before the graceful stop is asked of it.
    deadline = time.monotonic() + 60
    while '"event": "session_started"' not in daemon.log() and time.monotonic() < deadline:
        assert daemon.process.poll() is None, daemon.log()[-3000:]
        time.sleep(0.1)
    wait_caught_up(case.dsn, case.slot, current_lsn(case.dsn), daemon)
    assert daemon.stop() == 0, daemon.log()[-3000:]
    assert "Traceback" not in daemon.log()
    case.verify(load)


def test_kill_9_repeatedly_loses_and_repeats_nothing(case: Case) -> None:
    # Two formats: one Kafka transaction spans their topics (IBM: one message per PostgreSQL
    # transaction, on the transaction topic), the schema topic and the offsets topic.
    # The whole load is written before the first daemon starts: every daemon works through
    # a backlog, so a Kafka transaction holds messages nearly all the time (one is committed
    # every 0.5 s or 50,000 messages), however fast or slow the machine. (A load written
    # while the daemons ran left a fast machine's daemon caught up: no fifth commit to crash
    # after, and kills landing between transactions.)
    load = Load(case.dsn, case.table, 150_000, batch=1000, pause=0).start()
    load.join()
    # First a crash placed between a commit and its acknowledgement (failure injection:
    # the daemon ends itself right after its 2nd Kafka commit, which comes within the
    # backlog's first 100,000 messages); then 3 kills, each once the new daemon took over
    # (its init_transactions aborted the last one's open transaction) and a transaction of
    # its own holds messages.
    crashing = case.daemon("run0", "--format", "ibm", env={CRASH_AFTER_COMMITS_ENV: "2"})
    assert crashing.wait(timeout=180) == CRASH_EXIT_CODE, crashing.log()[-3000:]
    # Kafka committed past the slot's position:
    assert case.committed_lsn() > confirmed_lsn(case.dsn, case.slot)
    restarted = daemon = case.daemon("run1", "--format", "ibm")
    for n in range(2, 5):
        deadline = time.monotonic() + 120
        while '"event": "exactly_once_ready"' not in daemon.log() or not case.open_messages():
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            assert time.monotonic() < deadline, f"run{n - 1}: no open transaction in 120 s"
            time.sleep(0.01)
        daemon.kill()  # SIGKILL: nothing flushed, committed or acknowledged on the way out
        daemon = case.daemon(f"run{n}", "--format", "ibm")
    finish(case, load, daemon)
    case.verify_ibm(load)
    # Messages written to Kafka and never committed: a kill landed between produce and
    # commit (each next daemon's init_transactions aborted the zombie's transaction). No
    # other abort happened: the last daemon stopped between transactions.
    assert '"event": "kafka_transaction_aborted"' not in daemon.log()
    written = read(case.bootstrap, [case.topic], committed=False)
    assert len(written) > load.changes, "no kill landed between produce and commit"
    # The daemon after the crash skipped what Kafka already had (committed, not acknowledged).
    skipped = [
        orjson.loads(line)["transactions"]
        for line in restarted.log().splitlines()
        if '"event": "replay_skipped"' in line
    ]
    assert sum(skipped) > 0, restarted.log()[-3000:]


def test_the_slot_is_never_confirmed_past_an_uncommitted_transaction(case: Case) -> None:
    # Sample, while the daemon works through a backlog (Kafka transactions committed every
    # 0.5 s, acknowledgements sent every second), the slot's confirmed position and then the
    # data topic's first uncommitted offset (its last stable offset, when an open transaction
    # holds messages). The message there belongs to a PostgreSQL transaction Kafka had not
    # committed, or (see below) whose commit markers were not yet written: the slot must not
    # have been confirmed past its commit LSN unless the transaction log shows the latter.
    daemon = case.daemon("run")
    load = Load(case.dsn, case.table, 150_000, batch=1000, pause=0).start()
    load.join()
    end = current_lsn(case.dsn)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": case.bootstrap,
                "group.id": f"eos-test-{uuid.uuid4().hex}",
                "isolation.level": isolation,
            }
        )
        for isolation in ("read_committed", "read_uncommitted")
    ]
    partition = TopicPartition(case.topic, 0)
    samples: list[Sample] = []
    try:
        with psycopg.connect(case.dsn, autocommit=True) as conn:
            while confirmed_lsn(case.dsn, case.slot) < end:
                assert daemon.process.poll() is None, daemon.log()[-3000:]
                confirmed = int(
                    conn.execute(
                        "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots "
                        "WHERE slot_name = %s",
                        (case.slot,),
                    ).fetchone()[0]
                )
                confirmed_by = now_ms()
                try:
                    open_at = now_ms()
                    stable, high = (
                        c.get_watermark_offsets(partition, timeout=10, cached=False)[1]
                        for c in consumers
                    )
                except KafkaException:
                    continue  # the topic does not exist yet
                if high > stable:
                    samples.append(Sample(confirmed, stable, confirmed_by, open_at))
                time.sleep(0.02)
    finally:
        for consumer in consumers:
            consumer.close()
    finish(case, load, daemon)
    at_offset = {
        r.offset: parse_lsn(r.headers["walcast.commit_lsn"])
        for r in read(case.bootstrap, [case.topic], committed=False)
    }
    assert len(samples) > 20, "too few samples with an open transaction"
    past = [s for s in samples if at_offset[s.stable] < s.confirmed]
    decided = commits(case.bootstrap, case.transactional_id) if past else []
    violations = [
        (format_lsn(s.confirmed), format_lsn(at_offset[s.stable]))
        for s in unexplained(past, at_offset, decided)
    ]
    assert not violations, f"slot confirmed past uncommitted transactions: {violations[:5]}"
    print(f"{len(samples)} samples, {len(past) - len(violations)} met markers on their way")


def test_a_second_daemon_on_the_slot_is_refused_and_the_first_goes_on(case: Case) -> None:
    first = case.daemon("first")
    load = Load(case.dsn, case.table, 10_000).start()
    time.sleep(2)
    second = case.daemon("second")
    assert second.wait(timeout=60) != 0
    last = [line for line in second.log().splitlines() if line.strip()][-1]
    assert last.startswith("walcast: error: replication slot"), last
    assert "in use" in last
    assert '"event": "exactly_once_ready"' not in second.log()  # never touched Kafka's txns
    assert first.process.poll() is None
    finish(case, load, first)
    assert "fenced" not in first.log()


def test_a_frozen_daemon_whose_slot_is_taken_over_is_fenced(case: Case) -> None:
    zombie = case.daemon("zombie")
    load = Load(case.dsn, case.table, 10_000).start()
    time.sleep(3)
    zombie.process.send_signal(signal.SIGSTOP)  # frozen mid-load, its Kafka transaction open
    with psycopg.connect(case.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (case.slot,),
        )
    deadline = time.monotonic() + 30
    with psycopg.connect(case.dsn, autocommit=True) as conn:
        while conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (case.slot,)
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the slot stayed active"
            time.sleep(0.2)
    successor = case.daemon("successor")
    deadline = time.monotonic() + 60
    while '"event": "exactly_once_ready"' not in successor.log():
        assert successor.process.poll() is None, successor.log()[-3000:]
        assert time.monotonic() < deadline, "the successor did not start"
        time.sleep(0.2)
    zombie.process.send_signal(signal.SIGCONT)
    assert zombie.wait(timeout=60) != 0, "the zombie went on"
    last = [line for line in zombie.log().splitlines() if line.strip()][-1]
    assert re.match(r"walcast: error: (another walcast took over slot|replication slot)", last), (
        last
    )
    assert "Traceback" not in zombie.log()
    finish(case, load, successor)


def test_a_broker_restart_mid_load_loses_and_repeats_nothing(pg_dsn: str, tmp_path: Path) -> None:
    # A broker of this test's own: the shared one is never stopped.
    state = Path(f"/tmp/wc-eos-{uuid.uuid4().hex[:6]}")
    env = {**os.environ, "WALCAST_SERVICES_DIR": str(state)}
    env.pop("WALCAST_KAFKA_PORT", None)

    def services(command: str) -> str:
        done = subprocess.run(
            [str(SERVICES), command, "kafka"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    try:
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in services("start").splitlines()
            if line.startswith("export ")
        )
        bootstrap = shlex.split(exports["WALCAST_TEST_KAFKA"])[0]
        case = Case(pg_dsn, bootstrap, tmp_path)
        try:
            daemon = case.daemon("run")
            load = Load(case.dsn, case.table, 30_000).start()
            time.sleep(3)
            assert confirmed_lsn(case.dsn, case.slot) < current_lsn(case.dsn), "load too short"
            deadline = time.monotonic() + 10
            while case.open_messages() == 0:  # stop it while a transaction holds messages
                assert time.monotonic() < deadline, "no open transaction seen"
                time.sleep(0.05)
            services("stop")
            time.sleep(5)
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            services("start")
            finish(case, load, daemon)
        finally:
            case.close()
    finally:
        subprocess.run(
            [str(SERVICES), "stop", "kafka"], env=env, capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(state, ignore_errors=True)


def test_a_transaction_timeout_the_broker_refuses_is_one_clear_line(case: Case) -> None:
    daemon = case.daemon("run", "--producer-option", "transaction.timeout.ms=3600000")
    assert daemon.wait(timeout=60) != 0
    last = [line for line in daemon.log().splitlines() if line.strip()][-1]
    assert last.startswith("walcast: error: Kafka at "), last
    assert "transactional producer" in last
    assert "transaction.timeout.ms" in last
    assert "Traceback" not in daemon.log()


def test_an_initial_load_goes_through_kafka_transactions_too(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    table, pub, slot, prefix = f"eosl_{tag}", f"eosl_pub_{tag}", f"eosl_slot_{tag}", f"eosl_{tag}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text NOT NULL)")
        conn.execute(f"INSERT INTO {table} SELECT g, 'r' || g FROM generate_series(1, 20000) g")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    daemon = RunningDaemon(
        "--dsn", pg_dsn, "--slot", slot, "--create-slot", "--publication", pub,
        "--bootstrap-servers", kafka_bootstrap, "--format", "json",
        "--topic", prefix + ".{table}", "--schema-topic", prefix + ".schemas",
        "--metrics-port", "0", "--heartbeat-interval", "1", "--exactly-once",
        log_path=tmp_path / "run.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while '"event": "snapshot_table_done"' not in daemon.log():
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            assert time.monotonic() < deadline, daemon.log()[-3000:]
            time.sleep(0.2)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET v = v || ':1' WHERE id % 7 = 0")
        wait_caught_up(pg_dsn, slot, current_lsn(pg_dsn), daemon)
        assert daemon.stop() == 0, daemon.log()[-3000:]
        records = read(kafka_bootstrap, [f"{prefix}.{table}"])
        ops = [orjson.loads(r.value)["op"] for r in records]
        assert ops.count("snapshot") == 20_000
        assert ops.count("update") == 20_000 // 7
        assert len({r.position for r in records if r.headers.get("walcast.xid") != "0"}) == (
            20_000 // 7
        )
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP TABLE IF EXISTS {table}")

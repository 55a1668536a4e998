"""The exactly-once sink against a real broker: delivery means a committed Kafka transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from capture.events import Op, StreamItem, TransactionBegin, TransactionCommit
from capture.formats import format_class
from capture.position import Checkpoint, PositionLedger
from capture.pump import Output, Pump
from capture.sinks.eos_errors import TransactionTooLargeError
from capture.sinks.kafka import KafkaSinkError
from capture.sinks.kafka_eos import TransactionalKafkaSink
from capture.sinks.topics import TopicNamer
from capture.state.identity import SourceIdentity
from capture.state.offsets import read_offset
from capture.synthetic import format_options
from tests.capture.sinks.committed_reader import read
from tests.support.events import event, make_table

pytestmark = pytest.mark.integration
TABLE = make_table("public", "items", [("id", "int4", True), ("note", "text", False)])


class Scripted:
    """One scripted batch per poll; records acknowledgements."""

    def __init__(self, *batches: list[StreamItem | Checkpoint]) -> None:
        self.batches = list(batches)
        self.acks: list[int] = []

    def poll(self, timeout: float) -> Iterator[StreamItem | Checkpoint]:
        if self.batches:
            yield from self.batches.pop(0)

    @property
    def finished(self) -> bool:
        return not self.batches

    def acknowledge(self, lsn: int) -> None:
        self.acks.append(lsn)

    def ack_limit(self, lsn: int) -> int:
        return lsn

    def keep_alive(self) -> None:
        pass

    def close(self) -> None:
        pass


def txn(commit_lsn: int, rows: int = 3, *, complete: bool = True) -> list[StreamItem | Checkpoint]:
    items: list[StreamItem | Checkpoint] = [TransactionBegin(commit_lsn, commit_lsn, 0, rows)]
    items += [
        event(Op.INSERT, TABLE, after={"id": str(i), "note": "n"}, commit_lsn=commit_lsn, ordinal=i)
        for i in range(1, rows + 1)
    ]
    if complete:
        items.append(TransactionCommit(commit_lsn, commit_lsn, commit_lsn + 8, 0, rows))
    return items


class Setup:
    def __init__(self, bootstrap: str) -> None:
        tag = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.prefix = f"eos_{tag}"
        self.offsets_topic = f"eos_offsets_{tag}"
        self.identity = SourceIdentity("7", "db", f"slot_{tag}")

    def sink(self, **kw: object) -> TransactionalKafkaSink:
        settings = {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all"}
        return TransactionalKafkaSink(
            settings,
            identity=lambda: self.identity,
            offsets_topic=self.offsets_topic,
            commit_interval=3600,  # commits only when idle or drained, unless a test says so
            **kw,  # type: ignore[arg-type]
        )

    def pump(self, source: Scripted, sink: TransactionalKafkaSink) -> Pump:
        namer = TopicNamer("json", "db", self.prefix + ".{table}", self.prefix + ".txn")
        output = Output("json", format_class("json")(format_options()), namer)
        return Pump(source, sink, [output], PositionLedger())

    @property
    def topic(self) -> str:
        return f"{self.prefix}.items"

    def visible(self, *, committed: bool = True) -> list[tuple[str, int]]:
        return [r.position for r in read(self.bootstrap, [self.topic], committed=committed)]

    def offset(self) -> int | None:
        settings = {"bootstrap.servers": self.bootstrap}
        record = read_offset(settings, self.offsets_topic, self.identity.key)
        return None if record is None else record.commit_lsn


@pytest.fixture
def setup(kafka_bootstrap: str) -> Setup:
    return Setup(kafka_bootstrap)


def test_a_unit_is_delivered_only_once_its_kafka_transaction_committed(setup: Setup) -> None:
    sink = setup.sink()
    assert sink.start_session(lambda: None) is None  # nothing committed yet
    source = Scripted([*txn(0x100), *txn(0x200)])
    pump = setup.pump(source, sink)
    pump.run(lambda: False)
    assert sink.producer.flush(10) == 0
    # Written (the broker confirmed them), not committed: invisible, not acknowledged.
    assert len(setup.visible(committed=False)) == 6
    assert setup.visible() == []
    assert pump.ledger.advance() == 0
    sink.service(0)  # nothing sent since the last pass: the source is idle, commit
    assert pump.ledger.advance() == 0x208
    assert sorted(setup.visible()) == sorted(
        [("0/100", i) for i in (1, 2, 3)] + [("0/200", i) for i in (1, 2, 3)]
    )
    assert setup.offset() == 0x200
    assert sink.commits == 1


def test_commits_happen_at_unit_boundaries_once_due(setup: Setup) -> None:
    sink = setup.sink()
    sink.commit_messages = 4  # due after the second transaction's third message
    sink.start_session(lambda: None)
    pump = setup.pump(Scripted([*txn(0x100), *txn(0x200), *txn(0x300)]), sink)
    pump.run(lambda: False)
    # Committed when the third transaction opened: the first two are visible, whole.
    assert sink.commits == 1
    assert setup.offset() == 0x200
    assert {lsn for lsn, _ in setup.visible()} == {"0/100", "0/200"}
    assert pump.finish(10) == 0
    assert {lsn for lsn, _ in setup.visible()} == {"0/100", "0/200", "0/300"}
    assert len(setup.visible()) == 9


def test_a_stop_inside_a_transaction_aborts_the_kafka_transaction(setup: Setup) -> None:
    sink = setup.sink()
    sink.start_session(lambda: None)
    source = Scripted([*txn(0x100), *txn(0x200, complete=False)])
    pump = setup.pump(source, sink)
    pump.run(lambda: False)
    assert sink.producer.flush(10) == 0
    assert pump.finish(10) == 0  # aborted on purpose: sent again from the slot
    assert source.acks == []
    assert len(setup.visible(committed=False)) == 6  # written, then aborted
    assert setup.visible() == []
    assert setup.offset() is None
    assert sink.aborts == 1


def test_a_new_instance_fences_the_old_one_and_resumes_from_its_last_commit(
    setup: Setup,
) -> None:
    old = setup.sink()
    old.start_session(lambda: None)
    pump = setup.pump(Scripted(txn(0x100)), old)
    pump.run(lambda: False)
    assert pump.finish(10) == 0
    zombie = setup.pump(Scripted(txn(0x200)), old)
    zombie.run(lambda: False)  # produced into an open transaction, not committed

    new = setup.sink()
    assert new.start_session(lambda: None) == 0x100  # what Kafka holds, read back
    with pytest.raises(KafkaSinkError) as raised:
        zombie.finish(10)
    assert "another walcast took over slot" in raised.value.message
    assert setup.identity.slot in raised.value.message
    assert [lsn for lsn, _ in setup.visible()] == ["0/100"] * 3


def test_a_transaction_that_outlives_the_kafka_timeout_stops_with_one_line(setup: Setup) -> None:
    now = [0.0]
    sink = setup.sink(clock=lambda: now[0])
    sink.start_session(lambda: None)
    pump = setup.pump(Scripted(txn(0x1234, complete=False)), sink)
    pump.run(lambda: False)
    assert sink.producer.flush(10) == 0
    sink.service(0)  # Kafka confirmed everything: no outage
    now[0] += sink.transaction_timeout + 1
    with pytest.raises(TransactionTooLargeError) as raised:
        sink.service(0)
    text = raised.value.one_line()
    assert "0/1234" in text
    assert "transaction.timeout.ms (900000)" in text
    assert "without --exactly-once" in text
    sink.abort("test over")
    assert setup.visible() == []


def test_walcast_records_go_outside_transactions_before_any_is_needed(setup: Setup) -> None:
    # The initial load's record is written before the slot exists: no transactional
    # producer is made for it, and the progress topic gets no transaction markers.
    sink = setup.sink()
    topic = f"{setup.prefix}.progress"
    sink.publish(topic, b"slot/table", b"{}")
    assert sink.drain(10) == 0
    assert sink.source is None  # the source was not even asked who it is
    records = read(setup.bootstrap, [topic])
    assert [(r.key, r.value) for r in records] == [(b"slot/table", b"{}")]
    consumer_end = records[0].offset + 1
    consumer = Consumer({"bootstrap.servers": setup.bootstrap, "group.id": uuid.uuid4().hex})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
    assert high == consumer_end  # the last offset is the record, not a commit marker

"""The pump: one path from a source to a sink, acknowledging only what was delivered."""

from __future__ import annotations

import io
from collections.abc import Iterator

import orjson
import pytest

from capture.events import (
    ChangeEvent,
    LogicalMessageEvent,
    Op,
    StreamItem,
    TransactionBegin,
    TransactionCommit,
)
from capture.formats import FORMAT_NAMES, EncodedMessage, format_class
from capture.position import Checkpoint, PositionLedger, Unit
from capture.pump import Output, Pump, SourceWrapper, needs_transaction_sizes
from capture.sinks.stream import StreamSink
from capture.synthetic import SyntheticSource, format_options
from capture.synthetic.shop import generate
from capture.teststream import produce
from tests.support.events import event, make_table

TABLE = make_table("public", "orders", [("id", "int4", True), ("note", "text", False)])


class ScriptedSource:
    """A source that yields one scripted batch per poll and records acknowledgements."""

    def __init__(self, *batches: list[StreamItem | Checkpoint]) -> None:
        self.batches = list(batches)
        self.acks: list[int] = []
        self.kept_alive = 0
        self.hold_limit = 1 << 63
        self.closed = False

    def poll(self, timeout: float) -> Iterator[StreamItem | Checkpoint]:
        if self.batches:
            yield from self.batches.pop(0)

    @property
    def finished(self) -> bool:
        return not self.batches

    def acknowledge(self, lsn: int) -> None:
        self.acks.append(lsn)

    def ack_limit(self, lsn: int) -> int:
        return min(lsn, self.hold_limit)

    def keep_alive(self) -> None:
        self.kept_alive += 1

    def close(self) -> None:
        self.closed = True


def txn(xid: int, commit_lsn: int, *changes: ChangeEvent) -> list[StreamItem]:
    return [
        TransactionBegin(xid, commit_lsn, 0, len(changes)),
        *changes,
        TransactionCommit(xid, commit_lsn, commit_lsn + 8, 0, len(changes)),
    ]


def change(op: Op, ordinal: int, commit_lsn: int, **kw: object) -> ChangeEvent:
    return event(op, TABLE, ordinal=ordinal, commit_lsn=commit_lsn, **kw)  # type: ignore[arg-type]


def json_pump(source: ScriptedSource, **kw: object) -> tuple[Pump, io.BytesIO]:
    out = io.BytesIO()
    encoder = format_class("json")(format_options())
    pump = Pump(
        source, StreamSink(out, flush_interval=0), [Output("json", encoder)], PositionLedger(), **kw
    )  # type: ignore[arg-type]
    return pump, out


def ops(out: io.BytesIO) -> list[str]:
    return [orjson.loads(line)["op"] for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_synthetic_stream_through_the_pump_equals_direct_encoding(fmt: str) -> None:
    source = SyntheticSource(700, seed=4, tables=8)
    out = io.BytesIO()
    encoder = format_class(fmt)(source.options())
    pump = Pump(source, StreamSink(out), [Output(fmt, encoder)], PositionLedger())
    pump.run(lambda: False, poll_timeout=0)
    assert pump.finish(1) == 0
    assert pump.changes == 700
    expected: list[bytes] = []
    direct = format_class(fmt)(format_options())
    produce(
        direct, generate(700, seed=4, tables=8), lambda m: expected.append(direct.frame_for_tail(m))
    )
    assert out.getvalue() == b"".join(expected)
    last_end = max(
        i.end_lsn for i in generate(700, seed=4, tables=8) if isinstance(i, TransactionCommit)
    )
    assert source.acknowledged == last_end


def test_acknowledges_whole_transactions_after_the_output_is_flushed() -> None:
    source = ScriptedSource(
        txn(1, 0x100, change(Op.INSERT, 1, 0x100, after={"id": "1"})),
        [TransactionBegin(2, 0x200, 0), change(Op.INSERT, 1, 0x200, after={"id": "2"})],
    )
    pump, out = json_pump(source)
    pump.run(lambda: False)
    pump.finish(1)
    assert ops(out) == ["insert", "insert"]
    assert source.acks == [0x108]  # the open second transaction is never acknowledged


def test_max_changes_completes_the_transaction_when_its_commit_follows() -> None:
    source = ScriptedSource(
        txn(
            1,
            0x100,
            change(Op.INSERT, 1, 0x100, after={"id": "1"}),
            change(Op.DELETE, 2, 0x100, before={"id": "1"}),
        ),
        txn(2, 0x200, change(Op.INSERT, 1, 0x200, after={"id": "2"})),
    )
    pump, out = json_pump(source)
    pump.run(lambda: False, max_changes=2)
    pump.finish(1)
    assert pump.changes == 2
    assert ops(out) == ["insert", "delete"]
    assert source.acks == [0x108]


def test_max_changes_inside_a_transaction_abandons_it() -> None:
    first = txn(1, 0x100, change(Op.INSERT, 1, 0x100, after={"id": "1"}))
    second = txn(2, 0x200, *(change(Op.INSERT, i, 0x200, after={"id": str(i)}) for i in (1, 2)))
    source = ScriptedSource(first + second)
    pump, out = json_pump(source)
    pump.run(lambda: False, max_changes=2)
    pump.finish(1)
    assert pump.changes == 2
    assert len(ops(out)) == 2
    assert source.acks == [0x108]  # transaction 2 is sent again by the next run


def test_split_key_updates_sends_delete_and_insert() -> None:
    moved = change(Op.UPDATE, 1, 0x100, before={"id": "1"}, before_key_only=True, after={"id": "2"})
    pump, out = json_pump(ScriptedSource(txn(1, 0x100, moved)), split_key_updates=True)
    pump.run(lambda: False)
    assert ops(out) == ["delete", "insert"]


def test_checkpoint_is_acknowledged_once_everything_before_it_is_delivered() -> None:
    source = ScriptedSource(
        [*txn(1, 0x100, change(Op.INSERT, 1, 0x100, after={"id": "1"})), Checkpoint(0x500)]
    )
    pump, _ = json_pump(source)
    pump.run(lambda: False)
    assert source.acks == [0x500]


class RefusingSink(StreamSink):
    def close_unit(self, unit: Unit) -> None:
        unit.outstanding += 1
        unit.delivered("Broker: Message size too large", None)


def test_a_refused_message_stops_the_pump_before_its_unit() -> None:
    source = ScriptedSource(txn(1, 0x100, change(Op.INSERT, 1, 0x100, after={"id": "1"})))
    encoder = format_class("json")(format_options())
    pump = Pump(source, RefusingSink(io.BytesIO()), [Output("json", encoder)], PositionLedger())
    with pytest.raises(Exception, match="too large"):
        pump.run(lambda: False)
    assert source.acks == []


class WaitingSink(StreamSink):
    """A sink whose every change waits (like a full Kafka queue) until the hook raises."""

    def send_change(self, output: Output, event: ChangeEvent, unit: Unit | None) -> None:
        for _ in range(3):
            self.wait_hook()
        super().send_change(output, event, unit)


def test_a_stop_during_a_sink_wait_abandons_the_open_unit() -> None:
    source = ScriptedSource(
        txn(1, 0x100, change(Op.INSERT, 1, 0x100, after={"id": "1"})),
        txn(2, 0x200, change(Op.INSERT, 1, 0x200, after={"id": "2"})),
    )
    encoder = format_class("json")(format_options())
    ledger = PositionLedger()
    pump = Pump(
        source, WaitingSink(io.BytesIO(), flush_interval=0), [Output("json", encoder)], ledger
    )
    stops = iter([False] * 5 + [True] * 100)  # the 2nd transaction's wait sees the stop
    pump.run(lambda: next(stops))
    assert ledger.current is None
    assert source.kept_alive >= 3  # every wait kept the source alive
    pump.finish(1)
    assert source.acks[-1] == 0x108


def test_non_transactional_message_with_output_is_a_unit_of_its_own() -> None:
    class Messages(StreamSink):
        pass

    out = io.BytesIO()
    encoder = format_class("json")(format_options())
    sent: list[list[EncodedMessage]] = []
    encoder.logical_message = lambda m: [EncodedMessage(b"{}", None, "message")]  # type: ignore[method-assign]
    sink = Messages(out, flush_interval=0)
    original = sink.send
    sink.send = lambda o, msgs, unit: (sent.append(msgs), original(o, msgs, unit))  # type: ignore[method-assign]
    source = ScriptedSource(
        [LogicalMessageEvent(0x300, "app", b"x", False, None), Checkpoint(0x310)]
    )
    pump = Pump(source, sink, [Output("json", encoder)], PositionLedger())
    pump.run(lambda: False)
    assert sent == [[EncodedMessage(b"{}", None, "message")]]
    assert source.acks == [0x310]


def test_heartbeat_messages_produce_nothing() -> None:
    source = ScriptedSource([LogicalMessageEvent(0x300, "walcast.heartbeat", b"", False, None)])
    pump, out = json_pump(source)
    pump.run(lambda: False)
    assert out.getvalue() == b""


def test_the_transaction_size_decision() -> None:
    assert needs_transaction_sizes(["json", "shareplex"])
    assert not needs_transaction_sizes(["json", "canal"])


class _Passing(SourceWrapper[ScriptedSource]):
    """A wrapper that passes its inner source's items as they are."""

    def poll(self, timeout: float) -> Iterator[StreamItem | Checkpoint]:
        return iter(self.inner.poll(timeout))

    @property
    def finished(self) -> bool:
        return self.inner.finished


def test_a_source_wrapper_leaves_positions_and_the_connection_to_its_inner_source() -> None:
    inner = ScriptedSource(txn(7, 0x100, change(Op.INSERT, 1, 0x100, after={"id": "1"})))
    inner.hold_limit = 0x80
    wrapper = _Passing(inner)
    pump, out = json_pump(wrapper)  # type: ignore[arg-type]
    pump.run(lambda: False)
    assert ops(out) == ["insert"]
    # the ledger asked the wrapper how far it may confirm; the inner source's hold answered
    assert inner.acks == [0x80]
    assert wrapper.ack_limit(0x200) == 0x80
    wrapper.keep_alive()
    assert inner.kept_alive >= 1
    wrapper.close()
    assert inner.closed

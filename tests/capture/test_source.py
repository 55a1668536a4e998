"""The replication source without a server: decoding, reassembly and the checkpoints it vouches for.

The stream is replaced by a scripted one that hands over XLogData and keepalives as the
server would; everything else (decoder, relation cache, transaction assembler) is real.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.kit import wire
from capture.events import ChangeEvent, LogicalMessageEvent, TransactionBegin, TransactionCommit
from capture.pgoutput.decoder import PgOutputDecoder
from capture.position import Checkpoint
from capture.relcache import RelationCache
from capture.replication.protocol import Keepalive, XLogData
from capture.source import ReplicationSource
from capture.transactions import TransactionAssembler

REL = wire.relation(16384, "public", "t", [(1, "id", 23, -1), (0, "v", 25, -1)])


@dataclass
class ScriptedStream:
    batches: list[list[XLogData | Keepalive]]
    acked_lsn: int = 0
    received_lsn: int = 0
    statuses: int = 0

    def read_batch(self, timeout: float) -> list[XLogData | Keepalive]:
        return self.batches.pop(0) if self.batches else []

    def acknowledge(self, lsn: int) -> None:
        self.acked_lsn = max(self.acked_lsn, lsn)

    def maybe_send_status(self) -> None:
        self.statuses += 1


def source(*batches: list[XLogData | Keepalive], proto: int = 2) -> ReplicationSource:
    src = object.__new__(ReplicationSource)
    relations = RelationCache()
    src.decoder = PgOutputDecoder(proto)
    src.relations = relations
    src.assembler = TransactionAssembler(relations, proto_version=proto)
    src.stream = ScriptedStream(list(batches))  # type: ignore[assignment]
    return src


def x(start: int, payload: bytes) -> XLogData:
    return XLogData(start, start + len(payload), 0, payload)


def keepalive(wal_end: int) -> Keepalive:
    return Keepalive(wal_end, 0, reply_requested=False)


def transaction(commit_lsn: int, xid: int) -> list[XLogData]:
    return [
        x(commit_lsn - 100, wire.begin(commit_lsn, 0, xid)),
        x(commit_lsn - 90, REL),
        x(commit_lsn - 80, wire.insert(16384, [("t", b"1"), ("t", b"a")])),
        x(commit_lsn, wire.commit(commit_lsn, commit_lsn + 8, 0)),
    ]


def test_items_arrive_in_order_and_keepalives_on_an_idle_stream_are_checkpoints() -> None:
    src = source([*transaction(0x1000, 700), keepalive(0x2000)])
    items = list(src.poll(0))
    assert [type(i) for i in items] == [
        TransactionBegin, ChangeEvent, TransactionCommit, Checkpoint,
    ]  # fmt: skip
    assert items[-1] == Checkpoint(0x2000)


def test_a_keepalive_inside_a_streamed_transaction_is_no_checkpoint() -> None:
    streamed = [
        x(0x100, wire.stream_start(900)),
        x(
            0x110,
            wire.relation(16384, "public", "t", [(1, "id", 23, -1), (0, "v", 25, -1)], xid=900),
        ),
        x(0x120, wire.insert(16384, [("t", b"1"), ("t", b"a")], xid=900)),
        x(0x130, wire.stream_stop()),
    ]
    src = source(
        [*streamed, keepalive(0x5000)], [x(0x6000, wire.stream_commit(900, 0x6000, 0x6008, 0))]
    )
    assert list(src.poll(0)) == []  # held: no checkpoint past an unfinished transaction
    replayed = list(src.poll(0))
    assert [type(i) for i in replayed] == [TransactionBegin, ChangeEvent, TransactionCommit]
    assert replayed[-1].end_lsn == 0x6008


def test_a_non_transactional_message_outside_a_transaction_is_followed_by_a_checkpoint() -> None:
    message = wire.message("walcast.heartbeat", b"", 0x3000, transactional=False)
    src = source([x(0x2FF0, message)])
    items = list(src.poll(0))
    assert isinstance(items[0], LogicalMessageEvent)
    assert items[1] == Checkpoint(0x2FF0 + len(message))


def test_acknowledge_and_hold_go_to_the_stream_and_the_assembler() -> None:
    src = source()
    src.acknowledge(0x40)
    assert src.stream.acked_lsn == 0x40
    assert src.ack_limit(0x40) == 0x40  # nothing prepared
    src.keep_alive()
    assert src.stream.statuses == 1  # type: ignore[attr-defined]
    assert not src.finished

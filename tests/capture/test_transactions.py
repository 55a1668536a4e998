"""Reassembly of ordinary, streamed and prepared transactions, from hand-built bytes."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from bench.kit import wire
from capture.errors import DecodeError, UnknownRelationError
from capture.events import ChangeEvent, Op, StreamItem, TransactionBegin, TransactionCommit
from capture.pgoutput.decoder import PgOutputDecoder
from capture.relcache import RelationCache
from capture.transactions import ProtocolStateError, TransactionAssembler

REL = wire.relation(10, "public", "t", [(1, "id", 23, -1), (0, "v", 25, -1)])
REL2 = wire.relation(11, "public", "u", [(1, "k", 25, -1)])


class Feeder:
    """Decode and feed wire messages like the replication loop does."""

    def __init__(self, version: int = 3, memory_limit: int = 1 << 20) -> None:
        self.decoder = PgOutputDecoder(version)
        self.assembler = TransactionAssembler(
            RelationCache(), proto_version=version, memory_limit=memory_limit
        )
        self.lsn = 0x1000

    def __call__(self, *messages: bytes) -> list:
        out = []
        for data in messages:
            self.lsn += 0x10
            out.extend(self.assembler.feed(self.decoder.decode(data), data, self.lsn))
        return out


def changes(items: list) -> list[ChangeEvent]:
    return [i for i in items if isinstance(i, ChangeEvent)]


def rows(items: list) -> list[tuple]:
    return [
        (c.op.value, c.xid, c.ordinal, c.after.as_dict(typed=False) if c.after else None)
        for c in changes(items)
    ]


def test_ordinary_transaction_passes_through_in_order() -> None:
    feed = Feeder()
    items = feed(
        wire.begin(0x500, 1_000_000, 700),
        REL,
        wire.insert(10, [("t", b"1"), ("t", b"a")]),
        wire.update(10, [("t", b"2"), ("u", None)], old=[("t", b"1"), ("n", None)], old_kind="K"),
        wire.delete(10, [("t", b"2"), ("n", None)]),
        wire.commit(0x500, 0x530, 1_000_000),
    )
    assert isinstance(items[0], TransactionBegin)
    assert items[0].commit_lsn == 0x500
    events = changes(items)
    assert [e.op for e in events] == [Op.INSERT, Op.UPDATE, Op.DELETE]
    assert [e.ordinal for e in events] == [1, 2, 3]
    assert all(e.commit_lsn == 0x500 and e.xid == 700 for e in events)
    # each change's own position: its message's XLogData start (the feeder's 0x10 steps)
    assert [e.lsn for e in events] == [0x1030, 0x1040, 0x1050]
    update = events[1]
    assert update.before is not None
    assert update.before.key_only
    assert update.before.as_dict(typed=False) == {"id": "1"}
    assert update.after is not None
    assert update.after.unchanged_toast_columns() == ["v"]
    assert update.after.as_dict(typed=True) == {"id": 2, "v": update.after.tuple.values[1]}
    assert events[0].after is not None
    assert events[0].after.as_dict() == {"id": 1, "v": "a"}
    commit = items[-1]
    assert isinstance(commit, TransactionCommit)
    assert (commit.end_lsn, commit.change_count) == (0x530, 3)
    assert feed.assembler.idle


def test_truncate_is_one_event_per_table() -> None:
    feed = Feeder()
    items = feed(
        wire.begin(0x500, 0, 7), REL, REL2, wire.truncate([10, 11], options=1),
        wire.commit(0x500, 0x510, 0),
    )  # fmt: skip
    events = changes(items)
    assert [(e.op, e.table.name, e.ordinal, e.truncate_options, e.lsn) for e in events] == [
        (Op.TRUNCATE, "t", 1, 1, 0x1040),
        (Op.TRUNCATE, "u", 2, 1, 0x1040),
    ]


def test_unknown_relation_names_oid_and_lsn() -> None:
    feed = Feeder()
    feed(wire.begin(0x500, 0, 7))
    with pytest.raises(UnknownRelationError, match=r"relation OID 99 at WAL position 0/1020"):
        feed(wire.insert(99, [("t", b"1")]))


def test_row_outside_transaction_is_a_protocol_error() -> None:
    feed = Feeder()
    feed(REL)
    with pytest.raises(ProtocolStateError, match="Insert outside a transaction"):
        feed(wire.insert(10, [("t", b"1"), ("t", b"a")]))


def _streamed_chunks(xid: int, sub: int, n: int) -> list[bytes]:
    msgs = [
        wire.stream_start(xid),
        wire.relation(10, "public", "t", [(1, "id", 23, -1), (0, "v", 25, -1)], xid=xid),
    ]
    msgs += [wire.insert(10, [("t", str(i).encode()), ("t", b"top")], xid=xid) for i in range(n)]
    msgs += [wire.stream_stop(), wire.stream_start(xid, first=False)]
    msgs += [
        wire.insert(10, [("t", str(1000 + i).encode()), ("t", b"sub")], xid=sub) for i in range(n)
    ]
    msgs += [wire.insert(10, [("t", b"5000"), ("t", b"after")], xid=xid), wire.stream_stop()]
    return msgs


@pytest.mark.parametrize("memory_limit", [1 << 20, 200])
def test_streamed_transaction_held_until_commit_and_subxact_abort_dropped(
    memory_limit: int,
) -> None:
    feed = Feeder(memory_limit=memory_limit)
    assert feed(*_streamed_chunks(900, 901, 50)) == []
    held = feed.assembler._streams[900]
    assert held.buffer.spilled is (memory_limit == 200)
    # An ordinary transaction commits between the chunks and is emitted at once.
    other = feed(
        wire.begin(0x800, 0, 950),
        REL2,
        wire.insert(11, [("t", b"k")]),
        wire.commit(0x800, 0x810, 0),
    )
    assert rows(other) == [("insert", 950, 1, {"k": "k"})]
    assert feed(wire.stream_abort(900, 901)) == []
    items = feed(wire.stream_commit(900, 0x900, 0x910, 42))
    got = rows(items)
    assert len(got) == 51
    assert all(r[3]["v"] in {"top", "after"} for r in got)
    assert [r[2] for r in got] == list(range(1, 52))
    # held (and spilled) changes keep the positions they arrived at, in order
    positions = [e.lsn for e in changes(items)]
    assert positions == sorted(positions)
    assert len(set(positions)) == 51
    assert positions[0] > 0x1000
    assert positions[-1] < feed.lsn
    assert items[-1] == TransactionCommit(900, 0x900, 0x910, 42, 51)
    assert feed.assembler.idle


def test_aborted_streamed_transaction_never_appears_and_its_relation_is_not_applied() -> None:
    feed = Feeder()
    chunks = _streamed_chunks(900, 901, 3)
    assert feed(*chunks) == []
    assert 10 not in feed.assembler.relations
    assert feed(wire.stream_abort(900, 900)) == []
    assert feed.assembler.idle
    assert 10 not in feed.assembler.relations


def test_prepared_transaction_commits_later_and_holds_acks() -> None:
    feed = Feeder()
    feed(REL)
    assert (
        feed(
            wire.begin_prepare(0x700, 0x720, 5, 800, "g1"),
            wire.insert(10, [("t", b"1"), ("t", b"prep")]),
            wire.prepare(0x700, 0x720, 5, 800, "g1"),
        )
        == []
    )
    assert not feed.assembler.idle
    assert feed.assembler.ack_limit(0x9999) == 0x700
    later = feed(
        wire.begin(0x750, 0, 801),
        wire.insert(10, [("t", b"2"), ("t", b"x")]),
        wire.commit(0x750, 0x760, 0),
    )
    assert rows(later) == [("insert", 801, 1, {"id": "2", "v": "x"})]
    items = feed(wire.commit_prepared(0x780, 0x790, 9, 800, "g1"))
    assert rows(items) == [("insert", 800, 1, {"id": "1", "v": "prep"})]
    assert feed.assembler.ack_limit(0x9999) == 0x9999


def test_rolled_back_prepared_transaction_never_appears() -> None:
    feed = Feeder()
    feed(REL)
    feed(
        wire.begin_prepare(0x700, 0x720, 5, 800, "g1"),
        wire.insert(10, [("t", b"1"), ("t", b"prep")]),
        wire.prepare(0x700, 0x720, 5, 800, "g1"),
    )
    assert feed(wire.rollback_prepared(0x720, 0x740, 5, 6, 800, "g1")) == []
    assert feed.assembler.idle


def test_stream_prepare_then_commit_prepared() -> None:
    feed = Feeder()
    feed(*_streamed_chunks(900, 901, 2))
    assert feed(wire.stream_prepare(0x700, 0x720, 5, 900, "gs")) == []
    items = feed(wire.commit_prepared(0x780, 0x790, 9, 900, "gs"))
    assert len(changes(items)) == 5


def test_commit_prepared_for_unknown_gid_is_an_error_not_a_silent_loss() -> None:
    feed = Feeder()
    with pytest.raises(Exception, match="never received"):
        feed(wire.commit_prepared(0x780, 0x790, 9, 900, "nope"))


def _open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def _feed_held(feed: Feeder, n: int) -> Iterable[StreamItem]:
    """Stream a transaction of ``n`` inserts and commit it; return feed()'s result as is."""
    feed(*_streamed_chunks(900, 901, n))
    data = wire.stream_commit(900, 0x900, 0x910, 42)
    return feed.assembler.feed(feed.decoder.decode(data), data, 0x900)


def test_a_replayed_transaction_is_a_lazy_stream_not_a_list() -> None:
    feed = Feeder(memory_limit=200)
    result = _feed_held(feed, 50_000)
    assert not isinstance(result, list | tuple)
    replay = iter(result)
    begin = next(replay)
    assert isinstance(begin, TransactionBegin)
    assert begin.change_count == 100_001
    assert feed.assembler.in_transaction  # until the replay has ended
    first = next(replay)
    assert isinstance(first, ChangeEvent)
    assert first.ordinal == 1
    rest = sum(1 for _ in replay)
    assert rest == 100_001  # 100,000 more changes and the commit
    assert not feed.assembler.in_transaction


def test_a_replay_decodes_each_message_only_when_its_item_is_asked_for() -> None:
    feed = Feeder(memory_limit=200)
    feed(wire.stream_start(900), wire.relation(10, "public", "t", [(1, "id", 23, -1)], xid=900))
    feed(wire.insert(10, [("t", b"1")], xid=900))
    feed.assembler._streams[900].buffer.append(900, 0x4242, b"I\x00\x00\x03\x84garbage")
    feed(wire.stream_stop())
    data = wire.stream_commit(900, 0x900, 0x910, 42)
    replay = iter(feed.assembler.feed(feed.decoder.decode(data), data, 0x900))
    assert isinstance(next(replay), TransactionBegin)
    assert isinstance(next(replay), ChangeEvent)  # the good change comes out first
    with pytest.raises(DecodeError, match="WAL position 0/4242"):
        next(replay)
    assert not feed.assembler.in_transaction


def test_close_in_the_middle_of_a_replay_drops_its_spill_file() -> None:
    feed = Feeder(memory_limit=200)
    before = _open_fds()
    replay = iter(_feed_held(feed, 1000))
    assert _open_fds() == before + 1  # the spill file
    next(replay)
    next(replay)
    feed.assembler.close()
    assert _open_fds() == before
    assert not feed.assembler.in_transaction
    assert list(replay) == []  # a closed replay yields nothing more


def test_close_before_a_replay_started_drops_its_spill_file() -> None:
    feed = Feeder(memory_limit=200)
    before = _open_fds()
    _feed_held(feed, 1000)
    assert _open_fds() == before + 1
    feed.assembler.close()
    assert _open_fds() == before


def test_a_tuple_with_more_columns_than_its_relation_is_a_decode_error() -> None:
    feed = Feeder()
    feed(wire.begin(0x500, 0, 7), REL)
    with pytest.raises(DecodeError) as info:
        feed(wire.insert(10, [("t", b"1"), ("t", b"a"), ("t", b"extra")]))
    message = str(info.value)
    assert "relation public.t" in message
    assert "has 3 columns" in message
    assert "describes 2" in message
    assert "WAL position 0/1030" in message


@pytest.mark.parametrize(
    "message",
    [
        wire.insert(10, [("t", b"1"), ("t", b"caf\xc3")]),
        wire.update(
            10, [("t", b"1"), ("t", b"ok")], old=[("t", b"1"), ("t", b"\xff")], old_kind="O"
        ),
        wire.delete(10, [("t", b"1"), ("t", b"\xe2\x82")], old_kind="O"),
    ],
)
def test_text_that_is_not_utf8_is_a_decode_error_naming_the_column(message: bytes) -> None:
    feed = Feeder()
    feed(wire.begin(0x500, 0, 7), REL)
    with pytest.raises(DecodeError, match=r"relation public\.t column v: the text value is not"):
        feed(message)


def test_non_ascii_utf8_text_passes() -> None:
    feed = Feeder()
    items = feed(
        wire.begin(0x500, 0, 7), REL, wire.insert(10, [("t", b"1"), ("t", "café ☕".encode())])
    )
    assert rows(items) == [("insert", 7, 1, {"id": "1", "v": "café ☕"})]


def test_a_held_transaction_checks_its_tuples_when_replayed() -> None:
    feed = Feeder()
    feed.assembler.hold_transactions = True
    feed(wire.begin(0x500, 0, 7), REL, wire.insert(10, [("t", b"1")]))
    with pytest.raises(DecodeError, match="has 1 columns"):
        feed(wire.commit(0x500, 0x530, 0))

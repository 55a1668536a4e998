"""The pgoutput decoder on hand-built wire bytes: every message, every protocol version."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.kit import wire
from capture.errors import DecodeError
from capture.pgoutput.decoder import MIN_VERSION_FOR, PgOutputDecoder
from capture.pgoutput.messages import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    MessageType,
    Origin,
    Prepare,
    Relation,
    ReplicaIdentity,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)

VERSIONS = (1, 2, 3, 4)


def decode(data: bytes, version: int = 4, *, in_stream: bool = False, parallel: bool = False):
    decoder = PgOutputDecoder(version, streaming_parallel=parallel)
    decoder.in_stream = in_stream
    return decoder.decode(data)


@pytest.mark.parametrize("version", VERSIONS)
def test_begin_commit_origin(version: int) -> None:
    assert decode(wire.begin(0x1_0000_0010, 123456, 745), version) == Begin(
        0x1_0000_0010, 123456, 745
    )
    assert decode(wire.commit(0x20, 0x48, -5), version) == Commit(0, 0x20, 0x48, -5)
    assert decode(wire.origin(77, "node_a"), version) == Origin(77, "node_a")


@pytest.mark.parametrize("version", VERSIONS)
def test_relation_and_type(version: int) -> None:
    data = wire.relation(
        16384, "public", "orders", [(1, "id", 23, -1), (0, "note", 1043, 104)], identity="f"
    )
    rel = decode(data, version)
    assert isinstance(rel, Relation)
    assert (rel.relation_id, rel.namespace, rel.name) == (16384, "public", "orders")
    assert rel.replica_identity is ReplicaIdentity.FULL
    assert [(c.name, c.type_oid, c.type_modifier, c.is_key) for c in rel.columns] == [
        ("id", 23, -1, True),
        ("note", 1043, 104, False),
    ]
    assert rel.xid is None
    assert decode(wire.type_message(16500, "public", "mood"), version) == Type(
        None, 16500, "public", "mood"
    )


def test_catalog_namespace_is_empty_string() -> None:
    rel = decode(wire.relation(5, "", "pg_thing", []))
    assert isinstance(rel, Relation)
    assert rel.namespace == ""
    assert rel.columns == ()


@pytest.mark.parametrize("version", VERSIONS)
def test_insert_all_column_kinds(version: int) -> None:
    cols = [("t", b"42"), ("n", None), ("u", None), ("b", b"\x00\x00\x00\x2a"), ("t", b"")]
    msg = decode(wire.insert(16384, cols), version)
    assert msg == Insert(
        None,
        16384,
        TupleData(b"tnubt", (b"42", None, UNCHANGED_TOAST, b"\x00\x00\x00\x2a", b"")),
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("kind", "is_key"), [("K", True), ("O", False)])
def test_update_with_old_image(version: int, kind: str, is_key: bool) -> None:
    msg = decode(wire.update(7, [("t", b"2")], old=[("t", b"1")], old_kind=kind), version)
    assert isinstance(msg, Update)
    assert msg.old == TupleData(b"t", (b"1",))
    assert msg.old_is_key is is_key
    assert msg.new == TupleData(b"t", (b"2",))


def test_update_without_old_image() -> None:
    msg = decode(wire.update(7, [("t", b"2"), ("u", None)]))
    assert msg == Update(None, 7, None, False, TupleData(b"tu", (b"2", UNCHANGED_TOAST)))


@pytest.mark.parametrize("kind", ["K", "O"])
def test_delete(kind: str) -> None:
    msg = decode(wire.delete(7, [("t", b"1"), ("n", None)], old_kind=kind))
    assert msg == Delete(None, 7, TupleData(b"tn", (b"1", None)), kind == "K")


def test_truncate_options_and_relations() -> None:
    assert decode(wire.truncate([1, 2, 3], options=3)) == Truncate(None, 3, (1, 2, 3))


@pytest.mark.parametrize("transactional", [True, False])
def test_logical_message(transactional: bool) -> None:
    msg = decode(wire.message("walcast", b"\x00hb", 99, transactional=transactional))
    assert msg == LogicalMessage(None, 1 if transactional else 0, 99, "walcast", b"\x00hb")
    assert msg.transactional is transactional


@pytest.mark.parametrize("version", [2, 3, 4])
def test_streamed_chunk_carries_xids(version: int) -> None:
    decoder = PgOutputDecoder(version)
    assert decoder.decode(wire.stream_start(900, first=True)) == StreamStart(900, True)
    assert decoder.in_stream
    rel = decoder.decode(wire.relation(5, "s", "t", [(1, "a", 23, -1)], xid=900))
    assert isinstance(rel, Relation)
    assert rel.xid == 900
    assert decoder.decode(wire.type_message(6, "s", "e", xid=900)) == Type(900, 6, "s", "e")
    assert decoder.decode(wire.insert(5, [("t", b"1")], xid=901)) == Insert(
        901, 5, TupleData(b"t", (b"1",))
    )
    upd = decoder.decode(wire.update(5, [("t", b"2")], old=[("t", b"1")], old_kind="K", xid=901))
    assert isinstance(upd, Update)
    assert upd.xid == 901
    dele = decoder.decode(wire.delete(5, [("t", b"2")], xid=900))
    assert isinstance(dele, Delete)
    assert dele.xid == 900
    assert decoder.decode(wire.truncate([5], xid=900)) == Truncate(900, 0, (5,))
    msg = decoder.decode(wire.message("p", b"x", 10, xid=900))
    assert isinstance(msg, LogicalMessage)
    assert msg.xid == 900
    assert decoder.decode(wire.stream_stop()) == StreamStop()
    assert not decoder.in_stream
    # Outside the chunk the same bytes without xid decode again.
    assert decoder.decode(wire.insert(5, [("t", b"1")])) == Insert(
        None, 5, TupleData(b"t", (b"1",))
    )


@pytest.mark.parametrize("version", [2, 3, 4])
def test_stream_commit_and_abort(version: int) -> None:
    assert decode(wire.stream_commit(900, 0x100, 0x130, 55), version) == StreamCommit(
        900, 0, 0x100, 0x130, 55
    )
    assert decode(wire.stream_abort(900, 901), version) == StreamAbort(900, 901)


def test_v4_parallel_stream_abort_has_lsn_and_time() -> None:
    data = wire.stream_abort(900, 900, abort_lsn=0x500, abort_ts=77)
    assert decode(data, 4, parallel=True) == StreamAbort(900, 900, 0x500, 77)
    # Without parallel streaming the same bytes have 16 trailing bytes.
    with pytest.raises(DecodeError, match="trailing"):
        decode(data, 4)


@pytest.mark.parametrize("version", [3, 4])
def test_two_phase_messages(version: int) -> None:
    assert decode(wire.begin_prepare(0x10, 0x20, 5, 700, "gid-1"), version) == BeginPrepare(
        0x10, 0x20, 5, 700, "gid-1"
    )
    assert decode(wire.prepare(0x10, 0x20, 5, 700, "gid-1"), version) == Prepare(
        0, 0x10, 0x20, 5, 700, "gid-1"
    )
    assert decode(wire.stream_prepare(0x10, 0x20, 5, 700, "g"), version) == StreamPrepare(
        0, 0x10, 0x20, 5, 700, "g"
    )
    assert decode(wire.commit_prepared(0x30, 0x40, 6, 700, "g"), version) == CommitPrepared(
        0, 0x30, 0x40, 6, 700, "g"
    )
    assert decode(wire.rollback_prepared(0x20, 0x50, 5, 7, 700, "g"), version) == (
        RollbackPrepared(0, 0x20, 0x50, 5, 7, 700, "g")
    )


NEWER_MESSAGES = {
    MessageType.STREAM_START: wire.stream_start(1),
    MessageType.STREAM_STOP: wire.stream_stop(),
    MessageType.STREAM_COMMIT: wire.stream_commit(1, 2, 3, 4),
    MessageType.STREAM_ABORT: wire.stream_abort(1, 1),
    MessageType.BEGIN_PREPARE: wire.begin_prepare(1, 2, 3, 4, "g"),
    MessageType.PREPARE: wire.prepare(1, 2, 3, 4, "g"),
    MessageType.STREAM_PREPARE: wire.stream_prepare(1, 2, 3, 4, "g"),
    MessageType.COMMIT_PREPARED: wire.commit_prepared(1, 2, 3, 4, "g"),
    MessageType.ROLLBACK_PREPARED: wire.rollback_prepared(1, 2, 3, 4, 5, "g"),
}


@pytest.mark.parametrize("message_type", list(NEWER_MESSAGES))
def test_newer_messages_rejected_by_older_protocol(message_type: MessageType) -> None:
    data = NEWER_MESSAGES[message_type]
    too_old = MIN_VERSION_FOR[message_type] - 1
    with pytest.raises(DecodeError, match="needs protocol version") as info:
        decode(data, too_old)
    assert info.value.message_type == chr(message_type)
    assert decode(data, MIN_VERSION_FOR[message_type]) is not None


ALL_MESSAGES = [
    wire.begin(1, 2, 3),
    wire.commit(1, 2, 3),
    wire.origin(1, "o"),
    wire.relation(1, "s", "t", [(1, "a", 23, -1), (0, "b", 25, -1)]),
    wire.type_message(1, "s", "t"),
    wire.insert(1, [("t", b"abc"), ("n", None), ("b", b"\x01")]),
    wire.update(1, [("t", b"x")], old=[("t", b"y")]),
    wire.update(1, [("u", None)], old=[("t", b"y")], old_kind="K"),
    wire.delete(1, [("t", b"y")]),
    wire.truncate([1, 2], 1),
    wire.message("p", b"content", 5),
    *NEWER_MESSAGES.values(),
]


@pytest.mark.parametrize("data", ALL_MESSAGES, ids=lambda d: chr(d[0]))
def test_every_truncation_raises_decode_error_with_offset(data: bytes) -> None:
    for cut in range(len(data)):
        decoder = PgOutputDecoder(4)
        with pytest.raises(DecodeError) as info:
            decoder.decode(data[:cut])
        err = info.value
        assert err.message_type == ("?" if cut == 0 else chr(data[0]))
        assert 0 <= err.offset <= cut
        assert f"offset {err.offset}" in str(err)


@pytest.mark.parametrize("data", ALL_MESSAGES, ids=lambda d: chr(d[0]))
def test_trailing_bytes_rejected(data: bytes) -> None:
    with pytest.raises(DecodeError, match="trailing bytes") as info:
        PgOutputDecoder(4).decode(data + b"\x00")
    assert info.value.offset == len(data)


def test_unknown_type_byte_and_bad_column_kind() -> None:
    with pytest.raises(DecodeError, match="unknown message type byte 0x5a") as info:
        decode(b"Z\x00")
    assert info.value.offset == 0
    bad = wire.insert(1, [("t", b"1")]).replace(b"t\x00\x00\x00\x01", b"x\x00\x00\x00\x01")
    with pytest.raises(DecodeError, match="column kind 0x78") as info:
        decode(bad)
    assert info.value.message_type == "I"
    assert info.value.offset == 8


def test_negative_and_oversized_lengths() -> None:
    data = b"I" + b"\x00\x00\x00\x01" + b"N" + b"\x00\x01" + b"t" + b"\xff\xff\xff\xff"
    with pytest.raises(DecodeError, match="length -1"):
        decode(data)
    huge = b"T" + b"\x7f\xff\xff\xff" + b"\x00"
    with pytest.raises(DecodeError, match="does not fit"):
        decode(huge)


def test_decode_error_names_lsn_when_known() -> None:
    err = DecodeError("boom", message_type="I", offset=3).at_lsn(0x1_0000_00AB)
    assert "message 'I' at offset 3, WAL position 1/AB" in str(err)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=64), st.sampled_from(VERSIONS), st.booleans())
def test_random_bytes_only_raise_decode_error(data: bytes, version: int, in_stream: bool) -> None:
    decoder = PgOutputDecoder(version)
    decoder.in_stream = in_stream
    try:
        decoder.decode(data)
    except DecodeError as err:
        offset = err.offset
    else:
        offset = 0
    assert 0 <= offset <= len(data)


@settings(max_examples=2000, deadline=None)
@given(
    st.sampled_from(ALL_MESSAGES),
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=0, max_value=255),
)
def test_mutated_messages_only_raise_decode_error(data: bytes, where: int, byte: int) -> None:
    mutated = bytearray(data)
    mutated[where % len(data)] = byte
    with contextlib.suppress(DecodeError):
        PgOutputDecoder(4).decode(bytes(mutated))


column = st.one_of(
    st.tuples(st.just("n"), st.none()),
    st.tuples(st.just("u"), st.none()),
    st.tuples(st.just("t"), st.binary(max_size=40)),
    st.tuples(st.just("b"), st.binary(max_size=40)),
)


@settings(max_examples=500, deadline=None)
@given(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.lists(column, max_size=30),
    st.one_of(st.none(), st.integers(min_value=1, max_value=2**32 - 1)),
)
def test_random_tuples_round_trip(relid: int, cols: list, xid: int | None) -> None:
    decoder = PgOutputDecoder(2)
    decoder.in_stream = xid is not None
    msg = decoder.decode(wire.insert(relid, cols, xid=xid))
    assert isinstance(msg, Insert)
    assert msg.relation_id == relid
    assert msg.xid == xid
    assert msg.new.kinds == "".join(k for k, _ in cols).encode()
    expected = tuple(None if k == "n" else UNCHANGED_TOAST if k == "u" else v for k, v in cols)
    assert msg.new.values == expected


def _with_time(ts: int) -> list[bytes]:
    return [
        wire.begin(0x100, ts, 7),
        wire.commit(0x100, 0x108, ts),
        wire.stream_commit(7, 0x100, 0x108, ts),
        wire.begin_prepare(0x100, 0x108, ts, 7, "g"),
        wire.prepare(0x100, 0x108, ts, 7, "g"),
        wire.stream_prepare(0x100, 0x108, ts, 7, "g"),
        wire.commit_prepared(0x100, 0x108, ts, 7, "g"),
        wire.rollback_prepared(0x100, 0x108, 0, ts, 7, "g"),
        wire.rollback_prepared(0x100, 0x108, ts, 0, 7, "g"),
    ]


@pytest.mark.parametrize("ts", [2**62, -(2**62), 2**63 - 1, 252_455_616_000_000_000])
@pytest.mark.parametrize("index", range(9))
def test_times_a_datetime_cannot_hold_are_decode_errors(ts: int, index: int) -> None:
    with pytest.raises(DecodeError, match="outside years 1 to 9999"):
        decode(_with_time(ts)[index])


@pytest.mark.parametrize("ts", [-63_082_281_600_000_000, 0, 252_455_615_999_999_999])
def test_times_at_the_ends_of_the_datetime_range_decode(ts: int) -> None:
    for data in _with_time(ts):
        decode(data)
    assert decode(wire.stream_abort(7, 7, 0x100, ts), parallel=True).abort_ts == ts
    with pytest.raises(DecodeError, match="abort time"):
        decode(wire.stream_abort(7, 7, 0x100, 2**62), parallel=True)

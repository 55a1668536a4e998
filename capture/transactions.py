"""Reassemble pgoutput messages into committed transactions, in commit order.

Feed every decoded message (with its raw bytes and the XLogData start LSN) to
:meth:`TransactionAssembler.feed`; it returns the :data:`~capture.events.StreamItem`
objects that became final, as an iterable the caller consumes fully, in order, before the
next ``feed`` or ``close`` call. A replayed held transaction is a generator that decodes one
held message at a time from its spill buffer: a 10M-row transaction is never a list.
``close()`` during a replay ends it and drops its buffer.

* Ordinary transactions (Begin … Commit) pass straight through, change by change: the
  server sends them only once they have committed, and Begin already names the commit LSN.
* Streamed transactions (protocol v2+, Stream Start … Stream Stop chunks) are held in a
  :class:`~capture.spill.SpillBuffer` per top-level xid and replayed at Stream Commit.
  Stream Abort drops the whole transaction, or only the aborted subtransaction's records.
  Relation/Type messages inside a stream take effect only when it commits.
* Prepared transactions (two-phase, v3+) are held from Begin Prepare (or Stream Prepare)
  until Commit Prepared, and dropped at Rollback Prepared.
* With ``hold_transactions=True`` ordinary transactions are held too (spilling to disk
  past the memory limit) and replayed at Commit, so every ``TransactionBegin`` carries
  the transaction's ``change_count``. Formats that state a transaction's size up front
  (Shareplex ``size``) need this; memory stays bounded whatever the transaction's size.

No change of an aborted or not-yet-committed transaction ever leaves this module.

Acknowledgement: a consumer acknowledges a transaction's ``end_lsn`` once it is delivered,
through :meth:`TransactionAssembler.ack_limit`, which holds acknowledgements below any
pending prepared transaction; once its prepare is confirmed the server would not send it
again after a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Final, NoReturn

from capture.consistency import check_row, key_image_kinds, plain_key_image, plainly_fits
from capture.errors import DecodeError, WalcastError
from capture.events import (
    ChangeEvent,
    Image,
    LogicalMessageEvent,
    Op,
    StreamItem,
    Table,
    TransactionBegin,
    TransactionCommit,
)
from capture.lsn import format_lsn
from capture.pgoutput import messages as pg
from capture.pgoutput.decoder import PgOutputDecoder
from capture.relcache import RelationCache
from capture.spill import DEFAULT_MEMORY_LIMIT, SpillBuffer

_NO_ITEMS: Final[tuple[StreamItem, ...]] = ()
_ROW_TYPES: Final = frozenset({pg.MessageType.INSERT, pg.MessageType.UPDATE, pg.MessageType.DELETE})
_TRUNCATE: Final = pg.MessageType.TRUNCATE
_INSERT: Final = Op.INSERT
_join: Final = b"".join


class ProtocolStateError(WalcastError):
    """Messages arrived in an order the protocol does not allow (e.g. Insert outside a txn)."""

    exit_code = 5


@dataclass(slots=True)
class _Open:
    """The ordinary or replayed transaction whose changes are being emitted."""

    xid: int
    commit_lsn: int
    commit_ts: int
    ordinal: int = 0
    held: _Held | None = None
    """Set in hold mode: the transaction's raw messages, replayed at Commit."""


@dataclass(slots=True)
class _Held:
    """A streamed or prepared transaction waiting for its outcome."""

    buffer: SpillBuffer
    streamed: bool
    """Held messages came from stream chunks, so each carries an xid after its type byte."""
    aborted_subxids: set[int] = field(default_factory=set)
    prepare_lsn: int | None = None


class TransactionAssembler:
    """Turns a pgoutput message stream into committed transactions.

    ``proto_version`` and ``streaming_parallel`` must match the stream, because held
    messages are decoded again when replayed.
    """

    def __init__(
        self,
        relations: RelationCache,
        *,
        proto_version: int = 1,
        streaming_parallel: bool = False,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        spill_dir: str | None = None,
        hold_transactions: bool = False,
    ) -> None:
        self.relations = relations
        self._rows = relations.rows_by_id
        self.hold_transactions = hold_transactions
        self._replay_decoder = PgOutputDecoder(proto_version, streaming_parallel=streaming_parallel)
        self._memory_limit = memory_limit
        self._spill_dir = spill_dir
        self._open: _Open | None = None
        self._streams: dict[int, _Held] = {}
        self._current_stream: _Held | None = None
        self._prepared: dict[str, _Held] = {}
        self._preparing: tuple[str, _Held] | None = None
        self._key_kinds: dict[Table, bytes] = {}
        """Kind bytes of a plain old key image, per table (see :mod:`capture.consistency`)."""
        self._replaying: tuple[Generator[StreamItem, None, None], _Held] | None = None
        """The replay in progress and its held transaction (until the replay ends)."""
        self._handlers: dict[type, Callable[[pg.Message, bytes, int], Iterable[StreamItem]]] = {
            pg.Begin: self._begin,
            pg.Commit: self._commit,
            pg.Origin: self._ignore,
            pg.Relation: self._relation,
            pg.Type: self._type,
            pg.Insert: self._row,
            pg.Update: self._row,
            pg.Delete: self._row,
            pg.Truncate: self._row,
            pg.LogicalMessage: self._logical_message,
            pg.StreamStart: self._stream_start,
            pg.StreamStop: self._stream_stop,
            pg.StreamCommit: self._stream_commit,
            pg.StreamAbort: self._stream_abort,
            pg.BeginPrepare: self._begin_prepare,
            pg.Prepare: self._prepare,
            pg.StreamPrepare: self._stream_prepare,
            pg.CommitPrepared: self._commit_prepared,
            pg.RollbackPrepared: self._rollback_prepared,
        }

    # -- public ------------------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        """True while an ordinary, streamed or prepared transaction is unfinished."""
        return (
            self._replaying is not None
            or self._open is not None
            or self._preparing is not None
            or bool(self._streams)
            or self._current_stream is not None
        )

    @property
    def idle(self) -> bool:
        """True when nothing is open, streaming or prepared: every change seen was emitted."""
        return not self.in_transaction and not self._prepared

    def ack_limit(self, lsn: int) -> int:
        """The highest LSN at most ``lsn`` that is safe to confirm to the server."""
        pending = [h.prepare_lsn for h in self._prepared.values() if h.prepare_lsn is not None]
        if self._preparing is not None and self._preparing[1].prepare_lsn is not None:
            pending.append(self._preparing[1].prepare_lsn)
        return min([lsn, *pending])

    def feed(self, message: pg.Message, raw: bytes, wal_start: int) -> Iterable[StreamItem]:
        """Process one message; return the items that became final (often none or one)."""
        try:
            if self._current_stream is not None and not isinstance(
                message, pg.StreamStop | pg.StreamStart
            ):
                return self._hold(self._current_stream, message, raw, wal_start)
            if self._preparing is not None and not isinstance(message, pg.Prepare):
                return self._hold(self._preparing[1], message, raw, wal_start)
            if (
                self._open is not None
                and self._open.held is not None
                and not isinstance(message, pg.Commit | pg.Begin)
            ):
                return self._hold(self._open.held, message, raw, wal_start)
            return self._handlers[type(message)](message, raw, wal_start)
        except DecodeError as exc:
            raise exc.at_lsn(wal_start) from None

    def close(self) -> None:
        """Drop everything held (on shutdown); held data is re-sent by the server on restart.

        Safe in the middle of a replay: the replay ends and its spill buffer is dropped.
        """
        if self._replaying is not None:
            replay, held = self._replaying
            replay.close()
            held.buffer.close()  # a replay closed before its first item never ran its finally
            self._replaying = None
        for held in [*self._streams.values(), *self._prepared.values()]:
            held.buffer.close()
        self._streams.clear()
        self._prepared.clear()
        self._open = None
        self._current_stream = None
        self._preparing = None

    # -- ordinary transactions --------------------------------------------------------------

    def _begin(self, message: pg.Message, _raw: bytes, wal_start: int) -> Iterable[StreamItem]:
        assert isinstance(message, pg.Begin)
        if self._open is not None:
            raise self._state_error("Begin inside an open transaction", wal_start)
        self._open = _Open(message.xid, message.final_lsn, message.commit_ts)
        if self.hold_transactions:
            self._open.held = self._new_held(streamed=False)
            return _NO_ITEMS
        return [TransactionBegin(message.xid, message.final_lsn, message.commit_ts)]

    def _commit(self, message: pg.Message, _raw: bytes, wal_start: int) -> Iterable[StreamItem]:
        assert isinstance(message, pg.Commit)
        opened = self._open
        if opened is None:
            raise self._state_error("Commit without Begin", wal_start)
        self._open = None
        if opened.held is not None:
            return self._replay(
                opened.held, opened.xid, message.commit_lsn, message.end_lsn, message.commit_ts
            )
        return [
            TransactionCommit(
                opened.xid, message.commit_lsn, message.end_lsn, message.commit_ts, opened.ordinal
            )
        ]

    def _ignore(self, _message: pg.Message, _raw: bytes, _wal_start: int) -> Iterable[StreamItem]:
        return _NO_ITEMS

    def _relation(self, message: pg.Message, _raw: bytes, wal_start: int) -> Iterable[StreamItem]:
        assert isinstance(message, pg.Relation)
        self.relations.apply_relation(message, lsn=wal_start)
        return _NO_ITEMS

    def _type(self, message: pg.Message, _raw: bytes, _wal_start: int) -> Iterable[StreamItem]:
        assert isinstance(message, pg.Type)
        self.relations.apply_type(message)
        return _NO_ITEMS

    def _row(self, message: pg.Message, raw: bytes, wal_start: int) -> Iterable[StreamItem]:
        opened = self._open
        if opened is None:
            raise self._state_error(f"{type(message).__name__} outside a transaction", wal_start)
        return self._changes(opened, message, raw, wal_start)

    def _changes(
        self, opened: _Open, message: pg.Message, raw: bytes, wal_start: int
    ) -> Iterable[StreamItem]:
        """Build the change events of one row message inside ``opened``.

        Every tuple is checked against its table first (:func:`~capture.consistency.check_row`).
        """
        if type(message) is pg.Insert:
            table, text_kinds = self._rows.get(message.relation_id) or self._unknown(
                message.relation_id, wal_start
            )
            new = message.new
            # plainly_fits(new, text_kinds), inlined on the hottest path; a message that is
            # all ASCII (its relation OID's bytes too) needs no join
            if new.kinds is not text_kinds or not (
                raw.isascii() or _join(new.values).isascii()  # type: ignore[arg-type]
            ):
                check_row(table, "I", raw, wal_start, new)
            opened.ordinal += 1
            return [
                ChangeEvent(
                    _INSERT, table, None, Image(table, new), opened.xid,
                    opened.commit_lsn, opened.commit_ts, opened.ordinal, 0, wal_start,
                )
            ]  # fmt: skip
        if isinstance(message, pg.Update | pg.Delete):
            # An UPDATE has a new tuple, a DELETE none; both may carry the old one.
            after_tuple = message.new if isinstance(message, pg.Update) else None
            table = self.relations.table(message.relation_id, lsn=wal_start)
            self._check_images(
                table, "D" if after_tuple is None else "U", raw, wal_start, message.old_is_key,
                message.old, after_tuple,
            )  # fmt: skip
            before = (
                Image(table, message.old, key_only=message.old_is_key)
                if message.old is not None
                else None
            )
            opened.ordinal += 1
            return [
                ChangeEvent(
                    Op.DELETE if after_tuple is None else Op.UPDATE, table, before,
                    None if after_tuple is None else Image(table, after_tuple), opened.xid,
                    opened.commit_lsn, opened.commit_ts, opened.ordinal, 0, wal_start,
                )
            ]  # fmt: skip
        if isinstance(message, pg.Truncate):
            items: list[StreamItem] = []
            for relation_id in message.relation_ids:
                table = self.relations.table(relation_id, lsn=wal_start)
                opened.ordinal += 1
                items.append(
                    ChangeEvent(
                        Op.TRUNCATE, table, None, None, opened.xid, opened.commit_lsn,
                        opened.commit_ts, opened.ordinal, message.options, wal_start,
                    )
                )  # fmt: skip
            return items
        if isinstance(message, pg.LogicalMessage):
            return [
                LogicalMessageEvent(
                    message.lsn, message.prefix, message.content, message.transactional, opened.xid
                )
            ]
        return _NO_ITEMS

    def _unknown(self, relation_id: int, wal_start: int) -> NoReturn:
        self.relations.table(relation_id, lsn=wal_start)  # raises UnknownRelationError
        raise AssertionError(relation_id)  # pragma: no cover - table() raised

    def _check_images(
        self,
        table: Table,
        message_type: str,
        raw: bytes,
        wal_start: int,
        old_is_key: bool,
        old: pg.TupleData | None,
        new: pg.TupleData | None,
    ) -> None:
        """Check the images of an Update or Delete (see :mod:`capture.consistency`)."""
        text_kinds = self._rows[table.relation_id][1]
        if new is not None and not plainly_fits(new, text_kinds):
            check_row(table, message_type, raw, wal_start, new)
        if old is None:
            return
        if old_is_key:
            kinds = self._key_kinds.get(table)
            if kinds is None:
                kinds = self._key_kinds[table] = key_image_kinds(table)
            if not plain_key_image(old, kinds):
                check_row(table, message_type, raw, wal_start, key_only=old)
        elif not plainly_fits(old, text_kinds):
            check_row(table, message_type, raw, wal_start, old)

    def _logical_message(
        self, message: pg.Message, raw: bytes, wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.LogicalMessage)
        if message.transactional and self._open is not None:
            return self._changes(self._open, message, raw, wal_start)
        return [
            LogicalMessageEvent(
                message.lsn, message.prefix, message.content, message.transactional, message.xid
            )
        ]

    # -- streamed transactions (v2+) ------------------------------------------------------

    def _new_held(self, *, streamed: bool) -> _Held:
        return _Held(SpillBuffer(self._memory_limit, self._spill_dir), streamed)

    def _hold(
        self, held: _Held, message: pg.Message, raw: bytes, wal_start: int
    ) -> Iterable[StreamItem]:
        if isinstance(message, pg.LogicalMessage) and not message.transactional:
            return self._logical_message(message, raw, wal_start)
        xid = getattr(message, "xid", None)
        held.buffer.append(xid if isinstance(xid, int) else 0, wal_start, raw)
        return _NO_ITEMS

    def _stream_start(
        self, message: pg.Message, _raw: bytes, wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.StreamStart)
        if self._open is not None or self._current_stream is not None:
            raise self._state_error("Stream Start inside an open transaction or chunk", wal_start)
        held = self._streams.get(message.xid)
        if held is None:
            held = self._streams[message.xid] = self._new_held(streamed=True)
        self._current_stream = held
        return _NO_ITEMS

    def _stream_stop(
        self, _message: pg.Message, _raw: bytes, wal_start: int
    ) -> Iterable[StreamItem]:
        if self._current_stream is None:
            raise self._state_error("Stream Stop outside a streamed chunk", wal_start)
        self._current_stream = None
        return _NO_ITEMS

    def _stream_commit(
        self, message: pg.Message, _raw: bytes, _wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.StreamCommit)
        held = self._streams.pop(message.xid, None)
        if held is None:
            # A transaction whose every change was filtered out may still be announced.
            held = self._new_held(streamed=True)
        return self._replay(
            held, message.xid, message.commit_lsn, message.end_lsn, message.commit_ts
        )

    def _stream_abort(
        self, message: pg.Message, _raw: bytes, _wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.StreamAbort)
        if message.subxid == message.xid:
            held = self._streams.pop(message.xid, None)
            if held is not None:
                held.buffer.close()
        elif (held := self._streams.get(message.xid)) is not None:
            held.aborted_subxids.add(message.subxid)
        return _NO_ITEMS

    def _replay(
        self, held: _Held, xid: int, commit_lsn: int, end_lsn: int, commit_ts: int
    ) -> Iterable[StreamItem]:
        """Start emitting a held transaction; the items come from :meth:`_replayed`."""
        replay = self._replayed(held, xid, commit_lsn, end_lsn, commit_ts)
        self._replaying = (replay, held)
        return replay

    def _replayed(
        self, held: _Held, xid: int, commit_lsn: int, end_lsn: int, commit_ts: int
    ) -> Generator[StreamItem, None, None]:
        """Yield a held transaction, decoding one held message at a time.

        Two passes over the held messages: the first counts the changes, so that
        ``TransactionBegin.change_count`` is known; the second decodes them (streamed
        messages carry per-subtransaction xids; aborted subtransactions are skipped).
        The spill buffer is dropped when the generator ends, fails or is closed.
        """
        try:
            opened = _Open(xid, commit_lsn, commit_ts)
            yield TransactionBegin(xid, commit_lsn, commit_ts, self._count(held))
            decoder = self._replay_decoder
            aborted = held.aborted_subxids
            changes = self._changes
            relations = self.relations
            decoder.in_stream = held.streamed
            for sub_xid, at, raw in held.buffer:
                if sub_xid in aborted:
                    continue
                try:
                    message = decoder.decode(raw)
                except DecodeError as exc:
                    raise exc.at_lsn(at) from None
                if isinstance(message, pg.Relation):
                    relations.apply_relation(message, lsn=at)
                elif isinstance(message, pg.Type):
                    relations.apply_type(message)
                else:
                    yield from changes(opened, message, raw, at)
            yield TransactionCommit(xid, commit_lsn, end_lsn, commit_ts, opened.ordinal)
        finally:
            held.buffer.close()
            if self._replaying is not None and self._replaying[1] is held:
                self._replaying = None

    def _count(self, held: _Held) -> int:
        """Count the row changes held, without decoding tuples."""
        count = 0
        offset = 5 if held.streamed else 1
        for sub_xid, _at, raw in held.buffer:
            if sub_xid in held.aborted_subxids or not raw:
                continue
            kind = raw[0]
            if kind in _ROW_TYPES:
                count += 1
            elif kind == _TRUNCATE and len(raw) >= offset + 4:
                count += int.from_bytes(raw[offset : offset + 4], "big")
        return count

    # -- two-phase (v3+) ------------------------------------------------------------------------

    def _begin_prepare(
        self, message: pg.Message, _raw: bytes, wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.BeginPrepare)
        if self._open is not None or self._preparing is not None:
            raise self._state_error("Begin Prepare inside an open transaction", wal_start)
        held = self._new_held(streamed=False)
        held.prepare_lsn = message.prepare_lsn
        self._preparing = (message.gid, held)
        return _NO_ITEMS

    def _prepare(self, message: pg.Message, _raw: bytes, wal_start: int) -> Iterable[StreamItem]:
        assert isinstance(message, pg.Prepare)
        if self._preparing is None or self._preparing[0] != message.gid:
            raise self._state_error(f"Prepare of {message.gid!r} without Begin Prepare", wal_start)
        self._prepared[message.gid] = self._preparing[1]
        self._preparing = None
        return _NO_ITEMS

    def _stream_prepare(
        self, message: pg.Message, _raw: bytes, _wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.StreamPrepare)
        held = self._streams.pop(message.xid, None) or self._new_held(streamed=True)
        held.prepare_lsn = message.prepare_lsn
        self._prepared[message.gid] = held
        return _NO_ITEMS

    def _commit_prepared(
        self, message: pg.Message, _raw: bytes, _wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.CommitPrepared)
        held = self._prepared.pop(message.gid, None)
        if held is None:
            raise WalcastError(
                f"COMMIT PREPARED {message.gid!r} (xid {message.xid}) at "
                f"{format_lsn(message.commit_lsn)} names a transaction whose changes were never "
                "received",
                hint="the slot was advanced past the PREPARE; re-create the slot, or disable "
                "two_phase",
            )
        return self._replay(
            held, message.xid, message.commit_lsn, message.end_lsn, message.commit_ts
        )

    def _rollback_prepared(
        self, message: pg.Message, _raw: bytes, _wal_start: int
    ) -> Iterable[StreamItem]:
        assert isinstance(message, pg.RollbackPrepared)
        held = self._prepared.pop(message.gid, None)
        if held is not None:
            held.buffer.close()
        return _NO_ITEMS

    @staticmethod
    def _state_error(what: str, wal_start: int) -> ProtocolStateError:
        return ProtocolStateError(
            f"pgoutput protocol violation at WAL position {format_lsn(wal_start)}: {what}",
            hint="report this with the server version; restart resumes from the slot",
        )

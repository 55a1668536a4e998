"""Mutate recorded pgoutput traffic and push it through the whole capture pipeline.

The traffic is real (tests/data/pgoutput, recorded from PostgreSQL by
bench/fuzz_record.py). A session is cut into *units* (an ordinary transaction, a streamed
transaction from its first chunk to its commit or abort, a prepared transaction from
Begin Prepare to its outcome, a lone message), long units trimmed to a few dozen messages.
One *episode* takes a unit, mutates one to three of its messages (and sometimes the order
of messages), and feeds it as the replication source does: decoder, relation cache
(primed with the session's earlier Relation and Type messages), transaction assembler,
then every item through every output format exactly as the sinks call them (the Kafka
path's ``change``/``begin``/``commit`` in even episodes, ``tail_lines`` and
``frame_for_tail`` in odd ones), the key-update split, layout records, and at the end
``flush``. A failing ``change`` is explained with :func:`capture.consistency.explain`, as
the sinks must.

The one rule: only walcast's own errors (:class:`~capture.errors.WalcastError`) may come
out. Anything else is a *finding*, reported with the mutation that caused it.

Mutations are of two kinds: byte-level (flip, set to an edge value, overwrite 2/4/8 bytes
with edge integers, truncate, insert, duplicate a span) and structural ones that keep the
message decodable so that the later stages see them (a value replaced by edge-case text,
bytes or invalid UTF-8, a value's kind switched between text and binary, a column added
or removed, a Relation column's type OID, modifier or name changed, a Type message naming
another type, a Begin/Commit time or LSN at an extreme).
"""

from __future__ import annotations

import gzip
import json
import random
import struct
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.kit import wire
from capture.consistency import explain
from capture.errors import WalcastError
from capture.events import ChangeEvent, LogicalMessageEvent, TransactionBegin, TransactionCommit
from capture.formats import FORMAT_NAMES, Encoder, FormatOptions, encoder_for, parse_settings
from capture.formats.layout import layout_record
from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    Truncate,
    TupleData,
    Type,
    Update,
)
from capture.relcache import RelationCache
from capture.split import split_key_update
from capture.transactions import TransactionAssembler
from capture.types import TypeRegistry
from capture.types.facts import TypeFacts

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "pgoutput"
_RECORD = struct.Struct(">QI")
MAX_UNIT = 24
"""Units longer than this keep their first and last messages only (row messages dropped)."""
ENCODER_REUSE = 300
"""Episodes that share one set of encoders (encoders cache per-table state)."""

# --------------------------------------------------------------------------- traffic


@dataclass
class Session:
    """One recorded replication session and the options it was recorded with."""

    name: str
    proto_version: int
    binary: bool
    streaming: bool
    two_phase: bool
    messages: list[tuple[int, bytes]]


def load_sessions(directory: Path = DATA) -> list[Session]:
    """Every session listed in ``sessions.json``."""
    manifest = json.loads((directory / "sessions.json").read_text())
    sessions = []
    for name, options in manifest.items():
        data = gzip.decompress((directory / options["file"]).read_bytes())
        messages = []
        pos = 0
        while pos < len(data):
            lsn, size = _RECORD.unpack_from(data, pos)
            pos += _RECORD.size
            messages.append((lsn, data[pos : pos + size]))
            pos += size
        sessions.append(
            Session(
                name,
                int(options["proto_version"]),
                bool(options["binary"]),
                bool(options["streaming"]),
                bool(options["two_phase"]),
                messages,
            )
        )
    return sessions


@dataclass
class Entry:
    """One recorded message with what the clean decoding made of it."""

    lsn: int
    raw: bytes
    decoded: Message
    in_stream: bool
    """Decoded inside a streamed chunk (row messages carry an xid)."""


@dataclass
class Unit:
    """A self-contained slice of a session, with the catalog messages seen before it."""

    session: Session
    entries: list[Entry]
    prelude: list[Relation | Type]


def _entries(session: Session) -> list[Entry]:
    decoder = PgOutputDecoder(session.proto_version)
    entries = []
    for lsn, raw in session.messages:
        in_stream = decoder.in_stream
        entries.append(Entry(lsn, raw, decoder.decode(raw), in_stream))
    return entries


def whole(session: Session) -> Unit:
    """The whole session as one unit (nothing trimmed, nothing primed)."""
    return Unit(session, _entries(session), [])


def cut_units(session: Session) -> list[Unit]:
    """Cut ``session`` into units (see the module docstring)."""
    entries = _entries(session)
    units: list[Unit] = []
    catalog: dict[tuple[str, int], Relation | Type] = {}
    start = 0
    open_streams: set[int] = set()
    preparing = False
    for index, entry in enumerate(entries):
        message = entry.decoded
        if isinstance(message, Relation | Type):
            key = ("R" if isinstance(message, Relation) else "Y", _oid(message))
            catalog.pop(key, None)
            catalog[key] = message
        if isinstance(message, StreamStart):
            open_streams.add(message.xid)
        elif isinstance(message, BeginPrepare):
            preparing = True
        ends = isinstance(
            message, Commit | StreamCommit | StreamAbort | CommitPrepared | RollbackPrepared
        ) or (isinstance(message, LogicalMessage) and not message.transactional)
        if isinstance(message, StreamCommit | StreamPrepare) or (
            isinstance(message, StreamAbort) and message.xid == message.subxid
        ):
            open_streams.discard(message.xid)
        if isinstance(message, Prepare):
            continue  # the unit goes on to Commit/Rollback Prepared
        if (
            ends
            and not open_streams
            and (not preparing or isinstance(message, CommitPrepared | RollbackPrepared))
        ):
            preparing = False
            chosen = entries[start : index + 1]
            prelude = [m for k, m in catalog.items() if not any(e.decoded is m for e in chosen)]
            units.append(Unit(session, _trim(chosen), prelude))
            start = index + 1
    return units


def _oid(message: Relation | Type) -> int:
    return message.relation_id if isinstance(message, Relation) else message.type_oid


def _trim(entries: list[Entry]) -> list[Entry]:
    if len(entries) <= MAX_UNIT:
        return entries
    keep = []
    rows = 0
    for entry in entries:
        if isinstance(entry.decoded, Insert | Update | Delete):
            rows += 1
            if rows > MAX_UNIT // 2:
                continue
        keep.append(entry)
    return keep


# --------------------------------------------------------------------------- mutations

EDGE_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, ord("t"), ord("b"), ord("n"), ord("u"), ord("N"))
EDGE_INTS = (0, 1, -1, 2, 3, 4, 8, 127, 128, 255, 256, 32767, 32768, 65535, 2**31 - 1, -(2**31))
EDGE_TEXT = (
    b"", b" ", b"-", b"+", b".", b"0", b"-0", b"00", b"1e999", b"-1e-999", b"NaN", b"nan",
    b"Infinity", b"-Infinity", b"inf", b"99999999999999999999999999999999999999", b"1_000",
    b"t", b"f", b"true", b"x", b"\x00", b"{", b"}", b"{}", b"{{}}", b"{1,{2}}", b'{"a}',
    b"[1:2]={1}", b"[0:0]={}", b"NULL", b"\\x", b"\\xZZ", b"\\x0", b"2024-13-45",
    b"0000-00-00", b"24:00:01", b"25:00:00", b"2024-01-01 25:61:61+99", b"infinity",
    b"-infinity", b"294277-01-01", b"10000-01-01", b"1 year 2 mons", b"P1Y", b"@ 1 year",
    b"1.2.3.4/33", b"::/129", b"zz:zz", b"08:00:2b", b"1.5e10", b"0x10", b"\xff\xfe",
    b"\xc3\x28", b"\xed\xa0\x80", b"caf\xc3\xa9", b"\xe2\x98\x95", b"a" * 300, b"9" * 2000,
    b"(1,2)", b"((1,2),(3,4))", b"$1.00", b"B101", b"102", b"00000000-0000-0000-0000-00000000000",
)  # fmt: skip
TYPE_OIDS = (
    16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 142, 650, 700, 701, 774, 829, 869, 1042, 1043,
    1082, 1083, 1114, 1184, 1186, 1266, 1560, 1562, 1700, 2950, 3220, 3802, 5069, 1000, 1001,
    1005, 1007, 1009, 1016, 1021, 1022, 1115, 1182, 1183, 1185, 1187, 1231, 1270, 2951, 3807,
    600, 603, 790, 3904, 3614, 199, 651, 1041, 1561, 1563, 123456, 4294967295,
)  # fmt: skip
TYPE_NAMES = (
    ("", "int4"), ("", "_int4"), ("", "numeric"), ("", "_numeric"), ("", "timestamptz"),
    ("", "bytea"), ("", "box"), ("", "_box"), ("", "nosuchtype"), ("public", "_mood"),
    ("public", "mood"), ("pg_catalog", "_text"), ("x", "_"), ("", ""),
)  # fmt: skip


@dataclass
class Mutation:
    """What was done to which message (for the report of a finding)."""

    index: int
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"#{self.index} {self.kind}: {self.detail}"


class Mutator:
    """Random mutations of recorded messages, deterministic for a seed."""

    def __init__(self, rng: random.Random, session: Session) -> None:
        self.rng = rng
        self.session = session

    def mutate_unit(self, unit: Unit) -> tuple[list[tuple[int, bytes]], list[Mutation]]:
        """The unit's (lsn, bytes) with 1 to 3 messages mutated (sometimes reordered)."""
        rng = self.rng
        messages = [(e.lsn, e.raw) for e in unit.entries]
        done: list[Mutation] = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            index = rng.randrange(len(messages))
            entry = unit.entries[index] if index < len(unit.entries) else None
            raw = messages[index][1]
            if entry is not None and raw is entry.raw and rng.random() < 0.6:
                mutated, kind, detail = self._structural(entry)
            else:
                mutated, kind, detail = self._bytes(raw)
            messages[index] = (messages[index][0], mutated)
            done.append(Mutation(index, kind, detail))
        if rng.random() < 0.08 and len(messages) > 1:
            op = rng.choice(("drop", "duplicate", "swap", "foreign"))
            i = rng.randrange(len(messages))
            if op == "drop":
                del messages[i]
            elif op == "duplicate":
                messages.insert(i, messages[i])
            elif op == "swap":
                j = min(i + 1, len(messages) - 1)
                messages[i], messages[j] = messages[j], messages[i]
            else:
                messages.insert(i, rng.choice(self.session.messages))
            done.append(Mutation(i, "order", op))
        return messages, done

    # -- byte level

    def _bytes(self, raw: bytes) -> tuple[bytes, str, str]:
        rng = self.rng
        data = bytearray(raw)
        op = rng.choice(("flip", "edge", "int", "int", "truncate", "insert", "dup"))
        at = rng.randrange(len(data)) if data else 0
        if op == "flip" and data:
            data[at] ^= 1 << rng.randrange(8)
        elif op == "edge" and data:
            data[at] = rng.choice(EDGE_BYTES)
        elif op == "int" and data:
            width = rng.choice((2, 4, 8))
            value = rng.choice(EDGE_INTS) if width < 8 else rng.choice((2**62, -(2**62), -1, 0))
            packed = (
                value.to_bytes(width, "big", signed=True)
                if -(2 ** (8 * width - 1)) <= value < 2 ** (8 * width - 1)
                else b"\xff" * width
            )
            data[at : at + width] = packed
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))
        elif op == "dup" and data:
            end = min(len(data), at + rng.randrange(1, 12))
            data[at:at] = data[at:end]
        return bytes(data), "bytes", f"{op} at {at}"

    # -- structural (still decodable)

    def _structural(self, entry: Entry) -> tuple[bytes, str, str]:
        message = entry.decoded
        xid = getattr(message, "xid", None) if entry.in_stream else None
        if isinstance(message, Insert):
            columns, detail = self._tuple(message.new)
            return wire.insert(message.relation_id, columns, xid=xid), "tuple", detail
        if isinstance(message, Update):
            if message.old is not None and self.rng.random() < 0.5:
                old, detail = self._tuple(message.old)
                new = _columns(message.new)
                detail = "old " + detail
            else:
                new, detail = self._tuple(message.new)
                old = _columns(message.old) if message.old is not None else None
            kind = "K" if message.old_is_key else "O"
            return wire.update(message.relation_id, new, old, kind, xid=xid), "tuple", detail
        if isinstance(message, Delete) and message.old is not None:
            old, detail = self._tuple(message.old)
            kind = "K" if message.old_is_key else "O"
            return wire.delete(message.relation_id, old, kind, xid=xid), "tuple", detail
        if isinstance(message, Relation):
            return self._relation(message, xid)
        if isinstance(message, Type):
            namespace, name = self.rng.choice(TYPE_NAMES)
            data = wire.type_message(message.type_oid, namespace, name, xid=xid)
            return data, "type", f"{namespace}.{name}"
        if isinstance(message, Begin):
            ts = self.rng.choice((2**62, -(2**62), 2**63 - 1, 0, -1))
            return wire.begin(message.final_lsn, ts, message.xid), "begin", f"ts {ts}"
        if isinstance(message, Truncate):
            relids = [*message.relation_ids, self.rng.choice((0, 1, 2**32 - 1))]
            self.rng.shuffle(relids)
            data = wire.truncate(relids, self.rng.randrange(256), xid=xid)
            return data, "truncate", f"relids {relids}"
        if isinstance(message, LogicalMessage):
            content = self.rng.choice(EDGE_TEXT)
            data = wire.message(
                message.prefix, content, message.lsn, message.transactional, xid=xid
            )
            return data, "message", f"content {content[:20]!r}"
        return self._bytes(entry.raw)

    def _tuple(self, data: TupleData) -> tuple[list[wire.Column], str]:
        rng = self.rng
        columns = _columns(data)
        op = rng.choice(("value", "value", "value", "kind", "add", "remove", "null"))
        at = rng.randrange(len(columns)) if columns else 0
        if op == "add" or not columns:
            columns.insert(at, ("t", rng.choice(EDGE_TEXT)))
        elif op == "remove":
            del columns[at]
        elif op == "null":
            columns[at] = (rng.choice("nu"), None)
        elif op == "kind":
            kind, value = columns[at]
            columns[at] = ("b" if kind == "t" else "t", value if value is not None else b"1")
        else:
            kind, value = columns[at]
            if kind not in "tb":
                kind = "t"
            if rng.random() < 0.3 and value:
                mutated = bytearray(value)
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
                new = bytes(mutated)
            elif rng.random() < 0.5:
                new = rng.choice(EDGE_TEXT)
            else:
                new = bytes(
                    rng.randrange(256) for _ in range(rng.choice((0, 1, 2, 3, 4, 6, 8, 12, 16)))
                )
            columns[at] = (kind, new)
        return columns, f"{op} column {at}: {columns[at] if at < len(columns) else ''}"

    def _relation(self, message: Relation, xid: int | None) -> tuple[bytes, str, str]:
        rng = self.rng
        columns = [(c.flags, c.name, c.type_oid, c.type_modifier) for c in message.columns]
        op = rng.choice(("type", "type", "type", "typmod", "add", "remove", "name", "identity"))
        at = rng.randrange(len(columns)) if columns else 0
        identity = message.replica_identity.value
        if op == "add" or not columns:
            columns.insert(at, (rng.randrange(2), f"extra{at}", rng.choice(TYPE_OIDS), -1))
        elif op == "remove":
            del columns[at]
        elif op == "typmod":
            flags, name, oid, _ = columns[at]
            columns[at] = (flags, name, oid, rng.choice((-1, 0, 4, 5, 65540, 2**31 - 1, -(2**31))))
        elif op == "name":
            flags, _, oid, typmod = columns[at]
            other = columns[rng.randrange(len(columns))][1]
            columns[at] = (flags, rng.choice((other, "", "ü ☕", 'a"b')), oid, typmod)
        elif op == "identity":
            identity = rng.choice("dnfi")
        else:
            flags, name, _, typmod = columns[at]
            columns[at] = (flags, name, rng.choice(TYPE_OIDS), typmod)
        data = wire.relation(
            message.relation_id, message.namespace, message.name, columns, identity, xid=xid
        )
        return data, "relation", f"{op} column {at}"


def _columns(data: TupleData) -> list[wire.Column]:
    return [
        (chr(kind), value if isinstance(value, bytes) else None)
        for kind, value in zip(data.kinds, data.values, strict=True)
    ]


# --------------------------------------------------------------------------- the pipeline


@dataclass
class Finding:
    """An exception that is not a walcast error, and how it came about."""

    session: str
    stage: str
    error: str
    mutations: list[Mutation]
    trace: str

    def __str__(self) -> str:
        done = "; ".join(map(str, self.mutations))
        return f"[{self.session}] {self.stage}: {self.error}\n  after {done}\n{self.trace}"


@dataclass
class Stats:
    """What a fuzzing run did."""

    episodes: int = 0
    mutated_messages: int = 0
    fed_messages: int = 0
    walcast_errors: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> str:
        errors = ", ".join(f"{k} {v:,}" for k, v in sorted(self.walcast_errors.items()))
        return (
            f"{self.episodes:,} episodes, {self.mutated_messages:,} mutated messages "
            f"({self.fed_messages:,} messages fed), walcast errors: {errors or 'none'}, "
            f"findings: {len(self.findings)}"
        )


def _fake_elements(array_oid: int) -> tuple[int, str, str] | None:
    """A catalog that answers for every unresolved array (arbitrary but fixed answers)."""
    return (array_oid + 1, "", ("int4", "numeric", "text", "timestamptz", "bytea")[array_oid % 5])


def _fake_types(
    named: dict[int, tuple[str, str]],
) -> Callable[[Sequence[int]], dict[int, TypeFacts]]:
    """A catalog for binary sessions: a type a Type message named is an enum, or its array.

    (The recorded sessions' only non-built-in types are the scenario's enum and domains
    over built-ins, which the registry resolves without the catalog.)
    """

    by_name = {name: oid for oid, (_, name) in named.items()}

    def facts(oid: int) -> TypeFacts:
        namespace, name = named[oid]
        element = by_name.get(name[1:]) if name.startswith("_") else None
        if element is not None:  # an array of a named type
            return TypeFacts(oid, namespace, name, "b", "A", "array_out", "array_send", element)
        return TypeFacts(oid, namespace, name, "e", "E", "enum_out", "enum_send")

    def resolve(oids: Sequence[int]) -> dict[int, TypeFacts]:
        return {oid: facts(oid) for oid in oids if oid in named}

    return resolve


def _relation_cache(unit: Unit, types: TypeRegistry | None = None) -> RelationCache:
    messages = [*unit.prelude, *(e.decoded for e in unit.entries)]
    named = {m.type_oid: (m.namespace, m.name) for m in messages if isinstance(m, Type)}
    binary = unit.session.binary
    by_name = {name: (oid, namespace) for oid, (namespace, name) in named.items()}

    def elements(array_oid: int) -> tuple[int, str, str] | None:
        """The recorded element type of an array a Type message named, else a fake one."""
        _, name = named.get(array_oid, ("", ""))
        element = by_name.get(name[1:]) if name.startswith("_") else None
        if element is not None:
            return element[0], element[1], name[1:]
        return _fake_elements(array_oid)

    return RelationCache(
        types,
        element_resolver=elements,
        binary=binary,
        type_resolver=_fake_types(named) if binary else None,
    )


def _clock() -> float:
    return 1_700_000_000.0


_OPTIONS: dict[str, FormatOptions] = {}


class _Encoders:
    """One encoder of every format; ``unsized``: those that need no transaction sizes."""

    def __init__(self) -> None:
        if not _OPTIONS:
            for name in FORMAT_NAMES:
                _OPTIONS[name] = FormatOptions(
                    settings=parse_settings(name, {}), clock=_clock, max_message_bytes=100_000
                )
        self.all: list[tuple[str, Encoder]] = [
            (name, encoder_for(name, _OPTIONS[name])) for name in FORMAT_NAMES
        ]
        self.unsized = [(n, e) for n, e in self.all if not e.needs_transaction_size]


_PRIMED: dict[int, RelationCache] = {}


def _primed(unit: Unit) -> RelationCache:
    """A relation cache holding the unit's prelude (built once per unit, copied per episode).

    The copy shares the compiled tables (immutable) but not the registry or the table map,
    which the episode's own (mutated) Relation and Type messages change.
    """
    pristine = _PRIMED.get(id(unit))
    if pristine is None:
        pristine = _PRIMED[id(unit)] = _relation_cache(unit)
        for message in unit.prelude:
            if isinstance(message, Type):
                pristine.apply_type(message)
        for message in unit.prelude:
            if isinstance(message, Relation):
                pristine.apply_relation(message)
    types = TypeRegistry()
    types._codecs = dict(pristine.types._codecs)  # noqa: SLF001
    types._unknown = dict(pristine.types._unknown)  # noqa: SLF001
    types._unresolved_arrays = set(pristine.types._unresolved_arrays)  # noqa: SLF001
    relations = _relation_cache(unit, types)
    relations.tables_by_id.update(pristine.tables_by_id)
    relations.rows_by_id.update(pristine.rows_by_id)
    return relations


def run_episode(
    unit: Unit,
    messages: list[tuple[int, bytes]],
    encoders: list[tuple[str, Encoder]],
    *,
    tail_path: bool,
    hold: bool,
    observe: Callable[[ChangeEvent], None] | None = None,
) -> tuple[str, str, str] | None:
    """Feed ``messages`` through the pipeline; (stage, error, traceback) of a non-walcast error.

    A WalcastError propagates (the pipeline stops there, as walcast does).
    """
    session = unit.session
    relations = _primed(unit)
    decoder = PgOutputDecoder(session.proto_version)
    assembler = TransactionAssembler(
        relations,
        proto_version=session.proto_version,
        memory_limit=16384,
        hold_transactions=hold,
    )
    stage = "decoder"
    try:
        for lsn, raw in messages:
            stage = "decoder"
            message = decoder.decode(raw)
            stage = "assembler"
            for item in assembler.feed(message, raw, lsn):
                stage = type(item).__name__
                if observe is not None and type(item) is ChangeEvent:
                    observe(item)
                _encode(item, encoders, tail_path)
                stage = "assembler"
        stage = "flush"
        for _, encoder in encoders:
            encoder.flush()
    except WalcastError:
        raise
    except Exception as exc:  # noqa: BLE001 - the finding
        return stage, f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=-6)
    finally:
        assembler.close()
    return None


def _encode(item: Any, encoders: list[tuple[str, Encoder]], tail_path: bool) -> None:
    if type(item) is ChangeEvent:
        layout_record(item.table)
        for event in split_key_update(item):
            for _, encoder in encoders:
                try:
                    if tail_path:
                        encoder.tail_lines(event)
                    else:
                        encoder.change(event)
                except Exception as exc:
                    found = explain(event, exc)
                    if found is None:
                        raise
                    raise found from exc
    elif type(item) is TransactionBegin:
        for _, encoder in encoders:
            frame = encoder.frame_for_tail
            for message in encoder.begin(item):
                if tail_path:
                    frame(message)
    elif type(item) is TransactionCommit:
        for _, encoder in encoders:
            frame = encoder.frame_for_tail
            for message in encoder.commit(item):
                if tail_path:
                    frame(message)
    else:
        assert type(item) is LogicalMessageEvent
        for _, encoder in encoders:
            encoder.logical_message(item)


def fuzz(
    sessions: list[Session],
    *,
    seed: int,
    mutated_messages: int,
    progress: Callable[[Stats], None] | None = None,
) -> Stats:
    """Run episodes until ``mutated_messages`` mutated messages were fed; return the stats."""
    rng = random.Random(seed)
    per_session = [(s, cut_units(s)) for s in sessions]
    stats = Stats()
    encoders = _Encoders()
    for episode in _episodes(rng, per_session):
        session, unit = episode
        messages, done = Mutator(rng, session).mutate_unit(unit)
        stats.episodes += 1
        stats.mutated_messages += sum(1 for m in done if m.kind != "order")
        stats.fed_messages += len(messages)
        if stats.episodes % ENCODER_REUSE == 0:
            encoders = _Encoders()
        hold = stats.episodes % 4 < 2  # as the pump decides: held when a format needs sizes
        try:
            failure = run_episode(
                unit,
                messages,
                encoders.all if hold else encoders.unsized,
                tail_path=stats.episodes % 2 == 1,
                hold=hold,
            )
        except WalcastError as exc:
            name = type(exc).__name__
            stats.walcast_errors[name] = stats.walcast_errors.get(name, 0) + 1
            encoders = _Encoders()  # an encoder may be mid-transaction; walcast would stop
            continue
        if failure is not None:
            stage, error, trace = failure
            stats.findings.append(Finding(session.name, stage, error, done, trace))
            encoders = _Encoders()
        if progress is not None and stats.episodes % 5000 == 0:
            progress(stats)
        if stats.mutated_messages >= mutated_messages:
            break
    return stats


def _episodes(
    rng: random.Random, per_session: list[tuple[Session, list[Unit]]]
) -> Iterator[tuple[Session, Unit]]:
    while True:
        session, units = rng.choice(per_session)
        yield session, rng.choice(units)

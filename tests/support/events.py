"""Build real ChangeEvents without a server: a Relation message through the real
RelationCache, and tuples of PostgreSQL text (or binary) values.

    t = make_table("public", "orders", [("id", "int4", True), ("note", "text", False)])
    ev = event(Op.INSERT, t, after={"id": "1", "note": "hi"}, xid=700, ordinal=1)

``table_with`` adds type modifiers and a catalog primary key; ``keyed_table`` derives both
the identity flags and that primary key from which columns are keys.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence

from bench.kit import wire
from capture.events import ChangeEvent, Image, Op, Table
from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import UNCHANGED_TOAST, ReplicaIdentity, TupleData, UnchangedToast
from capture.relcache import RelationCache

TYPE_OIDS = {
    "bool": 16, "bytea": 17, "int8": 20, "int2": 21, "int4": 23, "text": 25, "json": 114,
    "float4": 700, "float8": 701, "bpchar": 1042, "varchar": 1043, "date": 1082, "time": 1083,
    "timestamp": 1114, "timestamptz": 1184, "interval": 1186, "timetz": 1266, "numeric": 1700,
    "uuid": 2950, "jsonb": 3802, "inet": 869, "cidr": 650, "macaddr": 829, "_int4": 1007,
    "_text": 1009, "money": 790, "point": 600,
}  # fmt: skip

_CACHE = RelationCache()
_next_oid = [40000]
PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def _next_relation_id() -> int:
    _next_oid[0] += 1
    return _next_oid[0]


def _relation_table(
    relation_id: int,
    schema: str,
    name: str,
    columns: Sequence[tuple[int, str, int, int]],
    identity: str,
    cache: RelationCache,
) -> Table:
    """Decode a Relation message of ``(flags, name, type OID, typmod)`` columns into ``cache``."""
    message = PgOutputDecoder(1).decode(wire.relation(relation_id, schema, name, columns, identity))
    return cache.apply_relation(message)  # type: ignore[arg-type]


def make_table(
    schema: str,
    name: str,
    columns: Sequence[tuple[str, str, bool]],
    identity: str = "d",
    cache: RelationCache | None = None,
) -> Table:
    """A Table as RelationCache builds it from a Relation message."""
    flags = [(1 if key else 0, col, TYPE_OIDS[typ], -1) for col, typ, key in columns]
    return _relation_table(_next_relation_id(), schema, name, flags, identity, cache or _CACHE)


def table_with(
    schema: str,
    name: str,
    columns: Sequence[tuple[str, str, bool, int]],
    identity: str = "d",
    pk: tuple[str, ...] | None = None,
    relation_id: int | None = None,
) -> Table:
    """A Table with type modifiers (and a catalog primary key for REPLICA IDENTITY FULL).

    ``columns`` are ``(name, type, is_key, typmod)``; each table gets its own RelationCache,
    whose key resolver answers ``pk``. ``relation_id`` is fresh unless given.
    """
    flags = [(1 if key else 0, col, TYPE_OIDS[typ], mod) for col, typ, key, mod in columns]
    cache = RelationCache(key_resolver=(lambda *_: pk) if pk else None)
    relation_id = _next_relation_id() if relation_id is None else relation_id
    return _relation_table(relation_id, schema, name, flags, identity, cache)


def keyed_table(
    columns: Sequence[tuple[str, str, bool]],
    identity: str = "d",
    name: str = "orders",
    schema: str = "public",
    typmods: Mapping[str, int] | None = None,
) -> Table:
    """A Table whose key columns (``(name, type, is_key)``) are its primary key.

    With REPLICA IDENTITY FULL every column is flagged as part of the identity, as the server
    sends it, and the key columns come back as the catalog primary key.
    """
    full = identity == "f"
    typmods = typmods or {}
    return table_with(
        schema,
        name,
        [(col, typ, full or key, typmods.get(col, -1)) for col, typ, key in columns],
        identity,
        pk=tuple(col for col, _, key in columns if key) if full else None,
    )


def image(
    table: Table,
    values: Mapping[str, str | bytes | UnchangedToast | None],
    *,
    key_only: bool = False,
    binary: Collection[str] = frozenset(),
) -> Image:
    """An image from text values; columns missing from ``values`` are NULL.

    Columns named in ``binary`` carry their ``bytes`` value in binary format (kind ``b``).
    """
    raw: list[bytes | UnchangedToast | None] = []
    kinds = bytearray()
    for col in table.columns:
        v = values.get(col.name)
        if v is None:
            raw.append(None)
            kinds.append(ord("n"))
        elif v is UNCHANGED_TOAST:
            raw.append(UNCHANGED_TOAST)
            kinds.append(ord("u"))
        elif col.name in binary:
            raw.append(v)  # type: ignore[arg-type]
            kinds.append(ord("b"))
        else:
            raw.append(str(v).encode())
            kinds.append(ord("t"))
    return Image(table, TupleData(bytes(kinds), tuple(raw)), key_only=key_only)


def commit_ts(when: dt.datetime) -> int:
    """Wire timestamp (µs since 2000-01-01 UTC) of an aware datetime."""
    delta = when - PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def event(
    op: Op,
    table: Table,
    before: Mapping | None = None,
    after: Mapping | None = None,
    *,
    before_key_only: bool = False,
    xid: int = 700,
    commit_lsn: int = 0x16B3748,
    when: dt.datetime = dt.datetime(2024, 5, 2, 18, 17, 29, 123456, tzinfo=dt.UTC),
    ordinal: int = 1,
    binary: Collection[str] = frozenset(),
) -> ChangeEvent:
    """A row change; ``binary`` names the columns whose values are sent in binary format."""
    return ChangeEvent(
        op,
        table,
        (
            image(table, before, key_only=before_key_only, binary=binary)
            if before is not None
            else None
        ),
        image(table, after, binary=binary) if after is not None else None,
        xid,
        commit_lsn,
        commit_ts(when),
        ordinal,
    )


__all__ = ["ReplicaIdentity", "event", "image", "keyed_table", "make_table", "table_with"]

"""Build real ChangeEvents without a server: a Relation message through the real
RelationCache, and tuples of PostgreSQL text values.

    t = make_table("public", "orders", [("id", "int4", True), ("note", "text", False)])
    ev = insert(t, {"id": "1", "note": "hi"}, xid=700, commit_lsn=0x16B3748, ordinal=1)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from capture.events import ChangeEvent, Image, Op, Table
from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import UNCHANGED_TOAST, ReplicaIdentity, TupleData, UnchangedToast
from capture.relcache import RelationCache
from tests.support import wire

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


def make_table(
    schema: str,
    name: str,
    columns: Sequence[tuple[str, str, bool]],
    identity: str = "d",
    cache: RelationCache | None = None,
) -> Table:
    """A Table as RelationCache builds it from a Relation message."""
    _next_oid[0] += 1
    data = wire.relation(
        _next_oid[0], schema, name,
        [(1 if key else 0, col, TYPE_OIDS[typ], -1) for col, typ, key in columns], identity,
    )  # fmt: skip
    message = PgOutputDecoder(1).decode(data)
    return (cache or _CACHE).apply_relation(message)  # type: ignore[arg-type]


def image(
    table: Table, values: Mapping[str, str | UnchangedToast | None], *, key_only: bool = False
) -> Image:
    """An image from text values; columns missing from ``values`` are NULL."""
    raw = []
    kinds = bytearray()
    for col in table.columns:
        v = values.get(col.name)
        if v is None:
            raw.append(None)
            kinds.append(ord("n"))
        elif v is UNCHANGED_TOAST:
            raw.append(UNCHANGED_TOAST)
            kinds.append(ord("u"))
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
) -> ChangeEvent:
    return ChangeEvent(
        op,
        table,
        image(table, before, key_only=before_key_only) if before is not None else None,
        image(table, after) if after is not None else None,
        xid,
        commit_lsn,
        commit_ts(when),
        ordinal,
    )


__all__ = ["ReplicaIdentity", "event", "image", "make_table"]

"""PostgreSQL's own view of each change, which every reader's understanding is compared with.

Two sources give the same model (:class:`RefChange` over :class:`RefTable`):

* the capture scenario on the real server: values from the ``test_decoding`` plugin (PostgreSQL
  printing each change itself), column types, keys and replica identity from the catalog;
* ``walcast produce-test-stream``: the synthetic shop's changes as the source generates them
  (:func:`capture.synthetic.shop.generate`: the text PostgreSQL would print), with its tables.

Only what PostgreSQL sent is in an image: ``after`` lacks unchanged TOAST columns, ``before``
is ``None`` when no old row was sent, and holds only the key when only the key was sent.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from capture.events import PG_EPOCH_US, ChangeEvent, Op, Table
from capture.pgoutput.messages import ReplicaIdentity, UnchangedToast
from capture.synthetic.shop import generate

if TYPE_CHECKING:
    import psycopg

    from tests.support.test_decoding import Change


@dataclass(frozen=True)
class RefColumn:
    name: str
    type_name: str
    """The base type's name (a domain's base type; ``_int4`` for arrays)."""
    typmod: int
    type_oid: int
    """The column's own type OID (``pg_attribute.atttypid``, a domain's own OID)."""
    is_enum: bool = False


@dataclass(frozen=True)
class RefTable:
    schema: str
    name: str
    columns: tuple[RefColumn, ...]
    primary_key: tuple[str, ...]
    full: bool
    """REPLICA IDENTITY FULL: old rows carry every column."""

    def column(self, name: str) -> RefColumn:
        return next(c for c in self.columns if c.name == name)


@dataclass
class RefChange:
    op: str  # insert, update, delete, truncate
    table: RefTable
    xid: int
    commit_us: int
    """Commit time, Unix microseconds."""
    before: dict[str, str | None] | None = None
    after: dict[str, str | None] | None = None
    unchanged_toast: list[str] = field(default_factory=list)


def _commit_us(text: str) -> int:
    moment = dt.datetime.fromisoformat(text.replace(" ", "T"))
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


_CATALOG = """
SELECT c.relname, a.attname, a.atttypid::int,
       coalesce(bt.typname, t.typname),
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END,
       coalesce(bt.typtype, t.typtype) = 'e',
       c.relreplident = 'f',
       coalesce(a.attnum = ANY (i.indkey), false)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE n.nspname = %s AND c.relkind = 'r'
ORDER BY c.relname, a.attnum
"""


def catalog_tables(conn: psycopg.Connection, schema: str) -> dict[str, RefTable]:
    """The tables of ``schema`` as the catalog describes them."""
    columns: dict[str, list[RefColumn]] = {}
    keys: dict[str, list[str]] = {}
    full: dict[str, bool] = {}
    for table, name, oid, type_name, typmod, is_enum, is_full, in_key in conn.execute(
        _CATALOG, (schema,)
    ):
        columns.setdefault(table, []).append(RefColumn(name, type_name, typmod, oid, is_enum))
        keys.setdefault(table, [])
        if in_key:
            keys[table].append(name)
        full[table] = is_full
    return {
        t: RefTable(schema, t, tuple(cols), tuple(keys[t]), full[t]) for t, cols in columns.items()
    }


def from_test_decoding(changes: list[Change], tables: dict[str, RefTable]) -> list[RefChange]:
    """test_decoding's changes, old images completed (test_decoding omits their nulls)."""
    out = []
    for change in changes:
        table = tables[change.table]
        before = change.before
        if before is not None and table.full:
            before = {c.name: before.get(c.name) for c in table.columns}
        out.append(
            RefChange(
                op=change.op,
                table=table,
                xid=change.xid,
                commit_us=_commit_us(change.commit_time),
                before=before,
                after=change.after,
                unchanged_toast=list(change.unchanged_toast),
            )
        )
    return out


def _ref_table(table: Table) -> RefTable:
    return RefTable(
        schema=table.schema,
        name=table.name,
        columns=tuple(
            RefColumn(c.name, c.type_name, c.type_modifier, c.type_oid) for c in table.columns
        ),
        primary_key=tuple(table.primary_key),
        full=table.replica_identity is ReplicaIdentity.FULL,
    )


def from_synthetic(count: int, seed: int = 0, tables: int = 4) -> list[RefChange]:
    """The changes ``walcast produce-test-stream --count count --seed seed`` is made of."""
    out: list[RefChange] = []
    converted: dict[int, RefTable] = {}
    for item in generate(count, seed, tables):
        if not isinstance(item, ChangeEvent):
            continue
        table = converted.setdefault(id(item.table), _ref_table(item.table))
        change = RefChange(
            op=item.op.value if item.op is not Op.SNAPSHOT else "insert",
            table=table,
            xid=item.xid,
            commit_us=item.commit_ts + PG_EPOCH_US,
        )
        names = item.table.column_names
        if item.before is not None:
            change.before = {
                names[i]: t
                for i in item.before.present_indexes()
                if not isinstance(t := item.before.text(i), UnchangedToast)
            }
            if table.full:
                change.before = {c.name: change.before.get(c.name) for c in table.columns}
        if item.after is not None:
            change.after = {}
            for i in item.after.present_indexes():
                text = item.after.text(i)
                if isinstance(text, UnchangedToast):
                    change.unchanged_toast.append(names[i])
                else:
                    change.after[names[i]] = text
        out.append(change)
    return out

"""The synthetic shop: deterministic tables and committed transactions, with no server.

:func:`generate` yields a realistic stream of committed transactions
(``TransactionBegin, ChangeEvent*, TransactionCommit``) without a server: the tables
are real :class:`~capture.events.Table` objects built from Relation message bytes by
the real :class:`~capture.relcache.RelationCache`, and the row images are text-mode
tuples holding exactly what PostgreSQL would print (values are rendered by the type
codecs of :mod:`capture.types`). The same ``(count, seed, tables)`` always gives the
same stream, so tests and Spark jobs can compare parsed output with the generated
changes.

The shop it simulates (schema ``shop``; with more than eight tables the list repeats
with a suffix, ``customers_2`` …):

=============  ========================  ==============================================
table          REPLICA IDENTITY          columns
=============  ========================  ==============================================
customers      DEFAULT (pk id)           int8, varchar, text, timestamptz, bool,
                                         numeric(12,2), jsonb, uuid, date
orders         DEFAULT (pk id)           int8, int8, text, numeric(12,2), timestamptz,
                                         text (delimiters, quotes, newlines), jsonb, int4
products       DEFAULT (pk id)           int8, varchar, text, numeric(12,2), text (now and
                                         then > 2 kB: unchanged-TOAST updates), bytea,
                                         float8, text[], timestamp
payments       FULL (pk id from catalog) int8, int8, numeric(12,2), char(3), text,
                                         timestamptz, uuid, bool, bytea (zero bytes)
shipments      DEFAULT (pk id)           int8, int8, text, date, interval, varchar, bool
audit_log      FULL, no primary key      timestamptz, text, text, jsonb, inet
inventory      INDEX (warehouse_id, sku) int4, varchar, int4, float4, timestamptz; key
                                         changes (stock moved) send the old key
sessions       DEFAULT (pk id uuid)      uuid, int8, timestamptz, interval, inet, json
=============  ========================  ==============================================

About half the changes are inserts, a third updates and the rest deletes (updates and
deletes only touch rows that exist; a table holding many rows leans to updates and
deletes, so memory stays bounded). Transactions hold 1 to 500 changes, most of them
few. Images follow the replica identity exactly as pgoutput sends them: no old image
for an update under DEFAULT/INDEX, the old key for a delete or a key change, the whole
old row under FULL, and ``UNCHANGED_TOAST`` for a large value an update did not touch.

``count`` counts row changes.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Final

from capture import events
from capture.errors import ConfigError
from capture.pgoutput.messages import UNCHANGED_TOAST, TupleData, UnchangedToast
from capture.synthetic.tables import (
    START_TIME,
    TYPE_OIDS,
    Gen,
    TableSpec,
    build_tables,
    table_specs,
)
from capture.types import TypeRegistry

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["generate"]

FIRST_XID: Final = 5000
FIRST_LSN: Final = 0x1_6B37_4800
TOAST_THRESHOLD: Final = 2000
"""Text longer than this is stored out of line (TOASTed): unchanged, it is not re-sent."""
ROW_SOFT_LIMIT: Final = 5000
"""Live rows per table above which inserts become rare."""

_REGISTRY: Final = TypeRegistry()
_T: Final = ord("t")
_N: Final = ord("n")
_U: Final = ord("u")


# --------------------------------------------------------------------------- rows

_Row = tuple[bytes | None, ...]


class _Rows:
    """The live rows of one table: O(1) insert, random pick and delete."""

    __slots__ = ("index", "keys", "rows")

    def __init__(self) -> None:
        self.rows: dict[int, _Row] = {}
        self.keys: list[int] = []
        self.index: dict[int, int] = {}

    def add(self, key: int, row: _Row) -> None:
        self.rows[key] = row
        self.index[key] = len(self.keys)
        self.keys.append(key)

    def pick(self, rng: random.Random) -> int:
        return self.keys[rng.randrange(len(self.keys))]

    def remove(self, key: int) -> _Row:
        at = self.index.pop(key)
        last = self.keys.pop()
        if last != key:
            self.keys[at] = last
            self.index[last] = at
        return self.rows.pop(key)


class _TableModel:
    """A table, its value generators and its live rows."""

    def __init__(self, spec: TableSpec, table: events.Table) -> None:
        self.spec = spec
        self.table = table
        self.rows = _Rows()
        self.next_row = 1
        self.renderers = [_REGISTRY.codec(TYPE_OIDS[c.type_name]).to_text for c in spec.columns]
        self.key_indexes = table.key_indexes
        self.identity_key = tuple(i for i, c in enumerate(spec.columns) if c.key)
        self.mutable = [i for i, c in enumerate(spec.columns) if c.mutable and not c.key]
        self.full = spec.identity == "f"
        self.toastable = [i for i, c in enumerate(spec.columns) if c.type_name == "text"]

    def value(self, gen: Gen, i: int, row_number: int) -> bytes | None:
        gen.row = row_number
        value = self.spec.columns[i].make(gen)
        if value is None:
            return None
        return str(self.renderers[i](value)).encode()

    def new_row(self, gen: Gen) -> tuple[int, _Row]:
        number = self.next_row
        self.next_row += 1
        return number, tuple(self.value(gen, i, number) for i in range(len(self.spec.columns)))


def _image(
    table: events.Table, values: Sequence[bytes | UnchangedToast | None], *, key_only: bool = False
) -> events.Image:
    kinds = bytes(_N if v is None else _U if v is UNCHANGED_TOAST else _T for v in values)
    return events.Image(table, TupleData(kinds, tuple(values)), key_only=key_only)


def _key_image(model: _TableModel, row: _Row) -> events.Image:
    keys = set(model.identity_key)
    values = [v if i in keys else None for i, v in enumerate(row)]
    return _image(model.table, values, key_only=True)


def _transaction_size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.55:
        return 1
    if roll < 0.85:
        return rng.randint(2, 5)
    if roll < 0.97:
        return rng.randint(6, 50)
    return rng.randint(51, 500)


def _change(
    model: _TableModel, gen: Gen, rng: random.Random
) -> tuple[events.Op, events.Image | None, events.Image | None]:
    """One random change of ``model``: (op, before, after) as pgoutput would send them."""
    rows = model.rows
    live = len(rows.keys)
    insert_share = 0.5 if live < ROW_SOFT_LIMIT else 0.1
    roll = rng.random()
    if live == 0 or roll < insert_share:
        number, row = model.new_row(gen)
        rows.add(number, row)
        return events.Op.INSERT, None, _image(model.table, row)
    number = rows.pick(rng)
    old = rows.rows[number]
    if roll < insert_share + (1 - insert_share) * 0.7:
        new = list(old)
        for i in rng.sample(model.mutable, min(len(model.mutable), rng.randint(1, 3))):
            new[i] = model.value(gen, i, number)
        key_change = bool(model.spec.key_changes) and rng.random() < model.spec.key_changes
        new_number = number
        if key_change:
            new_number = model.next_row
            model.next_row += 1
            for i in model.identity_key:
                new[i] = model.value(gen, i, new_number)
        new_row = tuple(new)
        rows.remove(number)
        rows.add(new_number, new_row)
        sent: list[bytes | UnchangedToast | None] = list(new_row)
        for i in model.toastable:
            value = new_row[i]
            if value is not None and len(value) > TOAST_THRESHOLD and value == old[i]:
                sent[i] = UNCHANGED_TOAST
        after = _image(model.table, sent)
        if model.full:
            return events.Op.UPDATE, _image(model.table, old), after
        if key_change:
            return events.Op.UPDATE, _key_image(model, old), after
        return events.Op.UPDATE, None, after
    rows.remove(number)
    before = _image(model.table, old) if model.full else _key_image(model, old)
    return events.Op.DELETE, before, None


def generate(count: int, seed: int = 0, tables: int = 4) -> Iterator[events.StreamItem]:
    """Generate a deterministic stream of ``count`` row changes over ``tables`` synthetic tables.

    Yields ``TransactionBegin`` (with ``change_count``), the ``ChangeEvent`` objects and
    ``TransactionCommit`` of each transaction, in commit order.
    """
    if count < 0:
        raise ConfigError("--count: must not be negative")
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    gen = Gen(rng)
    specs = table_specs(tables)
    models = [
        _TableModel(spec, table) for spec, table in zip(specs, build_tables(specs), strict=True)
    ]
    weights = [3 if m.spec.name.startswith(("orders", "audit_log")) else 2 for m in models]
    xid = FIRST_XID
    lsn = FIRST_LSN
    commit_ts = int(START_TIME.timestamp()) * 1_000_000 - events.PG_EPOCH_US
    left = count
    while left > 0:
        size = min(left, _transaction_size(rng))
        left -= size
        xid += rng.randint(1, 3)
        commit_ts += rng.randint(50, 250_000)
        gen.now = events.pg_ts_to_datetime(commit_ts)
        lsn += 64 * size + rng.randint(40, 4000)
        commit_lsn = lsn
        yield events.TransactionBegin(xid, commit_lsn, commit_ts, size)
        focus = rng.choices(models, weights)[0]
        for ordinal in range(1, size + 1):
            model = focus if rng.random() < 0.6 else rng.choices(models, weights)[0]
            op, before, after = _change(model, gen, rng)
            yield events.ChangeEvent(
                op, model.table, before, after, xid, commit_lsn, commit_ts, ordinal
            )
        yield events.TransactionCommit(xid, commit_lsn, commit_lsn + 56, commit_ts, size)

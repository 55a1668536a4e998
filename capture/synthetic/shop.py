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

import dataclasses
import datetime as dt
import json
import random
import struct
import uuid
from decimal import Decimal
from ipaddress import IPv4Address
from typing import TYPE_CHECKING, Any, Final

from capture.errors import ConfigError
from capture.events import (
    PG_EPOCH_US,
    ChangeEvent,
    Image,
    Op,
    StreamItem,
    Table,
    TransactionBegin,
    TransactionCommit,
    pg_ts_to_datetime,
)
from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import UNCHANGED_TOAST, Relation, TupleData, UnchangedToast
from capture.relcache import RelationCache
from capture.types import Interval, TypeRegistry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

SCHEMA: Final = "shop"
DATABASE: Final = "shop"
SOURCE_VERSION: Final = "16.4"
SERVER: Final = "walcast-test"
FIRST_RELATION_ID: Final = 16384
FIRST_XID: Final = 5000
FIRST_LSN: Final = 0x1_6B37_4800
START_TIME: Final = dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC)
TOAST_THRESHOLD: Final = 2000
"""Text longer than this is stored out of line (TOASTed): unchanged, it is not re-sent."""
ROW_SOFT_LIMIT: Final = 5000
"""Live rows per table above which inserts become rare."""

TYPE_OIDS: Final = {
    "bool": 16,
    "bytea": 17,
    "int8": 20,
    "int2": 21,
    "int4": 23,
    "text": 25,
    "json": 114,
    "float4": 700,
    "float8": 701,
    "inet": 869,
    "bpchar": 1042,
    "varchar": 1043,
    "date": 1082,
    "time": 1083,
    "timestamp": 1114,
    "timestamptz": 1184,
    "interval": 1186,
    "numeric": 1700,
    "uuid": 2950,
    "jsonb": 3802,
    "timetz": 1266,
    "cidr": 650,
    "macaddr": 829,
    "money": 790,
    "point": 600,
    "xml": 142,
    "oid": 26,
    "bit": 1560,
    "varbit": 1562,
    "_int4": 1007,
    "_text": 1009,
}
_REGISTRY: Final = TypeRegistry()
_T: Final = ord("t")
_N: Final = ord("n")
_U: Final = ord("u")


# --------------------------------------------------------------------------- relations


def relation_message(
    relation_id: int,
    schema: str,
    name: str,
    identity: str,
    columns: Sequence[tuple[str, int, int, bool]],
) -> bytes:
    """Build the bytes of a pgoutput Relation message (``R``) as the server lays them out.

    ``columns`` are ``(name, type OID, type modifier, is_key)``; ``identity`` is
    ``pg_class.relreplident`` (``d``, ``f``, ``i``, ``n``).
    """
    out = bytearray(b"R")
    out += struct.pack(">I", relation_id)
    out += schema.encode() + b"\x00" + name.encode() + b"\x00"
    out += identity.encode() + struct.pack(">h", len(columns))
    for col_name, type_oid, typmod, is_key in columns:
        out += struct.pack(">B", 1 if is_key else 0) + col_name.encode() + b"\x00"
        out += struct.pack(">Ii", type_oid, typmod)
    return bytes(out)


# --------------------------------------------------------------------------- values


def jsonb_text(value: Any) -> str:
    """``value`` as jsonb prints it: keys by (length, bytes), ``", "`` and ``": "``."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        inner = ", ".join(
            f"{json.dumps(k, ensure_ascii=False)}: {jsonb_text(value[k])}" for k in keys
        )
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


_FIRST_NAMES: Final = ("Ada", "Grace", "Linus", "Zoë", "Ming", "Olu", "Siobhán", "Ravi", "Ana")
_LAST_NAMES: Final = ("Lovelace", "Hopper", "O'Brien", "Nakamura", "García", "Okafor", "Kowalski")
_TRICKY: Final = (
    'say "hi", then leave',
    "comma, separated, words",
    "two\nlines",
    "tab\tand ;semicolon|pipe",
    "back\\slash and 'single' quotes",
    "東京 · Zürich · café",
    "",
    "NULL",
    '""',
    'a,b\n"c"',
)
_STATUSES: Final = ("new", "paid", "packed", "shipped", "delivered", "cancelled")
_METHODS: Final = ("card", "sepa", "paypal", "voucher")
_CURRENCIES: Final = ("EUR", "USD", "GBP", "JPY")
_CARRIERS: Final = ("DHL", "UPS", "FedEx", "La Poste")
_ACTIONS: Final = ("login", "logout", "update_profile", "refund", "export")
_WORDS: Final = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


class _Gen:
    """Value generators: each returns a typed Python value (or None) for a codec."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = START_TIME
        self.row = 0

    def maybe_null(self, value: Any, p: float = 0.1) -> Any:
        return None if self.rng.random() < p else value

    def text(self) -> str:
        rng = self.rng
        if rng.random() < 0.15:
            return rng.choice(_TRICKY)
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 6)))

    def name(self) -> str:
        return f"{self.rng.choice(_FIRST_NAMES)} {self.rng.choice(_LAST_NAMES)}"

    def email(self) -> str:
        return f"user{self.rng.randrange(10**6)}@example.com"

    def money(self, high: int = 10**6) -> Decimal:
        cents = self.rng.randrange(high * 100)
        return Decimal(cents).scaleb(-2)

    def recent(self) -> dt.datetime:
        micros = self.rng.choice((0, 500_000, self.rng.randrange(1_000_000)))
        back = dt.timedelta(seconds=self.rng.randrange(86_400 * 30), microseconds=micros)
        return self.now - back

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def blob(self, size: int = 16) -> bytes:
        data = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randrange(size + 1)))
        return b"\x00" + data if self.rng.random() < 0.3 else data

    def day(self) -> dt.date:
        return dt.date(1950, 1, 1) + dt.timedelta(days=self.rng.randrange(365 * 60))

    def profile(self) -> str:
        rng = self.rng
        doc: dict[str, Any] = {
            "tier": rng.choice(("free", "plus", "pro")),
            "newsletter": rng.random() < 0.5,
            "score": rng.randrange(1000),
        }
        if rng.random() < 0.3:
            doc["note"] = rng.choice(_TRICKY)
        return jsonb_text(doc)

    def items(self) -> str:
        rng = self.rng
        lines = [
            {"sku": f"SKU-{rng.randrange(10**5):05d}", "qty": rng.randint(1, 5)}
            for _ in range(rng.randint(1, 4))
        ]
        return jsonb_text(lines)

    def description(self) -> str:
        rng = self.rng
        if rng.random() < 0.03:
            return "Long description. " + " ".join(rng.choice(_WORDS) for _ in range(400))
        return self.text()

    def interval(self) -> Interval:
        rng = self.rng
        hours = rng.randint(1, 23)
        return Interval(
            0, rng.randint(1, 9), hours * 3_600_000_000 + rng.randrange(60) * 60_000_000
        )

    def ip(self) -> IPv4Address:
        return IPv4Address(0x0A000000 + self.rng.randrange(1 << 24))


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column of a synthetic table: its type and how values are made."""

    name: str
    type_name: str
    make: Callable[[_Gen], Any]
    """Generator (``row`` is the row's number) → typed value (None for NULL)."""
    typmod: int = -1
    key: bool = False
    mutable: bool = True
    """Updates may change it."""


@dataclasses.dataclass(frozen=True, slots=True)
class TableSpec:
    """A synthetic table: columns, replica identity, primary key, key changes."""

    name: str
    identity: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]
    key_changes: float = 0.0
    """Share of updates that change the replica-identity key."""


_NUMERIC_12_2: Final = ((12 << 16) | 2) + 4


def _varchar(n: int) -> int:
    return n + 4


def _c(name: str, type_name: str, make: Callable[[_Gen], Any], **kw: Any) -> ColumnSpec:
    return ColumnSpec(name, type_name, make, **kw)


TABLES: Final[tuple[TableSpec, ...]] = (
    TableSpec(
        "customers",
        "d",
        (
            _c("id", "int8", lambda g: g.row, key=True, mutable=False),
            _c("email", "varchar", lambda g: g.email(), typmod=_varchar(120)),
            _c("full_name", "text", lambda g: g.name()),
            _c("created_at", "timestamptz", lambda g: g.recent(), mutable=False),
            _c("is_active", "bool", lambda g: g.rng.random() < 0.8),
            _c("balance", "numeric", lambda g: g.money(10**4), typmod=_NUMERIC_12_2),
            _c("profile", "jsonb", lambda g: g.maybe_null(g.profile())),
            _c("external_id", "uuid", lambda g: g.uuid(), mutable=False),
            _c("birth_date", "date", lambda g: g.maybe_null(g.day(), 0.3)),
        ),
        ("id",),
    ),
    TableSpec(
        "orders",
        "d",
        (
            _c("id", "int8", lambda g: g.row, key=True, mutable=False),
            _c("customer_id", "int8", lambda g: g.rng.randrange(1, 10**6), mutable=False),
            _c("status", "text", lambda g: g.rng.choice(_STATUSES)),
            _c("total", "numeric", lambda g: g.money(), typmod=_NUMERIC_12_2),
            _c("placed_at", "timestamptz", lambda g: g.recent(), mutable=False),
            _c("note", "text", lambda g: g.maybe_null(g.text(), 0.4)),
            _c("items", "jsonb", lambda g: g.items()),
            _c("quantity", "int4", lambda g: g.rng.randint(-(2**31), 2**31 - 1)),
        ),
        ("id",),
    ),
    TableSpec(
        "products",
        "d",
        (
            _c("id", "int8", lambda g: g.row, key=True, mutable=False),
            _c("sku", "varchar", lambda g: f"SKU-{g.row:05d}", typmod=_varchar(32), mutable=False),
            _c("title", "text", lambda g: g.text()),
            _c("price", "numeric", lambda g: g.money(), typmod=_NUMERIC_12_2),
            _c("description", "text", lambda g: g.description()),
            _c("thumbnail", "bytea", lambda g: g.maybe_null(g.blob(24))),
            _c("weight_kg", "float8", lambda g: g.rng.random() * 50),
            _c("tags", "_text", lambda g: [g.rng.choice(_WORDS + _TRICKY[:3]) for _ in range(3)]),
            _c("updated_at", "timestamp", lambda g: g.recent().replace(tzinfo=None)),
        ),
        ("id",),
    ),
    TableSpec(
        "payments",
        "f",
        (
            _c("id", "int8", lambda g: g.row, mutable=False),
            _c("order_id", "int8", lambda g: g.rng.randrange(1, 10**6), mutable=False),
            _c("amount", "numeric", lambda g: g.money(), typmod=_NUMERIC_12_2),
            _c("currency", "bpchar", lambda g: g.rng.choice(_CURRENCIES), typmod=_varchar(3)),
            _c("method", "text", lambda g: g.rng.choice(_METHODS)),
            _c("paid_at", "timestamptz", lambda g: g.maybe_null(g.recent(), 0.2)),
            _c("reference", "uuid", lambda g: g.uuid(), mutable=False),
            _c("captured", "bool", lambda g: g.maybe_null(g.rng.random() < 0.5)),
            _c("raw_response", "bytea", lambda g: g.blob(32)),
        ),
        ("id",),
    ),
    TableSpec(
        "shipments",
        "d",
        (
            _c("id", "int8", lambda g: g.row, key=True, mutable=False),
            _c("order_id", "int8", lambda g: g.rng.randrange(1, 10**6), mutable=False),
            _c("carrier", "text", lambda g: g.rng.choice(_CARRIERS)),
            _c("shipped_on", "date", lambda g: g.maybe_null(g.recent().date())),
            _c("transit", "interval", lambda g: g.interval()),
            _c("tracking_code", "varchar", lambda g: g.uuid().hex[:20], typmod=_varchar(40)),
            _c("delivered", "bool", lambda g: g.rng.random() < 0.3),
        ),
        ("id",),
    ),
    TableSpec(
        "audit_log",
        "f",
        (
            _c("at", "timestamptz", lambda g: g.now, mutable=False),
            _c("actor", "text", lambda g: g.name()),
            _c("action", "text", lambda g: g.rng.choice(_ACTIONS)),
            _c("details", "jsonb", lambda g: g.maybe_null(g.profile())),
            _c("client_addr", "inet", lambda g: g.ip()),
        ),
        (),
    ),
    TableSpec(
        "inventory",
        "i",
        (
            _c("warehouse_id", "int4", lambda g: g.row % 7 + 1, key=True),
            _c("sku", "varchar", lambda g: f"SKU-{g.row:05d}", typmod=_varchar(32), key=True),
            _c("quantity", "int4", lambda g: g.rng.randrange(10_000)),
            _c("unit_cost", "float4", lambda g: float(g.money(100))),
            _c("updated_at", "timestamptz", lambda g: g.now),
        ),
        (),
        key_changes=0.05,
    ),
    TableSpec(
        "sessions",
        "d",
        (
            _c("id", "uuid", lambda g: g.uuid(), key=True, mutable=False),
            _c("customer_id", "int8", lambda g: g.rng.randrange(1, 10**6)),
            _c("started_at", "timestamptz", lambda g: g.recent()),
            _c("ttl", "interval", lambda g: g.interval()),
            _c("ip", "inet", lambda g: g.ip()),
            _c("data", "json", lambda g: json.dumps({"ua": g.text(), "n": g.row})),
        ),
        ("id",),
    ),
)


def table_specs(count: int) -> list[TableSpec]:
    """Return the first ``count`` synthetic tables (the list repeats with a ``_n`` suffix)."""
    if count < 1:
        raise ConfigError("--tables: must be at least 1")
    out = []
    for i in range(count):
        spec = TABLES[i % len(TABLES)]
        lap = i // len(TABLES)
        out.append(dataclasses.replace(spec, name=f"{spec.name}_{lap + 1}") if lap else spec)
    return out


def build_tables(specs: Sequence[TableSpec], cache: RelationCache | None = None) -> list[Table]:
    """Real Tables for ``specs``: Relation bytes → decoder → RelationCache."""
    keys = {(SCHEMA, s.name): s.primary_key for s in specs}
    if cache is None:
        cache = RelationCache(key_resolver=lambda _oid, schema, name: keys.get((schema, name)))
    decoder = PgOutputDecoder(1)
    tables = []
    for i, spec in enumerate(specs):
        full = spec.identity == "f"
        data = relation_message(
            FIRST_RELATION_ID + i,
            SCHEMA,
            spec.name,
            spec.identity,
            [(c.name, TYPE_OIDS[c.type_name], c.typmod, full or c.key) for c in spec.columns],
        )
        message = decoder.decode(data)
        assert isinstance(message, Relation)
        tables.append(cache.apply_relation(message))
    return tables


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

    def __init__(self, spec: TableSpec, table: Table) -> None:
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

    def value(self, gen: _Gen, i: int, row_number: int) -> bytes | None:
        gen.row = row_number
        value = self.spec.columns[i].make(gen)
        if value is None:
            return None
        return str(self.renderers[i](value)).encode()

    def new_row(self, gen: _Gen) -> tuple[int, _Row]:
        number = self.next_row
        self.next_row += 1
        return number, tuple(self.value(gen, i, number) for i in range(len(self.spec.columns)))


def _image(
    table: Table, values: Sequence[bytes | UnchangedToast | None], *, key_only: bool = False
) -> Image:
    kinds = bytes(_N if v is None else _U if v is UNCHANGED_TOAST else _T for v in values)
    return Image(table, TupleData(kinds, tuple(values)), key_only=key_only)


def _key_image(model: _TableModel, row: _Row) -> Image:
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
    model: _TableModel, gen: _Gen, rng: random.Random
) -> tuple[Op, Image | None, Image | None]:
    """One random change of ``model``: (op, before, after) as pgoutput would send them."""
    rows = model.rows
    live = len(rows.keys)
    insert_share = 0.5 if live < ROW_SOFT_LIMIT else 0.1
    roll = rng.random()
    if live == 0 or roll < insert_share:
        number, row = model.new_row(gen)
        rows.add(number, row)
        return Op.INSERT, None, _image(model.table, row)
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
            return Op.UPDATE, _image(model.table, old), after
        if key_change:
            return Op.UPDATE, _key_image(model, old), after
        return Op.UPDATE, None, after
    rows.remove(number)
    before = _image(model.table, old) if model.full else _key_image(model, old)
    return Op.DELETE, before, None


def generate(count: int, seed: int = 0, tables: int = 4) -> Iterator[StreamItem]:
    """Generate a deterministic stream of ``count`` row changes over ``tables`` synthetic tables.

    Yields ``TransactionBegin`` (with ``change_count``), the ``ChangeEvent`` objects and
    ``TransactionCommit`` of each transaction, in commit order.
    """
    if count < 0:
        raise ConfigError("--count: must not be negative")
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    gen = _Gen(rng)
    specs = table_specs(tables)
    models = [
        _TableModel(spec, table) for spec, table in zip(specs, build_tables(specs), strict=True)
    ]
    weights = [3 if m.spec.name.startswith(("orders", "audit_log")) else 2 for m in models]
    xid = FIRST_XID
    lsn = FIRST_LSN
    commit_ts = int(START_TIME.timestamp()) * 1_000_000 - PG_EPOCH_US
    left = count
    while left > 0:
        size = min(left, _transaction_size(rng))
        left -= size
        xid += rng.randint(1, 3)
        commit_ts += rng.randint(50, 250_000)
        gen.now = pg_ts_to_datetime(commit_ts)
        lsn += 64 * size + rng.randint(40, 4000)
        commit_lsn = lsn
        yield TransactionBegin(xid, commit_lsn, commit_ts, size)
        focus = rng.choices(models, weights)[0]
        for ordinal in range(1, size + 1):
            model = focus if rng.random() < 0.6 else rng.choices(models, weights)[0]
            op, before, after = _change(model, gen, rng)
            yield ChangeEvent(op, model.table, before, after, xid, commit_lsn, commit_ts, ordinal)
        yield TransactionCommit(xid, commit_lsn, commit_lsn + 56, commit_ts, size)

"""The synthetic shop's tables: their columns, types, keys and value generators.

:data:`TABLES` describes each table (:class:`TableSpec`, :class:`ColumnSpec`: a name, a
PostgreSQL type, how a value is made from a seeded :class:`Gen`); :func:`build_tables` turns
them into real :class:`~capture.events.Table` objects through the same path a stream takes
(Relation bytes → decoder → relation cache). :mod:`capture.synthetic.shop` fills them with
rows and changes.
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
from capture.events import Table
from capture.pgoutput.decoder import PgOutputDecoder
from capture.pgoutput.messages import Relation
from capture.relcache import RelationCache
from capture.types import Interval

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

SCHEMA: Final = "shop"
DATABASE: Final = "shop"
SOURCE_VERSION: Final = "16.4"
SERVER: Final = "walcast-test"
FIRST_RELATION_ID: Final = 16384
START_TIME: Final = dt.datetime(2024, 3, 1, 9, 0, tzinfo=dt.UTC)

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


class Gen:
    """Value generators: each returns a typed Python value (or None) for a codec."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = START_TIME
        self.row = 0

    def maybe_null(self, value: Any, p: float = 0.1) -> Any:
        """None with probability ``p``, else ``value``."""
        return None if self.rng.random() < p else value

    def text(self) -> str:
        """A short phrase of words, sometimes a string that is hard to escape."""
        rng = self.rng
        if rng.random() < 0.15:
            return rng.choice(_TRICKY)
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 6)))

    def name(self) -> str:
        """A first and last name."""
        return f"{self.rng.choice(_FIRST_NAMES)} {self.rng.choice(_LAST_NAMES)}"

    def email(self) -> str:
        """An example.com address."""
        return f"user{self.rng.randrange(10**6)}@example.com"

    def money(self, high: int = 10**6) -> Decimal:
        """A non-negative amount with two decimal places, below ``high``."""
        cents = self.rng.randrange(high * 100)
        return Decimal(cents).scaleb(-2)

    def recent(self) -> dt.datetime:
        """A timestamp within 30 days before the generator's clock."""
        micros = self.rng.choice((0, 500_000, self.rng.randrange(1_000_000)))
        back = dt.timedelta(seconds=self.rng.randrange(86_400 * 30), microseconds=micros)
        return self.now - back

    def uuid(self) -> uuid.UUID:
        """A random version-4 UUID."""
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def blob(self, size: int = 16) -> bytes:
        """Up to ``size`` random bytes, sometimes starting with a NUL byte."""
        data = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randrange(size + 1)))
        return b"\x00" + data if self.rng.random() < 0.3 else data

    def day(self) -> dt.date:
        """A date between 1950 and 2010."""
        return dt.date(1950, 1, 1) + dt.timedelta(days=self.rng.randrange(365 * 60))

    def profile(self) -> str:
        """A small jsonb document in PostgreSQL's jsonb text form."""
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
        """A jsonb array of one to four order lines."""
        rng = self.rng
        lines = [
            {"sku": f"SKU-{rng.randrange(10**5):05d}", "qty": rng.randint(1, 5)}
            for _ in range(rng.randint(1, 4))
        ]
        return jsonb_text(lines)

    def description(self) -> str:
        """Usually a phrase; 3% of the time a long text (a few kB)."""
        rng = self.rng
        if rng.random() < 0.03:
            return "Long description. " + " ".join(rng.choice(_WORDS) for _ in range(400))
        return self.text()

    def interval(self) -> Interval:
        """A PostgreSQL interval of days, hours and minutes (no months)."""
        rng = self.rng
        hours = rng.randint(1, 23)
        return Interval(
            0, rng.randint(1, 9), hours * 3_600_000_000 + rng.randrange(60) * 60_000_000
        )

    def ip(self) -> IPv4Address:
        """An address in 10.0.0.0/8."""
        return IPv4Address(0x0A000000 + self.rng.randrange(1 << 24))


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One column of a synthetic table: its type and how values are made."""

    name: str
    type_name: str
    make: Callable[[Gen], Any]
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


def _c(name: str, type_name: str, make: Callable[[Gen], Any], **kw: Any) -> ColumnSpec:
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

r"""``canal``: Alibaba canal ``FlatMessage`` JSON, as canal and DTS write it to Kafka.

Every message is one JSON object with canal's keys in canal's order (alphabetical, as
its serializer writes them), null fields written as ``null``::

    {"data": [{"id": "1", "note": "hi"}], "database": "public", "es": 1714673849123,
     "gtid": "700:0/16B3748", "id": 23803720, "isDdl": false,
     "mysqlType": {"id": "integer", "note": "text"}, "old": null, "pkNames": ["id"],
     "sql": "", "sqlType": {"id": 4, "note": 2005}, "table": "orders",
     "ts": 1714673849130, "type": "INSERT"}

Decisions:

* **One row per message** (``data`` has one element): each message can be keyed by its
  row, so a row's changes stay in one partition and in order. ``EncodedMessage.key`` is
  :func:`~capture.formats._common.row_key` of the new row (the old row for a DELETE);
  a table without a primary key is keyed by its name, so that all its changes keep one
  partition and commit order.
* **Values** are always strings or null, whatever the type: PostgreSQL's exact text
  output (the walsender runs with DateStyle=ISO, TimeZone=UTC, extra_float_digits=1,
  bytea_output=hex), so ``numeric`` keeps every digit, timestamps keep microseconds,
  arrays and json are their PostgreSQL literals; ``mysqlType`` says which type to parse a
  value as. Three types are rewritten so that the readers our users run take them as
  they are (Flink's ``canal-json``, the most used canal consumer, by default; each has a
  setting):

  - **bool** (``canal.boolean``): ``true``/``false`` by default, as Flink reads booleans
    (``Boolean.parseBoolean``: PostgreSQL's ``t`` would read as false, silently). ``1-0``
    writes canal's own MySQL form ``1``/``0``; ``t-f`` PostgreSQL's text.
  - **timestamptz** (``canal.timestamptz``): ``utc`` (default) writes the UTC wall-clock
    time without offset, ``2024-02-09 07:45:59.10355``, as canal writes its timestamps and
    as Flink parses ``TIMESTAMP``/``TIMESTAMP_LTZ`` (``yyyy-MM-dd HH:mm:ss[.f]``, no
    offset); the value is still exact, the offset is always UTC. BC values keep their
    `` BC`` suffix; ``infinity`` stays. ``offset`` writes PostgreSQL's exact text with its
    ``+00``.
  - **bytea** (``canal.bytea``): ``base64`` (default) is what Flink's ``BYTES`` expects
    (Jackson decodes text nodes as base64). ``latin1`` is canal's own form: the raw bytes
    read as ISO-8859-1, one character per byte, which canal's client adapter turns back
    into bytes the same way. ``hex`` is PostgreSQL's ``\\x`` text
    (``bytes.fromhex(v[2:])``).

  The same forms are used in ``data``, ``old`` and deleted rows; arrays of these types
  stay PostgreSQL array literals.
* **INSERT**: ``data`` = the new row, ``old`` = null. **DELETE**: ``data`` = the deleted
  row, ``old`` = null. **UPDATE**: ``data`` = the full new row, ``old`` = the old values
  of the changed columns only (Flink's canal-json takes every column absent from
  ``old[i]`` from ``data[i]``).
* **No before image** (REPLICA IDENTITY DEFAULT/USING INDEX): an UPDATE that did not
  change the key has no old image, so ``old`` is ``[{}]`` (canal's "nothing changed";
  Flink then rebuilds the before row from ``data``: right key, non-key old values
  unknown). An UPDATE that changed the key carries the old key only: ``old`` holds the
  key columns whose value changed. A DELETE's ``data`` then holds only the key columns
  (the others were not sent and are absent, not null). With REPLICA IDENTITY FULL every
  image is complete and ``old`` is exact.
* **Unchanged TOAST** values (not sent): taken from the old image when it is complete
  (REPLICA IDENTITY FULL: the value did not change); otherwise the column is absent from
  ``data[i]`` (absent = not sent; null = SQL NULL) and absent from ``old[i]``.
* **Load rows** (``Op.SNAPSHOT``, read by an initial or on-demand load): ``type``
  ``INIT``, DTS's value for full data synchronization (``canal.load_type=INSERT`` writes
  ``INSERT`` instead: Flink's canal-json fails on, or with ``ignore-parse-errors`` drops,
  any type but INSERT/UPDATE/DELETE/CREATE, which would lose the loaded rows), with
  ``data`` = the row and ``old`` null. The chunk's position stands in for the commit:
  ``id`` is the load chunk's watermark LSN (after every change the row includes, before
  every later one) and ``gtid`` is ``0:<watermark>`` (xid 0: a load, not a transaction).
* **TRUNCATE**: canal's own DDL-style message: ``type`` "TRUNCATE", ``isDdl`` true,
  ``sql`` = ``TRUNCATE TABLE "schema"."table"`` (plus ``RESTART IDENTITY``/``CASCADE``
  as sent), ``data``/``old``/``mysqlType``/``sqlType``/``pkNames`` null. Flink's
  canal-json rejects unknown types unless ``canal-json.ignore-parse-errors`` is set; set
  ``canal.truncate=skip`` to drop them instead.
* **database/table** (``canal.database_name``): ``schema`` (default; MySQL's database is
  the namespace that qualifies a table, PostgreSQL's schema plays that role),
  ``database`` (the PostgreSQL database name; tables of different schemas then share a
  namespace) or ``database.schema``. ``table`` is the table name.
* **Positions**: ``id`` (canal's batch id) is the transaction's commit LSN as an integer:
  shared by the messages of one transaction, increasing in commit order and the same
  after a replay, so replays are detectable. ``gtid`` is ``"<xid>:<commit LSN X/Y>"``.
  canal has no per-row position; with ``canal.walcast_keys=true`` each message also gets
  a ``walcast`` object ``{"commitLsn": "X/Y", "ordinal": n, "xid": n}`` (sorted last, so
  canal's order holds). It is off by default because POJO consumers with strict
  unknown-property checks (Jackson's default) reject extra keys; canal's client, Flink
  and Spark ignore them.
* ``es`` = commit time (ms), ``ts`` = time the message was built (ms), ``sql`` = "".
* ``pkNames`` = the primary key (null when the table has none, as canal writes it).
* ``sqlType`` (``java.sql.Types``): bool BOOLEAN 16, int2 SMALLINT 5, int4 INTEGER 4,
  int8/oid/xid BIGINT -5, numeric NUMERIC 2, float4 REAL 7, float8 DOUBLE 8, char/bpchar
  CHAR 1, varchar/name/enums VARCHAR 12, text and json/jsonb CLOB 2005, bytea BLOB 2004,
  date DATE 91, time TIME 92, timetz TIME_WITH_TIMEZONE 2013, timestamp TIMESTAMP 93,
  timestamptz TIMESTAMP_WITH_TIMEZONE 2014, arrays ARRAY 2003, bit BIT -7, everything
  else (uuid, interval, inet, money, xml …) OTHER 1111.
* ``mysqlType`` = the column's declared type as DDL spells it, in PostgreSQL's short
  spellings, which MySQL-minded parsers of ``mysqlType`` also read: ``bigint``,
  ``varchar(20)``, ``char(3)``, ``numeric(38,10)``, ``timestamptz(3)``, ``integer[]``
  (see :func:`declared_type`).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from capture.events import PG_EPOCH_US, ChangeEvent, Column, Image, Op, Table
from capture.formats._common import (
    Family,
    PerTable,
    RowKeys,
    bytea_bytes,
    clock_ms,
    family,
    is_lob,
    json_change,
    text_row,
    truncate_sql,
)
from capture.formats._common import column_texts as image_texts
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.settings import FormatSettings
from capture.lsn import format_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST, UnchangedToast
from capture.types.datetimes import timestamp_to_text, timestamptz_from_text
from capture.types.text import bytea_from_text
from capture.types.typmod import modifier_text


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``canal.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "canal"

    database_name: Literal["schema", "database", "database.schema"] = "schema"
    """What ``database`` holds: the schema, the database, or ``database.schema``."""
    truncate: Literal["emit", "skip"] = "emit"
    """Write TRUNCATE as canal's DDL-style message, or drop it."""
    walcast_keys: bool = False
    """Add a ``walcast`` object with the commit LSN, ordinal and xid to each message."""
    boolean: Literal["true-false", "1-0", "t-f"] = "true-false"
    """How bool values are written: ``true``/``false`` (Flink), ``1``/``0`` (canal's MySQL
    form) or ``t``/``f`` (PostgreSQL's text)."""
    timestamptz: Literal["utc", "offset"] = "utc"
    """timestamptz as the UTC wall-clock time without offset (canal, Flink), or PostgreSQL's
    exact text with its ``+00`` offset."""
    bytea: Literal["base64", "latin1", "hex"] = "base64"
    """bytea as base64 (Flink's BYTES), the bytes read as ISO-8859-1 (canal's own), or
    PostgreSQL's ``\\x`` hex text."""
    load_type: Literal["INIT", "INSERT"] = "INIT"
    """The ``type`` of a loaded row: DTS's ``INIT`` (the spec), or ``INSERT`` for readers that
    reject any other type (Flink's canal-json)."""


_SQL_TYPES: Final = {
    Family.BOOL: 16,
    Family.SMALLINT: 5,
    Family.INTEGER: 4,
    Family.BIGINT: -5,
    Family.NUMERIC: 2,
    Family.REAL: 7,
    Family.DOUBLE: 8,
    Family.CHAR: 1,
    Family.STRING: 12,
    Family.BYTES: 2004,
    Family.DATE: 91,
    Family.TIME: 92,
    Family.TIMETZ: 2013,
    Family.TIMESTAMP: 93,
    Family.TIMESTAMPTZ: 2014,
    Family.INTERVAL: 1111,
    Family.UUID: 1111,
    Family.JSON: 2005,
    Family.NETWORK: 1111,
    Family.ARRAY: 2003,
    Family.OTHER: 1111,
}
_BINARY: Final = ord("b")
_CLOB: Final = 2005
_BIT: Final = -7

_SQL_NAMES: Final = {
    "bool": "boolean",
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "bpchar": "char",
    "char": '"char"',
}


def declared_type(type_name: str, typmod: int) -> str:
    """Return the column's declared type as DDL spells it (``varchar(20)``, ``bigint``).

    PostgreSQL's short spellings, all valid in DDL: ``smallint``, ``integer``, ``bigint``,
    ``real``, ``double precision``, ``boolean``, ``varchar(n)``, ``char(n)``,
    ``numeric(p,s)``, ``timestamp(p)``, ``timestamptz(p)``, ``time(p)``, ``timetz(p)``,
    ``interval day to second(p)``, ``bit(n)``, ``varbit(n)``, ``<element>[]`` for arrays;
    any other type by its name.
    """
    if type_name.startswith("_"):
        return declared_type(type_name[1:], typmod) + "[]"
    return _SQL_NAMES.get(type_name, type_name) + modifier_text(type_name, typmod)


def utc_wall_clock(text: str) -> str:
    """A timestamptz's text as the UTC wall-clock time without offset (``… 07:45:59.1``).

    The walsender prints timestamptz in UTC (``+00``); another offset is converted to UTC.
    """
    if text.endswith("+00"):
        return text[:-3]
    value = timestamptz_from_text(text.encode())
    return timestamp_to_text(value)


def _utc_from_wire(raw: bytes) -> str:
    return raw[:-3].decode() if raw[-3:] == b"+00" else utc_wall_clock(raw.decode())


def _bytea_wire_bytes(raw: bytes) -> bytes:
    return binascii.unhexlify(raw[2:]) if raw[:2] == b"\\x" else bytea_from_text(raw)


_KINDS: Final = {Op.INSERT: "INSERT", Op.UPDATE: "UPDATE", Op.SNAPSHOT: "INIT"}
_BOOLS: Final = {"true-false": ("true", "false"), "1-0": ("1", "0")}
_BYTEA: Final[dict[str, Callable[[bytes], str]]] = {
    "base64": lambda data: binascii.b2a_base64(data, newline=False).decode(),
    "latin1": lambda data: data.decode("latin-1"),
}
_Convert = tuple[Callable[[str], str], Callable[[bytes], str]]
"""A column's rewrite: from its PostgreSQL text, and (the fast path) from its wire text."""


def sql_type(column: Column) -> int:
    """Return the ``java.sql.Types`` code canal reports for ``column``."""
    fam = family(column)
    if fam is Family.STRING and is_lob(column):
        return _CLOB
    if column.type_name == "bit":
        return _BIT
    return _SQL_TYPES[fam]


@dataclass(slots=True)
class _Plan:
    """What every message of one table (one Relation message) shares."""

    table: Table
    names: tuple[str, ...]
    database: str
    name: str
    pk_names: list[str] | None
    sql_type: dict[str, int]
    mysql_type: dict[str, str]
    key_indexes: tuple[int, ...]
    keys: RowKeys
    decoders: tuple[Callable[[bytes], str], ...]
    """Per column: wire text (bytes) → canal's text (``bytes.decode`` when not rewritten)."""
    converted: tuple[tuple[int, _Convert], ...]
    """(column index, rewrite) of the columns whose text is rewritten (see Settings)."""


class CanalEncoder(Encoder, name="canal", settings=Settings):
    """canal FlatMessage JSON, one row per message."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        self._plans = PerTable(self._plan)
        self._lsn = -1
        self._gtid = ""
        self._lsn_text = ""
        self._xid = -1
        self._ts = -1
        self._es = 0
        self._load_type: str = self.settings.load_type

    def _plan(self, table: Table) -> _Plan:
        if self.settings.database_name == "schema":
            database = table.schema
        elif self.settings.database_name == "database":
            database = self.options.database
        else:
            database = f"{self.options.database}.{table.schema}"
        columns = table.columns
        converters = [self._converter(c) for c in columns]
        return _Plan(
            table=table,
            names=table.column_names,
            database=database,
            name=table.name,
            pk_names=list(table.primary_key) or None,
            sql_type={c.name: sql_type(c) for c in columns},
            mysql_type={c.name: declared_type(c.type_name, c.type_modifier) for c in columns},
            key_indexes=table.key_indexes,
            keys=RowKeys(table),
            decoders=tuple(bytes.decode if c is None else c[1] for c in converters),
            converted=tuple((i, c) for i, c in enumerate(converters) if c is not None),
        )

    def _converter(self, column: Column) -> _Convert | None:
        """How ``column``'s PostgreSQL text is rewritten for canal consumers (None: kept)."""
        fam = family(column)
        settings = self.settings
        if fam is Family.BOOL and settings.boolean != "t-f":
            true, false = _BOOLS[settings.boolean]
            return {"t": true, "f": false}.__getitem__, {b"t": true, b"f": false}.__getitem__
        if fam is Family.TIMESTAMPTZ and settings.timestamptz == "utc":
            return utc_wall_clock, _utc_from_wire
        if fam is Family.BYTES and settings.bytea != "hex":
            encode = _BYTEA[settings.bytea]
            return (
                lambda text: encode(bytea_bytes(text)),
                lambda raw: encode(_bytea_wire_bytes(raw)),
            )
        return None

    @staticmethod
    def _texts(plan: _Plan, image: Image) -> list[str | UnchangedToast | None]:
        """The canal texts of every column of ``image`` (unchanged TOAST kept as such).

        Rewritten columns of a text-mode image are converted straight from their wire
        bytes; binary-mode values are rendered to PostgreSQL's text first.
        """
        if not plan.converted:
            return image_texts(image)
        tup = image.tuple
        if _BINARY not in tup.kinds:
            return [
                decode(v) if type(v) is bytes else v  # type: ignore[misc]
                for decode, v in zip(plan.decoders, tup.values, strict=True)
            ]
        texts = image_texts(image)
        for i, (convert, _) in plan.converted:
            text = texts[i]
            if type(text) is str:
                texts[i] = convert(text)
        return texts

    def _positions(self, event: ChangeEvent) -> None:
        if event.commit_lsn != self._lsn or event.xid != self._xid:
            self._lsn = event.commit_lsn
            self._xid = event.xid
            self._lsn_text = format_lsn(event.commit_lsn)
            self._gtid = f"{event.xid}:{self._lsn_text}"
        if event.commit_ts != self._ts:
            self._ts = event.commit_ts
            self._es = (event.commit_ts + PG_EPOCH_US) // 1000

    def document(self, event: ChangeEvent) -> dict[str, Any] | None:
        """Build the FlatMessage of ``event`` as a dict (None for a skipped TRUNCATE)."""
        plan = self._plans[event.table]
        self._positions(event)
        op = event.op
        old: list[dict[str, str | None]] | None = None
        if op is Op.INSERT or op is Op.UPDATE or op is Op.SNAPSHOT:
            after = event.after
            assert after is not None
            texts = self._texts(plan, after)
            before = event.before
            if op is Op.UPDATE:
                changed: dict[str, str | None] = {}
                if before is not None:
                    self._old_values(plan, before, texts, changed)
                old = [changed]
            data = [text_row(plan.names, texts)]
            kind = self._load_type if op is Op.SNAPSHOT else _KINDS[op]
        elif op is Op.DELETE:
            before = event.before
            data = [self._present_row(plan, before)] if before is not None else [{}]
            kind = "DELETE"
        elif self.settings.truncate == "skip":
            return None
        else:
            return self._document(
                plan,
                event,
                "TRUNCATE",
                None,
                None,
                truncate_sql(event.table, event.truncate_options),
            )
        return self._document(plan, event, kind, data, old)

    def _document(
        self,
        plan: _Plan,
        event: ChangeEvent,
        kind: str,
        data: list[dict[str, Any]] | None,
        old: list[dict[str, Any]] | None,
        ddl: str | None = None,
    ) -> dict[str, Any]:
        """The FlatMessage: ``ddl`` is the statement of a DDL-style message (no row metadata)."""
        is_ddl = ddl is not None
        doc: dict[str, Any] = {
            "data": data,
            "database": plan.database,
            "es": self._es,
            "gtid": self._gtid,
            "id": self._lsn,
            "isDdl": is_ddl,
            "mysqlType": None if is_ddl else plan.mysql_type,
            "old": old,
            "pkNames": None if is_ddl else plan.pk_names,
            "sql": ddl or "",
            "sqlType": None if is_ddl else plan.sql_type,
            "table": plan.name,
            "ts": clock_ms(self._clock),
            "type": kind,
        }
        if self.settings.walcast_keys:
            doc["walcast"] = {
                "commitLsn": self._lsn_text,
                "ordinal": event.ordinal,
                "xid": event.xid,
            }
        return doc

    def _present_row(self, plan: _Plan, image: Image) -> dict[str, Any]:
        """Column → text for the columns ``image`` carries (only the key for a key image)."""
        texts = self._texts(plan, image)
        if not image.key_only:
            return text_row(plan.names, texts)
        names = plan.names
        return {
            names[i]: t for i in plan.key_indexes if not isinstance(t := texts[i], UnchangedToast)
        }

    def _old_values(
        self,
        plan: _Plan,
        before: Image,
        texts: list[str | UnchangedToast | None],
        changed: dict[str, str | None],
    ) -> None:
        """Fill ``changed`` with the old values of changed columns; complete ``texts``.

        Compares canal's texts: every rewrite is one-to-one, so they differ exactly when
        PostgreSQL's do.
        """
        old_texts = self._texts(plan, before)
        names = plan.names
        indexes = plan.key_indexes if before.key_only else range(len(texts))
        for i in indexes:
            was = old_texts[i]
            now = texts[i]
            if now is UNCHANGED_TOAST:
                if not before.key_only and was is not UNCHANGED_TOAST:
                    texts[i] = was
                continue
            if isinstance(was, UnchangedToast) or was == now:
                continue
            changed[names[i]] = was

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """One message per row change (none for a TRUNCATE with ``canal.truncate=skip``)."""
        return json_change(event, self.document(event), self._plans[event.table].keys)

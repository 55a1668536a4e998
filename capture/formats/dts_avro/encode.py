"""``dts-avro``: Alibaba DTS Avro, one ``com.alibaba.dts.formats.avro.Record`` per message.

Each Kafka value is one raw Avro binary datum of ``Record`` (no container header, no
registry magic byte) that decodes with DTS's published schema, unchanged
(``schemas/dts-avro-Record.avsc``, a union list of named types whose top-level type is
``Record``). The datum is written directly from precomputed byte strings (per
encoder, table and transaction) with the Avro wire primitives of
:mod:`capture.formats.avro`, instead of through a generic Avro writer, which is several
times slower; each column's image item comes from :mod:`capture.formats.dts_avro.values`. The
tests check every record against ``fastavro`` (decoding with the unchanged schema, and
byte equality with ``fastavro.schemaless_writer``).

Record fields
    * ``version`` 1.
    * ``id``: deterministic and strictly increasing: at each transaction (or heartbeat)
      the counter jumps to the commit LSN if it is behind it, then each record takes
      the next value. So ``id == commit_lsn + ordinal - 1`` whenever transactions are
      further apart in the WAL than they have changes (nearly always), ids never
      repeat or go backwards within a stream, and a replay from the same position
      gives the same ids (an Avro long: LSNs below 2**63, i.e. every real one). Replays
      are detected with the tags below, not with ``id``.
    * ``sourceTimestamp``: commit time, Unix seconds. ``bornTimestamp``: commit time,
      Unix milliseconds (a build time in DTS; the commit time keeps output
      deterministic and replay-stable). ``processTimestamps``: null.
    * ``sourcePosition``: ``<commit LSN X/Y>@<ordinal>``, the change's own position.
      ``safeSourcePosition``: ``<commit LSN X/Y>``: walcast resumes at transaction
      boundaries, so the transaction's commit LSN is the safe position.
    * ``sourceTxid``: the xid in decimal. ``source``: ``{PostgreSQL, <server version>}``.
    * ``objectName``: ``<database>.<schema>.<table>``.
    * ``tags``: ``walcast.commit_lsn`` (X/Y), ``walcast.ordinal``, ``walcast.commit_time``
      (ISO-8601 UTC with microseconds), ``pk_uk_info`` (``{"PRIMARY":["id"]}``, DTS's
      own tag, when the primary key is known) and ``walcast.unchanged_toast`` (JSON
      list of column names) when some value could not be sent. Consumers ignore tags
      they do not know.
    * ``fields``: ``[{name, dataTypeNumber}]`` in column order. ``dataTypeNumber`` is
      the column type's OID (``pg_type.oid``; 20 int8, 1700 numeric, 1184 timestamptz,
      …): DTS numbers types per source engine, and the OID is PostgreSQL's own number.
      It is where the exact PostgreSQL type lives: the image items' own ``type`` names
      are limited to DTS's enum (below).

Operations
    INSERT (``afterImages`` only), UPDATE (both), DELETE (``beforeImages`` only). A row
    read by an initial or on-demand load (``Op.SNAPSHOT``) is an ``INIT`` record
    (``afterImages`` only) with ``sourceTxid`` ``0`` and ``sourcePosition``
    ``<watermark>@<ordinal>``: the load chunk's watermark LSN sorts it after every change
    the row includes and before every later one.
    TRUNCATE is a ``DDL`` record whose ``afterImages`` is the SQL text
    (``TRUNCATE TABLE "public"."orders" RESTART IDENTITY CASCADE``, options as sent),
    ``fields`` and ``beforeImages`` null; one per truncated table. BEGIN/COMMIT records
    are off by default (``dts-avro.transaction_records=true`` turns them on); HEARTBEAT
    records (``heartbeat()``, on by default, ``dts-avro.heartbeats=false``) carry the
    server position in ``sourcePosition``.

Values (one union item per column)
    ============================  ================================================
    PostgreSQL                    DTS Avro
    ============================  ================================================
    NULL                          Avro ``null``
    int2 / int4 / int8, oid, xid  ``Integer{precision: 2 / 4 / 8 (bytes), value}``
    bool                          ``Integer{precision: 1, value: "1" | "0"}``
    numeric(p,s)                  ``Decimal{value, p, s}``; unconstrained numeric:
                                  precision and scale of the value (as Java's
                                  BigDecimal: ``0.001`` is 1, 3); ``NaN``,
                                  ``±Infinity``: ``Float{NaN | ±Infinity, 0, -1}``
                                  (BigDecimal, which the DTS SDK reads a
                                  ``Decimal`` with, has no such values)
    real / double precision       ``Float{value, precision: 24 / 53, scale: -1}``
                                  (binary digits; scale -1: not fixed)
    char, varchar, text, name,    ``Character{charset: "UTF8", value: UTF-8 bytes}``
    enums, unknown types
    bytea                         ``BinaryObject{type: "BYTEA", value: the bytes}``
    timestamptz                   ``Timestamp{timestamp: Unix seconds, millis: µs}``
    timestamp                     ``DateTime{year … second, millis: µs}``
    date                          ``DateTime{year, month, day}`` (time fields null)
    time                          ``DateTime{hour, minute, second, millis: µs}``
    timetz                        ``TimestampWithTimeZone{DateTime{hour … millis},
                                  timezone: "+05:30"}`` (offset as PostgreSQL
                                  prints it)
    json, jsonb                   ``TextObject{type: "JSON", value: PostgreSQL text}``
    xml                           ``TextObject{type: "XML", …}``
    uuid                          ``TextObject{type: "UUID", …}``
    point, line, lseg, box,       ``TextObject{type: "GEOMETRY", …}`` (PostgreSQL's
    path, polygon, circle         text, not WKT)
    interval, inet, cidr,         ``TextObject{type: "TEXT", …}``
    macaddr, arrays, money, bit,
    tsvector, any other type
    ============================  ================================================

    ``TextObject``/``BinaryObject`` ``type`` names come only from the DTS SDK's
    ``ObjectType`` enum (BINARY, BOOL, BLOB, XML, JSON, TEXT, BFILE, RAW, LONG_RAW, ROWID,
    UROWID, ENUM, SET, BYTEA, GEOMETRY, XTYPE, UUID): the SDK's ``AvroDeserializer``
    (dts-new-subscribe-sdk 2.0.0) calls ``ObjectType.valueOf(type.toUpperCase())`` and
    throws for any other name (``JSONB``, ``INTERVAL``, ``_INT4`` …). They are written in
    the enum's own upper case. The column's PostgreSQL type is its ``dataTypeNumber``.

    ``millis`` fields hold microseconds (DTS pads the fraction to six digits). BC
    years use astronomical numbering (1 BC is year 0, 44 BC is -43) and seconds
    before 1970 are negative with ``millis`` still in 0..999999 (floor). ``infinity``
    and ``-infinity`` dates and timestamps become ``TextObject{"TEXT", "infinity"}``.

Missing values
    * A column whose unchanged TOASTed value was not sent is copied from the before
      image when the old row was sent (REPLICA IDENTITY FULL), else it is
      ``EmptyObject.NONE`` ("no value", distinct from NULL) and listed in the
      ``walcast.unchanged_toast`` tag.
    * UPDATE without an old image (REPLICA IDENTITY DEFAULT/INDEX, key unchanged): the
      key columns' before values are their after values, the others ``NONE``. A
      key-only old image gives the key values and ``NONE`` for the other columns.

Kafka key
    Row changes: :func:`capture.formats._common.row_key` (``schema.table`` for a table
    without a primary key: one partition, commit order) of the row (after image, the
    before image for DELETE): every change of one row goes to one partition. DDL: the
    qualified table name. BEGIN/COMMIT/HEARTBEAT: the database name.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import ClassVar, Final

import orjson

from capture.events import (
    PG_EPOCH_US,
    ChangeEvent,
    Image,
    Op,
    Table,
    TransactionBegin,
    TransactionCommit,
    pg_ts_to_datetime,
)
from capture.formats._common import PerTable, RowKeys, keyed_image, truncate_sql
from capture.formats._common import raw_texts as _resolve
from capture.formats.avro import (
    NULL_BRANCH,
    SECOND_BRANCH,
    SMALL,
    avro_array,
    avro_bytes,
    avro_map,
    avro_string,
    varint,
    zigzag,
)
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.dts_avro.values import NONE, NULL, converter
from capture.formats.settings import FormatSettings
from capture.lsn import format_lsn

RECORD_VERSION: Final = 1
SOURCE_TYPES: Final = (
    "MySQL",
    "Oracle",
    "SQLServer",
    "PostgreSQL",
    "MongoDB",
    "Redis",
    "DB2",
    "PPAS",
    "DRDS",
    "HBASE",
    "HDFS",
    "FILE",
    "OTHER",
)
OPERATIONS: Final = (
    "INSERT",
    "UPDATE",
    "DELETE",
    "DDL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "ABORT",
    "HEARTBEAT",
    "CHECKPOINT",
    "COMMAND",
    "FILL",
    "FINISH",
    "CONTROL",
    "RDB",
    "NOOP",
    "INIT",
)

_BINARY: Final = ord("b")
_UNCHANGED: Final = ord("u")
_OPT_NULL: Final = NULL_BRANCH
"""A ``["null", …]`` union holding null."""
_OPT_STRING: Final = SECOND_BRANCH
"""Branch 1 of ``["null", "string", …]``."""
_OPT_ARRAY: Final = b"\x04"
"""Branch 2 of ``["null", "string", {array}]``."""


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``dts-avro.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "dts-avro"

    transaction_records: bool = False
    """Emit BEGIN and COMMIT records around each transaction's changes."""
    heartbeats: bool = True
    """Emit HEARTBEAT records when :meth:`DtsAvroEncoder.heartbeat` is called."""


# --------------------------------------------------------------------------- encoder

_ORDINAL_TAG: Final = avro_string("walcast.ordinal")
_TOAST_TAG: Final = avro_string("walcast.unchanged_toast")


def _array(items: list[bytes]) -> bytes:
    """``["null", "string", array]`` holding the array of ``items``."""
    return _OPT_ARRAY + avro_array(items)


class _TableState:
    """Per-Table precomputed bytes (a new Relation message makes a new Table object)."""

    __slots__ = (
        "converters",
        "fields",
        "key_indexes",
        "key_mask",
        "keys",
        "object_name",
        "size",
        "tag_count",
        "tags",
    )

    def __init__(self, table: Table, database: str) -> None:
        self.converters = tuple(converter(c) for c in table.columns)
        self.size = len(table.columns)
        self.key_indexes = table.key_indexes
        self.key_mask = tuple(i in table.key_indexes for i in range(self.size))
        self.object_name = _OPT_STRING + avro_string(f"{database}.{table.qualified_name}")
        items = b"".join(avro_string(c.name) + zigzag(c.type_oid) for c in table.columns)
        array = zigzag(self.size) + items + b"\x00" if self.size else b"\x00"
        self.fields = _OPT_ARRAY + array
        tags: list[tuple[str, str]] = []
        if table.primary_key:
            info = orjson.dumps({"PRIMARY": list(table.primary_key)}).decode()
            tags.append(("pk_uk_info", info))
        self.tags = b"".join(avro_string(k) + avro_string(v) for k, v in tags)
        self.tag_count = len(tags)
        self.keys = RowKeys(table)


@dataclass(slots=True)
class _Txn:
    xid: int
    commit_lsn: int
    commit_ts: int
    lsn_text: str
    at: bytes
    """``<commit LSN>@``: the sourcePosition without the ordinal."""
    head: bytes
    """sourceTimestamp (after ``id``)."""
    middle: bytes
    """safeSourcePosition, sourceTxid, source."""
    born: bytes
    tags: bytes
    tag_count: int
    chunks: dict[tuple[_TableState, Op, int], bytes] = field(default_factory=dict)
    """Cached :meth:`DtsAvroEncoder._chunk` results."""


class DtsAvroEncoder(Encoder, name="dts-avro", binary_output=True, settings=Settings):
    """DTS Avro ``Record`` datums, one message per row change."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        self._version = zigzag(RECORD_VERSION)
        self._source = zigzag(SOURCE_TYPES.index("PostgreSQL")) + avro_string(
            self.options.source_version
        )
        self._ops = {op: zigzag(OPERATIONS.index(op)) for op in OPERATIONS}
        self._op_of = {
            Op.INSERT: self._ops["INSERT"],
            Op.UPDATE: self._ops["UPDATE"],
            Op.DELETE: self._ops["DELETE"],
            Op.SNAPSHOT: self._ops["INIT"],
        }
        self._database_key = self.options.database.encode()
        self._tables = PerTable(self._new_state)
        self._txn: _Txn | None = None
        self._next_id = 0

    # ------------------------------------------------------------------ state

    def _new_state(self, table: Table) -> _TableState:
        return _TableState(table, self.options.database)

    def _open(self, xid: int, commit_lsn: int, commit_ts: int) -> _Txn:
        self._next_id = max(self._next_id, commit_lsn)
        lsn_text = format_lsn(commit_lsn)
        unix_us = commit_ts + PG_EPOCH_US
        tags = [
            ("walcast.commit_lsn", lsn_text),
            ("walcast.commit_time", pg_ts_to_datetime(commit_ts).isoformat()),
        ]
        txn = _Txn(
            xid=xid,
            commit_lsn=commit_lsn,
            commit_ts=commit_ts,
            lsn_text=lsn_text,
            at=lsn_text.encode() + b"@",
            head=zigzag(unix_us // 1_000_000),
            middle=avro_string(lsn_text) + avro_string(str(xid)) + self._source,
            born=zigzag(unix_us // 1000),
            tags=b"".join(avro_string(k) + avro_string(v) for k, v in tags),
            tag_count=len(tags),
        )
        self._txn = txn
        return txn

    def _current(self, xid: int, commit_lsn: int, commit_ts: int) -> _Txn:
        txn = self._txn
        if (
            txn is None
            or txn.commit_lsn != commit_lsn
            or txn.xid != xid
            or txn.commit_ts != commit_ts
        ):
            txn = self._open(xid, commit_lsn, commit_ts)
        return txn

    def _take_id(self) -> bytes:
        value = self._next_id
        self._next_id = value + 1
        return zigzag(value)

    # ------------------------------------------------------------------ images

    def _image(
        self,
        state: _TableState,
        image: Image,
        fallback: list[bytes] | None,
        missing: list[int],
    ) -> list[bytes]:
        """Encode one union item per column."""
        tup = image.tuple
        convs = state.converters
        if _UNCHANGED in tup.kinds or _BINARY in tup.kinds:
            values, patch = _resolve(image)
            out = [
                NULL if raw is None else conv(raw) for conv, raw in zip(convs, values, strict=True)
            ]
            for i in patch:
                if fallback is not None and fallback[i] is not NONE:
                    out[i] = fallback[i]
                else:
                    missing.append(i)
                    out[i] = NONE
        else:
            out = [
                NULL if raw is None else conv(raw)  # type: ignore[arg-type]
                for conv, raw in zip(convs, tup.values, strict=True)
            ]
        if image.key_only:
            return [item if key else NONE for item, key in zip(out, state.key_mask, strict=True)]
        return out

    # ------------------------------------------------------------------ records

    def _chunk(self, txn: _Txn, state: _TableState, op: Op, extra_tags: int) -> bytes:
        """Encode the fields from ``safeSourcePosition`` to the ``walcast.ordinal`` key.

        They depend only on the transaction, table and operation, so they are cached.
        """
        key = (state, op, extra_tags)
        chunk = txn.chunks.get(key)
        if chunk is None:
            operation = self._ops["DDL"] if op is Op.TRUNCATE else self._op_of[op]
            count = txn.tag_count + state.tag_count + 1 + extra_tags
            chunk = txn.chunks[key] = b"".join(
                (
                    txn.middle,
                    operation,
                    state.object_name,
                    _OPT_NULL,
                    zigzag(count),
                    txn.tags,
                    _ORDINAL_TAG,
                )
            )
        return chunk

    def record(self, event: ChangeEvent) -> bytes:
        """Encode ``event`` as one Avro datum."""
        txn = self._txn
        if (
            txn is None
            or txn.commit_lsn != event.commit_lsn
            or txn.xid != event.xid
            or txn.commit_ts != event.commit_ts
        ):
            txn = self._open(event.xid, event.commit_lsn, event.commit_ts)
        table = event.table
        state = self._tables[table]
        op = event.op
        ordinal = b"%d" % event.ordinal
        position = txn.at + ordinal
        record_id = self._next_id
        self._next_id = record_id + 1
        if op is Op.TRUNCATE:
            toast = b""
            chunk = self._chunk(txn, state, op, 0)
            fields = _OPT_NULL
            before_data = _OPT_NULL
            after_data = _OPT_STRING + avro_string(truncate_sql(table, event.truncate_options))
        else:
            missing: list[int] = []
            before = event.before
            after = event.after
            before_items = self._image(state, before, None, missing) if before is not None else None
            after_items: list[bytes] | None = None
            if after is not None:
                fallback = before_items if before is not None and not before.key_only else None
                after_items = self._image(state, after, fallback, missing)
                if op is Op.UPDATE and before_items is None:
                    before_items = [
                        item if key else NONE
                        for item, key in zip(after_items, state.key_mask, strict=True)
                    ]
            if op is Op.INSERT or op is Op.SNAPSHOT:
                before_items = None
            elif op is Op.DELETE:
                after_items = None
            toast = b""
            if missing:
                names = table.column_names
                toast = _TOAST_TAG + avro_bytes(orjson.dumps([names[i] for i in missing]))
                chunk = self._chunk(txn, state, op, 1)
            else:
                chunk = txn.chunks.get((state, op, 0)) or self._chunk(txn, state, op, 0)
            fields = state.fields
            before_data = _OPT_NULL if before_items is None else _array(before_items)
            after_data = _OPT_NULL if after_items is None else _array(after_items)
        return b"".join(
            (
                self._version,
                varint(record_id),
                txn.head,
                SMALL[len(position)],
                position,
                chunk,
                SMALL[len(ordinal)],
                ordinal,
                state.tags,
                toast,
                b"\x00",
                fields,
                before_data,
                after_data,
                txn.born,
            )
        )

    def key(self, event: ChangeEvent) -> bytes:
        """Return the Kafka key of ``event`` (see the module docstring)."""
        return self._tables[event.table].keys.key(keyed_image(event))

    def _control(
        self, operation: str, txn: _Txn, position: str, tags: list[tuple[str, str]]
    ) -> bytes:
        """Encode a BEGIN/COMMIT record (no table)."""
        return b"".join(
            (
                self._version,
                self._take_id(),
                txn.head,
                avro_string(position),
                txn.middle,
                self._ops[operation],
                _OPT_NULL,
                _OPT_NULL,
                avro_map(tags),
                _OPT_NULL,
                _OPT_NULL,
                _OPT_NULL,
                txn.born,
            )
        )

    # ------------------------------------------------------------------ stream

    def begin(self, begin: TransactionBegin) -> list[EncodedMessage]:
        """Send a BEGIN record when ``dts-avro.transaction_records`` is on."""
        txn = self._open(begin.xid, begin.commit_lsn, begin.commit_ts)
        if not self.settings.transaction_records:
            return []
        tags = [
            ("walcast.commit_lsn", txn.lsn_text),
            ("walcast.commit_time", pg_ts_to_datetime(begin.commit_ts).isoformat()),
        ]
        if begin.change_count is not None:
            tags.append(("walcast.change_count", str(begin.change_count)))
        datum = self._control("BEGIN", txn, f"{txn.lsn_text}@0", tags)
        return [
            EncodedMessage(
                datum, self._database_key, "begin", None, None, begin.commit_lsn, begin.xid, None
            )
        ]

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """One record per row change (one DDL record per table of a TRUNCATE)."""
        return [EncodedMessage.for_change(event, self.record(event), self.key(event))]

    def tail_lines(self, event: ChangeEvent) -> bytes:
        """Print ``event`` as ``walcast tail`` does (base64), without building a message."""
        return base64.b64encode(self.record(event)) + b"\n"

    def commit(self, commit: TransactionCommit) -> list[EncodedMessage]:
        """Send a COMMIT record when ``dts-avro.transaction_records`` is on."""
        if not self.settings.transaction_records:
            self._txn = None
            return []
        txn = self._current(commit.xid, commit.commit_lsn, commit.commit_ts)
        tags = [
            ("walcast.commit_lsn", txn.lsn_text),
            ("walcast.commit_time", pg_ts_to_datetime(commit.commit_ts).isoformat()),
            ("walcast.change_count", str(commit.change_count)),
            ("walcast.end_lsn", format_lsn(commit.end_lsn)),
        ]
        datum = self._control("COMMIT", txn, f"{txn.lsn_text}@{commit.change_count + 1}", tags)
        self._txn = None
        return [
            EncodedMessage(
                datum,
                self._database_key,
                "commit",
                None,
                None,
                commit.commit_lsn,
                commit.xid,
                None,
            )
        ]

    def heartbeat(self, lsn: int, now_us: int) -> list[EncodedMessage]:
        """Send a HEARTBEAT record at server position ``lsn`` (``now_us``: Unix µs)."""
        if not self.settings.heartbeats:
            return []
        self._next_id = max(self._next_id, lsn)
        lsn_text = format_lsn(lsn)
        datum = b"".join(
            (
                self._version,
                self._take_id(),
                zigzag(now_us // 1_000_000),
                avro_string(lsn_text),
                avro_string(lsn_text),
                avro_string(""),
                self._source,
                self._ops["HEARTBEAT"],
                _OPT_NULL,
                _OPT_NULL,
                b"\x00",
                _OPT_NULL,
                _OPT_NULL,
                _OPT_NULL,
                zigzag(now_us // 1000),
            )
        )
        return [EncodedMessage(datum, self._database_key, "heartbeat", None, None, lsn, None, None)]

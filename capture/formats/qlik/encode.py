"""``qlik``: Qlik Replicate JSON messages (``atMSG`` envelope, ``MD`` metadata and ``DT`` data).

Envelope: ``{"magic": "atMSG", "type": "DT"|"MD", "headers": null,
"messageSchemaId": null, "messageSchema": null, "message": {...}}``.

A data message (``DT``; ``note`` is a text column, a LOB, so it has no changeMask bit)::

    {"data": {"id": 1, "note": "hi"}, "beforeData": null,
     "headers": {"operation": "INSERT",
                 "changeSequence": "20240502181729120000023803720000001",
                 "timestamp": "2024-05-02T18:17:29.123",
                 "streamPosition": "00000000/016B3748",
                 "transactionId": "000000000000000000000000000002BC",
                 "changeMask": "01", "columnMask": "03",
                 "transactionEventCounter": 1, "transactionLastEvent": true}}

Decisions:

* **Values**: int2/int4/int8/oid/xid → JSON integers; float4/float8 → JSON numbers
  (shortest round-trip text, so exact; NaN/Infinity/-Infinity, which JSON numbers cannot
  hold, are those strings); bool → true/false; bytea → upper-case hex of the bytes
  (``bytes.fromhex`` restores them); numeric, dates, times, timestamps, intervals and
  every other type → strings with PostgreSQL's exact text (DateStyle=ISO, TimeZone=UTC:
  ``2024-05-02 18:17:29.123456+00``), so all digits and microseconds survive.
* **Masks** (``changeMask``, ``columnMask``): bit *n-1* stands for the column of ordinal
  *n* (1-based, the order of ``tableColumns``). Little-endian by byte: the first byte
  (first two hex digits) holds ordinals 1-8 (bit 0 = ordinal 1), the next byte ordinals
  9-16, and so on; always ``ceil(columns / 8)`` bytes (at least one), upper-case hex.
  Decode: ``b = bytes.fromhex(mask)``, ordinal *n* is set when
  ``b[(n-1)//8] >> ((n-1)%8) & 1``. ``columnMask`` has a bit for every column present in
  ``data``. ``changeMask``: INSERT, all inserted columns; DELETE, the primary-key columns
  (the replica identity when the key is unknown); UPDATE, the columns whose value
  changed. LOB columns never have a ``changeMask`` bit; a LOB is a column of type text,
  bytea, json or jsonb (:func:`~capture.formats._common.is_lob`), and their Qlik types
  are NCLOB/BLOB.
* **No before image** (REPLICA IDENTITY DEFAULT/USING INDEX): which columns an UPDATE
  changed is only known from a complete old image (REPLICA IDENTITY FULL). Without one,
  ``changeMask`` marks every present non-LOB column except the replica-identity key
  columns that did not change (a superset of the changed columns: re-applying an
  unchanged value is harmless). The key's change is known: without an old key it did
  not change; with one, the differing key columns are marked. ``beforeData`` is then
  null, or holds only the old key columns when the key changed (the absent columns are
  unknown, not null). A DELETE without FULL
  carries only the key: the other columns are null in ``data`` with their
  ``columnMask`` bits clear, Qlik's way of saying "not replicated".
* **Unchanged TOAST** values (not sent): taken from the old image when it is complete
  (the value did not change); otherwise null in ``data`` with the ``columnMask`` bit
  clear. Such a column did not change, so its ``changeMask`` bit is clear.
* ``changeSequence`` (35 digits, strictly increasing across the task): the commit time as
  ``YYYYMMDDHHmmSShh`` (UTC, hundredths) followed by a 19-digit counter
  ``(commit LSN mod 10^13) * 10^6 + ordinal``. It is derived from the change alone, so a
  replay yields the same value; when that value would not exceed the previous one (a
  commit timestamp earlier than its predecessor's, the LSN wrapping past 10^13 within one
  hundredth of a second, or more than 999,999 changes in a transaction), the previous
  value + 1 is used instead, which keeps the sequence strictly increasing.
* ``timestamp`` = commit time, UTC, ``YYYY-MM-DDTHH:MM:SS.mmm``. ``streamPosition`` =
  the commit LSN as fixed-width hex ``XXXXXXXX/XXXXXXXX`` (sorts as a string; PostgreSQL
  accepts it as a pg_lsn). ``transactionId`` = the xid as 32 upper-case hex digits (the
  width Qlik uses). ``transactionEventCounter`` = the change's 1-based ordinal, so
  ``(streamPosition, transactionEventCounter)`` identifies a change across replays.
* ``transactionLastEvent`` comes from ``TransactionBegin.change_count`` (the format sets
  ``needs_transaction_size``). If a transaction arrives without it, the encoder holds
  back one message and releases it when the next change or the commit shows whether it
  was the last.
* **Load rows** (``Op.SNAPSHOT``, read by an initial or on-demand load): ``operation``
  ``REFRESH`` ("insert of a record during Full Load stage"), ``beforeData`` null, masks
  as for an INSERT. ``streamPosition`` is the load chunk's watermark LSN (after every
  change the row includes, before every later one), ``transactionId`` is zero and
  ``transactionEventCounter`` numbers the rows of the chunk.
* **TRUNCATE**: Qlik's operations (INSERT, UPDATE, DELETE, REFRESH) have none; walcast
  writes a DT with ``operation`` "TRUNCATE", ``data`` {}, ``beforeData`` null and empty
  masks rather than dropping it silently (a consumer that ignores it would keep rows the
  source removed). Consumers switching on the operation should handle or skip it.
* **MD** is sent before a table's first DT and again whenever a new Relation message
  changes the table's structure (names, types, key or its schema/table name); a Relation
  message that changes nothing sends none. ``tableVersion`` counts the structures seen
  for the table in this process (1 first). ``schemaId`` is a hash of the structure
  (stable across restarts). ``lineage``: ``server`` = source server, ``task`` =
  ``qlik.task`` (default the producer name), ``schema``, ``table``, ``timestamp`` = the
  commit time of the change that triggered it. ``tableStructure.tableColumns`` maps each
  column name to ordinal, Qlik type, length, precision, scale and primaryKeyPosition
  (0 when not in the key). Types: bool BOOLEAN, int2 INT2, int4 INT4, int8/oid/xid INT8,
  numeric NUMERIC (precision/scale from the declaration, 0 when unconstrained), float4
  REAL4, float8 REAL8, char/varchar/name/enums/arrays WSTRING (length = declared length,
  0 when unbounded), text/json/jsonb NCLOB, bytea BLOB, date DATE, time/timetz TIME,
  timestamp/timestamptz DATETIME (scale = fractional digits, 6 by default), everything
  else STRING. ``dataSchema`` is the Avro schema (JSON text) of ``data``: a record of
  nullable fields (int, long, float or double with string for NaN/Infinity, boolean,
  else string); field names that are not valid Avro names are rewritten with ``_``.
* Keys: a DT's is :func:`~capture.formats._common.row_key` (``schema.table`` for a table
  without a primary key: one partition, commit order) of the new row (the old row
  for a DELETE); an MD's is ``schema.table``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

import orjson

from capture import events
from capture.events import Op
from capture.formats._common import (
    Family,
    PerTable,
    RowKeys,
    family,
    is_lob,
    json_number,
    keyed_image,
    pg_bool,
)
from capture.formats._common import column_texts as image_texts
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.settings import PARSE, FormatSettings, setting_text
from capture.pgoutput.messages import UNCHANGED_TOAST, UnchangedToast
from capture.types import typmod
from capture.types.text import bytea_from_text

if TYPE_CHECKING:
    import datetime as dt

_DT_PREFIX: Final = (
    b'{"magic":"atMSG","type":"DT","headers":null,"messageSchemaId":null,'
    b'"messageSchema":null,"message":'
)
_MD_PREFIX: Final = (
    b'{"magic":"atMSG","type":"MD","headers":null,"messageSchemaId":null,'
    b'"messageSchema":null,"message":'
)
_COUNTER: Final = 10**19
_LSN_PART: Final = 10**13
_ORDINAL_PART: Final = 10**6

_QLIK_TYPES: Final = {
    Family.BOOL: "BOOLEAN",
    Family.SMALLINT: "INT2",
    Family.INTEGER: "INT4",
    Family.BIGINT: "INT8",
    Family.NUMERIC: "NUMERIC",
    Family.REAL: "REAL4",
    Family.DOUBLE: "REAL8",
    Family.CHAR: "WSTRING",
    Family.STRING: "WSTRING",
    Family.BYTES: "BLOB",
    Family.DATE: "DATE",
    Family.TIME: "TIME",
    Family.TIMETZ: "TIME",
    Family.TIMESTAMP: "DATETIME",
    Family.TIMESTAMPTZ: "DATETIME",
    Family.INTERVAL: "STRING",
    Family.UUID: "STRING",
    Family.JSON: "NCLOB",
    Family.NETWORK: "STRING",
    Family.ARRAY: "WSTRING",
    Family.OTHER: "STRING",
}
_AVRO_TYPES: Final[dict[Family, Any]] = {
    Family.BOOL: "boolean",
    Family.SMALLINT: "int",
    Family.INTEGER: "int",
    Family.BIGINT: "long",
    Family.REAL: ["float", "string"],
    Family.DOUBLE: ["double", "string"],
}


# ------------------------------------------------------------------ settings


def _task(key: str, value: Any) -> str:
    return setting_text(key, str(value).strip())


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``qlik.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "qlik"

    task: str | None = field(default=None, metadata={PARSE: _task})
    """``lineage.task`` of MD messages; None: the producer's name (``source_name``)."""


# ------------------------------------------------------------------ values


def bytes_hex(text: str) -> str:
    r"""Upper-case hex of a bytea's bytes, from its ``\x`` hex or escape text."""
    if text.startswith("\\x"):
        return text[2:].upper()
    return bytea_from_text(text.encode()).hex().upper()


def _converter(column: events.Column) -> Any:
    fam = family(column)
    if fam in (Family.SMALLINT, Family.INTEGER, Family.BIGINT):
        return int
    if fam in (Family.REAL, Family.DOUBLE):
        return json_number
    if fam is Family.BOOL:
        return pg_bool
    if fam is Family.BYTES:
        return bytes_hex
    return None


def column_structure(column: events.Column) -> tuple[str, int, int, int]:
    """(Qlik type, length, precision, scale) of ``column``."""
    fam = family(column)
    mod = column.type_modifier
    name = column.type_name
    qlik = _QLIK_TYPES[fam]
    if fam is Family.STRING and is_lob(column):
        qlik = "NCLOB"
    length = typmod.length(name, mod) or 0
    precision = scale = 0
    declared = typmod.numeric_precision_scale(mod) if fam is Family.NUMERIC else None
    if declared is not None:
        precision, scale = declared
    elif fam in (Family.TIMESTAMP, Family.TIMESTAMPTZ, Family.TIME, Family.TIMETZ):
        digits = typmod.time_precision(mod)
        scale = 6 if digits is None else digits
    return qlik, length, precision, scale


def _avro_name(name: str) -> str:
    out = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def data_schema(table: events.Table) -> str:
    """Return the Avro schema (JSON text) of a DT message's ``data`` for ``table``."""
    fields = []
    seen: set[str] = set()
    for column in table.columns:
        name = _avro_name(column.name)
        base = name
        n = 1
        while name in seen:
            n += 1
            name = f"{base}_{n}"
        seen.add(name)
        avro = _AVRO_TYPES.get(family(column), "string")
        union = ["null", *avro] if isinstance(avro, list) else ["null", avro]
        fields.append({"name": name, "type": union, "default": None})
    schema = {
        "type": "record",
        "name": _avro_name(table.name),
        "namespace": _avro_name(table.schema),
        "fields": fields,
    }
    return orjson.dumps(schema).decode()


def _mask_hex(mask: int, nbytes: int) -> str:
    return mask.to_bytes(nbytes, "little").hex().upper()


def _ms_text(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}"


@dataclass(slots=True)
class _Plan:
    table: events.Table
    names: tuple[str, ...]
    converters: tuple[Any, ...]
    nbytes: int
    all_mask: int
    nonlob_mask: int
    key_mask: int
    """Primary key (or replica identity) columns, LOBs excluded (DELETE changeMask)."""
    identity_mask: int
    """Columns a key-only old image carries."""
    all_hex: str
    nonlob_hex: str
    schema_id: str
    keys: RowKeys
    structure: dict[str, Any] = field(repr=False)
    checked: bool = False
    """Whether the table's MD was announced (or found announced) for this plan."""


class QlikEncoder(Encoder, name="qlik", needs_transaction_size=True, settings=Settings):
    """Qlik Replicate JSON: an MD per table structure, a DT per row change."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        self.task = self.settings.task or self.options.source_name
        self._plans = PerTable(self._build_plan)
        self._versions: dict[int, tuple[str, int]] = {}
        """relation OID → (schemaId, tableVersion) last announced."""
        self._last_seq = 0
        self._count: int | None = None
        self._count_xid: int | None = None
        self._pending: tuple[dict[str, Any], events.ChangeEvent, bytes] | None = None
        """A DT held back until it is known whether it is its transaction's last."""
        self._ts = -1
        self._time = ""
        self._prefix = 0
        self._lsn = -1
        self._position = ""
        self._xid = -1
        self._txid = ""

    # ------------------------------------------------------------------ transactions

    def begin(self, begin: events.TransactionBegin) -> list[EncodedMessage]:
        """Remember the transaction's size, for ``transactionLastEvent``."""
        out = self._release(last=False)
        self._count = begin.change_count
        self._count_xid = begin.xid
        return out

    def commit(self, commit: events.TransactionCommit) -> list[EncodedMessage]:  # noqa: ARG002
        """Release a held-back last message."""
        self._count = None
        self._count_xid = None
        return self._release(last=True)

    def flush(self) -> list[EncodedMessage]:
        """Release a held-back message whose transaction never ended (marked not last)."""
        return self._release(last=False)

    def _release(self, *, last: bool) -> list[EncodedMessage]:
        pending = self._pending
        if pending is None:
            return []
        self._pending = None
        message, event, key = pending
        message["headers"]["transactionLastEvent"] = last
        return [EncodedMessage.for_change(event, _DT_PREFIX + orjson.dumps(message) + b"}", key)]

    # ------------------------------------------------------------------ metadata

    def _plan(
        self, table: events.Table, event: events.ChangeEvent, out: list[EncodedMessage]
    ) -> _Plan:
        """The table's plan; an MD goes to ``out`` first when its structure is new."""
        plan = self._plans[table]
        if plan.checked:
            return plan
        plan.checked = True
        announced = self._versions.get(table.relation_id)
        if announced is None or announced[0] != plan.schema_id:
            version = 1 if announced is None else announced[1] + 1
            self._versions[table.relation_id] = (plan.schema_id, version)
            out.extend(self._release(last=False))
            out.append(self._metadata(plan, version, event))
        return plan

    def _build_plan(self, table: events.Table) -> _Plan:
        columns = table.columns
        names = table.column_names
        index = {n: i for i, n in enumerate(names)}
        pk = table.primary_key
        key_indexes = [index[n] for n in pk] if pk else list(table.key_indexes)
        lob = [is_lob(c) for c in columns]
        nbytes = max(1, (len(columns) + 7) // 8)
        all_mask = (1 << len(columns)) - 1
        nonlob_mask = sum(1 << i for i, is_lob_col in enumerate(lob) if not is_lob_col)
        key_mask = sum(1 << i for i in key_indexes if not lob[i])
        identity_mask = sum(1 << i for i in table.key_indexes)
        pk_position = {i: pos for pos, i in enumerate(key_indexes, start=1)} if pk else {}
        table_columns: dict[str, Any] = {}
        for i, column in enumerate(columns):
            qlik_type, length, precision, scale = column_structure(column)
            table_columns[column.name] = {
                "ordinal": i + 1,
                "type": qlik_type,
                "length": length,
                "precision": precision,
                "scale": scale,
                "primaryKeyPosition": pk_position.get(i, 0),
            }
        dschema = data_schema(table)
        structure = {
            "schema": table.schema,
            "table": table.name,
            "tableColumns": table_columns,
            "dataSchema": dschema,
        }
        schema_id = hashlib.blake2b(orjson.dumps(structure), digest_size=16).hexdigest()
        return _Plan(
            table=table,
            names=names,
            converters=tuple(_converter(c) for c in columns),
            nbytes=nbytes,
            all_mask=all_mask,
            nonlob_mask=nonlob_mask,
            key_mask=key_mask,
            identity_mask=identity_mask,
            all_hex=_mask_hex(all_mask, nbytes),
            nonlob_hex=_mask_hex(nonlob_mask, nbytes),
            schema_id=schema_id,
            keys=RowKeys(table),
            structure=structure,
        )

    def _metadata(self, plan: _Plan, version: int, event: events.ChangeEvent) -> EncodedMessage:
        table = plan.table
        message = {
            "schemaId": plan.schema_id,
            "lineage": {
                "server": self.options.server,
                "task": self.task,
                "schema": table.schema,
                "table": table.name,
                "tableVersion": version,
                "timestamp": _ms_text(events.pg_ts_to_datetime(event.commit_ts)),
            },
            "tableStructure": {"tableColumns": plan.structure["tableColumns"]},
            "dataSchema": plan.structure["dataSchema"],
        }
        return EncodedMessage(
            _MD_PREFIX + orjson.dumps(message) + b"}",
            table.qualified_name.encode(),
            "metadata",
            table.schema,
            table.name,
            event.commit_lsn,
            event.xid,
            None,
        )

    # ------------------------------------------------------------------ data

    def _values(
        self, plan: _Plan, texts: list[str | UnchangedToast | None], mask: int | None = None
    ) -> dict[str, Any]:
        """Column → value; columns outside ``mask`` (or not sent) are null."""
        if mask is not None:
            texts = [t if mask >> i & 1 else None for i, t in enumerate(texts)]
        return {
            name: None
            if text is None or isinstance(text, UnchangedToast)
            else text
            if conv is None
            else conv(text)
            for name, conv, text in zip(plan.names, plan.converters, texts, strict=True)
        }

    def _before_values(
        self, plan: _Plan, texts: list[str | UnchangedToast | None], mask: int
    ) -> dict[str, Any]:
        """Column → value for the columns of ``mask`` only (a key-only old image)."""
        names = plan.names
        convs = plan.converters
        out: dict[str, Any] = {}
        for i, text in enumerate(texts):
            if not mask >> i & 1 or isinstance(text, UnchangedToast):
                continue
            conv = convs[i]
            out[names[i]] = text if text is None or conv is None else conv(text)
        return out

    def _sequence(self, event: events.ChangeEvent) -> str:
        if event.commit_ts != self._ts:
            self._ts = event.commit_ts
            when = events.pg_ts_to_datetime(event.commit_ts)
            self._time = _ms_text(when)
            self._prefix = int(when.strftime("%Y%m%d%H%M%S") + f"{when.microsecond // 10000:02d}")
        natural = (
            self._prefix * _COUNTER + (event.commit_lsn % _LSN_PART) * _ORDINAL_PART + event.ordinal
        )
        seq = natural if natural > self._last_seq else self._last_seq + 1
        self._last_seq = seq
        return f"{seq:035d}"

    def document(self, plan: _Plan, event: events.ChangeEvent) -> dict[str, Any]:
        """Build a DT's ``message`` object (``transactionLastEvent`` still false)."""
        op = event.op
        before_data: dict[str, Any] | None = None
        nbytes = plan.nbytes
        if op is Op.INSERT or op is Op.SNAPSHOT:
            assert event.after is not None
            texts = image_texts(event.after)
            if UNCHANGED_TOAST not in texts:
                data = self._values(plan, texts)
                change_hex = plan.nonlob_hex
                column_hex = plan.all_hex
            else:
                present = _present(texts)
                data = self._values(plan, texts)
                change_hex = _mask_hex(present & plan.nonlob_mask, nbytes)
                column_hex = _mask_hex(present, nbytes)
            operation = "INSERT" if op is Op.INSERT else "REFRESH"
        elif op is Op.UPDATE:
            assert event.after is not None
            new = image_texts(event.after)
            before = event.before
            if before is not None and not before.key_only:
                old = image_texts(before)
                changed = 0
                for i, (n, o) in enumerate(zip(new, old, strict=True)):
                    if isinstance(n, UnchangedToast):
                        new[i] = o
                    elif n != o and not isinstance(o, UnchangedToast):
                        changed |= 1 << i
                present = _present(new)
                before_data = self._values(plan, old)
                change_mask = changed & plan.nonlob_mask
            else:
                # Without a complete old image only the key's change is known: the
                # replica identity did not change when no old key was sent.
                present = _present(new)
                change_mask = present & plan.nonlob_mask & ~plan.identity_mask
                if before is not None:
                    old = image_texts(before)
                    before_data = self._before_values(plan, old, plan.identity_mask)
                    for i in plan.table.key_indexes:
                        if old[i] != new[i] and not isinstance(new[i], UnchangedToast):
                            change_mask |= (1 << i) & plan.nonlob_mask
            data = self._values(plan, new)
            change_hex = _mask_hex(change_mask, nbytes)
            column_hex = plan.all_hex if present == plan.all_mask else _mask_hex(present, nbytes)
            operation = "UPDATE"
        elif op is Op.DELETE:
            before = event.before
            if before is None:
                data = dict.fromkeys(plan.names)
                present = 0
            else:
                texts = image_texts(before)
                present = plan.identity_mask if before.key_only else _present(texts)
                data = self._values(plan, texts, present)
            change_hex = _mask_hex(plan.key_mask & present, nbytes)
            column_hex = _mask_hex(present, nbytes)
            operation = "DELETE"
        else:
            data = {}
            change_hex = column_hex = _mask_hex(0, nbytes)
            operation = "TRUNCATE"
        if event.commit_lsn != self._lsn:
            self._lsn = event.commit_lsn
            lsn = event.commit_lsn
            self._position = f"{lsn >> 32:08X}/{lsn & 0xFFFFFFFF:08X}"
        if event.xid != self._xid:
            self._xid = event.xid
            self._txid = f"{event.xid:032X}"
        sequence = self._sequence(event)
        return {
            "data": data,
            "beforeData": before_data,
            "headers": {
                "operation": operation,
                "changeSequence": sequence,
                "timestamp": self._time,
                "streamPosition": self._position,
                "transactionId": self._txid,
                "changeMask": change_hex,
                "columnMask": column_hex,
                "transactionEventCounter": event.ordinal,
                "transactionLastEvent": False,
            },
        }

    def change(self, event: events.ChangeEvent) -> list[EncodedMessage]:
        """Encode one change: an MD first when the table's structure is new, then one DT."""
        out: list[EncodedMessage] = []
        plan = self._plan(event.table, event, out)
        message = self.document(plan, event)
        key = plan.keys.key(keyed_image(event))
        count = self._count
        if count is not None and self._count_xid == event.xid:
            message["headers"]["transactionLastEvent"] = event.ordinal >= count
            value = _DT_PREFIX + orjson.dumps(message) + b"}"
            out.append(EncodedMessage.for_change(event, value, key))
            return out
        out.extend(self._release(last=False))
        self._pending = (message, event, key)
        return out


def _present(texts: list[str | UnchangedToast | None]) -> int:
    """Mask of the columns sent (everything but unchanged TOAST)."""
    mask = 0
    for i, text in enumerate(texts):
        if not isinstance(text, UnchangedToast):
            mask |= 1 << i
    return mask

r"""``debezium``: the Debezium PostgreSQL connector's change events, as it writes them.

The key and value of every record are what Debezium 3.6.1.Final (``plugin.name=pgoutput``,
its defaults) hands to Kafka Connect's ``JsonConverter`` (``schemas.enable=false`` unless
``debezium.schemas=true``), so a consumer of Debezium's topics reads walcast's unchanged.
Checked event by event against the real connector on the same WAL over the capture
scenario (``tests/readers/test_debezium_compare.py``: topic, key bytes, op, before, after
and every ``source`` field equal but the LSN, below) and read by Flink's ``debezium-json``
(``tests/readers/test_debezium_flink.py``: the same rows as from the connector's records).
A value::

    {"before": null, "after": {"id": 7, "note": "hi"},
     "source": {"version": "3.6.1.Final", "connector": "postgresql", "name": "walcast",
                "ts_ms": 1714673849123, "snapshot": "false", "db": "shop",
                "sequence": "[\"24023128\",\"24023184\"]", "ts_us": 1714673849123456,
                "ts_ns": 1714673849123456000, "schema": "public", "table": "orders",
                "txId": 700, "lsn": 24023184, "xmin": null, "origin": null,
                "origin_lsn": null},
     "transaction": null, "op": "c", "ts_ms": 1714673850250, "ts_us": 1714673850250000,
     "ts_ns": 1714673850250000000}

and its key ``{"id": 7}``. Settings (``debezium.*``,
:class:`Settings`) and the connector setting each stands for:
``topic_prefix`` (``topic.prefix``, default ``walcast``), ``decimal_handling``
(``decimal.handling.mode``: precise, string, double), ``time_precision``
(``time.precision.mode``: adaptive, adaptive_time_microseconds, connect),
``binary_handling`` (``binary.handling.mode``: bytes, base64, hex), ``schemas``
(the converter's ``schemas.enable``), ``tombstones`` (``tombstones.on.delete``),
``skipped_operations`` (``skipped.operations``: ``t`` by default, ``none``, or a comma list
of ``c``, ``u``, ``d``, ``t``), ``provide_transaction_metadata``, ``heartbeats`` (records on
walcast's heartbeat interval, like ``heartbeat.interval.ms``), ``unavailable_value_placeholder``
(``unavailable.value.placeholder``), and walcast's own ``load_snapshot``,
``unrepresentable`` and ``source_version`` (below).

Records, in Debezium's order:

* **op** ``c`` (insert), ``u`` (update), ``d`` (delete, then a **tombstone**: same key,
  null value, unless ``tombstones=false``), ``r`` (a row of a load), ``t`` (truncate, only
  when ``t`` is not skipped; key null, ``before``/``after`` null; one per table).
  An **update that changes the primary key** is a ``d`` of the old key (``before``: the old
  row, or the old key with every other column null), its tombstone, and a ``c`` of the new
  key, all with the update's ``source``; the same when walcast's pump already split it
  (``split_key_updates``). Skipping applies to the records after that split, as Debezium's.
  A delete without any old image (REPLICA IDENTITY NOTHING) writes nothing, as Debezium.
* **before**: the old row when PostgreSQL sent it (REPLICA IDENTITY FULL; the key columns,
  the others null, for a delete or key change under DEFAULT/USING INDEX), else null.
* **key**: the primary-key columns, converted like values; null for a table without one.
  Decision: Debezium's null key, not walcast's usual table-name key, so that consumers of
  the connector's topics see the same keys. The Kafka sink writes every null-key record
  (these, and ``t``) to partition 0 of its topic (:mod:`capture.sinks.kafka`), where the
  connector's producer spreads them at random: a keyless table keeps its commit order, and a
  record sent again after a crash lands in its first copy's partition, where consumers
  drop replays by position.
* **source**: ``name`` = the topic prefix; ``ts_ms``/``ts_us``/``ts_ns`` = the commit time;
  ``snapshot`` ``"false"`` for streamed changes; ``db`` = the database; ``txId`` = the xid;
  ``lsn`` = the change's own WAL position (``ChangeEvent.lsn``: the start of the XLogData
  message that carried it, as the connector's ``lastReceivedLsn``), at or before the
  commit LSN; ``sequence`` = ``["<end LSN of the last
  commit before>", "<lsn>"]`` as decimal strings (the first ``null`` for the first
  transaction a process writes, as Debezium after a start without offsets); ``xmin``,
  ``origin``, ``origin_lsn`` null (xmin is Debezium's default, origins are not decoded).
* Envelope ``ts_ms``/``ts_us``/``ts_ns``: when the record was built (walcast's clock).
* **Load rows** (``op`` ``r``, initial and on-demand loads alike). Decision: walcast's loads
  are read in chunks spliced into the stream at watermarks while it streams, which is what
  Debezium calls an incremental snapshot, and Debezium marks the rows of those
  ``"incremental"``; so by default (``load_snapshot=incremental``) ``snapshot`` is
  ``"incremental"`` and ``txId``/``lsn`` are null; ``sequence`` ends with the chunk's
  watermark LSN, ``ts_ms`` is when the chunk was read. ``load_snapshot=true`` marks them
  ``"true"`` (with the watermark as ``lsn``) for consumers that look for the blocking
  snapshot's mark. The blocking snapshot's ``first``, ``first_in_data_collection``,
  ``last_in_data_collection`` and ``last`` are never written: the stream does not tell an
  encoder which chunk is a table's or a load's last one.
* **Transaction metadata** (``provide_transaction_metadata=true``): a ``BEGIN`` and an
  ``END`` record per transaction (``{"status", "id", "event_count", "data_collections",
  "ts_ms"}``, key ``{"id"}``, on the transaction topic; ``ts_ms`` the commit time;
  ``data_collections`` in the iteration order of Debezium's ``java.util.HashMap`` of
  them), also for a transaction whose changes were all skipped, and each event's
  ``transaction`` block ``{"id", "total_order", "data_collection_order"}``. Debezium's id
  is ``"<xid>:<LSN>"`` with the LSN of the record at hand (the Begin message's for BEGIN,
  the event's own, the commit's end for END); walcast writes the commit LSN in place of the
  first (known differences below), the event's own and the commit's end; tombstones and
  skipped records are not counted. Load rows have none. Checked against the connector with
  ``debezium.schemas=true`` and truncates (test_debezium_compare.py).
* **Heartbeats** (``heartbeats=true``): Debezium's records, key ``{"serverName": prefix}``,
  value ``{"ts_ms": now}``, topic ``__debezium-heartbeat.<prefix>``.
* **Topics**: ``<prefix>.<schema>.<table>`` (:attr:`Encoder.default_topic`),
  ``<prefix>.transaction`` and the heartbeat topic in place of walcast's default templates;
  a template the user set is kept (:func:`capture.sinks.topics.format_templates`). A name
  part with characters outside ``[A-Za-z0-9_]`` gets walcast's escaping (``_`` plus a hash,
  :mod:`capture.sinks.topics`) where Debezium only replaces them with ``_``.

Values (see :mod:`capture.formats.debezium.encode_values`; Debezium's defaults first):

* int2/int4/int8/oid: numbers; float4/float8: numbers with Java's digits (``3.4028235E38``,
  ``1.0E-5``, ``-0.0``), NaN/±Infinity as the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``; bool: true/false.
* numeric: ``precise``: ``numeric(p,s)`` is Connect's Decimal (base64 of the unscaled
  two's-complement bytes, scale ``s``), unconstrained numeric
  ``{"scale": n, "value": base64}`` (VariableScaleDecimal, trailing zeros removed);
  ``string``: the plain digits (NaN, Infinity, -Infinity as ``NAN``,
  ``POSITIVE_INFINITY``, ``NEGATIVE_INFINITY``); ``double``: a number. money: a Decimal of
  scale 2 (string/double likewise).
* **NaN and ±Infinity under precise** cannot be represented: the connector writes null in
  a nullable column and stops in a NOT NULL one (``Invalid value: null used for required
  field``); a numeric array holding one is null in every mode (pgjdbc cannot read it). With
  ``unrepresentable=null`` (default) walcast writes null, as the connector does for the
  nullable columns it replicates (it does not know NOT NULL, so it never stops there);
  ``unrepresentable=fail`` stops with one line naming the column and LSN instead.
* date: days since 1970-01-01 (BC and year 294276 too); ``infinity``/``-infinity`` as
  pgjdbc's dates make them (-2147472692 / -2147472691). time: microseconds (milliseconds
  for time(0..3) under adaptive, and under connect), ``24:00:00`` a full day. timestamp:
  epoch microseconds (milliseconds for timestamp(0..3) and connect), infinity
  9223372036825200000 µs. timestamptz: ``2024-02-29T11:45:01.123456Z`` in UTC with the
  column's fraction digits (6 by default; none for timestamptz(0)), years past 9999 with
  ``+``, BC years negative, ``infinity``/``-infinity``; timetz: ``08:15:01.5Z`` in UTC.
* interval: microseconds as Debezium computes them (a month is 30.4375 days, in doubles,
  truncated; saturating at the long range).
* bytea: base64 (``bytes``; the same text for ``base64``), lowercase hex for ``hex``.
* text, varchar, char (padded), "char", uuid, json (as written), jsonb, xml, inet, cidr,
  macaddr, tsvector, ranges, enums, citext, ltree and every unknown type: the PostgreSQL
  text. hstore: a JSON object text, keys in java.util.HashMap order. point:
  ``{"x", "y", "wkb", "srid": null}``. bit(1)/varbit(1): a boolean; bit(n)/varbit(n):
  the bits as a little-endian integer's minimal bytes, base64. name: null (the connector
  does not decode it).
* arrays: lists of the element values; a multi-dimensional array's sub-arrays are null,
  bounds are dropped (pgjdbc's reading). Elements go through java.sql types: date and
  time elements before 1582 would follow the Julian calendar in Debezium (walcast writes
  the proleptic Gregorian value), time elements keep milliseconds (24:00:00 is 0),
  timetz elements milliseconds, ``infinity`` in a date[] is -622191234.
* Left out of the record, as the connector does: box, circle, line, lseg, path, polygon,
  xid, pg_lsn, tsquery, txid_snapshot, reg* and the arrays of money, name, interval,
  bit/varbit, xml and point.
* **Unchanged TOAST** values: the old row's value when PostgreSQL sent it (FULL);
  otherwise the placeholder (``unavailable_value_placeholder``): the text for string
  types, its UTF-8 bytes for bytea, ``[placeholder]`` for text/varchar/char/json arrays,
  its byte values for int4/int8/date arrays, its name-UUID for uuid arrays, and
  ``{"p": "p"}`` for hstore. Other types (numeric, other arrays, bits) have no placeholder;
  the connector stops there and so does walcast, with one line (set REPLICA IDENTITY FULL).

Known differences (walcast reads pgoutput, the connector also reads the catalog):

* ``debezium.schemas=true``: non-key columns are ``optional`` (the connector marks NOT NULL
  columns required); no ``default`` (the connector writes column defaults, 0 for serials)
  and no ``doc`` (column comments); enums are plain strings (the connector's
  ``io.debezium.data.Enum`` with ``allowed``). With a column default, JsonConverter also
  writes the default for a null value (``replace.null.with.default``); walcast writes null.
* The BEGIN record's transaction id holds the commit LSN where the connector has the
  Begin message's position (``TransactionBegin`` keeps none; ``TransactionBegin.lsn`` is
  used when present). Each change's ``source.lsn``, ``sequence`` and transaction id hold
  its own position, as the connector's.
* Bad input: a value no PostgreSQL server sends (an integer past 64 bits, a numeric past
  PostgreSQL's range, a bit string of other characters) and a commit time outside
  ``ts_ns``'s range (years 1677-2262) stop the stream with a DecodeError naming the table,
  column and LSN; they never reach Kafka in another form.
* Kafka headers: the two halves of a key change carry the connector's
  ``__debezium.newkey`` (the delete and its tombstone) and ``__debezium.oldkey`` (the
  create), in the default header converter's text (:mod:`.headers`), after
  walcast's own (commit LSN, xid, ordinal, source); ``__debezium.context.*`` (off by
  default in the connector) are not written. With ``daemon.split_key_updates`` the pump
  splits a key change before the encoder sees it: its halves carry no such header.
* Float digits follow JDK 19+; a connector on JDK 17 writes a few doubles with more digits
  (the same number).
* ``source.version`` is ``source_version`` (default ``3.6.1.Final``, the version whose
  output walcast reproduces).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

import orjson

from capture.errors import DecodeError, WalcastError
from capture.events import PG_EPOCH_US, ChangeEvent, Image, Op, Table, TransactionBegin
from capture.events import TransactionCommit as Commit
from capture.formats._common import PerTable, clock_us
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.debezium.encode_values import (
    BinaryMode,
    ColumnForm,
    NoPlaceholderError,
    TimeMode,
    ValueModes,
    column_form,
)
from capture.formats.debezium.headers import NEW_KEY, OLD_KEY, key_header
from capture.formats.debezium.scalars import (
    DecimalMode,
    UnrepresentableError,
    java_hashmap_order,
)
from capture.formats.debezium.schemas import (
    HEARTBEAT_KEY,
    HEARTBEAT_VALUE,
    TRANSACTION_KEY,
    TRANSACTION_VALUE,
    debezium_topic,
    envelope_schema,
    jackson_escapes,
    key_schema,
    schema_prefix,
    with_field,
)
from capture.formats.debezium.settings import (
    prefix_setting,
    skipped_setting,
)
from capture.formats.settings import PARSE, FormatSettings, setting_text
from capture.lsn import format_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST
from capture.split import key_changed

_NS_MAX_US: Final = (2**63 - 1) // 1000
"""The latest commit time (µs since 1970) whose ``ts_ns`` fits Java's long."""
_NS_MIN_US: Final = -(2**63) // 1000 + 1
_MESSAGE_TYPES: Final = {Op.INSERT: "I", Op.UPDATE: "U", Op.DELETE: "D", Op.SNAPSHOT: "I"}


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``debezium.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "debezium"

    topic_prefix: str = field(default="walcast", metadata={PARSE: prefix_setting})
    """``topic.prefix``: ``source.name``, the topics' and the schemas' names."""
    decimal_handling: DecimalMode = "precise"
    time_precision: TimeMode = "adaptive"
    binary_handling: BinaryMode = "bytes"
    schemas: bool = False
    """``{"schema": ..., "payload": ...}`` keys and values (JsonConverter's schemas.enable)."""
    tombstones: bool = True
    skipped_operations: str = field(default="t", metadata={PARSE: skipped_setting})
    provide_transaction_metadata: bool = False
    heartbeats: bool = False
    unavailable_value_placeholder: str = field(
        default="__debezium_unavailable_value", metadata={PARSE: setting_text}
    )
    load_snapshot: Literal["incremental", "true"] = "incremental"
    """``source.snapshot`` of load rows."""
    unrepresentable: Literal["null", "fail"] = "null"
    """A value the mode cannot represent (numeric NaN under precise): null, or stop."""
    source_version: str = "3.6.1.Final"

    def skipped(self) -> frozenset[str]:
        """The skipped operation codes."""
        text = self.skipped_operations
        return frozenset() if text == "none" else frozenset(text.split(","))


@dataclass(slots=True)
class _Plan:
    """What every record of one table (one Relation message) shares."""

    table: Table
    forms: list[ColumnForm]
    key_forms: list[ColumnForm] | None
    """Primary-key columns in key order; None for a table without a primary key."""
    collection: str
    key_prefix: bytes
    """``{"schema":<Key>,"payload":`` with schemas on, else empty."""
    value_prefix: bytes


class DebeziumEncoder(Encoder, name="debezium", settings=Settings):
    """The Debezium PostgreSQL connector's records (see the module docstring)."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        settings = self.settings
        prefix = settings.topic_prefix
        self.prefix = prefix
        self.default_topic = f"{prefix}.{{schema}}.{{table}}"
        self.default_transaction_topic = f"{prefix}.transaction"
        self.heartbeat_topic = f"__debezium-heartbeat.{prefix}"
        self._modes = ValueModes(
            settings.decimal_handling,
            settings.time_precision,
            settings.binary_handling,
            settings.unavailable_value_placeholder,
        )
        self._schemas = settings.schemas
        self._skipped = settings.skipped()
        self._metadata = settings.provide_transaction_metadata
        self._null_unrepresentable = settings.unrepresentable == "null"
        self._plans = PerTable(self._plan)
        self._source_head = {
            "version": settings.source_version,
            "connector": "postgresql",
            "name": prefix,
        }
        self._database = self.options.database
        self._last_commit: int | None = None
        self._xid = -1
        self._total = 0
        self._per_table: dict[str, int] = {}
        self._tx_key_prefix = schema_prefix(TRANSACTION_KEY) if self._schemas else b""
        self._tx_value_prefix = schema_prefix(TRANSACTION_VALUE) if self._schemas else b""

    # ------------------------------------------------------------------ tables

    def _plan(self, table: Table) -> _Plan:
        modes = self._modes
        forms = [
            form
            for i, column in enumerate(table.columns)
            if (form := column_form(column, i, modes)) is not None
        ]
        by_name = {f.name: f for f in forms}
        key_forms = [by_name[n] for n in table.primary_key if n in by_name] or None
        record = f"{self.prefix}.{table.schema}.{table.name}"
        key_prefix = value_prefix = b""
        if self._schemas:
            keys = set(table.primary_key)
            fields = [
                with_field(f.schema, optional=f.name not in keys, field=f.name) for f in forms
            ]
            value_prefix = schema_prefix(
                envelope_schema(record, debezium_topic(self.prefix, table), fields)
            )
            if key_forms is not None:
                key_fields = [with_field(f.schema, optional=False, field=f.name) for f in key_forms]
                key_prefix = schema_prefix(key_schema(record, key_fields))
        return _Plan(
            table, forms, key_forms, f"{table.schema}.{table.name}", key_prefix, value_prefix
        )

    # ------------------------------------------------------------------ values

    def _value(self, form: ColumnForm, image: Image, event: ChangeEvent) -> Any:
        """The column's value in Debezium's form (see the module docstring's bad input)."""
        raw = image.value(form.index) if form.typed else image.text(form.index)
        try:
            return form.convert(raw)
        except UnrepresentableError as exc:
            if self._null_unrepresentable:
                return None
            table = event.table.qualified_name
            raise WalcastError(
                f"debezium: column {table}.{form.name} (commit LSN {format_lsn(event.commit_lsn)}"
                f", xid {event.xid}): {exc}",
                hint="set debezium.decimal_handling=string or double, or "
                "debezium.unrepresentable=null to write null as the Debezium connector does",
            ) from None
        except (ValueError, ArithmeticError, LookupError, struct.error) as exc:
            raise DecodeError(
                f"change {event.ordinal} of transaction {event.xid}: a value no PostgreSQL "
                f"server sends for type {form.type_name}, so the debezium format cannot "
                f"write it ({type(exc).__name__}: {str(exc)[:120]})",
                message_type=_MESSAGE_TYPES.get(event.op, "?"),
                offset=None,
                lsn=event.commit_lsn,
                relation=event.table.qualified_name,
                column=form.name,
            ) from None

    def _row(
        self, forms: list[ColumnForm], image: Image, old: Image | None, event: ChangeEvent
    ) -> dict[str, Any]:
        """Column → value; unchanged TOAST from ``old`` (when sent) or the placeholder."""
        values = image.tuple.values
        row: dict[str, Any] = {}
        for form in forms:
            raw = values[form.index]
            if raw is None:
                row[form.name] = None
            elif raw is UNCHANGED_TOAST:
                was = UNCHANGED_TOAST if old is None else old.tuple.values[form.index]
                if was is None:
                    row[form.name] = None
                elif was is not UNCHANGED_TOAST:
                    assert old is not None
                    row[form.name] = self._value(form, old, event)
                else:
                    try:
                        row[form.name] = form.unchanged_toast(event.table.qualified_name)
                    except NoPlaceholderError as exc:
                        raise WalcastError(
                            f"debezium: {exc} (commit LSN {format_lsn(event.commit_lsn)}, "
                            f"xid {event.xid}); the Debezium connector stops here too",
                            hint="ALTER TABLE ... REPLICA IDENTITY FULL makes PostgreSQL send "
                            "the old value, which walcast then writes",
                        ) from None
            else:
                row[form.name] = self._value(form, image, event)
        return row

    def _key(self, plan: _Plan, row: dict[str, Any] | None) -> bytes | None:
        if plan.key_forms is None or row is None:
            return None
        payload = orjson.dumps({f.name: row[f.name] for f in plan.key_forms})
        if self._schemas:
            payload = plan.key_prefix + payload + b"}"
        return jackson_escapes(payload)

    # ------------------------------------------------------------------ records

    def _source(self, event: ChangeEvent, lsn: int) -> dict[str, Any]:
        commit_us = event.commit_ts + PG_EPOCH_US
        if not _NS_MIN_US <= commit_us <= _NS_MAX_US:
            raise DecodeError(
                f"transaction {event.xid} has a commit time of {commit_us} µs since 1970, "
                "outside the range of the debezium format's ts_ns (years 1677 to 2262)",
                message_type="B",
                offset=None,
                lsn=event.commit_lsn,
                relation=event.table.qualified_name,
            )
        load = event.op is Op.SNAPSHOT
        last = "null" if self._last_commit is None else f'"{self._last_commit}"'
        snapshot = "false"
        if load:
            snapshot = self.settings.load_snapshot
        streamed = not load or snapshot == "true"
        return {
            **self._source_head,
            "ts_ms": commit_us // 1000,
            "snapshot": snapshot,
            "db": self._database,
            "sequence": f'[{last},"{lsn}"]',
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "schema": event.table.schema,
            "table": event.table.name,
            "txId": event.xid if not load else None,
            "lsn": lsn if streamed else None,
            "xmin": None,
            "origin": None,
            "origin_lsn": None,
        }

    def _transaction_block(self, plan: _Plan, event: ChangeEvent, lsn: int) -> Any:
        if not self._metadata or event.op is Op.SNAPSHOT:
            return None
        self._total += 1
        order = self._per_table.get(plan.collection, 0) + 1
        self._per_table[plan.collection] = order
        return {
            "id": f"{event.xid}:{lsn}",
            "total_order": self._total,
            "data_collection_order": order,
        }

    def _record(
        self,
        plan: _Plan,
        event: ChangeEvent,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        key: bytes | None,
        lsn: int,
    ) -> EncodedMessage:
        now_us = clock_us(self._clock)
        envelope = {
            "before": before,
            "after": after,
            "source": self._source(event, lsn),
            "transaction": self._transaction_block(plan, event, lsn),
            "op": op,
            "ts_ms": now_us // 1000,
            "ts_us": now_us,
            "ts_ns": now_us * 1000,
        }
        payload = orjson.dumps(envelope)
        if self._schemas:
            payload = plan.value_prefix + payload + b"}"
        return EncodedMessage.for_change(event, jackson_escapes(payload), key)

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """The records of one change (see the module docstring)."""
        plan = self._plans[event.table]
        lsn = change_lsn(event)
        op = event.op
        skipped = self._skipped
        out: list[EncodedMessage] = []
        if op is Op.TRUNCATE:
            if "t" not in skipped:
                out.append(self._record(plan, event, "t", None, None, None, lsn))
            return out
        before = after = None
        if event.before is not None:
            before = self._row(plan.forms, event.before, None, event)
        if event.after is not None:
            old = event.before if event.before is not None and not event.before.key_only else None
            after = self._row(plan.forms, event.after, old, event)
        if op is Op.INSERT or op is Op.SNAPSHOT:
            if op is Op.SNAPSHOT or "c" not in skipped:
                code = "r" if op is Op.SNAPSHOT else "c"
                out.append(
                    self._record(plan, event, code, None, after, self._key(plan, after), lsn)
                )
            return out
        if op is Op.UPDATE and not key_changed(event):
            if "u" not in skipped:
                out.append(
                    self._record(plan, event, "u", before, after, self._key(plan, after), lsn)
                )
            return out
        if before is None:
            return out  # a delete without an old image: nothing to key or show (Debezium's)
        # a key change: each half names the other's key (the connector's headers)
        moved = op is Op.UPDATE and plan.key_forms is not None and after is not None
        if "d" not in skipped:
            old_key = self._key(plan, before)
            deleted = self._record(plan, event, "d", before, None, old_key, lsn)
            if moved:
                assert plan.key_forms is not None
                assert after is not None
                deleted.headers = ((NEW_KEY, key_header(plan.key_forms, after)),)
            out.append(deleted)
            if self.settings.tombstones:
                tombstone = EncodedMessage.for_change(event, None, old_key)
                tombstone.headers = deleted.headers
                out.append(tombstone)
        if op is Op.UPDATE and "c" not in skipped:
            created = self._record(plan, event, "c", None, after, self._key(plan, after), lsn)
            if moved:
                assert plan.key_forms is not None
                created.headers = ((OLD_KEY, key_header(plan.key_forms, before)),)
            out.append(created)
        return out

    # ------------------------------------------------------------------ transactions

    def _transaction_record(self, status: str, tx_id: str, body: dict[str, Any]) -> bytes:
        payload = orjson.dumps({"status": status, "id": tx_id, **body})
        if self._schemas:
            payload = self._tx_value_prefix + payload + b"}"
        return payload

    def _transaction_key(self, tx_id: str) -> bytes:
        payload = orjson.dumps({"id": tx_id})
        return self._tx_key_prefix + payload + b"}" if self._schemas else payload

    def begin(self, begin: TransactionBegin) -> list[EncodedMessage]:
        """A BEGIN record with transaction metadata (none for a load chunk)."""
        self._xid = begin.xid
        self._total = 0
        self._per_table = {}
        if not self._metadata or begin.xid == 0:
            return []
        tx_id = f"{begin.xid}:{begin_lsn(begin)}"
        body = {"event_count": None, "data_collections": None, "ts_ms": _commit_ms(begin.commit_ts)}
        value = self._transaction_record("BEGIN", tx_id, body)
        key = self._transaction_key(tx_id)
        return [EncodedMessage(value, key, "begin", None, None, begin.commit_lsn, begin.xid, None)]

    def commit(self, commit: Commit) -> list[EncodedMessage]:
        """An END record with transaction metadata; remembers the commit's end LSN."""
        out: list[EncodedMessage] = []
        if commit.xid == 0:
            return out
        if self._metadata:
            tx_id = f"{commit.xid}:{commit.end_lsn}"
            body = {
                "event_count": self._total,
                "data_collections": [
                    {"data_collection": name, "event_count": self._per_table[name]}
                    for name in java_hashmap_order(list(self._per_table))
                ],
                "ts_ms": _commit_ms(commit.commit_ts),
            }
            value = self._transaction_record("END", tx_id, body)
            key = self._transaction_key(tx_id)
            out.append(
                EncodedMessage(
                    value, key, "commit", None, None, commit.commit_lsn, commit.xid, None
                )
            )
        self._last_commit = commit.end_lsn
        return out

    def heartbeat(self, lsn: int, now_us: int) -> list[EncodedMessage]:
        """Debezium's heartbeat record (``debezium.heartbeats=true``)."""
        if not self.settings.heartbeats:
            return []
        key = orjson.dumps({"serverName": self.prefix})
        value = orjson.dumps({"ts_ms": now_us // 1000})
        if self._schemas:
            key = schema_prefix(HEARTBEAT_KEY) + key + b"}"
            value = schema_prefix(HEARTBEAT_VALUE) + value + b"}"
        return [
            EncodedMessage(
                jackson_escapes(value), jackson_escapes(key), "heartbeat", commit_lsn=lsn
            )
        ]

    def frame_for_tail(self, message: EncodedMessage) -> bytes:
        """One line per record; a tombstone prints as ``null``."""
        return (b"null" if message.value is None else message.value) + b"\n"


def _commit_ms(commit_ts: int) -> int:
    return (commit_ts + PG_EPOCH_US) // 1000


def change_lsn(event: ChangeEvent) -> int:
    """The WAL position of the change's pgoutput message (``ChangeEvent.lsn``), else its commit's.

    Load rows: the chunk's watermark.
    """
    if event.op is Op.SNAPSHOT:
        return event.commit_lsn
    lsn: int = getattr(event, "lsn", 0) or event.commit_lsn
    return lsn


def begin_lsn(begin: TransactionBegin) -> int:
    """The WAL position of the Begin message (``TransactionBegin.lsn``), else the commit's."""
    lsn: int = getattr(begin, "lsn", 0) or begin.commit_lsn
    return lsn


__all__ = ["DebeziumEncoder", "Settings", "begin_lsn", "change_lsn", "debezium_topic"]

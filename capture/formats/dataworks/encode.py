r"""``dataworks``: Alibaba DataWorks real-time sync JSON (``schema`` / ``payload`` / ``version``).

Each record::

    {"schema": {"dataColumn": [{"name": "id", "type": "LONG"}, ...],
                "primaryKey": ["id"],
                "source": {"dbType": "PostgreSQL", "dbVersion": "16.4", "dbName": "shop",
                           "schemaName": "public", "tableName": "orders"}},
     "payload": {"before": null, "after": {"dataColumn": {"id": 1, ...}},
                 "sequenceId": "000000000000238037200000000001", "scn": null,
                 "timestamp": {"eventTime": 1714673849123, "systemTime": 1714673849130,
                               "checkpointTime": 1714673849123},
                 "op": "INSERT", "ddl": null},
     "version": "0.0.1"}

Decisions:

* **Types** (DataWorks has six): bool → BOOLEAN (JSON true/false); int2, int4, int8, oid,
  xid → LONG (JSON integer, exact to 64 bits); float4, float8 → DOUBLE (JSON number;
  PostgreSQL prints the shortest text that round-trips, and so does the JSON encoder, so
  the consumer's double, or float for float4, is exactly the stored value; NaN, Infinity
  and -Infinity have no JSON number and are written as those strings); bytea → BYTES
  (base64 of the exact bytes); date → DATE (ms since the Unix epoch at 00:00 UTC, exact).
  timestamp and timestamptz → DATE only when the column's declared precision is 0 to 3
  (``timestamp(3)``): the ms value is then exact. Otherwise (the default precision is 6)
  they are STRING, PostgreSQL's exact text (``2024-05-02 18:17:29.123456+00``), because a
  DATE would drop the microseconds. ``dataworks.timestamp_type`` changes this: ``auto``
  (default, as described), ``date`` (always DATE; microseconds truncated towards the
  past) or ``string`` (date, timestamp and timestamptz all STRING). A timestamp without
  time zone is read as UTC. The special values infinity/-infinity stay strings even in a
  DATE column. Everything else is STRING with PostgreSQL's exact text: numeric (all
  digits, NaN, ±Infinity), char/varchar/text, time, timetz, interval, uuid, json/jsonb,
  inet/cidr/macaddr, arrays (PostgreSQL array literals), money, bit, xml, enums …
  The consumer recovers every value exactly: LONG/BOOLEAN/STRING as they are, DOUBLE
  by parsing the number (or the special string), BYTES by base64-decoding, DATE as an
  instant in ms, and STRING columns by parsing the text as PostgreSQL does (the column's
  PostgreSQL type is not carried; DataWorks' schema has only the six types).
* **Update** = two records, ``UPDATE_BEFOR`` (``before`` set, ``after`` null) then
  ``UPDATE_AFTER`` (``before`` null, ``after`` set), sharing one ``sequenceId``. With
  ``dataworks.update_records=single`` an update is one ``UPDATE_AFTER`` record holding
  both images (DataWorks' "one Kafka record per update" option).
* **No before image** (REPLICA IDENTITY DEFAULT/USING INDEX): ``before.dataColumn`` then
  holds only the replica-identity key columns: the old key when the key changed, else
  the key's values from the new row (it did not change). The other columns are absent
  (unknown), not null. A delete likewise carries only the key unless the identity is
  FULL. ``schema.dataColumn`` always lists every column.
* **Unchanged TOAST** values (not sent): taken from the old image when it is complete
  (REPLICA IDENTITY FULL; the value did not change), else absent from ``after``.
* ``sequenceId`` = commit LSN as 20 decimal digits + the change's ordinal as 10 digits:
  unique, deterministic across replays (a consumer drops duplicates by it), and sorting
  as a string orders changes by commit then by position in the transaction.
* **Load rows** (``Op.SNAPSHOT``, read by an initial or on-demand load) take the insert
  form (DataWorks has no load operation; its full data is inserts merged with the
  incremental data by ``sequenceId``): op ``INSERT``, ``after`` the row. Their
  ``sequenceId`` is the load chunk's watermark LSN + the row's ordinal in the chunk; the
  watermark lies after every change the row includes and before every later change of
  it, so the row sorts before the later streamed changes of the same row.
* ``scn`` = null (Oracle only). ``timestamp``: ``eventTime`` and ``checkpointTime`` =
  commit time (ms), ``systemTime`` = when the record was built (ms).
* ``dbType`` = "PostgreSQL", ``dbVersion``/``dbName`` from the source, ``schemaName`` /
  ``tableName`` the table's; ``primaryKey`` = the primary key, null when there is none.
* **TRUNCATE** = one record per table with op ``TRUNCATE``, both images null and
  ``ddl`` = ``{"text": "TRUNCATE TABLE \\"s\\".\\"t\\"", "ddlMeta": null}`` (ddlMeta is a
  serialized Java object in DataWorks; walcast has none).
* **Heartbeat**: :meth:`DataWorksEncoder.heartbeat` writes DataWorks' ``MHEARTBEAT``
  record (schema fields and images null, ``eventTime`` = ``checkpointTime`` = now).
* **Transaction records** ``TRANSACTION_BEGIN`` / ``TRANSACTION_END`` are off by default
  (DataWorks' Kafka output does not write them for DML sync, and consumers that do not
  expect them would treat them as data); ``dataworks.transaction_records=true`` turns
  them on. They look like heartbeats with ``sequenceId`` = commit LSN + ordinal 0 (begin)
  or change count + 1 (end), so they sort around the transaction's changes.
* ``version`` = "0.0.1", as in DataWorks' record examples.
* ``EncodedMessage.key`` is :func:`~capture.formats._common.row_key` (``schema.table``
  for a table without a primary key: one partition, commit order) of the new row (the
  old row for a delete); both records of an update share it. Heartbeats and transaction
  records have no key.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

import orjson

from capture.events import (
    PG_EPOCH_US,
    ChangeEvent,
    Column,
    Op,
    Table,
    TransactionBegin,
    TransactionCommit,
)
from capture.formats._common import (
    Family,
    PerTable,
    RowKeys,
    bytea_bytes,
    clock_ms,
    family,
    json_number,
    pg_bool,
)
from capture.formats._common import column_texts as image_texts
from capture.formats._common import truncate_sql as _truncate_sql
from capture.formats._instants import unix_days, unix_us
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.settings import FormatSettings
from capture.pgoutput.messages import UNCHANGED_TOAST, UnchangedToast
from capture.types.datetimes import date_from_text, timestamptz_from_text
from capture.types.typmod import time_precision
from capture.types.values import Infinity

_VERSION: Final = b'"0.0.1"'
_PG_EPOCH_MS: Final = PG_EPOCH_US // 1000
_NULL_SCHEMA: Final = b'{"dataColumn":null,"primaryKey":null,"source":null}'

Converter = Callable[[str], Any]


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``dataworks.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "dataworks"

    timestamp_type: Literal["auto", "date", "string"] = "auto"
    """How date, timestamp and timestamptz columns are typed."""
    transaction_records: bool = False
    """Write TRANSACTION_BEGIN / TRANSACTION_END records around each transaction."""
    update_records: Literal["split", "single"] = "split"
    """An update as UPDATE_BEFOR + UPDATE_AFTER, or as one UPDATE_AFTER with both images."""


# ------------------------------------------------------------------ value converters


def date_ms(text: str) -> int | str:
    """Return a date's ms since the Unix epoch (midnight UTC); infinity stays a string."""
    value = date_from_text(text.encode())
    if isinstance(value, Infinity):
        return text
    return unix_days(value) * 86_400_000


def timestamp_ms(text: str) -> int | str:
    """Return a timestamp[tz]'s ms since the Unix epoch (floor); infinity stays a string.

    A value without an offset (a timestamp without time zone) is taken as UTC.
    """
    value = timestamptz_from_text(text.encode())
    if isinstance(value, Infinity):
        return text
    return unix_us(value) // 1000


def bytes_base64(text: str) -> str:
    """BYTES: base64 of the bytea's bytes."""
    return base64.b64encode(bytea_bytes(text)).decode()


def to_long(text: str) -> int:
    """LONG: the integer."""
    return int(text)


def column_type(column: Column, timestamp_type: str) -> tuple[str, Converter | None]:
    """(DataWorks type, converter from PostgreSQL text; None = the text itself)."""
    fam = family(column)
    if fam is Family.BOOL:
        return "BOOLEAN", pg_bool
    if fam in (Family.SMALLINT, Family.INTEGER, Family.BIGINT):
        return "LONG", to_long
    if fam in (Family.REAL, Family.DOUBLE):
        return "DOUBLE", json_number
    if fam is Family.BYTES:
        return "BYTES", bytes_base64
    if timestamp_type != "string":
        digits = time_precision(column.type_modifier)
        if fam is Family.DATE:
            return "DATE", date_ms
        if fam in (Family.TIMESTAMP, Family.TIMESTAMPTZ) and (
            timestamp_type == "date" or (digits is not None and digits <= 3)
        ):
            return "DATE", timestamp_ms
    return "STRING", None


@dataclass(slots=True)
class _Plan:
    table: Table
    names: tuple[str, ...]
    converters: tuple[Converter | None, ...]
    plain: bool
    """Every column is STRING (no conversion)."""
    keys: RowKeys
    schema_json: bytes


class DataWorksEncoder(Encoder, name="dataworks", settings=Settings):
    """DataWorks JSON records; updates split into UPDATE_BEFOR/UPDATE_AFTER."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        self._plans = PerTable(self._plan)
        self._ts = -1
        self._event_ms = 0

    # ------------------------------------------------------------------ per table

    def _plan(self, table: Table) -> _Plan:
        types = [column_type(c, self.settings.timestamp_type) for c in table.columns]
        schema = {
            "dataColumn": [
                {"name": c.name, "type": t} for c, (t, _) in zip(table.columns, types, strict=True)
            ],
            "primaryKey": list(table.primary_key) or None,
            "source": {
                "dbType": "PostgreSQL",
                "dbVersion": self.options.source_version,
                "dbName": self.options.database,
                "schemaName": table.schema,
                "tableName": table.name,
            },
        }
        converters = tuple(conv for _, conv in types)
        return _Plan(
            table=table,
            names=table.column_names,
            converters=converters,
            plain=all(c is None for c in converters),
            keys=RowKeys(table),
            schema_json=orjson.dumps(schema),
        )

    # ------------------------------------------------------------------ images

    @staticmethod
    def _columns(
        plan: _Plan, texts: list[str | UnchangedToast | None], indexes: Any = None
    ) -> dict[str, Any]:
        """``{"dataColumn": {...}}`` for ``texts`` (all columns, or ``indexes``)."""
        names = plan.names
        convs = plan.converters
        if indexes is None:
            if UNCHANGED_TOAST not in texts:
                if plan.plain:
                    return {"dataColumn": dict(zip(names, texts, strict=True))}
                return {
                    "dataColumn": {
                        name: conv(text) if conv is not None and isinstance(text, str) else text
                        for name, conv, text in zip(names, convs, texts, strict=True)
                    }
                }
            indexes = range(len(names))
        out: dict[str, Any] = {}
        for i in indexes:
            text = texts[i]
            if text is None:
                out[names[i]] = None
            elif not isinstance(text, UnchangedToast):
                conv = convs[i]
                out[names[i]] = text if conv is None else conv(text)
        return {"dataColumn": out}

    def _images(
        self, plan: _Plan, event: ChangeEvent
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(before, after) dataColumn objects of a row change."""
        op = event.op
        before = event.before
        after = event.after
        key_indexes = plan.table.key_indexes
        if op is Op.INSERT or op is Op.SNAPSHOT:
            assert after is not None
            return None, self._columns(plan, image_texts(after))
        if op is Op.DELETE:
            if before is None:
                return {"dataColumn": {}}, None
            indexes = key_indexes if before.key_only else None
            return self._columns(plan, image_texts(before), indexes), None
        assert after is not None
        new = image_texts(after)
        if before is None:
            return self._columns(plan, new, key_indexes), self._columns(plan, new)
        old = image_texts(before)
        if before.key_only:
            return self._columns(plan, old, key_indexes), self._columns(plan, new)
        if UNCHANGED_TOAST in new:
            new = [o if isinstance(n, UnchangedToast) else n for n, o in zip(new, old, strict=True)]
        return self._columns(plan, old), self._columns(plan, new)

    # ------------------------------------------------------------------ records

    def _record(
        self,
        schema_json: bytes,
        op: str,
        sequence_id: str | None,
        event_ms: int,
        *,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
        ddl: dict[str, Any] | None = None,
        system: bool = True,
    ) -> bytes:
        stamps: dict[str, int] = {"eventTime": event_ms}
        if system:
            stamps["systemTime"] = clock_ms(self._clock)
        stamps["checkpointTime"] = event_ms
        payload = {
            "before": before,
            "after": after,
            "sequenceId": sequence_id,
            "scn": None,
            "timestamp": stamps,
            "op": op,
            "ddl": ddl,
        }
        return (
            b'{"schema":'
            + schema_json
            + b',"payload":'
            + orjson.dumps(payload)
            + b',"version":'
            + _VERSION
            + b"}"
        )

    def _event_time(self, commit_ts: int) -> int:
        if commit_ts != self._ts:
            self._ts = commit_ts
            self._event_ms = commit_ts // 1000 + _PG_EPOCH_MS
        return self._event_ms

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """Encode one record per change; two for an update (unless ``update_records=single``)."""
        table = event.table
        plan = self._plans[table]
        schema_json = plan.schema_json
        event_ms = self._event_time(event.commit_ts)
        seq = f"{event.commit_lsn:020d}{event.ordinal:010d}"
        op = event.op
        if op is Op.TRUNCATE:
            ddl = {"text": _truncate_sql(table, event.truncate_options), "ddlMeta": None}
            values = [self._record(schema_json, "TRUNCATE", seq, event_ms, ddl=ddl)]
            key = table.qualified_name.encode()
        else:
            before, after = self._images(plan, event)
            if op is Op.INSERT or op is Op.SNAPSHOT:
                values = [self._record(schema_json, "INSERT", seq, event_ms, after=after)]
                key = plan.keys.key(event.after)
            elif op is Op.DELETE:
                values = [self._record(schema_json, "DELETE", seq, event_ms, before=before)]
                key = plan.keys.key(event.before)
            else:
                key = plan.keys.key(event.after)
                if self.settings.update_records == "single":
                    values = [
                        self._record(
                            schema_json, "UPDATE_AFTER", seq, event_ms, before=before, after=after
                        )
                    ]
                else:
                    values = [
                        self._record(schema_json, "UPDATE_BEFOR", seq, event_ms, before=before),
                        self._record(schema_json, "UPDATE_AFTER", seq, event_ms, after=after),
                    ]
        return [EncodedMessage.for_change(event, value, key) for value in values]

    def begin(self, begin: TransactionBegin) -> list[EncodedMessage]:
        """Write a ``TRANSACTION_BEGIN`` record when ``dataworks.transaction_records`` is on."""
        return self._transaction_record("TRANSACTION_BEGIN", begin, 0)

    def commit(self, commit: TransactionCommit) -> list[EncodedMessage]:
        """Write a ``TRANSACTION_END`` record when ``dataworks.transaction_records`` is on."""
        return self._transaction_record("TRANSACTION_END", commit, commit.change_count + 1)

    def _transaction_record(
        self, operation: str, edge: TransactionBegin | TransactionCommit, ordinal: int
    ) -> list[EncodedMessage]:
        """A transaction record; its ``sequenceId`` sorts it at ``ordinal`` in its transaction."""
        if not self.settings.transaction_records:
            return []
        seq = f"{edge.commit_lsn:020d}{ordinal:010d}"
        value = self._record(_NULL_SCHEMA, operation, seq, self._event_time(edge.commit_ts))
        kind = "begin" if isinstance(edge, TransactionBegin) else "commit"
        return [EncodedMessage(value, None, kind, commit_lsn=edge.commit_lsn, xid=edge.xid)]

    def heartbeat(self, lsn: int, now_us: int) -> list[EncodedMessage]:
        """Write DataWorks' ``MHEARTBEAT`` record (``eventTime`` = ``checkpointTime`` = now)."""
        value = self._record(_NULL_SCHEMA, "MHEARTBEAT", None, now_us // 1000, system=False)
        return [EncodedMessage(value, None, "heartbeat", commit_lsn=lsn)]

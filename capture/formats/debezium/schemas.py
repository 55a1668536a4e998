"""Kafka Connect schemas of the ``debezium`` format, as JsonConverter writes them.

With ``debezium.schemas=true`` every key and value is ``{"schema": ..., "payload": ...}``
(``schemas.enable=true``); this module builds the ``schema`` part exactly as Kafka Connect's
``JsonConverter.asJsonSchema`` writes Debezium 3.6.1's schemas: keys in the order ``type``,
``fields``/``items``, ``optional``, ``name``, ``version``, ``doc``, ``parameters``,
``default``, and ``field`` last for a struct's field. Schemas are built once per table (a
new Relation message) and kept as JSON bytes.

What walcast cannot know from pgoutput, and writes differently from the connector (which
reads the catalog): a column is ``optional`` unless it is in the primary key (the connector
marks NOT NULL columns required), no ``default`` (the connector writes constant and serial
defaults), no ``doc`` for column comments, and an enum's ``io.debezium.data.Enum`` schema
has no ``allowed`` parameter (walcast writes an enum as a plain string schema). See the
module docstring of :mod:`capture.formats.debezium.encode`.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from capture.events import Column, Table
from capture.types import typmod

_PLAIN: Final = {
    "int2": "int16",
    "int4": "int32",
    "int8": "int64",
    "oid": "int64",
    "float4": "float",
    "float8": "double",
    "bool": "boolean",
}
_NAMED_STRING: Final = {
    "json": "io.debezium.data.Json",
    "jsonb": "io.debezium.data.Json",
    "hstore": "io.debezium.data.Json",
    "uuid": "io.debezium.data.Uuid",
    "xml": "io.debezium.data.Xml",
    "tsvector": "io.debezium.data.Tsvector",
    "ltree": "io.debezium.data.Ltree",
    "timetz": "io.debezium.time.ZonedTime",
    "timestamptz": "io.debezium.time.ZonedTimestamp",
}
_LOGICAL: Final = "org.apache.kafka.connect.data."
_TOPIC_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]")
_LOWER_ESCAPE: Final = re.compile(rb"\\\\|\\u00[0-9a-f]{2}")


def _named(type_: str, name: str, **rest: Any) -> dict[str, Any]:
    return {"type": type_, "name": name, "version": 1, **rest}


def with_field(
    schema: dict[str, Any], *, optional: bool, field: str | None = None
) -> dict[str, Any]:
    """``schema`` with ``optional`` (and ``field``) in JsonConverter's key order."""
    out: dict[str, Any] = {"type": schema["type"]}
    for key in ("fields", "items"):
        if key in schema:
            out[key] = schema[key]
    out["optional"] = optional
    for key in ("name", "version", "doc", "parameters", "default"):
        if key in schema:
            out[key] = schema[key]
    if field is not None:
        out["field"] = field
    return out


def _precision(column: Column) -> int:
    precision = typmod.time_precision(column.type_modifier)
    return 6 if precision is None else precision


def _scalar_schema(
    column: Column, type_name: str, decimal: str, time: str, binary: str
) -> dict[str, Any]:
    if type_name in _PLAIN:
        return {"type": _PLAIN[type_name]}
    if type_name in _NAMED_STRING:
        return _named("string", _NAMED_STRING[type_name])
    if type_name == "numeric":
        declared = typmod.numeric_precision_scale(column.type_modifier)
        if decimal == "string":
            return {"type": "string"}
        if decimal == "double":
            return {"type": "double"}
        if declared is None:
            return dict(_VARIABLE_SCALE)
        precision, scale = declared
        parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
        return _named("bytes", _LOGICAL + "Decimal", parameters=parameters)
    if type_name == "money":
        if decimal == "precise":
            return _named("bytes", _LOGICAL + "Decimal", parameters={"scale": "2"})
        return {"type": "string" if decimal == "string" else "double"}
    if type_name == "bytea":
        return {"type": "bytes" if binary == "bytes" else "string"}
    if type_name == "date":
        return _named("int32", _LOGICAL + "Date" if time == "connect" else "io.debezium.time.Date")
    if type_name == "time":
        if time == "connect":
            return _named("int32", _LOGICAL + "Time")
        if time == "adaptive" and _precision(column) <= 3:
            return _named("int32", "io.debezium.time.Time")
        return _named("int64", "io.debezium.time.MicroTime")
    if type_name == "timestamp":
        if time == "connect":
            return _named("int64", _LOGICAL + "Timestamp")
        if _precision(column) <= 3:
            return _named("int64", "io.debezium.time.Timestamp")
        return _named("int64", "io.debezium.time.MicroTimestamp")
    if type_name == "interval":
        return _named("int64", "io.debezium.time.MicroDuration")
    if type_name == "point":
        return dict(_POINT)
    if type_name in ("bit", "varbit"):
        length = typmod.bit_length(column.type_modifier)
        if length is None or length <= 1:
            return {"type": "boolean"}
        return _named("bytes", "io.debezium.data.Bits", parameters={"length": str(length)})
    return {"type": "string"}


def column_schema(column: Column, decimal: str, time: str, binary: str) -> dict[str, Any]:
    """The Connect schema of ``column``'s values (``optional``/``field`` added by the caller)."""
    type_name = column.type_name
    if type_name.startswith("_"):
        element = _scalar_schema(column, type_name[1:], decimal, time, binary)
        return {"type": "array", "items": with_field(element, optional=True)}
    return _scalar_schema(column, type_name, decimal, time, binary)


# ------------------------------------------------------------------ fixed schemas

SNAPSHOT_ALLOWED: Final = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)


def _req(type_: str, field: str, **rest: Any) -> dict[str, Any]:
    """A required field of a fixed schema."""
    return with_field({"type": type_, **rest}, optional=False, field=field)


def _opt(type_: str, field: str, **rest: Any) -> dict[str, Any]:
    """An optional field of a fixed schema."""
    return with_field({"type": type_, **rest}, optional=True, field=field)


def _struct(
    name: str, fields: list[dict[str, Any]], *, optional: bool = False, **rest: Any
) -> dict[str, Any]:
    """A Connect struct schema, its keys in the order Kafka Connect's JsonConverter writes."""
    return {"type": "struct", "fields": fields, "optional": optional, "name": name, **rest}


_VARIABLE_SCALE: Final = _named(
    "struct",
    "io.debezium.data.VariableScaleDecimal",
    fields=[_req("int32", "scale"), _req("bytes", "value")],
    doc="Variable scaled decimal",
)
_POINT: Final = _named(
    "struct",
    "io.debezium.data.geometry.Point",
    fields=[_req("double", "x"), _req("double", "y"), _opt("bytes", "wkb"), _opt("int32", "srid")],
    doc="Geometry (POINT)",
)


SOURCE: Final = _struct(
    "io.debezium.connector.postgresql.Source",
    [
        _req("string", "version"),
        _req("string", "connector"),
        _req("string", "name"),
        _req("int64", "ts_ms"),
        _opt(
            "string",
            "snapshot",
            name="io.debezium.data.Enum",
            version=1,
            parameters={"allowed": SNAPSHOT_ALLOWED},
            default="false",
        ),
        _req("string", "db"),
        _opt("string", "sequence"),
        _opt("int64", "ts_us"),
        _opt("int64", "ts_ns"),
        _req("string", "schema"),
        _req("string", "table"),
        _opt("int64", "txId"),
        _opt("int64", "lsn"),
        _opt("int64", "xmin"),
        _opt("string", "origin"),
        _opt("int64", "origin_lsn"),
    ],
    version=1,
    field="source",
)
"""``io.debezium.connector.postgresql.Source`` (the ``source`` field of an envelope)."""

TRANSACTION_BLOCK: Final = _struct(
    "event.block",
    [
        _req("string", "id"),
        _req("int64", "total_order"),
        _req("int64", "data_collection_order"),
    ],
    optional=True,
    version=1,
    field="transaction",
)

TRANSACTION_KEY: Final = _struct(
    "io.debezium.connector.common.TransactionMetadataKey",
    [_req("string", "id")],
    version=1,
)
TRANSACTION_VALUE: Final = _struct(
    "io.debezium.connector.common.TransactionMetadataValue",
    [
        _req("string", "status"),
        _req("string", "id"),
        _opt("int64", "event_count"),
        {
            "type": "array",
            "items": _struct(
                "event.collection",
                [_req("string", "data_collection"), _req("int64", "event_count")],
                optional=True,
                version=1,
            ),
            "optional": True,
            "field": "data_collections",
        },
        _req("int64", "ts_ms"),
    ],
    version=1,
)
HEARTBEAT_KEY: Final = _struct(
    "io.debezium.connector.common.ServerNameKey",
    [_req("string", "serverName")],
    version=1,
)
HEARTBEAT_VALUE: Final = _struct(
    "io.debezium.connector.common.Heartbeat",
    [_req("int64", "ts_ms")],
    version=1,
)


def key_schema(record_name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The key struct ``<prefix>.<schema>.<table>.Key`` of the primary-key ``fields``."""
    return _struct(record_name + ".Key", fields)


def envelope_schema(
    record_name: str, envelope_name: str, fields: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``<topic>.Envelope`` schema of a table whose value struct has ``fields``."""

    def value(field: str) -> dict[str, Any]:
        return _struct(record_name + ".Value", fields, optional=True, field=field)

    return _struct(
        envelope_name + ".Envelope",
        [
            value("before"),
            value("after"),
            SOURCE,
            TRANSACTION_BLOCK,
            _req("string", "op"),
            _opt("int64", "ts_ms"),
            _opt("int64", "ts_us"),
            _opt("int64", "ts_ns"),
        ],
        version=2,
    )


def debezium_topic(prefix: str, table: Table) -> str:
    """The topic the connector names for ``table`` (invalid characters as ``_``)."""
    return _TOPIC_CHARS.sub("_", f"{prefix}.{table.schema}.{table.name}")


def jackson_escapes(data: bytes) -> bytes:
    r"""Jackson's ``\\u00XX`` escapes are upper case (orjson's are lower case)."""
    if b"\\u00" not in data:
        return data
    return _LOWER_ESCAPE.sub(
        lambda m: m[0] if m[0] == b"\\\\" else b"\\u00" + m[0][4:].upper(), data
    )


def schema_prefix(schema: dict[str, Any]) -> bytes:
    """``{"schema":<schema>,"payload":`` as bytes (the payload and ``}`` follow)."""
    return b'{"schema":' + orjson.dumps(schema) + b',"payload":'


__all__ = [
    "HEARTBEAT_KEY",
    "HEARTBEAT_VALUE",
    "SOURCE",
    "TRANSACTION_BLOCK",
    "TRANSACTION_KEY",
    "TRANSACTION_VALUE",
    "column_schema",
    "debezium_topic",
    "envelope_schema",
    "jackson_escapes",
    "key_schema",
    "schema_prefix",
    "with_field",
]

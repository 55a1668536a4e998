r"""``dts-avro``: Alibaba DTS Avro, one raw ``com.alibaba.dts.formats.avro.Record`` per message.

Decoded with ``from_avro`` (spark-avro) and DTS's published schema
(``schemas/dts-avro-Record.avsc``; its union list is turned into a self-contained
``Record`` schema). Bytes that do not decode, or decode to a record without operation,
go to the quarantine as ``malformed`` (``mode=PERMISSIVE``: the job keeps going).

* ``operation``: INSERT/INIT (``afterImages``), UPDATE (both), DELETE
  (``beforeImages``); DDL whose text is ``TRUNCATE …`` → truncate, other DDL →
  ``unsupported``; BEGIN, COMMIT, ROLLBACK, ABORT, HEARTBEAT, CHECKPOINT and the other
  control operations carry no change.
* ``objectName``: ``db.schema.table`` (PostgreSQL, Oracle …) or ``db.table`` (MySQL: the
  database is then also the schema).
* Values → PostgreSQL text: Integer (bool columns ``1``/``0`` → ``t``/``f``),
  Character (decoded by its charset), Decimal, Float (Spark's double text),
  Timestamp (timestamptz text, µs), DateTime (date / timestamp / time text, BC years
  from astronomical numbering), TimestampWithTimeZone (timetz text), BinaryObject
  (``\x…``), TextObject and geometries (their text). ``EmptyObject.NULL`` is NULL;
  ``EmptyObject.NONE`` ("no value") leaves the column out of the image (for the after
  image it is an unchanged TOAST column).
* Column types: the layout's, else ``fields[].dataTypeNumber`` read as a PostgreSQL type
  OID (walcast) for the built-in types.
* Positions: walcast's tags ``walcast.commit_lsn``, ``walcast.ordinal`` and
  ``walcast.commit_time`` (µs); otherwise ``sourceTimestamp`` (seconds) and null
  positions (``id``/``sourcePosition`` of other producers are not LSNs). Primary key:
  the layout's, else DTS's ``pk_uk_info`` tag.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import json
from functools import cache
from typing import Any, ClassVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from capture.schema_files import require_schema
from pipeline import pgtext
from pipeline.formats.base import (
    ERR_MALFORMED,
    ERR_UNSUPPORTED,
    Parser,
    attach_layout,
    change_message,
    changed_between,
    empty_names,
    layout_types,
    names_of,
    no_changes,
)
from pipeline.layouts import column_names

NAMESPACE = "com.alibaba.dts.formats.avro"
_CONTROL = (
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
)
_OPS = {"INSERT": "insert", "INIT": "insert", "UPDATE": "update", "DELETE": "delete"}
TYPE_OIDS: dict[int, str] = {
    16: "bool",
    17: "bytea",
    18: "char",
    19: "name",
    20: "int8",
    21: "int2",
    23: "int4",
    25: "text",
    26: "oid",
    28: "xid",
    114: "json",
    142: "xml",
    650: "cidr",
    700: "float4",
    701: "float8",
    790: "money",
    829: "macaddr",
    869: "inet",
    1000: "_bool",
    1005: "_int2",
    1007: "_int4",
    1009: "_text",
    1015: "_varchar",
    1016: "_int8",
    1042: "bpchar",
    1043: "varchar",
    1082: "date",
    1083: "time",
    1114: "timestamp",
    1184: "timestamptz",
    1186: "interval",
    1266: "timetz",
    1560: "bit",
    1562: "varbit",
    1700: "numeric",
    2950: "uuid",
    3802: "jsonb",
}
"""Built-in PostgreSQL type OIDs (walcast's ``dataTypeNumber``) → type names."""


@cache
def record_schema() -> str:
    """The ``Record`` schema as one self-contained Avro JSON document.

    The published file is a union list of named types referenced by name; each named
    type is inlined at its first use (later uses keep the name), as Avro requires.
    """
    doc: list[Any] = json.loads(require_schema("dts-avro-Record.avsc").read_text())
    named: dict[str, dict[str, Any]] = {}
    for t in doc:
        if isinstance(t, dict) and "name" in t:
            full = f"{t.get('namespace', NAMESPACE)}.{t['name']}"
            named[full] = named[t["name"]] = t
    done: set[str] = set()

    def define(t: dict[str, Any]) -> Any:
        full = f"{t.get('namespace', NAMESPACE)}.{t['name']}"
        if full in done:
            return full
        done.add(full)
        out = {**t, "namespace": t.get("namespace", NAMESPACE)}
        if t["type"] == "record":
            out["fields"] = [{**f, "type": inline(f["type"])} for f in t["fields"]]
        return out

    def inline(node: Any) -> Any:
        if isinstance(node, str):
            return define(named[node]) if node in named else node
        if isinstance(node, list):
            return [inline(x) for x in node]
        if isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed") and "name" in node:
                return define(node)
            return {
                k: inline(v) if k in ("type", "items", "values") else v for k, v in node.items()
            }
        return node

    return json.dumps(define(named[f"{NAMESPACE}.Record"]))


def _pad(value: Column, width: int) -> Column:
    return F.lpad(value.cast("string"), width, "0")


def _datetime_text(dt: Column) -> Column:
    """PostgreSQL text of a DTS ``DateTime`` (date, timestamp or time of day)."""
    year = dt["year"]
    bc = year <= 0
    shown_year = F.when(bc, F.lit(1) - year).otherwise(year)
    date = F.concat(
        _pad(shown_year, 4), F.lit("-"), _pad(dt["month"], 2), F.lit("-"), _pad(dt["day"], 2)
    )
    time = F.concat(
        _pad(dt["hour"], 2),
        F.lit(":"),
        _pad(dt["minute"], 2),
        F.lit(":"),
        _pad(dt["second"], 2),
        pgtext.fraction(F.coalesce(dt["millis"], F.lit(0))),
    )
    with_date = F.concat(
        date,
        F.when(dt["hour"].isNotNull(), F.concat(F.lit(" "), time)).otherwise(F.lit("")),
        F.when(bc, F.lit(" BC")).otherwise(F.lit("")),
    )
    return F.when(year.isNotNull(), with_date).otherwise(time)


def value_text(v: Column, pg_type: Column) -> Column:
    """PostgreSQL text of one image value (a union struct); null for NULL and NONE."""
    charset = F.upper(
        F.regexp_replace(F.coalesce(v["member_Character"]["charset"], F.lit("")), "-", "")
    )
    raw = v["member_Character"]["value"]
    text = (
        F.when(charset.isin("LATIN1", "ISO88591"), F.decode(raw, "ISO-8859-1"))
        .when(charset.isin("ASCII", "USASCII"), F.decode(raw, "US-ASCII"))
        .otherwise(F.decode(raw, "UTF-8"))
    )
    integer = v["member_Integer"]["value"]
    ts = v["member_Timestamp"]
    tstz = v["member_TimestampWithTimeZone"]
    return (
        F.when(
            v["member_Integer"].isNotNull(),
            F.when(pg_type == "bool", pgtext.bool_text(integer)).otherwise(integer),
        )
        .when(v["member_Character"].isNotNull(), text)
        .when(v["member_Decimal"].isNotNull(), v["member_Decimal"]["value"])
        .when(v["member_Float"].isNotNull(), v["member_Float"]["value"].cast("string"))
        .when(
            ts.isNotNull(),
            pgtext.timestamp_text(
                ts["timestamp"] * F.lit(1_000_000) + ts["millis"], with_zone=pg_type != "timestamp"
            ),
        )
        .when(v["member_DateTime"].isNotNull(), _datetime_text(v["member_DateTime"]))
        .when(tstz.isNotNull(), F.concat(_datetime_text(tstz["value"]), tstz["timezone"]))
        .when(
            v["member_BinaryObject"].isNotNull(),
            pgtext.bytea_from_binary(v["member_BinaryObject"]["value"]),
        )
        .when(v["member_TextObject"].isNotNull(), v["member_TextObject"]["value"])
        .when(v["member_TextGeometry"].isNotNull(), v["member_TextGeometry"]["value"])
        .when(
            v["member_BinaryGeometry"].isNotNull(),
            pgtext.bytea_from_binary(v["member_BinaryGeometry"]["value"]),
        )
    )


class DtsAvroParser(Parser):
    """DTS Avro records → normalized changes."""

    name: ClassVar[str] = "dts-avro"

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring."""
        r = F.col("r")
        obj = r["objectName"]
        parts = F.split(obj, r"\.", 3)
        three = F.size(parts) == 3
        decoded = records.withColumn(
            "r",
            from_avro(
                F.col("value"),
                record_schema(),
                {"mode": "PERMISSIVE", "enableStableIdentifiersForUnionType": "true"},
            ),
        ).select(
            "*",
            F.element_at(parts, 1).alias("_database"),
            F.when(three, F.element_at(parts, 2))
            .otherwise(F.element_at(parts, 1))
            .alias("_schema"),
            F.when(three, F.element_at(parts, 3)).otherwise(F.element_at(parts, 2)).alias("_table"),
        )
        df = attach_layout(decoded, layouts, "_schema", "_table")
        tags = r["tags"]
        fields = r["fields"]["member_array"]
        names = column_names(fields)
        oid_types = F.create_map(*[F.lit(x) for kv in TYPE_OIDS.items() for x in kv])
        message_types = F.map_from_arrays(
            names,
            F.transform(
                fields,
                lambda f: F.coalesce(
                    F.element_at(oid_types, f["dataTypeNumber"]), f["dataTypeNumber"].cast("string")
                ),
            ),
        )
        # Names and types are columns of their own, read (not rebuilt) by the image
        # lambdas below; so are the images, which several expressions read.
        df = df.select(
            "*",
            names.alias("_names"),
            F.coalesce(
                layout_types(F.col("_layout")), F.when(fields.isNotNull(), message_types)
            ).alias("_types"),
        )
        names, types = F.col("_names"), F.col("_types")

        def image(which: str) -> Column:
            values = r[which]["member_array"]
            entries = F.transform(
                F.arrays_zip(names.alias("n"), values.alias("v")),
                lambda e: F.struct(
                    e["n"].alias("key"),
                    value_text(e["v"], F.coalesce(F.element_at(types, e["n"]), F.lit(""))).alias(
                        "value"
                    ),
                    F.coalesce(e["v"]["member_EmptyObject"] == "NONE", F.lit(False)).alias("none"),
                ),
            )
            kept = F.filter(entries, lambda e: ~e["none"])
            return F.when(
                values.isNotNull(),
                F.map_from_entries(F.transform(kept, lambda e: F.struct(e["key"], e["value"]))),
            )

        def none_columns(which: str) -> Column:
            values = r[which]["member_array"]
            flagged = F.filter(
                F.arrays_zip(names.alias("n"), values.alias("v")),
                lambda e: F.coalesce(e["v"]["member_EmptyObject"] == "NONE", F.lit(False)),
            )
            return F.coalesce(F.transform(flagged, lambda e: e["n"]), empty_names())

        operation = r["operation"]
        ddl = r["afterImages"]["member_string"]
        is_truncate = (operation == "DDL") & F.upper(
            F.ltrim(F.coalesce(ddl, F.lit("")))
        ).startswith("TRUNCATE")
        op = F.when(is_truncate, F.lit("truncate")).otherwise(
            F.element_at(F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), operation)
        )
        df = df.select(
            "*", image("beforeImages").alias("_before"), image("afterImages").alias("_after")
        )
        before, after = F.col("_before"), F.col("_after")
        lsn = pgtext.lsn_number(tags["walcast.commit_lsn"])
        ordinal = F.when(
            tags["walcast.ordinal"].rlike("^[0-9]+$"), tags["walcast.ordinal"].cast("long")
        )
        commit_time = F.coalesce(
            F.to_timestamp(tags["walcast.commit_time"]), F.timestamp_seconds(r["sourceTimestamp"])
        )
        pk_info = F.from_json(tags["pk_uk_info"], "map<string,array<string>>")
        changed = (
            F.when(op == "insert", names_of(after))
            .when(op.isin("delete", "truncate"), empty_names())
            .when(F.size(before) >= F.size(after), changed_between(before, after))
        )
        sql = F.upper(F.coalesce(ddl, F.lit("")))
        the_change = self.table_change(
            op,
            lsn,
            database=F.col("_database"),
            commit_time=commit_time,
            xid=F.when(r["sourceTxid"].rlike("^[0-9]{1,18}$"), r["sourceTxid"].cast("long")),
            ordinal=ordinal,
            primary_key=F.coalesce(
                F.col("_layout.primary_key"), F.element_at(pk_info, "PRIMARY"), empty_names()
            ),
            before=F.when(op.isin("update", "delete"), before),
            after=F.when(op.isin("insert", "update"), after),
            unchanged_toast=F.when(op == "update", none_columns("afterImages")).otherwise(
                empty_names()
            ),
            changed_columns=changed,
            column_types=types,
            truncate_options=F.when(
                is_truncate,
                F.struct(
                    sql.contains("CASCADE").alias("cascade"),
                    sql.contains("RESTART IDENTITY").alias("restart_identity"),
                ),
            ),
        )
        error = (
            F.when(r.isNull() | operation.isNull(), F.lit(ERR_MALFORMED))
            .when(operation.isin(*_CONTROL), F.lit(None))
            .when(op.isNull(), F.lit(ERR_UNSUPPORTED))
            .when(F.col("_table").isNull(), F.lit(ERR_MALFORMED))
            .when(op.isin("insert", "update") & after.isNull(), F.lit(ERR_MALFORMED))
            .when(op.isin("update", "delete") & before.isNull(), F.lit(ERR_MALFORMED))
        )
        detail = (
            F.when(r.isNull() | operation.isNull(), F.lit("not a DTS Avro Record datum"))
            .when(
                op.isNull(),
                F.concat(F.lit("operation "), operation, F.lit(": "), F.coalesce(ddl, F.lit(""))),
            )
            .when(F.col("_table").isNull(), F.lit("objectName is not db.schema.table"))
            .otherwise(F.concat(F.lit("operation "), operation, F.lit(" without its image")))
        )
        changes = F.when(error.isNotNull() | operation.isin(*_CONTROL), no_changes()).otherwise(
            F.array(the_change)
        )
        return df.select(*change_message(error, detail, lsn, ordinal, changes))

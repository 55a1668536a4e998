r"""``canal``: canal ``FlatMessage`` JSON (canal's own producer, Alibaba DTS, walcast).

Read as canal defines it (``schemas/canal.schema.json``); walcast's additions are
optional:

* One change per element of ``data`` (canal batches several rows per message; walcast
  writes one). DTS instances created before 2022-03-20 put a DELETE's row in ``old``
  with ``data`` null: such a row is the deleted row.
* UPDATE: ``after`` = ``data[i]``; ``before`` = ``data[i]`` overlaid with ``old[i]`` (as
  Flink's canal-json builds it: columns absent from ``old[i]`` did not change);
  ``changed_columns`` = the keys of ``old[i]``.
* TRUNCATE (canal's DDL-style message, ``isDdl`` true, walcast writes one per table):
  op ``truncate`` with the options parsed from ``sql``. Other DDL is not a row change:
  the message goes to the quarantine as ``unsupported`` (so schema changes stay visible).
* Positions: the commit LSN comes from the walcast extension ``walcast.commitLsn`` or
  from ``gtid`` when it has walcast's form ``<xid>:<X/Y>``; the ordinal only from
  ``walcast.ordinal`` (enable ``canal.walcast_keys`` in the producer to let replays be
  dropped). Other producers' ``id`` (a batch id or DTS offset) is not an LSN: their
  changes have null positions and keep Kafka order.
* ``database``: canal's ``database`` is the namespace that qualifies a table (MySQL's
  database, walcast's PostgreSQL schema by default). Parser option ``database_name``
  mirrors walcast's ``canal.database_name``: ``schema`` (default: ``database`` is the
  schema), ``database`` (it is the database; the schema is then ``public``) or
  ``database.schema``.
* ``unchanged_toast``: for an UPDATE, the columns of ``mysqlType`` absent from
  ``data[i]`` (walcast leaves out unchanged TOAST values it could not recover).
* Types: the table's layout record when one is known, else ``mysqlType`` mapped to
  PostgreSQL type names where the name is unambiguous (``bigint`` → ``int8`` …).
* Values: PostgreSQL's text, except where walcast's canal settings write another form,
  which is turned back: bool ``true``/``false`` or ``1``/``0`` (``canal.boolean``) →
  ``t``/``f``; a timestamptz without an offset (``canal.timestamptz=utc``, the UTC
  wall-clock time) → the same time with ``+00``; bytea per parser option ``bytea``,
  which must match the producer's ``canal.bytea``: ``base64`` (default, as walcast's),
  ``latin1`` (canal's own: bytes read as ISO-8859-1) or ``hex`` (PostgreSQL's ``\x``).
  Each form is read whatever the producer's setting was, except bytea's (its three forms
  overlap: ``\x00`` is also valid latin1), hence the option.
* Loads: ``INIT`` (DTS's full-load type, walcast's load rows) is an insert of the row.
* A field with the wrong JSON type (``ts: "yesterday"``, ``pkNames: "id"``, ``isDdl:
  "yes"``) makes the message ``malformed`` (quarantined, the fields named), never a
  change with nulls in their place.
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from typing import ClassVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import pgtext
from pipeline.formats.base import (
    ERR_MALFORMED,
    ERR_UNSUPPORTED,
    Parser,
    attach_layout,
    canonical_image,
    change_message,
    layout_types,
    no_changes,
)
from pipeline.schemas import struct_from_schema

_DML = ("INSERT", "UPDATE", "DELETE", "INIT")
_OPS = {"INSERT": "insert", "INIT": "insert", "UPDATE": "update", "DELETE": "delete"}
_GTID = r"^([0-9]+):([0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8})$"
_TYPED_FIELDS = ("es", "id", "ts", "isDdl", "data", "old", "pkNames", "mysqlType", "sqlType")
"""Fields whose JSON type Spark checks (a string field takes any value's text)."""
_BYTEA = {
    "base64": pgtext.bytea_from_base64,
    "latin1": pgtext.bytea_from_latin1,
    "hex": lambda value: value,
}
"""Parser option ``bytea`` → the conversion of a bytea value to PostgreSQL's hex text."""

DECLARED_TYPES: dict[str, str] = {
    "boolean": "bool",
    "bool": "bool",
    "smallint": "int2",
    "int2": "int2",
    "tinyint": "int2",
    "integer": "int4",
    "int": "int4",
    "int4": "int4",
    "mediumint": "int4",
    "bigint": "int8",
    "int8": "int8",
    "real": "float4",
    "float4": "float4",
    "float": "float4",
    "double precision": "float8",
    "double": "float8",
    "float8": "float8",
    "numeric": "numeric",
    "decimal": "numeric",
    "char": "bpchar",
    "bpchar": "bpchar",
    "character": "bpchar",
    "varchar": "varchar",
    "character varying": "varchar",
    "text": "text",
    "bytea": "bytea",
    "date": "date",
    "time": "time",
    "timetz": "timetz",
    "timestamp": "timestamp",
    "datetime": "timestamp",
    "timestamptz": "timestamptz",
    "interval": "interval",
    "uuid": "uuid",
    "json": "json",
    "jsonb": "jsonb",
    "inet": "inet",
}
"""Declared type (``mysqlType``, without its modifier) → PostgreSQL type name."""


def pg_type_of_declared(declared: Column) -> Column:
    """PostgreSQL type name of a declared type text (``numeric(12,2)`` → ``numeric``).

    Arrays (``integer[]``) become ``_<element>``; unknown names are kept as they are.
    """
    base = F.lower(F.trim(F.regexp_replace(declared, r"\(.*?\)|\[\]", "")))
    lookup = F.create_map(*[F.lit(x) for kv in DECLARED_TYPES.items() for x in kv])
    mapped = F.coalesce(F.element_at(lookup, base), base)
    return F.when(declared.endswith("[]"), F.concat(F.lit("_"), mapped)).otherwise(mapped)


def _raw_fields_if_needed(text: Column, j: Column) -> Column:
    """The message as a map of raw field texts, where a typed field parsed as null.

    A field with the wrong JSON type (``ts`` "yesterday", ``pkNames`` "id") parses as
    null, like a field left out; the raw map tells them apart. Parsing the message a
    second time costs about as much as the first, so it is done only where a typed field
    is null, ``old`` counting only for an UPDATE (the one kind that reads it): a
    well-formed insert or delete of a table with a primary key is parsed once.
    """
    suspect = F.upper(j["type"]).eqNullSafe("UPDATE") & j["old"].isNull()
    for name in _TYPED_FIELDS:
        if name != "old":
            suspect = suspect | j[name].isNull()
    return F.when(j.isNull() | suspect, F.from_json(text, "map<string,string>"))


class CanalParser(Parser):
    """canal FlatMessage JSON → normalized changes."""

    name: ClassVar[str] = "canal"
    option_names: ClassVar[tuple[str, ...]] = ("database_name", "bytea")

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring.

        A one-row message (walcast's) builds its change outside any lambda, so Spark
        generates code for it; several rows go through ``transform`` (interpreted).
        """
        mode = self.options.get("database_name", "schema")
        if mode not in ("schema", "database", "database.schema"):
            raise ValueError(
                f"canal: database_name {mode!r} is not schema|database|database.schema"
            )
        bytea = self.options.get("bytea", "base64")
        if bytea not in _BYTEA:
            raise ValueError(f"canal: bytea {bytea!r} is not base64|latin1|hex")
        convert = {
            "bool": pgtext.bool_text,
            "timestamptz": pgtext.timestamptz_with_offset,
            "bytea": _BYTEA[bytea],
        }
        j = F.col("j")
        db_field = j["database"]
        if mode == "schema":
            database, schema = F.lit(None).cast("string"), db_field
        elif mode == "database":
            database, schema = db_field, F.lit("public")
        else:
            database = F.substring_index(db_field, ".", 1)
            schema = F.expr(
                "substring(j.database, length(substring_index(j.database, '.', 1)) + 2)"
            )
        text = F.col("value").cast("string")
        parsed = (
            records.withColumn("j", F.from_json(text, struct_from_schema("canal.schema.json")))
            .withColumn("_raw", _raw_fields_if_needed(text, F.col("j")))
            .select(
                "*",
                database.alias("_database"),
                schema.alias("_schema"),
                j["table"].alias("_table"),
            )
        )
        df = attach_layout(parsed, layouts, "_schema", "_table", convert_types=convert)
        targets = F.col("_layout.convert")  # null without a layout: every value is looked at

        kind = F.upper(j["type"])
        gtid_lsn = pgtext.lsn_number(F.regexp_extract(j["gtid"], _GTID, 2))
        lsn = F.coalesce(pgtext.lsn_number(j["walcast"]["commitLsn"]), gtid_lsn)
        xid = F.coalesce(
            j["walcast"]["xid"],
            F.when(gtid_lsn.isNotNull(), F.regexp_extract(j["gtid"], _GTID, 1).cast("long")),
        )
        ordinal = j["walcast"]["ordinal"]
        commit_time = F.timestamp_millis(j["es"])
        # Types, and the one-row message's images with PostgreSQL's texts, are columns of
        # their own: several expressions read each, and their lambdas then run once.
        df = df.withColumn(
            "_types",
            F.coalesce(
                layout_types(F.col("_layout")),
                F.when(
                    j["mysqlType"].isNotNull(),
                    F.transform_values(j["mysqlType"], lambda _k, v: pg_type_of_declared(v)),
                ),
            ),
        )
        types = F.col("_types")
        pk = F.coalesce(F.col("_layout.primary_key"), j["pkNames"], F.array().cast("array<string>"))
        rows = F.when(kind == "DELETE", F.coalesce(j["data"], j["old"])).otherwise(j["data"])
        df = df.select(
            "*",
            canonical_image(F.element_at(rows, 1), types, convert, targets).alias("_row1"),
            canonical_image(F.element_at(j["old"], 1), types, convert, targets).alias("_old1"),
        )
        common = {
            "database": F.col("_database"),
            "commit_time": commit_time,
            "xid": xid,
            "primary_key": pk,
            "column_types": types,
        }

        def row_change(row: Column, i: Column, old_row: Column | None = None) -> Column:
            if old_row is None:  # inside transform(): convert here
                row = canonical_image(row, types, convert, targets)
                old_row = canonical_image(F.element_at(j["old"], i + 1), types, convert, targets)
            old = F.coalesce(old_row, F.create_map().cast("map<string,string>"))
            op = F.element_at(F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), kind)
            before = F.when(kind == "UPDATE", F.map_concat(row, old)).when(kind == "DELETE", row)
            after = F.when(kind.isin("INSERT", "INIT", "UPDATE"), row)
            changed = (
                F.when(kind == "UPDATE", F.map_keys(old))
                .when(kind.isin("INSERT", "INIT"), F.map_keys(row))
                .otherwise(F.array().cast("array<string>"))
            )
            declared = F.coalesce(F.map_keys(j["mysqlType"]), F.array().cast("array<string>"))
            return self.table_change(
                op,
                lsn,
                **common,
                unchanged_toast=F.when(
                    kind == "UPDATE", F.array_except(declared, F.map_keys(row))
                ).otherwise(F.array().cast("array<string>")),
                ordinal=ordinal + i,
                before=before,
                after=after,
                changed_columns=changed,
            )

        truncate = self.table_change(
            F.lit("truncate"),
            lsn,
            **common,
            unchanged_toast=F.array().cast("array<string>"),
            ordinal=ordinal,
            changed_columns=F.array().cast("array<string>"),
            truncate_options=F.struct(
                F.upper(j["sql"]).contains("CASCADE").alias("cascade"),
                F.upper(j["sql"]).contains("RESTART IDENTITY").alias("restart_identity"),
            ),
        )
        # A field sent with the wrong JSON type (ts "yesterday", pkNames "id", isDdl "yes")
        # parses as null: the raw text of the field tells it from a field left out.
        # (``old`` is read by an UPDATE only: see _raw_fields_if_needed)
        raw = F.col("_raw")
        wrong_types = F.concat_ws(
            ", ",
            *[
                F.when(
                    F.element_at(raw, F.lit(name)).isNotNull()
                    & j[name].isNull()
                    & (F.lit(name != "old") | (kind == "UPDATE")),
                    F.lit(name),
                )
                for name in _TYPED_FIELDS
            ],
        )
        error = (
            F.when(j.isNull(), F.lit(ERR_MALFORMED))
            .when(wrong_types != "", F.lit(ERR_MALFORMED))
            .when(j["table"].isNull() | j["type"].isNull(), F.lit(ERR_MALFORMED))
            .when(kind.isin(*_DML) & (F.coalesce(F.size(rows), F.lit(0)) < 1), F.lit(ERR_MALFORMED))
            .when(~kind.isin(*_DML, "TRUNCATE"), F.lit(ERR_UNSUPPORTED))
        )
        detail = (
            F.when(j.isNull(), F.lit("not a canal FlatMessage JSON object"))
            .when(wrong_types != "", F.concat(F.lit("wrong JSON type of "), wrong_types))
            .when(j["table"].isNull() | j["type"].isNull(), F.lit("missing table or type"))
            .when(kind.isin(*_DML), F.lit("DML message without rows"))
            .otherwise(F.concat(F.lit("canal type "), j["type"], F.lit(": "), j["sql"]))
        )
        changes = (
            F.when(error.isNotNull(), no_changes())
            .when(kind == "TRUNCATE", F.array(truncate))
            .when(F.size(rows) == 1, F.array(row_change(F.col("_row1"), F.lit(0), F.col("_old1"))))
            .otherwise(F.transform(rows, lambda row, i: row_change(row, i)))  # noqa: PLW0108 - Spark counts the lambda's parameters
        )
        return df.select(*change_message(error, detail, lsn, ordinal, changes))

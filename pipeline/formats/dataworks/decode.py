r"""``dataworks``: DataWorks real-time sync JSON (``schema`` / ``payload`` / ``version``).

Read as DataWorks defines it (``schemas/dataworks.schema.json``):

* ``payload.op``: ``INSERT``, ``DELETE``, ``TRUNCATE``; an update is either two records
  (``UPDATE_BEFOR`` with the before image, then ``UPDATE_AFTER`` with the after image,
  sharing a ``sequenceId``), which :mod:`pipeline.sequencing` pairs into one change, or
  one ``UPDATE_AFTER`` holding both images. ``MHEARTBEAT``, ``TRANSACTION_BEGIN``/``END``,
  ``GTID``, ``XACOMMIT``/``XAROLLBACK`` are control records (no change); DDL ops
  (``CREATE``, ``ALTER`` …) go to the quarantine as ``unsupported``.
* Values are typed by ``schema.dataColumn[].type`` and rewritten to PostgreSQL's text:
  BOOLEAN → ``t``/``f``, BYTES (base64) → ``\x…`` hex, DATE (epoch ms) → ``date``,
  ``timestamp`` or ``timestamptz`` text according to the layout's type (``timestamp``
  text without a layout); LONG, DOUBLE and STRING keep their text.
* ``source``: ``dbName`` is the database, ``schemaName`` the schema (MySQL has none:
  the database name is then the schema), ``tableName`` the table. ``primaryKey`` the
  key (the layout's when known).
* Positions: walcast's ``sequenceId`` (20-digit commit LSN + 10-digit ordinal) gives
  the commit LSN and the ordinal; other producers' sequence ids are opaque (null
  positions, Kafka order). ``eventTime`` (ms) is the commit time.
* Columns of ``schema.dataColumn`` absent from an update's after image were not sent
  (unchanged TOAST): they are listed in ``unchanged_toast``.
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
    changed_between,
    empty_names,
    layout_types,
    message,
    names_of,
    no_changes,
)
from pipeline.layouts import column_names, column_types
from pipeline.schemas import struct_from_schema

_CONTROL = ("MHEARTBEAT", "TRANSACTION_BEGIN", "TRANSACTION_END", "GTID", "XACOMMIT", "XAROLLBACK")
_ROW_OPS = ("INSERT", "UPDATE_BEFOR", "UPDATE_AFTER", "DELETE", "TRUNCATE")
_GENERIC_TYPES = {
    "LONG": "int8",
    "DOUBLE": "float8",
    "BOOLEAN": "bool",
    "BYTES": "bytea",
    "DATE": "timestamp",
    "STRING": "text",
}


_REWRITTEN_TYPES = ("BOOLEAN", "BYTES", "DATE")
"""DataWorks types whose values :func:`_value_text` rewrites (the others keep their text)."""


def _value_text(dw_type: Column, pg_type: Column, value: Column) -> Column:
    """PostgreSQL text of one DataWorks value of type ``dw_type``."""
    is_ms = value.rlike("^-?[0-9]+$")
    micros = value.cast("long") * F.lit(1000)
    date_text = (
        F.when(pg_type == "date", pgtext.date_text_from_millis(value.cast("long")))
        .when(pg_type == "timestamptz", pgtext.timestamp_text(micros, with_zone=True))
        .otherwise(pgtext.timestamp_text(micros, with_zone=False))
    )
    return (
        F.when(value.isNull(), value)
        .when(dw_type == "BOOLEAN", pgtext.bool_text(value))
        .when(dw_type == "BYTES", pgtext.bytea_from_base64(value))
        .when((dw_type == "DATE") & is_ms, date_text)
        .otherwise(value)
    )


class DataWorksParser(Parser):
    """DataWorks JSON → normalized changes (split updates paired downstream)."""

    name: ClassVar[str] = "dataworks"
    paired: ClassVar[bool] = True

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring."""
        j = F.col("j")
        source = j["schema"]["source"]
        parsed = records.withColumn(
            "j",
            F.from_json(F.col("value").cast("string"), struct_from_schema("dataworks.schema.json")),
        ).select(
            "*",
            F.coalesce(source["schemaName"], source["dbName"]).alias("_schema"),
            source["tableName"].alias("_table"),
        )
        df = attach_layout(parsed, layouts, "_schema", "_table")
        payload = j["payload"]
        op_raw = payload["op"]
        columns = j["schema"]["dataColumn"]
        # A column of its own, so the image lambdas below look it up rather than build it
        # again for every value.
        df = df.withColumn("_dw_types", column_types(columns))
        dw_types = F.col("_dw_types")
        # The columns whose values are rewritten (the others keep their text): a small map
        # of its own, so that a value's lookup scans it, not every column's type three
        # times, and an image of a table without such columns is kept as it is.
        df = df.withColumn(
            "_dw_rewritten",
            F.map_filter(dw_types, lambda _k, v: v.isin(*_REWRITTEN_TYPES)),
        )
        rewritten = F.col("_dw_rewritten")
        pg_types = layout_types(F.col("_layout"))

        def value_text(key: Column, value: Column) -> Column:
            kind = F.element_at(rewritten, key)
            return F.when(kind.isNull(), value).otherwise(
                _value_text(kind, F.coalesce(F.element_at(pg_types, key), F.lit("")), value)
            )

        def image(which: str) -> Column:
            raw = payload[which]["dataColumn"]
            return F.when(F.size(rewritten) == 0, raw).otherwise(
                F.transform_values(raw, value_text)
            )

        # The images are columns of their own: each is read by several expressions
        # below, and a projection would otherwise evaluate its lambdas once per use.
        df = df.select("*", image("before").alias("_before"), image("after").alias("_after"))
        before, after = F.col("_before"), F.col("_after")
        seq = payload["sequenceId"]
        walcast_seq = seq.rlike("^[0-9]{30}$")
        lsn = F.when(walcast_seq, F.substring(seq, 1, 20).cast("decimal(20,0)").cast("long"))
        ordinal = F.when(walcast_seq, F.substring(seq, 21, 10).cast("long"))
        op = (
            F.when(op_raw == "INSERT", F.lit("insert"))
            .when(op_raw.isin("UPDATE_BEFOR", "UPDATE_AFTER"), F.lit("update"))
            .when(op_raw == "DELETE", F.lit("delete"))
            .when(op_raw == "TRUNCATE", F.lit("truncate"))
        )
        all_columns = column_names(columns)
        unchanged = F.when(
            (op_raw == "UPDATE_AFTER") & after.isNotNull(),
            F.array_except(all_columns, names_of(after)),
        ).otherwise(empty_names())
        changed = (
            F.when(op_raw == "INSERT", names_of(after))
            .when((op_raw == "UPDATE_AFTER") & before.isNotNull(), changed_between(before, after))
            .when(op_raw.isin("DELETE", "TRUNCATE"), empty_names())
        )
        generic = F.transform_values(
            dw_types,
            lambda _k, v: F.element_at(
                F.create_map(*[F.lit(x) for kv in _GENERIC_TYPES.items() for x in kv]), v
            ),
        )
        the_change = self.table_change(
            op,
            lsn,
            database=source["dbName"],
            commit_time=F.timestamp_millis(payload["timestamp"]["eventTime"]),
            ordinal=ordinal,
            primary_key=F.coalesce(
                F.col("_layout.primary_key"), j["schema"]["primaryKey"], empty_names()
            ),
            before=before,
            after=after,
            unchanged_toast=unchanged,
            changed_columns=changed,
            column_types=F.coalesce(pg_types, F.when(columns.isNotNull(), generic)),
        )
        row_op = op_raw.isin(*_ROW_OPS)
        error = (
            F.when(j.isNull() | payload.isNull() | op_raw.isNull(), F.lit(ERR_MALFORMED))
            .when(op_raw.isin(*_CONTROL), F.lit(None))
            .when(~row_op, F.lit(ERR_UNSUPPORTED))
            .when(F.col("_table").isNull(), F.lit(ERR_MALFORMED))
            .when(
                ((op_raw == "INSERT") | (op_raw == "UPDATE_AFTER")) & after.isNull(),
                F.lit(ERR_MALFORMED),
            )
            .when(op_raw.isin("UPDATE_BEFOR", "DELETE") & before.isNull(), F.lit(ERR_MALFORMED))
        )
        detail = (
            F.when(j.isNull() | payload.isNull() | op_raw.isNull(), F.lit("not a DataWorks record"))
            .when(~row_op, F.concat(F.lit("op "), op_raw, F.lit(": "), payload["ddl"]["text"]))
            .when(F.col("_table").isNull(), F.lit("schema.source.tableName missing"))
            .otherwise(F.concat(F.lit("op "), op_raw, F.lit(" without its image")))
        )
        changes = F.when(error.isNotNull() | op_raw.isin(*_CONTROL), no_changes()).otherwise(
            F.array(the_change)
        )
        role = F.when(op_raw == "UPDATE_BEFOR", F.lit("before")).when(
            (op_raw == "UPDATE_AFTER") & before.isNull(), F.lit("after")
        )
        pair_key = F.concat_ws("\u0000", F.col("_schema"), F.col("_table"), seq)
        return df.select(
            *message(
                error=error,
                error_detail=F.when(error.isNotNull(), F.coalesce(detail, F.lit(""))),
                commit_lsn_num=lsn,
                first_ordinal=ordinal,
                change_count=F.size(changes),
                segment=F.lit(None),
                pair_role=F.when(error.isNull(), role),
                pair_key=F.when(role.isNotNull(), pair_key),
                changes=changes,
            )
        )

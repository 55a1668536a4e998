"""``shareplex``: Shareplex JSON as Alibaba DTS (and walcast) write it.

``{"meta": {...}, "data": {...}, "key": {...}}`` (``schemas/shareplex.schema.json``):

* ``meta.op``: ``ins``/``upd``/``del`` (also DTS's spelled-out ``INSERT``, ``UPDATE``,
  ``DELETE``), ``truncate``, and ``INIT`` (a row of a full load: DTS's, and walcast's
  initial and on-demand loads), an insert; anything else (DTS's ``DROP COLUMN`` …) goes to the
  quarantine as ``unsupported``.
* insert: ``after`` = ``data``. delete: ``before`` = ``data`` (without REPLICA IDENTITY
  FULL only the key columns). update: ``after`` = ``data`` (only the changed columns'
  new values: absent columns keep their value), ``before`` = ``key`` (the key's before
  values and, as in DTS's example, the changed columns' old values);
  ``changed_columns`` = the keys of ``data``.
* ``meta.table`` is ``OWNER.TABLE`` → schema and table (split at the first dot).
* Positions: ``scn`` is the commit position (walcast: the commit LSN as a decimal;
  Oracle: the SCN), so it orders and deduplicates changes; ``seq`` is the ordinal;
  ``trans`` the transaction id when it is a number (walcast's xid).
* ``meta.time`` (commit time, seconds, UTC) is the commit time.
* The format carries no primary key and no types: both come from the table's layout
  record when one is known (``primary_key`` is empty otherwise).
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.formats.base import (
    ERR_MALFORMED,
    ERR_UNSUPPORTED,
    Parser,
    attach_layout,
    empty_names,
    layout_types,
    message,
    names_of,
    no_changes,
)
from pipeline.schemas import struct_from_schema

_OPS = {
    "ins": "insert",
    "insert": "insert",
    "init": "insert",
    "upd": "update",
    "update": "update",
    "del": "delete",
    "delete": "delete",
    "truncate": "truncate",
}


class ShareplexParser(Parser):
    """Shareplex JSON → normalized changes."""

    name: ClassVar[str] = "shareplex"

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring."""
        j = F.col("j")
        meta = j["meta"]
        table_text = meta["table"]
        parsed = records.withColumn(
            "j",
            F.from_json(F.col("value").cast("string"), struct_from_schema("shareplex.schema.json")),
        ).select(
            "*",
            F.substring_index(table_text, ".", 1).alias("_schema"),
            F.expr(
                "substring(j.meta.table, length(substring_index(j.meta.table, '.', 1)) + 2)"
            ).alias("_table"),
        )
        df = attach_layout(parsed, layouts, "_schema", "_table")
        op = F.element_at(
            F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), F.lower(meta["op"])
        )
        scn = F.when(meta["scn"].rlike("^[0-9]{1,18}$"), meta["scn"].cast("long"))
        data = j["data"]
        the_change = self.table_change(
            op,
            scn,
            commit_time=F.to_timestamp(
                F.regexp_replace(meta["time"], "Z$", ""), "yyyy-MM-dd'T'HH:mm:ss"
            ),
            xid=F.when(meta["trans"].rlike("^[0-9]{1,18}$"), meta["trans"].cast("long")),
            ordinal=meta["seq"],
            primary_key=F.coalesce(F.col("_layout.primary_key"), empty_names()),
            before=F.when(op == "delete", data).when(op == "update", j["key"]),
            # An update's data holds the changed columns only; the key's before values
            # (``key``) complete the row's identity (data wins where both have a column,
            # e.g. a changed key).
            after=F.when(op == "insert", data).when(
                op == "update", F.map_concat(F.coalesce(j["key"], F.create_map()), data)
            ),
            unchanged_toast=empty_names(),
            changed_columns=F.when(op.isin("insert", "update"), names_of(data)).otherwise(
                empty_names()
            ),
            column_types=layout_types(F.col("_layout")),
        )
        error = (
            F.when(j.isNull() | meta.isNull(), F.lit(ERR_MALFORMED))
            .when(table_text.isNull() | ~table_text.contains("."), F.lit(ERR_MALFORMED))
            .when(op.isNull(), F.lit(ERR_UNSUPPORTED))
            .when(op.isin("insert", "update", "delete") & data.isNull(), F.lit(ERR_MALFORMED))
        )
        detail = (
            F.when(j.isNull() | meta.isNull(), F.lit("not a Shareplex JSON object with meta"))
            .when(
                table_text.isNull() | ~table_text.contains("."),
                F.lit("meta.table is not OWNER.TABLE"),
            )
            .when(op.isNull(), F.concat(F.lit("operation "), meta["op"]))
            .otherwise(F.lit("row change without data"))
        )
        changes = F.when(error.isNotNull(), no_changes()).otherwise(F.array(the_change))
        return df.select(
            *message(
                error=error,
                error_detail=F.when(error.isNotNull(), detail),
                commit_lsn_num=scn,
                first_ordinal=meta["seq"],
                change_count=F.size(changes),
                changes=changes,
            )
        )

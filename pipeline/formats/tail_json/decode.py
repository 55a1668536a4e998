"""``json``: walcast's own line format (``walcast run --format json``, ``walcast tail``).

One JSON object per row change (``schemas/json.schema.json``, written by
:mod:`capture.formats.tail_json.encode`): ``op``, ``schema``, ``table``, ``xid``,
``commit_lsn`` (``X/Y``), ``commit_time`` (ISO-8601, UTC), ``before``/``after`` (column →
PostgreSQL text, or null for a missing image) and ``unchanged_toast``.

* **op**: ``insert``, ``update``, ``delete``, ``truncate`` as they are; ``snapshot`` (a
  row of an initial or on-demand load) is an insert at the load chunk's position. Any
  other op is ``unsupported``.
* **Values** are already PostgreSQL's text: the images are kept as they are. Columns
  named in ``unchanged_toast`` are absent from ``after`` (they keep their value).
* **Positions**: ``commit_lsn`` is the commit LSN; the format carries no ordinal, so a
  change's ordinal is the ``walcast.ordinal`` header (every message holds one change).
* **Primary key and types**: from the table's layout record (empty key and no types
  without one: the table is then kept as a multiset of rows).
* ``changed_columns``: the after image's columns for an insert; for an update, those
  whose value differs from a known before value (a key-only before image tells few).
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`)
from __future__ import annotations

from typing import ClassVar

from pyspark.sql import DataFrame
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
from pipeline.schemas import struct_from_schema

_OPS = {
    "insert": "insert",
    "snapshot": "insert",
    "update": "update",
    "delete": "delete",
    "truncate": "truncate",
}


class JsonParser(Parser):
    """walcast's JSON change lines → normalized changes."""

    name: ClassVar[str] = "json"

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring."""
        j = F.col("j")
        parsed = records.withColumn(
            "j", F.from_json(F.col("value").cast("string"), struct_from_schema("json.schema.json"))
        ).select("*", j["schema"].alias("_schema"), j["table"].alias("_table"))
        df = attach_layout(parsed, layouts, "_schema", "_table")
        op = F.element_at(F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), j["op"])
        lsn = pgtext.lsn_number(j["commit_lsn"])
        before, after = j["before"], j["after"]
        the_change = self.table_change(
            op,
            lsn,
            commit_time=F.to_timestamp(j["commit_time"]),
            xid=j["xid"],
            primary_key=F.coalesce(F.col("_layout.primary_key"), empty_names()),
            before=F.when(op.isin("update", "delete"), before),
            after=F.when(op.isin("insert", "update"), after),
            unchanged_toast=F.coalesce(j["unchanged_toast"], empty_names()),
            changed_columns=F.when(op == "insert", names_of(after))
            .when(op == "update", F.when(before.isNotNull(), changed_between(before, after)))
            .otherwise(empty_names()),
            column_types=layout_types(F.col("_layout")),
        )
        error = (
            F.when(j.isNull() | j["op"].isNull(), F.lit(ERR_MALFORMED))
            .when(j["schema"].isNull() | j["table"].isNull(), F.lit(ERR_MALFORMED))
            .when(op.isNull(), F.lit(ERR_UNSUPPORTED))
            .when(lsn.isNull(), F.lit(ERR_MALFORMED))
            .when(op.isin("insert", "update") & after.isNull(), F.lit(ERR_MALFORMED))
            .when((op == "delete") & before.isNull(), F.lit(ERR_MALFORMED))
        )
        detail = (
            F.when(j.isNull() | j["op"].isNull(), F.lit("not a walcast JSON change line"))
            .when(j["schema"].isNull() | j["table"].isNull(), F.lit("no schema/table"))
            .when(op.isNull(), F.concat(F.lit("op "), j["op"]))
            .when(lsn.isNull(), F.lit("commit_lsn is not an X/Y LSN"))
            .otherwise(F.concat(F.lit("op "), j["op"], F.lit(" without its row image")))
        )
        changes = F.when(error.isNotNull(), no_changes()).otherwise(F.array(the_change))
        return df.select(
            *message(
                error=error,
                error_detail=F.when(error.isNotNull(), detail),
                commit_lsn_num=lsn,
                change_count=F.size(changes),
                changes=changes,
            )
        )

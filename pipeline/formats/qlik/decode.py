r"""``qlik``: Qlik Replicate JSON (``atMSG`` envelope; ``DT`` data, ``MD`` metadata).

Read as Qlik defines it (``schemas/qlik.schema.json``):

* ``DT`` messages are changes; ``MD`` (table metadata) messages are control messages
  (layouts come from walcast's layout records).
* ``headers.operation``: ``INSERT`` and ``REFRESH`` (full load) → insert, ``UPDATE``,
  ``DELETE``, walcast's ``TRUNCATE``.
* Images: INSERT/UPDATE ``after`` = ``data``, DELETE ``before`` = ``data``; UPDATE
  ``before`` = ``beforeData`` (null when the source sent no old image). Columns whose
  ``columnMask`` bit is clear were not replicated and are left out (not null); for an
  update they are the unchanged TOAST columns. ``changed_columns`` = the ``changeMask``
  bits. Bit *n-1* of the little-endian hex masks is the column of ordinal *n*, the
  *n*-th key of ``data``.
* The table: DT messages do not name it. walcast keys each DT with
  ``schema.table:[key values]``; other producers usually write one topic per table.
  (a TRUNCATE or a keyless row just ``schema.table``).
  The parser takes ``schema.table`` from the key prefix, else from the topic name
  (``schema.table``); a message with neither goes to the quarantine (``unknown_table``).
* Positions: walcast's ``streamPosition`` is the commit LSN (``XXXXXXXX/XXXXXXXX``), and
  ``transactionEventCounter`` the ordinal; ``transactionId`` (hex) the xid. Other
  producers' stream positions are opaque (null LSN). ``timestamp`` (ms) is the commit
  time.
* Values: JSON numbers and booleans arrive as their JSON text; with a layout, booleans
  become ``t``/``f`` and bytea (hex) ``\x…``.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

from typing import ClassVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import pgtext
from pipeline.formats.base import (
    ERR_MALFORMED,
    ERR_UNKNOWN_TABLE,
    ERR_UNSUPPORTED,
    Parser,
    attach_layout,
    canonical_image,
    change_message,
    empty_names,
    layout_types,
    no_changes,
)
from pipeline.schemas import struct_from_schema

_KEY_TABLE = r"^(.+?)\.(.+?)(?::\[.*)?$"
_TOPIC_TABLE = r"^([^.]+)\.(.+)$"
_OPS = {
    "INSERT": "insert",
    "REFRESH": "insert",
    "UPDATE": "update",
    "DELETE": "delete",
    "TRUNCATE": "truncate",
}


def mask_bits(mask: Column) -> Column:
    """A hex mask as a string of ``0``/``1``, character *i* the bit of column *i*.

    Little-endian: byte *b* (hex digits *2b*, *2b+1*) holds columns *8b* to *8b+7*, its
    lowest bit first. Built once per message (one lambda step per byte), so that a
    column's bit is then one ``substring`` (:func:`mask_bit`), not the byte arithmetic
    once per column and mask. A byte that is not hex reads as all clear; a mask of fewer
    than two digits as no bits.
    """
    last_byte = F.floor(F.length(mask) / 2).cast("int") - 1
    byte_bits = F.transform(
        F.sequence(F.lit(0), F.greatest(last_byte, F.lit(0))),
        lambda b: F.reverse(
            F.lpad(F.coalesce(F.conv(F.substring(mask, b * 2 + 1, 2), 16, 2), F.lit("0")), 8, "0")
        ),
    )
    return F.when(last_byte >= 0, F.array_join(byte_bits, "")).otherwise(F.lit(""))


def mask_bit(bits: Column, index: Column) -> Column:
    """Whether bit ``index`` (0-based column index) of :func:`mask_bits` is set."""
    return F.substring(bits, index + 1, 1) == F.lit("1")


def masked(image: Column, mask: Column, bits: Column) -> Column:
    """``image`` without the columns whose bit in ``mask`` is clear (all kept without a mask).

    ``bits`` is ``mask_bits(mask)``, a column of its own so that it is built once.
    """
    keys = F.filter(F.map_keys(image), lambda _k, i: mask_bit(bits, i))
    values = F.filter(F.map_values(image), lambda _v, i: mask_bit(bits, i))
    every_bit_set = (F.length(bits) >= F.size(image)) & ~F.substring(
        bits, 1, F.size(image)
    ).contains("0")
    return (
        F.when(mask.isNull() | image.isNull(), image)
        .when(every_bit_set, image)
        .otherwise(F.map_from_arrays(keys, values))
    )


def mask_names(image: Column, bits: Column, *, set_bits: bool) -> Column:
    """Names of ``image``'s columns whose bit in ``bits`` (:func:`mask_bits`) is set (or clear)."""
    return F.filter(
        F.map_keys(image),
        (lambda _k, i: mask_bit(bits, i)) if set_bits else (lambda _k, i: ~mask_bit(bits, i)),
    )


class QlikParser(Parser):
    """Qlik Replicate JSON → normalized changes."""

    name: ClassVar[str] = "qlik"

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring."""
        schema = struct_from_schema("qlik.schema.json", defs_override={"message": "data"})
        key = F.col("key").cast("string")
        from_key = key.rlike(_KEY_TABLE)
        parsed = records.withColumn("j", F.from_json(F.col("value").cast("string"), schema)).select(
            "*",
            F.when(from_key, F.regexp_extract(key, _KEY_TABLE, 1))
            .otherwise(
                F.when(
                    F.col("topic").rlike(_TOPIC_TABLE), F.regexp_extract("topic", _TOPIC_TABLE, 1)
                )
            )
            .alias("_schema"),
            F.when(from_key, F.regexp_extract(key, _KEY_TABLE, 2))
            .otherwise(
                F.when(
                    F.col("topic").rlike(_TOPIC_TABLE), F.regexp_extract("topic", _TOPIC_TABLE, 2)
                )
            )
            .alias("_table"),
        )
        convert = {
            "bool": pgtext.bool_text,
            "bytea": pgtext.bytea_from_hex,
        }
        df = attach_layout(parsed, layouts, "_schema", "_table", convert_types=convert)
        targets = F.col("_layout.convert")
        j = F.col("j")
        msg = j["message"]
        headers = msg["headers"]
        op = F.element_at(
            F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), headers["operation"]
        )
        types = layout_types(F.col("_layout"))
        # Images are columns of their own (two projections): several expressions read
        # each, and a projection would otherwise evaluate their lambdas once per use.
        df = df.select(
            "*",
            canonical_image(msg["data"], types, convert, targets).alias("_data"),
            canonical_image(msg["beforeData"], types, convert, targets).alias("_before_data"),
        )
        data, before_data = F.col("_data"), F.col("_before_data")
        df = df.withColumns(
            {
                "_column_bits": mask_bits(headers["columnMask"]),
                "_change_bits": mask_bits(headers["changeMask"]),
            }
        )
        df = df.withColumn("_present", masked(data, headers["columnMask"], F.col("_column_bits")))
        present = F.col("_present")
        lsn = pgtext.lsn_number(headers["streamPosition"])
        xid = pgtext.hex_number(headers["transactionId"])
        ordinal = headers["transactionEventCounter"]
        the_change = self.table_change(
            op,
            lsn,
            commit_time=F.to_timestamp(headers["timestamp"], "yyyy-MM-dd'T'HH:mm:ss.SSS"),
            xid=xid,
            ordinal=ordinal,
            primary_key=F.coalesce(F.col("_layout.primary_key"), empty_names()),
            before=F.when(op == "delete", present).when(op == "update", before_data),
            after=F.when(op.isin("insert", "update"), present),
            unchanged_toast=F.when(
                (op == "update") & headers["columnMask"].isNotNull(),
                mask_names(data, F.col("_column_bits"), set_bits=False),
            ).otherwise(empty_names()),
            changed_columns=F.when(op.isin("delete", "truncate"), empty_names()).otherwise(
                F.when(
                    headers["changeMask"].isNotNull(),
                    mask_names(data, F.col("_change_bits"), set_bits=True),
                )
            ),
            column_types=types,
        )
        is_md = j["type"] == "MD"
        error = (
            F.when(j.isNull() | (j["magic"] != "atMSG") | j["type"].isNull(), F.lit(ERR_MALFORMED))
            .when(is_md, F.lit(None))
            .when(headers.isNull(), F.lit(ERR_MALFORMED))
            .when(op.isNull(), F.lit(ERR_UNSUPPORTED))
            .when(F.col("_table").isNull(), F.lit(ERR_UNKNOWN_TABLE))
            .when(
                op.isin("insert", "update", "delete") & msg["data"].isNull(), F.lit(ERR_MALFORMED)
            )
        )
        detail = (
            F.when(
                j.isNull() | (j["magic"] != "atMSG") | j["type"].isNull(),
                F.lit("not an atMSG envelope"),
            )
            .when(headers.isNull(), F.lit("DT message without headers"))
            .when(op.isNull(), F.concat(F.lit("operation "), headers["operation"]))
            .when(F.col("_table").isNull(), F.lit("no schema.table in the key or topic name"))
            .otherwise(F.lit("DT message without data"))
        )
        changes = F.when(error.isNotNull() | is_md, no_changes()).otherwise(F.array(the_change))
        return df.select(*change_message(error, detail, lsn, ordinal, changes))

r"""``ibm``: IBM Q Replication Event Publishing, delimited messages.

One Kafka message holds a transaction (or one segment of a large one) as records, each
ending with the record delimiter (``schemas/ibm-delimited.md``). Parsed with Spark
string functions only:

* Records: ``regexp_extract_all`` with a quote-aware pattern (a record delimiter inside a
  quoted value belongs to the value; only the string delimiter is escaped, by doubling).
  A message whose records do not cover it entirely (unterminated quote, stray bytes) is
  ``malformed``.
* Fields: the 12 header fields, then the before value of every column, then the after
  value of every column. An empty field is NULL, ``""`` the empty string.
* Columns come from the layout record the record names: walcast writes the table's layout
  ``version`` (16 hex digits) in ``plan_name`` (:mod:`capture.formats.ibm.encode`), and the
  record is read with the layout of ``schema.table`` (same source) with that
  ``version``, never with one chosen by field count (ADD COLUMN then DROP COLUMN give
  two layouts with one field count; an ALTER inside a transaction gives one transaction
  records of two layouts). A record whose ``plan_name`` is not a version (IBM's own
  producers, an explicit ``ibm.plan_name``) is read with the table's layout only when
  the layout topic holds exactly one version of the table. Otherwise, and when the
  version is not (or no longer: the topic is compacted per table) in the topic, the
  record goes to the quarantine as ``unknown_table``; a record whose field count is not
  its layout's as ``malformed`` (the rest of the message is kept). Never a guess.
  Values are rewritten to PostgreSQL's text by the layout's
  ``rendering``: bool ``1``/``0`` → ``t``/``f``, numbers with the decimal character →
  ``.``, bytea hex → ``\x…``.
* Before images: without REPLICA IDENTITY FULL only the key columns' before values are
  known; empty non-key before fields are left out (unknown), not NULL. INSERT has no
  before image, DELETE no after image.
* ``<identifier>-INVALID-COLUMN-nnnX[-nnnX…]-NULL``: the value of each listed column
  ``nnn`` was not sent (X = ``A`` after, ``B`` before): it is left out of that image, and
  for ``A`` listed in ``unchanged_toast`` (materialize keeps the previous value). walcast
  lists every such column; IBM's own producers name the first one only.
* Positions: ``commit_lsn`` and ``transaction_identifier`` are hex numbers (walcast: the
  LSN and the xid). The ordinal of a record is its position in its transaction: the
  records of earlier segments of the same transaction count too, which
  :mod:`pipeline.sequencing` adds (``segment`` tells it how messages chain).
* Commit time: the ``date`` + ``time`` header fields (walcast puts the commit time there,
  to the microsecond) when they agree with ``commit_time`` to the second, else
  ``commit_time`` (IBM's own producers put the send time in ``date``/``time``).

Parser options (as walcast's ``ibm.*`` settings): ``column_delimiter``,
``record_delimiter``, ``string_delimiter``, ``decimal_character``, each one character
(the escapes ``\n``, ``\r``, ``\t``, ``\xHH`` are accepted).
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import re
from typing import ClassVar

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline import pgtext
from pipeline.formats.base import (
    ERR_MALFORMED,
    ERR_UNKNOWN_TABLE,
    ERR_UNSUPPORTED,
    SORT_SPAN,
    Parser,
    change,
    empty_names,
    message,
    no_changes,
)
from pipeline.layouts import column_names, column_types, layout_versions, same_source

HEADER = 12
LAYOUT_VERSION = "^[0-9a-f]{16}$"
"""A ``plan_name`` that names the record's layout version (``capture.formats.ibm.encode``)."""
INVALID_RE = r"-INVALID-COLUMN-((?:[0-9]+[AB]-)+)"
"""The unavailable columns of an identifier: ``…-INVALID-COLUMN-002A-005A-NULL``."""
_OPS = {"ISRT": "insert", "REPL": "update", "DLET": "delete"}
_ESCAPES = {"\\n": "\n", "\\r": "\r", "\\t": "\t", "\\\\": "\\"}


def _char(name: str, value: str) -> str:
    text = _ESCAPES.get(value, value)
    if len(value) == 4 and value.startswith("\\x"):
        text = chr(int(value.removeprefix("\\x"), 16))
    if len(text) != 1:
        raise ValueError(f"ibm: {name} must be a single character, not {value!r}")
    return text


class IbmParser(Parser):
    """IBM delimited messages → normalized changes (needs layout records)."""

    name: ClassVar[str] = "ibm"
    needs_layouts: ClassVar[bool] = True
    segmented: ClassVar[bool] = True
    scans_records_twice: ClassVar[bool] = True
    option_names: ClassVar[tuple[str, ...]] = (
        "column_delimiter",
        "record_delimiter",
        "string_delimiter",
        "decimal_character",
    )

    def __init__(self, options: dict[str, str] | None = None) -> None:
        super().__init__(options)
        defaults = {
            "column_delimiter": ",",
            "record_delimiter": "\n",
            "string_delimiter": '"',
            "decimal_character": ".",
        }
        chars = {k: _char(k, self.options.get(k, v)) for k, v in defaults.items()}
        if len(set(chars.values())) != len(chars):
            raise ValueError("ibm: the four delimiters must all be different")
        self.cd = chars["column_delimiter"]
        self.rd = chars["record_delimiter"]
        self.q = chars["string_delimiter"]
        self.dc = chars["decimal_character"]
        cd, rd, q = re.escape(self.cd), re.escape(self.rd), re.escape(self.q)
        neg = f"[^{cd}{rd}{q}]"
        field = f"(?:{q}(?:[^{q}]++|{q}{q})*+{q}|{neg}*+)"
        self.record_pattern = f"{field}(?:{cd}{field})*+(?:{rd}|\\z)"
        self.field_pattern = f"{cd}({field})"

    # -------------------------------------------------------------- values

    def unquote(self, raw: Column) -> Column:
        """A field's value: NULL when empty, the quoted text without its delimiters."""
        q = self.q
        inner = F.substring(raw, F.lit(2), F.length(raw) - 2)
        return (
            F.when(raw == "", F.lit(None).cast("string"))
            .when(raw.startswith(q), F.replace(inner, F.lit(q + q), F.lit(q)))
            .otherwise(raw)
        )

    def rendered(self, raw: Column, rendering: Column) -> Column:
        """PostgreSQL text of one field given its layout rendering."""
        value = self.unquote(raw)
        number = value if self.dc == "." else F.replace(value, F.lit(self.dc), F.lit("."))
        return (
            F.when(value.isNull(), value)
            .when(rendering == "bool", pgtext.bool_text(value))
            .when(rendering == "number", number)
            .when(rendering == "hex", pgtext.bytea_from_hex(value))
            .otherwise(value)
        )

    # -------------------------------------------------------------- layouts

    @staticmethod
    def layout_rows(layouts: DataFrame) -> DataFrame:
        """One row per layout version of each table, ready to join (see the docstring).

        Each version's newest copy (:func:`pipeline.layouts.layout_versions`).
        ``_l_versions`` counts the table's versions (a record without one included).
        """
        newest = layout_versions(layouts)
        per_table = Window.partitionBy("source", "schema", "table")
        cols = F.col("columns")
        return newest.select(
            F.col("source").alias("_l_source"),
            F.col("schema").alias("_l_schema"),
            F.col("table").alias("_l_table"),
            F.col("version").alias("_l_version"),
            F.count(F.lit(1)).over(per_table).alias("_l_versions"),
            F.col("field_count").alias("_l_fields"),
            column_names(cols).alias("_l_names"),
            F.transform(cols, lambda c: F.coalesce(c["rendering"], F.lit("quoted"))).alias(
                "_l_renderings"
            ),
            column_names(F.filter(cols, lambda c: F.coalesce(c["key"], F.lit(False)))).alias(
                "_l_key_names"
            ),
            column_types(cols).alias("_l_types_map"),
            F.col("primary_key").alias("_l_pk"),
            (F.coalesce(F.col("replica_identity"), F.lit("")) == "full").alias("_l_full"),
        )

    # -------------------------------------------------------------- parse

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring: one output row per record (``record_index``)."""
        text = F.col("value").cast("string")
        recs = F.filter(
            F.regexp_extract_all(text, F.lit(self.record_pattern), 0), lambda r: r != ""
        )
        covered = F.aggregate(F.transform(recs, F.length), F.lit(0), lambda a, b: a + b)
        base = records.select(
            "*", recs.alias("_recs"), (covered == F.length(text)).alias("_whole")
        ).withColumn("_ok", F.col("_whole") & (F.size("_recs") > 0))
        bad = base.where(~F.col("_ok")).select(
            *message(
                error=F.lit(ERR_MALFORMED),
                error_detail=F.lit(
                    "not a sequence of delimited records (unterminated quote or stray text)"
                ),
                change_count=F.lit(0),
                changes=no_changes(),
            )
        )
        rd = self.rd
        rec = F.col("_rec")
        stripped = F.when(
            rec.endswith(rd), F.substring(rec, F.lit(1), F.length(rec) - 1)
        ).otherwise(rec)
        # posexplode_outer of the good messages' records, then the null rows dropped: a
        # filter on _ok (or the one Spark infers for posexplode) would be pushed below the
        # projection and split every message a second time.
        rows = (
            base.select(
                "*", F.posexplode_outer(F.when(F.col("_ok"), F.col("_recs"))).alias("_ri", "_rec")
            )
            .where(F.col("_ri").isNotNull())
            .withColumn(
                "_fields",
                F.regexp_extract_all(
                    F.concat(F.lit(self.cd), stripped), F.lit(self.field_pattern), 1
                ),
            )
        )
        h = [self.unquote(F.element_at("_fields", k)) for k in range(1, HEADER + 1)]
        rows = rows.select(
            "*",
            h[1].alias("_ident"),
            h[4].alias("_owner"),
            h[5].alias("_table"),
            h[6].alias("_operation"),
            pgtext.hex_number(h[7]).alias("_xid"),
            pgtext.hex_number(h[8]).alias("_lsn"),
            F.to_timestamp(F.concat(h[2], h[3]), "yyyyDDDHHmmssSSSSSS").alias("_precise"),
            F.to_timestamp(h[9], "yyyy-MM-dd-HH.mm.ss").alias("_stated"),
            F.when(h[10].rlike(LAYOUT_VERSION), h[10]).alias("_version"),
            F.element_at("_fields", HEADER).cast("int").alias("_segment"),
            F.size("_fields").alias("_n_fields"),
        )
        version = F.col("_version")
        joined = rows.join(
            F.broadcast(self.layout_rows(layouts)),
            (F.col("_owner") == F.col("_l_schema"))
            & (F.col("_table") == F.col("_l_table"))
            & same_source(F.col("source"), F.col("_l_source"))
            & ((version == F.col("_l_version")) | (version.isNull() & (F.col("_l_versions") == 1))),
            "left",
        )
        n_fields = F.col("_n_fields")
        has_layout = F.col("_l_names").isNotNull()
        fits = has_layout & (n_fields == F.col("_l_fields"))
        # Every column of the layout is read only from a record that has its fields.
        n = F.when(fits, F.size("_l_names")).otherwise(F.lit(0))
        idx = F.when(n > 0, F.sequence(F.lit(0), n - 1)).otherwise(F.array().cast("array<int>"))
        op = F.element_at(
            F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), F.col("_operation")
        )

        def values(offset: Column) -> Column:
            return F.transform(
                idx,
                lambda k: self.rendered(
                    F.element_at("_fields", offset + k + 1),
                    F.element_at("_l_renderings", k + 1),
                ),
            )

        flags = F.regexp_extract("_ident", INVALID_RE, 1)

        def flagged(side: str) -> Column:
            """Names of the columns flagged unavailable on ``side`` (``A`` or ``B``)."""
            numbers = F.regexp_extract_all(flags, F.lit(f"([0-9]+){side}"), 1)
            names = F.transform(numbers, lambda i: F.element_at("_l_names", i.cast("int")))
            return F.filter(names, lambda c: c.isNotNull())

        joined = joined.select(
            "*",
            op.alias("_op"),
            F.when(fits & (flags != ""), flagged("A")).otherwise(empty_names()).alias("_bad_a"),
            F.when(fits & (flags != ""), flagged("B")).otherwise(empty_names()).alias("_bad_b"),
        )
        op = F.col("_op")
        bad_a, bad_b = F.col("_bad_a"), F.col("_bad_b")
        known = fits

        # Images are built only for the ops that have them, and without lambdas in the
        # common case: map_from_arrays(names, values). A map_filter drops unknown values
        # only where there can be some (a column flagged INVALID; non-key before values of
        # a table without REPLICA IDENTITY FULL).
        after_all = F.map_from_arrays(F.col("_l_names"), values(F.lit(HEADER) + n))
        after = F.when(
            known & op.isin("insert", "update"),
            F.when(
                F.size(bad_a) > 0,
                F.map_filter(after_all, lambda k, _v: ~F.array_contains(bad_a, k)),
            ).otherwise(after_all),
        )
        before_all = F.map_from_arrays(F.col("_l_names"), values(F.lit(HEADER)))
        full = F.col("_l_full")
        before = F.when(
            known & op.isin("update", "delete"),
            F.when(
                ~full | (F.size(bad_b) > 0),
                F.map_filter(
                    before_all,
                    lambda k, v: (
                        ~(
                            (~full & ~F.array_contains("_l_key_names", k) & v.isNull())
                            | F.array_contains(bad_b, k)
                        )
                    ),
                ),
            ).otherwise(before_all),
        )
        joined = joined.select("*", before.alias("_before"), after.alias("_after"))
        before, after = F.col("_before"), F.col("_after")
        precise, stated = F.col("_precise"), F.col("_stated")
        commit_time = F.when(
            precise.isNotNull() & (F.date_trunc("second", precise) == stated), precise
        ).otherwise(F.coalesce(stated, precise))
        error = (
            F.when(n_fields < HEADER, F.lit(ERR_MALFORMED))
            .when(op.isNull(), F.lit(ERR_UNSUPPORTED))
            .when(~has_layout, F.lit(ERR_UNKNOWN_TABLE))
            .when(~fits, F.lit(ERR_MALFORMED))
        )
        table_name = F.concat(
            F.coalesce(F.col("_owner"), F.lit("?")),
            F.lit("."),
            F.coalesce(F.col("_table"), F.lit("?")),
        )
        detail = (
            F.when(
                n_fields < HEADER,
                F.concat(F.lit("record with "), n_fields.cast("string"), F.lit(" fields")),
            )
            .when(
                op.isNull(),
                F.concat(F.lit("operation "), F.coalesce(F.col("_operation"), F.lit("?"))),
            )
            .when(
                has_layout,
                F.concat(
                    F.lit("record with "),
                    n_fields.cast("string"),
                    F.lit(" fields, but layout version "),
                    F.coalesce(F.col("_l_version"), F.lit("?")),
                    F.lit(" of "),
                    table_name,
                    F.lit(" has "),
                    F.col("_l_fields").cast("string"),
                ),
            )
            .when(
                version.isNotNull(),
                F.concat(
                    F.lit("no layout version "), version, F.lit(" of "), table_name, F.lit(" known")
                ),
            )
            .otherwise(
                F.concat(
                    F.lit("record of "),
                    table_name,
                    F.lit(
                        " names no layout version (plan_name) and the layout topic does not "
                        "hold exactly one layout of the table"
                    ),
                )
            )
        )
        the_change = change(
            format=F.lit(self.name),
            schema=F.col("_owner"),
            table=F.col("_table"),
            op=op,
            commit_lsn=pgtext.lsn_text(F.col("_lsn")),
            commit_lsn_num=F.col("_lsn"),
            commit_time=commit_time,
            xid=F.col("_xid"),
            ordinal=F.lit(1),
            primary_key=F.coalesce(F.col("_l_pk"), empty_names()),
            before=before,
            after=after,
            unchanged_toast=bad_a,
            changed_columns=F.when(op == "insert", F.map_keys(after))
            .when(op == "delete", empty_names())
            .when(
                F.col("_l_full"),
                F.map_keys(
                    F.map_filter(after, lambda k, v: ~F.element_at(before, k).eqNullSafe(v))
                ),
            ),
            column_types=F.col("_l_types_map"),
            error=error,
            error_detail=F.when(error.isNotNull(), detail),
        )
        # A record row carries no raw Kafka bytes: they would be copied into every record
        # of the message, and only a wholly malformed message is quarantined raw (a
        # rejected record is quarantined by its position).
        good = joined.select(
            *message(
                kafka_key=F.lit(None),
                kafka_value=F.lit(None),
                sort_key=F.col("offset") * F.lit(SORT_SPAN) + F.col("_ri"),
                record_index=F.col("_ri"),
                commit_lsn_num=F.col("_lsn"),
                change_count=F.lit(1),
                segment=F.col("_segment"),
                changes=F.array(the_change),
            )
        )
        return good.unionByName(bad)

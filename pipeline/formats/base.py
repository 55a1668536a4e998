"""The interface every format parser implements, and the helpers they share.

A parser turns a DataFrame of Kafka records (:data:`pipeline.kafka.RECORD_COLUMNS`: ``key,
value, topic, partition, offset, timestamp`` and what walcast's headers say, ``source``,
``load``, ``header_lsn``, ``header_ordinal``) into one row per record with the columns of
:data:`pipeline.model.MESSAGE`:

* the Kafka position and raw bytes (kept for the quarantine);
* ``error`` / ``error_detail``: set when the whole message cannot be read (malformed
  JSON, wrong Avro bytes, …); such a message has no changes;
* ``changes``: the row changes it carries, each a :data:`pipeline.model.CHANGE` struct
  (a change may carry its own ``error``, e.g. an IBM record of a table without layout);
  an empty array for control messages (heartbeats, transaction markers);
* ``record_index``/``sort_key``: a parser may return one row per record of a
  multi-record message (IBM) instead of a ``changes`` array; ``sort_key`` orders rows
  within a partition (offset x :data:`SORT_SPAN` + record index);
* sequencing hints for :mod:`pipeline.sequencing`: ``commit_lsn_num`` and
  ``first_ordinal`` (the position of the first change; :func:`message` takes the
  ``walcast.commit_lsn`` header's LSN where the parser gives none), ``change_count``, ``segment``
  (IBM segment number, else null) and ``pair_role``/``pair_key`` (DataWorks split
  updates, else null).

Invariants every parser keeps: it is built from Spark native functions only (no Python
UDF); it never drops a record (one output row per input row); anything it cannot read
is reported in ``error`` rather than raised; fields the format does not carry are null.
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from typing import Any, ClassVar

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.window import WindowSpec

from pipeline import pgtext
from pipeline.layouts import column_types, layout_versions, same_source
from pipeline.model import CHANGE, MESSAGE

SORT_SPAN = 1 << 20
"""``sort_key`` = Kafka offset x SORT_SPAN + the record's index in its message."""

ERR_MALFORMED = "malformed"
"""The message cannot be decoded (bad JSON, bad Avro, bad delimited record)."""
ERR_UNKNOWN_TABLE = "unknown_table"
"""No layout is known for the change's table (or none with the record's field count)."""
ERR_UNSUPPORTED = "unsupported"
"""A message the normalized model cannot hold (DDL other than TRUNCATE, unknown op)."""
ERR_REPLAY = "replay"
"""A change already seen (same commit LSN and ordinal): dropped from the output."""
ERR_ORPHAN = "orphan"
"""Half of a split update whose other half never came."""


class Parser(ABC):
    """Base of every format parser; subclasses set ``name`` and implement :meth:`parse`."""

    name: ClassVar[str]
    needs_layouts: ClassVar[bool] = False
    """The format cannot be read without layout records (IBM)."""
    segmented: ClassVar[bool] = False
    """Transactions may span several messages whose ordinals continue (IBM segments)."""
    paired: ClassVar[bool] = False
    """Updates may come as two messages (DataWorks ``UPDATE_BEFOR``/``UPDATE_AFTER``)."""
    splits_key_updates: ClassVar[bool] = False
    """An update of the primary key comes as a delete message and an insert message with
    the update's position (Debezium): the insert is not a replay of the delete."""
    scans_records_twice: ClassVar[bool] = False
    """:meth:`parse` reads its input twice (IBM: good and malformed messages apart); the
    normalize job then caches a batch's records instead of fetching them twice."""
    option_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        self.options: dict[str, str] = {}
        for key, value in (options or {}).items():
            if key not in self.option_names:
                valid = ", ".join(self.option_names) or "none"
                raise ValueError(f"{self.name}: unknown parser option {key!r}; valid: {valid}")
            self.options[key] = value

    @abstractmethod
    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """Message rows (:data:`~pipeline.model.MESSAGE`) for ``records``.

        ``layouts`` holds every known layout version (:func:`pipeline.layouts.read_layouts`;
        possibly empty).
        """

    def table_change(self, op: Column, lsn: Column | None = None, **fields: Column | Any) -> Column:
        """A CHANGE of this format (:func:`change`) to the table in ``_schema`` / ``_table``.

        Sets ``format`` (the parser's name), ``schema`` and ``table`` (the row's ``_schema``
        and ``_table`` columns), ``op``, and with ``lsn`` (a 64-bit LSN column)
        ``commit_lsn`` and ``commit_lsn_num`` (:func:`lsn_fields`); ``fields`` gives the
        others and may not set these again (TypeError).
        """
        common: dict[str, Column] = {
            "format": F.lit(self.name),
            "schema": F.col("_schema"),
            "table": F.col("_table"),
            "op": op,
        }
        if lsn is not None:
            common |= lsn_fields(lsn)
        return change(**common, **fields)


# ------------------------------------------------------------------ building rows


def null_of(name: str) -> Column:
    """A typed null for the CHANGE field ``name``."""
    return F.lit(None).cast(CHANGE[name].dataType)


def change(**fields: Column | Any) -> Column:
    """A CHANGE struct: the given fields (cast to their type), nulls for the rest."""
    unknown = set(fields) - set(CHANGE.fieldNames())
    if unknown:
        raise ValueError(f"not CHANGE fields: {sorted(unknown)}")
    cols = []
    for f in CHANGE.fields:
        value = fields.get(f.name)
        if value is None:
            col = null_of(f.name)
        else:
            col = (value if isinstance(value, Column) else F.lit(value)).cast(f.dataType)
        cols.append(col.alias(f.name))
    return F.struct(*cols)


def message(**fields: Column | Any) -> list[Column]:
    """The MESSAGE columns, from a DataFrame that still has the Kafka record columns.

    ``commit_lsn_num`` is the parser's, else the ``walcast.commit_lsn`` header's
    (``header_lsn``): a format that does not carry the commit LSN (Debezium) still has
    walcast's position.
    """
    base: dict[str, Column] = {
        "source": F.col("source"),
        "load": F.col("load"),
        "layout": F.col("header_layout"),
        "header_lsn": F.col("header_lsn"),
        "header_ordinal": F.col("header_ordinal"),
        "header_change_lsn": F.col("header_change_lsn"),
        "kafka_topic": F.col("topic"),
        "kafka_partition": F.col("partition"),
        "kafka_offset": F.col("offset"),
        "kafka_timestamp": F.col("timestamp"),
        "kafka_key": F.col("key"),
        "kafka_value": F.col("value"),
        "sort_key": F.col("offset") * F.lit(SORT_SPAN),
        "record_index": F.lit(0),
        "change_count": F.lit(1),
    }
    for key, value in fields.items():
        base[key] = value if isinstance(value, Column) else F.lit(value)
    own_lsn = base.get("commit_lsn_num")
    base["commit_lsn_num"] = (
        F.col("header_lsn")
        if own_lsn is None
        else F.coalesce(own_lsn.cast("long"), F.col("header_lsn"))
    )
    out = []
    for f in MESSAGE.fields:
        col = base.get(f.name, F.lit(None))
        out.append(col.cast(f.dataType).alias(f.name))
    return out


def change_message(
    error: Column, detail: Column, lsn: Column, ordinal: Column, changes: Column
) -> list[Column]:
    """The MESSAGE columns of a message holding ``changes``, or ``error`` and its ``detail``.

    ``lsn`` and ``ordinal`` are the commit LSN and the first change's ordinal; the detail is
    kept only when there is an error.
    """
    return message(
        error=error,
        error_detail=F.when(error.isNotNull(), detail),
        commit_lsn_num=lsn,
        first_ordinal=ordinal,
        change_count=F.size(changes),
        changes=changes,
    )


def single(ok: Column, the_change: Column) -> Column:
    """``[the_change]`` when ``ok``, else an empty array."""
    return F.when(ok, F.array(the_change)).otherwise(F.array().cast(MESSAGE["changes"].dataType))


def no_changes() -> Column:
    """An empty changes array."""
    return F.array().cast(MESSAGE["changes"].dataType)


# ------------------------------------------------------------------ layouts


def attach_layout(
    df: DataFrame,
    layouts: DataFrame,
    schema: str,
    table: str,
    convert_types: Collection[str] = (),
) -> DataFrame:
    """Add ``_layout``: the layout in effect for the message, or null (:func:`join_layout`).

    ``_layout`` holds ``version, replica_identity, primary_key, field_count``, ``types``
    (``map<column, pg type>``) and ``convert`` (the entries of ``types`` whose type is in
    ``convert_types``: the columns :func:`canonical_image` rewrites). The maps are built
    once per layout on the layout side, not per change: building them takes lambdas,
    which Spark interprets row by row.
    """
    wanted = F.array(*[F.lit(t) for t in sorted(convert_types)]).cast("array<string>")
    types = column_types(F.col("columns"))
    layout = F.struct(
        "version",
        "replica_identity",
        "primary_key",
        "field_count",
        types.alias("types"),
        F.map_filter(types, lambda _k, v: F.array_contains(wanted, v)).alias("convert"),
    )
    return join_layout(df, layouts, schema, table, layout)


def join_layout(
    df: DataFrame, layouts: DataFrame, schema: str, table: str, layout: Column
) -> DataFrame:
    """Add ``_layout``: ``layout`` of the layout in effect for the message, or null.

    ``layout`` is a column of a :func:`pipeline.layouts.layout_versions` row (a struct of
    what the parser needs of it), computed once per layout on the layout side. The table
    is ``(df[schema], df[table])`` of the message's source (see
    :func:`pipeline.layouts.same_source`); the layout is the version the message's
    ``header_layout`` names, else (no header, or a version the set does not hold) the
    table's newest (see :mod:`pipeline.layouts`). At most one layout matches, so every
    row of ``df`` is kept once, with only ``_layout`` added. The layout set is small, so
    it is broadcast: no shuffle of ``df``.
    """
    versions = layout_versions(layouts).select(
        F.col("source").alias("_l_source"),
        F.col("schema").alias("_l_schema"),
        F.col("table").alias("_l_table"),
        F.col("version").alias("_l_version"),
        F.col("latest").alias("_l_latest"),
        F.col("versions").alias("_l_versions"),
        layout.alias("_layout"),
    )
    named = F.col("header_layout")
    held = F.coalesce(F.array_contains(F.col("_l_versions"), named), F.lit(False))  # noqa: FBT003
    joined = df.join(
        F.broadcast(versions),
        (F.col(schema) == F.col("_l_schema"))
        & (F.col(table) == F.col("_l_table"))
        & same_source(F.col("source"), F.col("_l_source"))
        & ((F.col("_l_version") == named) | (F.col("_l_latest") & ~held)),
        "left",
    )
    return joined.drop(
        "_l_source", "_l_schema", "_l_table", "_l_version", "_l_latest", "_l_versions"
    )


def layout_types(layout: Column) -> Column:
    """``map<column, pg type>`` of an :func:`attach_layout` struct (null without a layout)."""
    return layout["types"]


def canonical_image(
    image: Column, types: Column, convert: Mapping[str, Any], targets: Column | None = None
) -> Column:
    """Apply ``convert[type](value)`` to each value of ``image`` whose type is known.

    ``types`` is a ``map<column, pg type>`` (may be null: the image is returned as is).
    ``convert`` maps a PostgreSQL type name to a function of the value column.
    ``targets``, when given, is the part of ``types`` whose type is in ``convert`` (a
    layout's ``convert``, :func:`attach_layout`), or null where it is not known. With it,
    an image of a table without such columns is kept as it is, and the (interpreted)
    lambda looks each value's column up in that small map and skips the type tests for
    the others, instead of scanning the whole type map per value (measured, 1M canal
    changes: the warm parse 11.3-11.7 s → 10.6 s; a ``map_concat`` of only the rewritten
    values was slower, 12.0-13.1 s, its key de-duplication costing more than it saved).
    """
    if not convert:
        return image

    def rewritten(value: Column, kind: Column) -> Column:
        expr = None
        for type_name, fn in convert.items():
            cond = kind == F.lit(type_name)
            expr = F.when(cond, fn(value)) if expr is None else expr.when(cond, fn(value))
        assert expr is not None
        return F.when(value.isNull(), value).otherwise(expr.otherwise(value))

    every_value = F.transform_values(
        image, lambda key, value: rewritten(value, F.element_at(types, key))
    )
    unknown = types.isNull() | image.isNull()
    if targets is None:
        return F.when(unknown, image).otherwise(every_value)

    def target_value(key: Column, value: Column) -> Column:
        kind = F.element_at(targets, key)
        return F.when(kind.isNull(), value).otherwise(rewritten(value, kind))

    return (
        F.when(unknown, image)
        .when(targets.isNull(), every_value)
        .when(F.size(targets) == 0, image)
        .otherwise(F.transform_values(image, target_value))
    )


# ------------------------------------------------------------------ images


def changed_between(before: Column, after: Column) -> Column:
    """Columns of ``after`` whose value differs from a known value in ``before``."""
    return F.map_keys(
        F.map_filter(
            after,
            lambda k, v: F.map_contains_key(before, k) & ~F.element_at(before, k).eqNullSafe(v),
        )
    )


def empty_names() -> Column:
    """An empty ``array<string>``."""
    return F.array().cast("array<string>")


def names_of(image: Column) -> Column:
    """The keys of an image (empty when null)."""
    return F.coalesce(F.map_keys(image), empty_names())


def lsn_fields(lsn_num: Column) -> dict[str, Column]:
    """``commit_lsn`` and ``commit_lsn_num`` of a 64-bit LSN column."""
    return {"commit_lsn": pgtext.lsn_text(lsn_num), "commit_lsn_num": lsn_num}


def first_in_partition() -> WindowSpec:
    """Window over one Kafka partition in offset order (for parsers needing neighbours)."""
    return Window.partitionBy("topic", "partition").orderBy("offset")

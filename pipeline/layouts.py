"""Table layouts from walcast's schema topic: column names, types and keys per table.

Some formats carry no column names or types (IBM delimited) or only coarse ones (canal's
strings, DataWorks' six types, Qlik's JSON numbers). walcast publishes a **layout
record** per table and layout version to a compacted Kafka topic (default
``walcast.schemas``), keyed by ``<source>/<schema>.<table>``, value = the JSON of
``capture.formats.layout.layout_record(table)`` plus ``source``::

    {"format": "ibm", "schema": "shop", "table": "orders", "relation_id": 16385,
     "version": "0efd47f9fd2cd13a", "replica_identity": "default",
     "primary_key": ["id"], "field_count": 18,
     "columns": [{"position": 1, "name": "id", "type": "int8", "key": true,
                  "primary_key": true, "rendering": "bare", ...}, ...]}

**Sources.** A layout serves only the messages of its own source: ``source`` (the
``<system identifier>/<database>/<slot>`` of :mod:`capture.state.identity`) must equal the
message's ``walcast.source`` header (:mod:`pipeline.kafka`), so two databases sharing the
topics and the layout topic never use each other's layouts (:func:`same_source`). Layout
records of walcast 0.1 carry no source: they serve only messages without the header
(walcast 0.1's own), never a walcast source's; :func:`count_sourceless` lets the jobs say
so once.

Only ``schema``, ``table`` and ``columns[].name/type/key`` are required; the other
fields are used when present (``primary_key`` falls back to the ``primary_key`` column
flags, then to the ``key`` flags unless ``replica_identity`` is ``full``;
``field_count`` to ``12 + 2 x columns``). The Spark schema comes from the JSON Schema of
the layout record in ``schemas/ibm-delimited.layout.json``.

Invariants: :func:`read_layouts` returns every layout version the topic still holds
(a compacted topic keeps at least the newest per table), each with its Kafka offset and
timestamp; :func:`layout_versions` one row per table and version (its newest copy), the
table's newest layout flagged ``latest``. A missing
topic is an empty layout set, not an error (jobs then quarantine what needs a layout).

**The layout in effect.** walcast names, in every change message, the layout version its
table had when the change was encoded (the ``walcast.layout`` header, ``header_layout``
in :mod:`pipeline.kafka`), and keys the layout records by version, so compaction keeps
every version. The jobs type a change with that version
(:func:`pipeline.formats.base.join_layout`): a column dropped or retyped since keeps the
type it had. A message without the header (walcast 0.1, other producers) or naming a
version the topic does not hold (compacted away: walcast 0.1 keyed layouts by table; or
lost with the topic) is typed with its table's newest layout, as
before: the only layout there is to read it with.
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from capture.schema_files import require_schema
from pipeline.local_frames import local_empty
from pipeline.schemas import to_spark_type

DEFAULT_LAYOUT_TOPIC = "walcast.schemas"
"""The schema topic ``walcast run`` writes layout records to by default."""


def layout_topic_name(given: str | None) -> str | None:
    """The layout topic a job reads (None: none).

    ``given``; :data:`DEFAULT_LAYOUT_TOPIC` when it is None; none when it is empty.
    """
    if given is None:
        return DEFAULT_LAYOUT_TOPIC
    return given or None


LAYOUT_FIELDS = (
    "source",
    "schema",
    "table",
    "version",
    "replica_identity",
    "primary_key",
    "field_count",
    "columns",
    "layout_offset",
    "layout_timestamp",
)


def layout_record_schema() -> StructType:
    """Spark schema of one layout record (from ``ibm-delimited.layout.json``)."""
    doc: dict[str, Any] = json.loads(require_schema("ibm-delimited.layout.json").read_text())
    node = doc["layout_record"]
    converted = to_spark_type(node, node)
    assert isinstance(converted, StructType)
    return converted


def parse_layouts(records: DataFrame) -> DataFrame:
    """Layout rows (:data:`LAYOUT_FIELDS`) from Kafka records of the schema topic.

    Records whose value is not a layout (tombstones, other JSON) are skipped.
    """
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), layout_record_schema()).alias("l"),
        F.col("offset").alias("layout_offset"),
        F.col("timestamp").alias("layout_timestamp"),
    ).where(F.col("l.schema").isNotNull() & F.col("l.table").isNotNull())
    cols = F.array_sort(F.col("l.columns"))  # position is the first field: field order
    pk_flags = F.transform(F.filter(cols, lambda c: c["primary_key"]), lambda c: c["name"])
    key_flags = F.transform(F.filter(cols, lambda c: c["key"]), lambda c: c["name"])
    primary_key = F.coalesce(
        F.col("l.primary_key"),
        F.when(F.size(pk_flags) > 0, pk_flags),
        F.when(F.coalesce(F.col("l.replica_identity"), F.lit("")) != "full", key_flags),
        F.array().cast("array<string>"),
    )
    return parsed.select(
        F.col("l.source").alias("source"),
        F.col("l.schema").alias("schema"),
        F.col("l.table").alias("table"),
        F.col("l.version").alias("version"),
        F.col("l.replica_identity").alias("replica_identity"),
        primary_key.alias("primary_key"),
        F.coalesce(F.col("l.field_count"), F.size(cols) * 2 + 12).alias("field_count"),
        cols.alias("columns"),
        "layout_offset",
        "layout_timestamp",
    )


def read_layouts(
    spark: SparkSession, bootstrap: str, topic: str | None, *, timeout: float = 30.0
) -> DataFrame:
    """Every layout version in ``topic`` (batch read from the earliest offset).

    Empty when ``topic`` does not exist (it is never created);
    :class:`~pipeline.errors.KafkaUnavailableError` when no broker answers in ``timeout`` s.
    """
    empty = local_empty(spark, _empty_schema(spark))
    if not topic:
        return empty
    from pipeline.kafka import topic_exists  # noqa: PLC0415 - avoids an import cycle

    if not topic_exists(bootstrap, topic, timeout):
        return empty
    from capture.kafka.security import client_settings, java_options  # noqa: PLC0415

    records = (
        spark.read.format("kafka")
        .options(**java_options(client_settings()))  # WALCAST__KAFKA__*, as walcast run's
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("failOnDataLoss", "false")
        .load()
    )
    return parse_layouts(records)


def _empty_schema(spark: SparkSession) -> StructType:
    probe = local_empty(spark, "offset long, timestamp timestamp, value binary")
    return parse_layouts(probe).schema


def layout_versions(layouts: DataFrame) -> DataFrame:
    """One row per ``(source, schema, table, version)`` (its newest copy), with ``latest``.

    A version published more than once (every daemon start publishes it again) is the
    same layout: its newest copy is kept. ``latest`` is true on the table's newest layout
    (the highest offset: walcast writes them all to one partition);
    ``versions`` is every version of the table in the set (to tell a version the set does
    not hold, :func:`pipeline.formats.base.join_layout`).
    """
    table = Window.partitionBy("source", "schema", "table")
    copies = Window.partitionBy("source", "schema", "table", "version").orderBy(
        F.col("layout_offset").desc()
    )
    newest_copy = layouts.withColumn("_n", F.row_number().over(copies)).where("_n = 1")
    return newest_copy.drop("_n").select(
        "*",
        (F.col("layout_offset") == F.max("layout_offset").over(table)).alias("latest"),
        F.collect_set("version").over(table).alias("versions"),
    )


def same_source(message_source: Column, layout_source: Column) -> Column:
    """Whether a layout serves a message: the same source, or neither has one (0.1)."""
    return message_source.eqNullSafe(layout_source)


def count_sourceless(layouts: DataFrame) -> int:
    """Layout records without a source (walcast 0.1's): they serve no walcast source."""
    return int(layouts.where(F.col("source").isNull()).count())


def warn_sourceless(
    layouts: DataFrame, topic: str | None, job: str, report: Callable[[str], None]
) -> None:
    """Say once, in the job's own line, that layouts without a source were found."""
    count = count_sourceless(layouts)
    if count:
        report(
            f"walcast spark {job}: {count:,} layout record(s) on {topic!r} name no source "
            "(written by walcast 0.1): they serve only messages without a walcast.source "
            "header, never another source's"
        )


def column_types(columns: Column) -> Column:
    """``map<name, type>`` of an array of ``{name, type}`` structs (a layout's ``columns``)."""
    return F.map_from_arrays(
        F.transform(columns, lambda c: c["name"]), F.transform(columns, lambda c: c["type"])
    )


def column_names(columns: Column) -> Column:
    """The ``name`` of each struct of an array (a layout's ``columns``: position order)."""
    return F.transform(columns, lambda c: c["name"])

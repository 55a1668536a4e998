r"""The normalized change: the one Spark schema every format's parser produces.

It follows ``schemas/normalized-change.schema.json`` field for field, with these Spark
representations (the JSON Schema describes the JSON form of the same record):

* ``before`` / ``after``: ``map<string,string>``. Values are PostgreSQL's text output
  where the format or the table's layout record tells the type (bool ``t``/``f``,
  bytea ``\x00ff``, timestamptz ``2024-05-02 18:17:29.123456+00`` …); otherwise the
  format's own text (a JSON number's text, e.g. ``1.0E-5``). SQL NULL is a null value;
  a column whose value is unknown (not sent, key-only old image, unchanged TOAST) is
  **absent**. Materialize casts the texts to typed columns with the layout.
* ``commit_lsn_num``: ``long`` (signed; every real LSN is below 2^63).
* ``commit_time``: ``timestamp`` (UTC), not an ISO string.
* ``ordinal``: ``long``.

Extra columns (after the schema's): ``kafka_timestamp``, ``record_index`` (0-based
position of the change inside its Kafka message: IBM and canal messages can hold
several) and ``commit_date`` (the UTC date of ``commit_time``, a partition column).
``source`` and ``load`` come from walcast's Kafka headers (:mod:`pipeline.kafka`): which
database and slot the change came from (null for other producers), and whether it is a
row of a load (an initial or ``walcast snapshot`` load: its position in the load chunk is
its ordinal, 1 for the chunk's first row).

Ordering invariant: within one source, changes sort in commit order by
``(commit_lsn_num, ordinal)``; :data:`ORDER_COLUMNS` adds the Kafka position as a
tie-breaker for formats that carry no ordinal.
"""

# ruff: noqa: FBT003
# (PySpark idiom: StructField(name, type, True))
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

TEXT_MAP = MapType(StringType(), StringType(), True)
NAMES = ArrayType(StringType(), True)

OPS = ("insert", "update", "delete", "truncate")

TRUNCATE_OPTIONS = StructType(
    [
        StructField("cascade", BooleanType(), True),
        StructField("restart_identity", BooleanType(), True),
    ]
)

CHANGE = StructType(
    [
        StructField("format", StringType(), True),
        StructField("database", StringType(), True),
        StructField("schema", StringType(), True),
        StructField("table", StringType(), True),
        StructField("op", StringType(), True),
        StructField("commit_lsn", StringType(), True),
        StructField("commit_lsn_num", LongType(), True),
        StructField("commit_time", TimestampType(), True),
        StructField("xid", LongType(), True),
        StructField("ordinal", LongType(), True),
        StructField("primary_key", NAMES, True),
        StructField("before", TEXT_MAP, True),
        StructField("after", TEXT_MAP, True),
        StructField("unchanged_toast", NAMES, True),
        StructField("changed_columns", NAMES, True),
        StructField("column_types", TEXT_MAP, True),
        StructField("truncate_options", TRUNCATE_OPTIONS, True),
        StructField("error", StringType(), True),
        StructField("error_detail", StringType(), True),
    ]
)
"""One change as a parser builds it (inside a message); ``error`` set = quarantine."""

KAFKA_FIELDS = [
    StructField("kafka_topic", StringType(), True),
    StructField("kafka_partition", IntegerType(), True),
    StructField("kafka_offset", LongType(), True),
    StructField("kafka_timestamp", TimestampType(), True),
]

SOURCE_FIELDS = [
    StructField("source", StringType(), True),
    StructField("load", BooleanType(), True),
]
"""What a message's walcast headers say (:data:`pipeline.kafka.HEADER_COLUMNS`)."""

RAW_FIELDS = [
    StructField("kafka_key", BinaryType(), True),
    StructField("kafka_value", BinaryType(), True),
]
"""A Kafka record's raw key and value bytes (what the quarantine keeps of a message)."""

NORMALIZED = StructType(
    [f for f in CHANGE.fields if f.name not in ("error", "error_detail")]
    + KAFKA_FIELDS
    + SOURCE_FIELDS
    + [
        StructField("record_index", IntegerType(), True),
        StructField("commit_date", DateType(), True),
    ]
)
"""The normalized change table's schema (Parquet), partition columns last."""

PARTITION_COLUMNS = ("schema", "table", "commit_date")
"""How the normalized table is partitioned: by source table, then commit date (UTC)."""

ORDER_COLUMNS = ("commit_lsn_num", "ordinal", "kafka_partition", "kafka_offset", "record_index")
"""Apply order of changes: commit order, then the Kafka position as a tie-breaker."""

MESSAGE = StructType(
    [
        *KAFKA_FIELDS,
        *SOURCE_FIELDS,
        StructField("header_ordinal", LongType(), True),
        *RAW_FIELDS,
        StructField("sort_key", LongType(), True),
        StructField("record_index", IntegerType(), True),
        StructField("error", StringType(), True),
        StructField("error_detail", StringType(), True),
        StructField("commit_lsn_num", LongType(), True),
        StructField("first_ordinal", LongType(), True),
        StructField("change_count", LongType(), True),
        StructField("segment", IntegerType(), True),
        StructField("pair_role", StringType(), True),
        StructField("pair_key", StringType(), True),
        StructField("changes", ArrayType(CHANGE, True), True),
    ]
)
"""What a parser returns, one row per Kafka message (see :mod:`pipeline.formats.base`)."""

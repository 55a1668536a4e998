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
* ``change_lsn``: ``long``, the change's own WAL position (the start of the XLogData
  message that carried its pgoutput message, at or before its commit LSN): Debezium's
  ``source.lsn``, else walcast's ``walcast.change_lsn`` header on a message of one
  change. A load row's is its chunk's watermark (its ``commit_lsn``: a load row has no
  WAL message of its own). Null where neither says (other producers, a message of
  several changes past its first). Informational: the apply order is the position rule
  below, never this column (two transactions' changes interleave in the WAL).

Extra columns (after the schema's): ``kafka_timestamp``, ``record_index`` (0-based
position of the change inside its Kafka message: IBM and canal messages can hold
several) and ``commit_date`` (the UTC date of ``commit_time``, a partition column).
``source`` and ``load`` come from walcast's Kafka headers (:mod:`pipeline.kafka`): which
database and slot the change came from (null for other producers), and whether it is a
row of a load (an initial or ``walcast snapshot`` load: its position in the load chunk is
its ordinal, 1 for the chunk's first row). ``layout`` is the ``walcast.layout`` header:
the version of the table's layout record the change was encoded with (:mod:`pipeline.layouts`;
null for other producers, and for the change of a paired format, such as a Debezium key
change, whose halves were read in two batches).

Ordering rule (issue 36): a change's place is its **position**, never a part of one.

* ``commit_lsn_num`` is the record's commit LSN, else walcast's ``walcast.commit_lsn``
  header (:mod:`pipeline.kafka`): every message walcast writes has one, in every format
  (Debezium's records carry only each change's own LSN, so the header is what places
  walcast's Debezium topics).
* ``ordinal`` is the record's ordinal, else the ``walcast.ordinal`` header (a message of
  one change). An ordinal numbers a change inside its transaction or load chunk: without
  its commit LSN it orders nothing, so normalize keeps it **only where
  ``commit_lsn_num`` is known** (``ordinal`` is null wherever ``commit_lsn_num`` is).
* A table's changes (of one source) are applied in :data:`LOG_ORDER`, ``(commit_lsn_num,
  ordinal)`` then the Kafka position, when every one of them has a commit LSN (walcast
  writes one for every change: this is commit order); in :data:`KAFKA_ORDER` (the Kafka
  position within a partition: the producer's order, e.g. a Debezium connector's, which
  keys a row's records to one partition) when none has; and not at all when some have
  and some do not (:func:`order_columns`: a one-line error, never a sort key whose first
  column is NULL for some of the changes, which would put them before all the others).
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

from pipeline.errors import UnorderedChangesError

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
        StructField("change_lsn", LongType(), True),
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
    StructField("layout", StringType(), True),
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

KAFKA_ORDER = ("kafka_partition", "kafka_offset", "record_index")
"""The Kafka position of a change: apply order of a table none of whose changes has a
commit LSN (never null: every change comes from a Kafka record)."""
LOG_ORDER = ("commit_lsn_num", "ordinal", *KAFKA_ORDER)
"""Commit order, the Kafka position as tie-breaker (a message's changes without
ordinals): apply order of a table all of whose changes have a commit LSN."""
ORDER_COLUMNS = LOG_ORDER
"""The apply order of walcast's changes (:data:`LOG_ORDER`)."""


def order_columns(changes: int, positioned: int, table: str) -> tuple[str, ...]:
    """The apply order of a table's changes: by position, or by Kafka position.

    ``changes`` changes of ``table``, ``positioned`` of them with a commit LSN:
    :data:`LOG_ORDER` when all have one, :data:`KAFKA_ORDER` when none has. Some but not
    all is :class:`~pipeline.errors.UnorderedChangesError` (one line): their order against
    each other is unknown, and a sort would put the ones without a commit LSN first.
    """
    if positioned == changes:
        return LOG_ORDER
    if positioned == 0:
        return KAFKA_ORDER
    raise UnorderedChangesError(
        f"{table}: {changes - positioned:,} of {changes:,} changes have no commit LSN, the "
        "others have one: their order against each other is unknown",
        hint="read one producer's topics per normalize output (walcast writes the "
        "walcast.commit_lsn header on every message)",
    )


MESSAGE = StructType(
    [
        *KAFKA_FIELDS,
        *SOURCE_FIELDS,
        StructField("header_lsn", LongType(), True),
        StructField("header_ordinal", LongType(), True),
        StructField("header_change_lsn", LongType(), True),
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

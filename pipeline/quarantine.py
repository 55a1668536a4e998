"""The quarantine: what the normalize job could not turn into normalized changes.

Nothing disappears silently: every Kafka record that yields no normalized change, other
than control records (heartbeats, transaction markers, metadata), is written here with
its Kafka position and the reason, and the job keeps going. Reasons
(:mod:`pipeline.formats.base`):

* ``malformed``: the message cannot be decoded (truncated JSON, wrong Avro bytes, a
  delimited message with an unterminated quote …); the raw key and value are kept.
* ``unknown_table``: no layout record is known for the change's table (IBM), or none
  with the record's field count.
* ``unsupported``: a valid message the normalized model cannot hold (DDL other than
  TRUNCATE, unknown operations); the raw value is kept.
* ``orphan``: half of a split update whose other half never came (raw value kept).
* ``replay``: a change already seen (same commit LSN and ordinal), dropped from the
  normalized output; only its position is kept.

One row per message for message-level problems (``record_index`` null), one per change
otherwise. The table is Parquet, partitioned by ``reason``.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.formats.base import ERR_REPLAY
from pipeline.model import KAFKA_FIELDS, RAW_FIELDS

QUARANTINE = StructType(
    [
        *KAFKA_FIELDS,
        StructField("record_index", IntegerType(), True),
        StructField("format", StringType(), True),
        StructField("detail", StringType(), True),
        StructField("schema", StringType(), True),
        StructField("table", StringType(), True),
        StructField("commit_lsn", StringType(), True),
        StructField("ordinal", LongType(), True),
        *RAW_FIELDS,
        StructField("quarantined_at", TimestampType(), True),
        StructField("reason", StringType(), False),
    ]
)
PARTITION_COLUMNS = ("reason",)


def _shape(df: DataFrame, values: dict[str, object]) -> DataFrame:
    cols = []
    for f in QUARANTINE.fields:
        value = values.get(f.name, F.col(f.name) if f.name in df.columns else F.lit(None))
        col = F.lit(value) if isinstance(value, str) else value
        assert isinstance(col, Column), f.name
        cols.append(col.cast(f.dataType).alias(f.name))
    return df.select(*cols)


def from_messages(problems: DataFrame, format_name: str) -> DataFrame:
    """Quarantine rows of wholly rejected messages (see ``sequencing.message_problems``)."""
    return _shape(
        problems,
        {
            "record_index": F.lit(None),
            "format": F.lit(format_name),
            "reason": F.col("reason"),
            "detail": F.col("detail"),
            "quarantined_at": F.current_timestamp(),
        },
    )


def from_changes(changes: DataFrame) -> DataFrame:
    """Quarantine rows of rejected changes: change-level errors and replays."""
    bad = changes.where(F.col("error").isNotNull() | F.col("is_replay"))
    reason = F.coalesce(F.col("error"), F.lit(ERR_REPLAY))
    detail = F.when(F.col("error").isNotNull(), F.col("error_detail")).otherwise(
        F.concat(
            F.lit("already seen: commit LSN "),
            F.coalesce(F.col("commit_lsn"), F.lit("?")),
            F.lit(" ordinal "),
            F.coalesce(F.col("ordinal").cast("string"), F.lit("?")),
        )
    )
    return _shape(
        bad,
        {
            "reason": reason,
            "detail": detail,
            "kafka_key": F.lit(None),
            "kafka_value": F.lit(None),
            "quarantined_at": F.current_timestamp(),
        },
    )


def good_changes(changes: DataFrame) -> DataFrame:
    """The changes that go to the normalized table (no error, not a replay)."""
    return changes.where(F.col("error").isNull() & ~F.col("is_replay")).drop(
        "error", "error_detail", "is_replay"
    )

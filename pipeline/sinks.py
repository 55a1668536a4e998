"""Exactly-once Parquet output from ``foreachBatch``: Spark's own file sink, per batch id.

The normalize job writes two outputs per micro-batch (changes and quarantine) from one
``foreachBatch``. A plain ``df.write`` there is not idempotent: a batch re-run after a
crash would append its rows again. :class:`ExactlyOnceParquet` instead drives Spark's
streaming file sink (``FileStreamSink``) directly: it writes the batch's files and
records them under ``<path>/_spark_metadata/<batch id>``, and skips a batch id it has
already committed. Readers (``spark.read.parquet(path)``, ``spark.readStream``) list
files through that log, so they never see the files of an unfinished attempt.

The sink class is Spark-internal (``org.apache.spark.sql.execution.streaming``); its
constructor has been stable since Spark 2.0 and is checked by the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession


class ExactlyOnceParquet:
    """A Parquet directory written batch by batch, each batch id at most once."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        partition_columns: Sequence[str] = (),
        options: Mapping[str, str] | None = None,
    ) -> None:
        jvm = spark._jvm  # noqa: SLF001 - py4j gateway, the only way to the JVM sink
        assert jvm is not None
        utils = jvm.org.apache.spark.api.python.PythonUtils
        columns = jvm.java.util.ArrayList()
        for name in partition_columns:
            columns.add(name)
        opts = jvm.java.util.HashMap()
        for key, value in (options or {}).items():
            opts.put(key, value)
        file_format = jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat()
        self.path = path
        self._sink = jvm.org.apache.spark.sql.execution.streaming.FileStreamSink(
            spark._jsparkSession,  # noqa: SLF001
            path,
            file_format,
            utils.toSeq(columns),
            utils.toScalaMap(opts),
        )

    def add_batch(self, batch_id: int, df: DataFrame) -> None:
        """Write ``df`` as batch ``batch_id`` (a no-op when that batch is committed)."""
        self._sink.addBatch(batch_id, df._jdf)  # noqa: SLF001

"""DataFrames of values the driver holds, made without Python workers.

PySpark's ``createDataFrame(rows, schema)`` parallelizes the pickled rows and re-pickles
them through an identity ``map`` before the JVM reads them: every action on such a frame
runs Python worker processes (a daemon forked per executor, one worker per task), on the
driver's machine in local mode and on every executor of a cluster. The jobs never need
them otherwise: this module makes the same frames in the JVM.

* :func:`local_empty`: an empty frame of a schema, Spark's own local relation.
* :func:`local_rows`: rows as PySpark's ``createDataFrame`` converts them
  (``StructType.toInternal``: timestamps to microseconds, dates to days, …), pickled by
  ``parallelize`` in batches, which the JVM unpickles itself (``SerDeUtil.pythonToJava``,
  the step PySpark's own conversion ends with) and gives the schema
  (``applySchemaToPythonRDD``, as ``createDataFrame`` does).

Invariant: a frame from :func:`local_rows` equals ``createDataFrame(rows, schema)``,
value for value and type for type (``tests/pipeline/test_local_frames.py``), and reading
it starts no Python worker. Rows are not verified against the schema (``createDataFrame``'s
``verifySchema``): the callers build them from the schema's own fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType, _parse_datatype_string


def local_empty(spark: SparkSession, schema: StructType | str) -> DataFrame:
    """An empty DataFrame of ``schema`` (a ``StructType`` or a DDL string)."""
    struct = _struct(schema)
    jspark = spark._jsparkSession  # noqa: SLF001 - py4j: Spark's own local relation
    jvm = spark._jvm  # noqa: SLF001
    assert jvm is not None
    jdf = jspark.createDataFrame(jvm.java.util.ArrayList(), jspark.parseDataType(struct.json()))
    return DataFrame(jdf, spark)


def local_rows(
    spark: SparkSession, rows: Iterable[tuple[Any, ...]], schema: StructType | str
) -> DataFrame:
    """A DataFrame of ``rows`` (tuples in ``schema``'s field order) of ``schema``."""
    struct = _struct(schema)
    internal = [struct.toInternal(row) for row in rows]
    if not internal:
        return local_empty(spark, struct)
    jvm = spark._jvm  # noqa: SLF001
    assert jvm is not None
    # batches of pickled rows: the JVM unpickles them (batched=True), no Python map between
    pickled = spark.sparkContext.parallelize(internal)._jrdd  # noqa: SLF001
    objects = jvm.org.apache.spark.api.python.SerDeUtil.pythonToJava(pickled, True)  # noqa: FBT003
    arrays = jvm.org.apache.spark.api.python.SerDeUtil.toJavaArray(objects)
    jdf = spark._jsparkSession.applySchemaToPythonRDD(arrays.rdd(), struct.json())  # noqa: SLF001
    return DataFrame(jdf, spark)


def _struct(schema: StructType | str) -> StructType:
    if isinstance(schema, StructType):
        return schema
    parsed = _parse_datatype_string(schema)
    assert isinstance(parsed, StructType), schema
    return parsed


__all__ = ["local_empty", "local_rows"]

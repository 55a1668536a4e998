"""JSON Schema → StructType (pure: no JVM needed)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructType

from pipeline.layouts import layout_record_schema
from pipeline.schemas import struct_from_schema, to_spark_type

pytestmark = pytest.mark.integration  # needs pyspark (unit tests need nothing)


def test_canal_schema_types() -> None:
    s = struct_from_schema("canal.schema.json")
    assert s["data"].dataType == ArrayType(MapType(StringType(), StringType()))
    assert s["sqlType"].dataType == MapType(StringType(), LongType())
    assert s["es"].dataType == LongType()
    assert isinstance(s["walcast"].dataType, StructType)


def test_mixed_scalar_values_become_text() -> None:
    node = {
        "type": "object",
        "additionalProperties": {"type": ["boolean", "number", "string", "null"]},
    }
    assert to_spark_type(node) == MapType(StringType(), StringType())


def test_refs_any_of_and_override() -> None:
    s = struct_from_schema("qlik.schema.json", defs_override={"message": "data"})
    message = s["message"].dataType
    assert isinstance(message, StructType)
    assert message["beforeData"].dataType == MapType(StringType(), StringType())
    assert message["headers"].dataType["transactionEventCounter"].dataType == LongType()


def test_layout_record_schema_has_the_issue_fields() -> None:
    names = layout_record_schema().fieldNames()
    for field in ("schema", "table", "relation_id", "version", "columns"):
        assert field in names

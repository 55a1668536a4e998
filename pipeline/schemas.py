"""JSON Schema → Spark ``StructType``: explicit ``from_json`` schemas from ``schemas/*.json``.

The parsers read JSON with ``from_json`` and an explicit schema derived from the format's
JSON Schema in ``schemas/``, so Spark never infers types from data. The converter
handles the subset those documents use (draft 2020-12):

* ``type`` (a name or a list; ``"null"`` only makes the field nullable), ``const`` and
  ``enum`` (typed by their values), ``$ref`` to ``#/$defs/...``, ``anyOf``/``oneOf``
  (the non-null branches must agree, else ``string``).
* ``object`` with ``properties`` → ``StructType`` (properties in document order);
  ``object`` with only ``additionalProperties`` → ``MapType(string, …)``; an object
  with neither → ``map<string,string>`` (each value kept as its JSON text).
* ``array`` → ``ArrayType(items)``; ``string`` → string; ``integer`` → long;
  ``number`` → double; ``boolean`` → boolean.
* Several non-null scalar types (``["boolean", "number", "string"]``) → string: Spark's
  JSON reader then keeps a number or boolean as its JSON text (``15``, ``true``), so a
  row image of mixed values is a ``map<string,string>`` of texts.

Conditional keywords (``if``/``then``, ``allOf``) constrain values, not shapes, and
are ignored. Invariant: the conversion is total (every schema gives a type) and pure.
"""

# ruff: noqa: FBT003
# (PySpark idiom: StructField(name, type, True))
from __future__ import annotations

import json
from functools import cache
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from capture.schema_files import require_schema

_SCALARS: dict[str, DataType] = {
    "string": StringType(),
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
}


@cache
def load_json_schema(name: str) -> dict[str, Any]:
    """Load ``schemas/<name>`` (e.g. ``canal.schema.json``)."""
    loaded: dict[str, Any] = json.loads(require_schema(name).read_text())
    return loaded


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"unsupported $ref {ref!r} (only local #/ references)")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _types_of(node: dict[str, Any]) -> list[str]:
    if "type" in node:
        t = node["type"]
        return [t] if isinstance(t, str) else list(t)
    if "const" in node:
        return [_json_type(node["const"])]
    if "enum" in node:
        return sorted({_json_type(v) for v in node["enum"]})
    return []


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def to_spark_type(node: dict[str, Any], root: dict[str, Any] | None = None) -> DataType:
    """Convert one JSON Schema node (resolved against ``root``) to a Spark type."""
    root = node if root is None else root
    node = _resolve(node, root)
    branches = node.get("anyOf") or node.get("oneOf")
    if branches and "type" not in node:
        converted = [
            to_spark_type(b, root) for b in branches if _types_of(_resolve(b, root)) != ["null"]
        ]
        if converted and all(c == converted[0] for c in converted):
            return converted[0]
        return StringType()
    kinds = [t for t in _types_of(node) if t != "null"]
    if not kinds:
        return StringType()
    if len(kinds) > 1:
        if set(kinds) <= {"integer", "number"}:
            return DoubleType()
        return StringType()
    kind = kinds[0]
    if kind == "object":
        return _object_type(node, root)
    if kind == "array":
        items = node.get("items")
        return ArrayType(to_spark_type(items, root) if isinstance(items, dict) else StringType())
    return _SCALARS[kind]


def _object_type(node: dict[str, Any], root: dict[str, Any]) -> DataType:
    properties = node.get("properties")
    if properties:
        return StructType(
            [StructField(name, to_spark_type(sub, root), True) for name, sub in properties.items()]
        )
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return MapType(StringType(), to_spark_type(extra, root), True)
    return MapType(StringType(), StringType(), True)


def struct_from_schema(name: str, *, defs_override: dict[str, str] | None = None) -> StructType:
    """The ``StructType`` of ``schemas/<name>``.

    ``defs_override`` maps a top-level property to a ``$defs`` entry to use for it
    instead (e.g. Qlik's envelope ``message`` → ``data``), for envelopes whose payload
    shape is chosen by an ``if``/``then``.
    """
    root = load_json_schema(name)
    converted = to_spark_type(root, root)
    if not isinstance(converted, StructType):
        raise TypeError(f"{name}: the top level is not an object with properties")
    if not defs_override:
        return converted
    fields = []
    for f in converted.fields:
        target = defs_override.get(f.name)
        if target is None:
            fields.append(f)
        else:
            fields.append(StructField(f.name, to_spark_type(root["$defs"][target], root), True))
    return StructType(fields)


def merge_structs(*types: StructType) -> StructType:
    """A struct with every field of ``types`` (first definition of a name wins)."""
    seen: dict[str, StructField] = {}
    for t in types:
        for f in t.fields:
            seen.setdefault(f.name, f)
    return StructType(list(seen.values()))

"""walcast's ``debezium`` output read by Apache Flink's ``debezium-json`` format.

Every record of the capture scenario (fixture ``debezium_outputs``,
:mod:`tests.readers.debezium_outputs`) goes through Flink 1.20's
``DebeziumJsonDecodingFormat`` (``DebeziumJsonDeserializationSchema``)
with the row type a Flink user declares for Debezium's default value forms
(:func:`flink_type`), one decoder per table; tombstones go in as Kafka hands them over (a
null value, which the format skips). Checked for every record:

* the row kinds: ``c`` +I, ``u`` -U +U, ``d`` -D, a tombstone nothing; an update without an
  old row (REPLICA IDENTITY DEFAULT) is rejected by Flink, as for the real connector's
  (Flink's debezium-json needs REPLICA IDENTITY FULL for updates);
* every field of every row: Flink's value equals the value walcast wrote, read as the
  declared type (base64 → bytes, Java float text → float, ...);
* the metadata ``source.database``/``schema``/``table``/``timestamp``;
* and Flink reads the real Debezium's records of the same changes to exactly the same rows.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from capture.types import typmod
from tests.readers.debezium_outputs import Outputs
from tests.readers.expect import float32_bits, float64_bits
from tests.readers.harness import ReaderHarness
from tests.readers.reference import RefColumn, RefTable

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]

_PLAIN = {
    "int2": "SMALLINT", "int4": "INT", "int8": "BIGINT", "oid": "BIGINT", "bool": "BOOLEAN",
    "float4": "FLOAT", "float8": "DOUBLE", "bytea": "BYTES", "money": "BYTES", "date": "INT",
    "time": "BIGINT", "timestamp": "BIGINT", "interval": "BIGINT",
}  # fmt: skip
_POINT = "ROW<`x` DOUBLE, `y` DOUBLE, `wkb` BYTES, `srid` INT>"
_VARIABLE_SCALE = "ROW<`scale` INT, `value` BYTES>"
_REJECTED_UPDATE = "REPLICA IDENTITY to FULL"


def flink_type(column: RefColumn) -> str:
    """The Flink SQL type that reads Debezium's default form of ``column``'s values."""
    name = column.type_name
    array = name.startswith("_")
    base = name[1:] if array else name
    if base in _PLAIN:
        kind = _PLAIN[base]
    elif base == "numeric":
        kind = "BYTES" if typmod.numeric_precision_scale(column.typmod) else _VARIABLE_SCALE
    elif base == "point":
        kind = _POINT
    elif base in ("bit", "varbit"):
        length = typmod.bit_length(column.typmod)
        kind = "BOOLEAN" if length is None or length <= 1 else "BYTES"
    else:
        kind = "STRING"
    return f"ARRAY<{kind}>" if array else kind


def _rendered(kind: str, value: Any) -> Any:
    """Flink's value of JSON ``value`` read as ``kind``, rendered as the harness does."""
    if value is None:
        return None
    if kind.startswith("ARRAY<"):
        return [_rendered(kind[6:-1], item) for item in value]
    if kind.startswith("ROW<"):
        fields = [part.split("` ")[1] for part in kind[4:-1].split(", ")]
        return [_rendered(f, item) for f, item in zip(fields, value.values(), strict=True)]
    if kind in ("SMALLINT", "INT", "BIGINT"):
        return int(value)
    if kind == "FLOAT":
        return float32_bits(float(value))
    if kind == "DOUBLE":
        return float64_bits(float(value))
    if kind == "BYTES":
        return base64.b64decode(value).hex()
    return value  # BOOLEAN, STRING


def _row_type(table: RefTable, names: list[str]) -> str:
    fields = ", ".join(f"`{n}` {flink_type(table.column(n))}" for n in names)
    return f"ROW<{fields}>"


def _expected(value: dict[str, Any], kinds: list[str], names: list[str]) -> list[Any]:
    """(row kind, rendered fields) of each row Flink must make of the record ``value``."""
    op = value["op"]
    if op in ("c", "r"):
        rows = [("+I", value["after"])]
    elif op == "d":
        rows = [("-D", value["before"])]
    else:
        rows = [("-U", value["before"]), ("+U", value["after"])]
    return [
        (kind, [_rendered(k, image[n]) for k, n in zip(kinds, names, strict=True)])
        for kind, image in rows
    ]


def _outcome(result: dict[str, Any]) -> Any:
    """The rows read, or the cause of a rejection (without the message text it quotes)."""
    return result["error"].rsplit(" <- ", 1)[-1] if "error" in result else result


def _read(
    readers: ReaderHarness, texts: list[str], indexes: list[int], row_type: str, label: str
) -> dict[int, dict[str, Any]]:
    got = readers.read("flink-debezium", [texts[i] for i in indexes], label, rowType=row_type)
    return dict(zip(indexes, got, strict=True))


def test_flink_debezium_json_reads_every_record(
    readers: ReaderHarness, debezium_outputs: Outputs
) -> None:
    outputs = debezium_outputs
    ours = [m.value.decode() if m.value is not None else "" for m in outputs.ours]
    theirs = [r.value_text or "" for r in outputs.theirs]
    by_table: dict[str, list[int]] = {}
    for i, message in enumerate(outputs.ours):
        assert message.table is not None
        by_table.setdefault(message.table, []).append(i)
    problems: list[str] = []
    counts = {"rows": 0, "rejected updates": 0, "tombstones": 0}
    for table_name, indexes in by_table.items():
        table = outputs.tables[table_name]
        values = [json.loads(ours[i]) for i in indexes if ours[i]]
        image = next(v["after"] or v["before"] for v in values)
        names = list(image)  # the columns Debezium writes, in its order
        row_type = _row_type(table, names)
        kinds = [flink_type(table.column(n)) for n in names]
        read = _read(readers, ours, indexes, row_type, f"walcast debezium: {table_name}")
        again = _read(readers, theirs, indexes, row_type, f"Debezium 3.6.1: {table_name}")
        for i in indexes:
            result = read[i]
            if _outcome(result) != _outcome(again[i]):
                problems.append(f"#{i} {table_name}: walcast {result}, Debezium {again[i]}")
            if not ours[i]:
                counts["tombstones"] += 1
                if result != {"rows": []}:
                    problems.append(f"#{i} tombstone read as {result}")
                continue
            value = json.loads(ours[i])
            if value["op"] == "u" and value["before"] is None:
                counts["rejected updates"] += 1
                if _REJECTED_UPDATE not in result.get("error", ""):
                    problems.append(f"#{i} update without old row: {result}")
                continue
            if "error" in result:
                problems.append(f"#{i} {table_name} {value['op']}: {result['error']}")
                continue
            want = _expected(value, kinds, names)
            got = [(row["kind"], row["fields"]) for row in result["rows"]]
            if got != want:
                problems.append(f"#{i} {table_name} {value['op']}: Flink {got}, wrote {want}")
            source = value["source"]
            meta = {
                "source.database": source["db"],
                "source.schema": source["schema"],
                "source.table": source["table"],
                "source.timestamp": source["ts_ms"] * 1000,
            }
            for row in result["rows"]:
                counts["rows"] += 1
                if row["meta"] != meta:
                    problems.append(f"#{i} metadata {row['meta']} != {meta}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])
    assert counts["rows"] > 0
    assert counts["tombstones"] > 0

"""Layout records (``capture.formats.layout``): one shape for every format, stable versions."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from capture.formats.ibm import encode as ibm
from capture.formats.layout import IBM_HEADER_FIELD_COUNT, RENDERINGS, layout_record
from capture.synthetic import build_tables, table_specs
from tests.support.events import keyed_table, table_with

LAYOUT_JSON = Path(__file__).resolve().parents[3] / "schemas" / "ibm-delimited.layout.json"
NUMERIC_12_2 = ((12 << 16) | 2) + 4
ORDERS = [("id", "int4", True), ("note", "text", False), ("qty", "int8", False)]


def test_layout_record_describes_the_fields() -> None:
    table = keyed_table(
        [("id", "int8", True), ("amount", "numeric", False), ("code", "varchar", False)],
        typmods={"amount": NUMERIC_12_2, "code": 24},
    )
    layout = layout_record(table)
    assert layout["format"] == "ibm"
    assert layout["schema"] == "public"
    assert layout["table"] == "orders"
    assert layout["relation_id"] == table.relation_id
    assert layout["replica_identity"] == "default"
    assert layout["primary_key"] == ["id"]
    assert layout["field_count"] == 12 + 6
    assert [c["name"] for c in layout["columns"]] == ["id", "amount", "code"]
    assert [c["declared_type"] for c in layout["columns"]] == [
        "int8",
        "numeric(12,2)",
        "varchar(20)",
    ]
    assert [c["rendering"] for c in layout["columns"]] == ["bare", "number", "quoted"]
    assert [c["key"] for c in layout["columns"]] == [True, False, False]


def test_interval_declared_type_keeps_its_fields() -> None:
    day_to_second_3 = ((1 << 3 | 1 << 10 | 1 << 11 | 1 << 12) << 16) | 3
    table = table_with("public", "iv", [("a", "interval", False, day_to_second_3)])
    assert layout_record(table)["columns"][0]["declared_type"] == "interval day to second(3)"


def test_layout_version_is_stable_and_changes_with_the_layout() -> None:
    a = layout_record(keyed_table(ORDERS))
    b = layout_record(keyed_table(ORDERS))
    c = layout_record(keyed_table([*ORDERS, ("extra", "text", False)]))
    d = layout_record(keyed_table(ORDERS, identity="f"))
    assert a["version"] == b["version"]
    assert a["relation_id"] != b["relation_id"]
    assert len({a["version"], c["version"], d["version"]}) == 3


def test_ibm_fields_agree_with_the_ibm_encoder() -> None:
    assert len(ibm.HEADER_FIELDS) == IBM_HEADER_FIELD_COUNT
    doc = json.loads(LAYOUT_JSON.read_text())
    assert set(doc["renderings"]) == set(RENDERINGS)


def test_layout_record_of_synthetic_tables_validates() -> None:
    doc = json.loads(LAYOUT_JSON.read_text())
    validator = jsonschema.Draft202012Validator(doc["layout_record"])
    for table in build_tables(table_specs(8)):
        validator.validate(layout_record(table))

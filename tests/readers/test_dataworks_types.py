"""walcast's DataWorks records checked against the six field types the DataWorks spec lists.

DataWorks publishes no consumer library (on Maven Central or PyPI), so this reader is the
spec's type table itself (``/work/shared/specs/dataworks-kafka-message-format.txt``):
BOOLEAN is a JSON bool, DOUBLE and LONG JSON numbers, DATE a number of ms since the epoch,
BYTES a base64 string, STRING a string. Every record of the capture scenario and of a
2,000-change test stream is read that way and each value compared with PostgreSQL's.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

import pytest

from tests.readers.compare import Mismatches, effective_after, pair
from tests.readers.conftest import Run
from tests.readers.expect import bytea_bytes, civil, days_from_civil, epoch_us
from tests.readers.reference import RefChange, RefColumn

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]

RUNS = ["capture_run", "stream_run"]
TYPES = {"BOOLEAN", "DOUBLE", "LONG", "DATE", "BYTES", "STRING"}
# walcast's documented choices where a value has no JSON form of its type: NaN/±Infinity of
# a DOUBLE and ±infinity of a DATE are written as PostgreSQL's text.
SPECIAL_TEXT = {"DOUBLE": {"NaN", "Infinity", "-Infinity"}, "DATE": {"infinity", "-infinity"}}
_OPS = {"insert": ["INSERT"], "update": ["UPDATE_BEFOR", "UPDATE_AFTER"], "delete": ["DELETE"]}


def _allowed_types(column: RefColumn) -> set[str]:
    name = column.type_name
    if name == "bool":
        return {"BOOLEAN"}
    if name in ("int2", "int4", "int8", "oid", "xid"):
        return {"LONG"}
    if name in ("float4", "float8"):
        return {"DOUBLE"}
    if name == "bytea":
        return {"BYTES"}
    if name == "date":
        return {"DATE"}
    if name in ("timestamp", "timestamptz"):
        # DATE holds ms: exact only for a declared precision of 0 to 3.
        return {"DATE"} if 0 <= column.typmod <= 3 else {"STRING"}
    return {"STRING"}


def _read(kind: str, value: Any) -> tuple[str, Any]:
    """What a consumer following the spec's type table makes of ``value``: (form, value)."""
    if value is None:
        return "null", None
    if isinstance(value, str) and value in SPECIAL_TEXT.get(kind, ()):
        return "special", value
    if kind == "BOOLEAN" and isinstance(value, bool):
        return "ok", value
    if kind == "LONG" and isinstance(value, int) and not isinstance(value, bool):
        return "ok", value
    if kind == "DOUBLE" and isinstance(value, int | float) and not isinstance(value, bool):
        return "ok", float(value)
    if kind == "DATE" and isinstance(value, int) and not isinstance(value, bool):
        return "ok", value
    if kind == "BYTES" and isinstance(value, str):
        try:
            return "ok", base64.b64decode(value, validate=True)
        except binascii.Error:
            return "bad", value
    if kind == "STRING" and isinstance(value, str):
        return "ok", value
    return "bad", value


def _due(column: RefColumn, kind: str, text: str | None) -> tuple[str, Any]:
    """What PostgreSQL's ``text`` must read as under DataWorks type ``kind``."""
    if text is None:
        return "null", None
    if text in SPECIAL_TEXT.get(kind, ()):
        return "special", text
    if kind == "BOOLEAN":
        return "ok", text == "t"
    if kind == "LONG":
        return "ok", int(text)
    if kind == "DOUBLE":
        value = float(text)
        if column.type_name == "float4":
            value = struct.unpack(">f", struct.pack(">f", value))[0]
        return "ok", value
    if kind == "BYTES":
        return "ok", bytea_bytes(text)
    if kind == "DATE":
        value = civil(text)
        if column.type_name == "date":
            assert value.year is not None and value.month is not None  # noqa: PT018
            return "ok", days_from_civil(value.year, value.month, value.day or 1) * 86_400_000
        return "ok", epoch_us(value) // 1000
    return "ok", text


def _check_image(
    found: Mismatches,
    index: int,
    change: RefChange,
    what: str,
    types: dict[str, str],
    got: dict[str, Any] | None,
    want: dict[str, str | None],
) -> None:
    if got is None:
        found.add(index, change, what, None, want)
        return
    values = got["dataColumn"]
    found.check(index, change, f"{what} columns", sorted(values), sorted(want))
    for column in change.table.columns:
        if column.name not in values or column.name not in want:
            continue
        kind = types[column.name]
        form, value = _read(kind, values[column.name])
        due = _due(column, kind, want[column.name])
        if column.type_name == "float4" and form == "ok":
            value = struct.unpack(">f", struct.pack(">f", value))[0]
        found.check(index, change, f"{what} {column.name} ({kind})", (form, value), due)


@pytest.mark.parametrize("run_name", RUNS)
def test_dataworks_values_have_the_spec_types(
    run_name: str, request: pytest.FixtureRequest
) -> None:
    run: Run = request.getfixturevalue(run_name)
    records = [json.loads(m) for m in run.messages["dataworks"]]
    records = [r for r in records if r["payload"]["op"] != "MHEARTBEAT"]
    # One record per change, two per update: regroup by change.
    grouped: list[dict[str, Any]] = []
    position = 0
    for change in run.changes:
        width = len(_OPS.get(change.op, ["TRUNCATE"]))
        grouped.append({"records": records[position : position + width]})
        position += width
    assert position == len(records), f"{len(records)} records for {len(run.changes)} changes"
    found = Mismatches("DataWorks spec types", run.label)
    sequence_ids: list[str] = []
    for index, change, group in pair(run.changes, grouped):
        recs = group["records"]
        ops = [r["payload"]["op"] for r in recs]
        found.check(index, change, "ops", ops, _OPS.get(change.op, ["TRUNCATE"]))
        for record in recs:
            found.check(
                index, change, "eventTime",
                record["payload"]["timestamp"]["eventTime"], change.commit_us // 1000,
            )  # fmt: skip
            sequence_ids.append(record["payload"]["sequenceId"])
        if change.op == "truncate" or ops != _OPS[change.op]:
            continue
        schema = recs[0]["schema"]
        columns = schema["dataColumn"]
        found.check(
            index, change, "schema columns",
            [c["name"] for c in columns], [c.name for c in change.table.columns],
        )  # fmt: skip
        types = {c["name"]: c["type"] for c in columns}
        for column in change.table.columns:
            kind = types.get(column.name)
            found.check(index, change, f"type of {column.name} ({column.type_name})",
                        kind in _allowed_types(column) and kind in TYPES, True)  # fmt: skip
        after = effective_after(change)
        if change.op == "insert":
            _check_image(found, index, change, "after", types, recs[0]["payload"]["after"], after)
        elif change.op == "delete":
            before = change.before or {}
            _check_image(
                found, index, change, "before", types, recs[0]["payload"]["before"], before
            )
        else:
            before = change.before
            if before is None:
                before = {k: after[k] for k in change.table.primary_key if k in after}
            _check_image(
                found, index, change, "before", types, recs[0]["payload"]["before"], before
            )
            _check_image(found, index, change, "after", types, recs[1]["payload"]["after"], after)
            ids = [r["payload"]["sequenceId"] for r in recs]
            found.check(index, change, "shared sequenceId", ids[0], ids[1])
    found.check(-1, None, "sequenceIds in commit order", sequence_ids == sorted(sequence_ids), True)
    found.assert_none()

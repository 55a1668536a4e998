"""walcast's canal output read by Flink's canal-json and by canal's own FlatMessage.

Every message of the capture scenario and of a 2,000-change test stream goes through each
reader; each row the reader produced is compared, value by typed value, with what PostgreSQL
reported for that change (:mod:`tests.readers.reference`).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.readers.compare import Mismatches, effective_after, pair
from tests.readers.conftest import Run
from tests.readers.expect import (
    UnrepresentableError,
    canal_text,
    flink_row_type,
    flink_type,
    flink_value,
)
from tests.readers.harness import ReaderHarness
from tests.readers.reference import RefChange, RefTable

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]

RUNS = ["capture_run", "stream_run"]


# ------------------------------------------------------------------ Flink canal-json


def _flink_rows(change: RefChange) -> list[tuple[str, list[Any]]]:
    """The rows Flink's canal-json must produce (raises UnrepresentableError)."""
    columns = change.table.columns
    after = effective_after(change)
    after_row = [flink_value(c, after.get(c.name)) for c in columns]
    if change.op == "insert":
        return [("+I", after_row)]
    before = change.before or {}
    if change.op == "delete":
        return [("-D", [flink_value(c, before.get(c.name)) for c in columns])]
    # UPDATE: columns absent from "old" are taken from "data" (Flink's canal-json rule).
    before_row = [
        flink_value(c, before[c.name]) if c.name in before else after_row[i]
        for i, c in enumerate(columns)
    ]
    return [("-U", before_row), ("+U", after_row)]


def _flink_fields(
    found: Mismatches, index: int, change: RefChange, kind: str, got: list, want: list
) -> None:
    for column, g, w in zip(change.table.columns, got, want, strict=True):
        found.check(index, change, f"{kind} {column.name} ({flink_type(column)})", g, w)


def _flink_meta(table: RefTable, change: RefChange) -> dict[str, Any]:
    return {
        "database": table.schema,
        "table": table.name,
        "event-timestamp": change.commit_us // 1000 * 1000,
        "pk-names": list(table.primary_key) or None,
    }


@pytest.mark.parametrize("run_name", RUNS)
def test_flink_canal_json_reads_every_message(
    readers: ReaderHarness, run_name: str, request: pytest.FixtureRequest
) -> None:
    run: Run = request.getfixturevalue(run_name)
    messages = run.messages["canal-flink"]
    changes = [c for c in run.changes if c.op != "truncate"]  # canal.truncate=skip
    assert messages, "no canal messages"
    # Flink decodes with one row type per table: feed each table's messages to its decoder.
    by_table: dict[str, list[int]] = {}
    tables = {c.table.name: c.table for c in changes}
    order = [c.table.name for c in changes]
    for i, name in enumerate(order):
        by_table.setdefault(name, []).append(i)
    results: list[dict[str, Any]] = [{}] * len(messages)
    assert len(messages) == len(changes), (len(messages), len(changes))
    for name, indexes in by_table.items():
        row_type = flink_row_type(tables[name].columns)
        out = readers.read(
            "flink-canal", [messages[i] for i in indexes], f"{run.label}: {name}", rowType=row_type
        )
        for i, result in zip(indexes, out, strict=True):
            results[i] = result
    found = Mismatches("Flink canal-json", run.label)
    rejected_as_due = 0
    for index, change, result in pair(changes, results):
        try:
            want = _flink_rows(change)
        except UnrepresentableError as exc:
            if "error" in result:
                rejected_as_due += 1
            else:
                found.add(index, change, f"value {exc} has no Flink value", result, "a rejection")
            continue
        if "error" in result:
            found.add(index, change, "message", result["error"], "read")
            continue
        rows = result["rows"]
        found.check(index, change, "row kinds", [r["kind"] for r in rows], [k for k, _ in want])
        for row, (kind, fields) in zip(rows, want, strict=False):
            _flink_fields(found, index, change, kind, row["fields"], fields)
            meta = {k: v for k, v in row["meta"].items() if k != "ingestion-timestamp"}
            found.check(index, change, f"{kind} metadata", meta, _flink_meta(change.table, change))
    found.assert_none()
    if run_name == "capture_run":
        # 44 BC, 4713 BC, infinity, year 294276: outside Flink's DATE/TIMESTAMP range.
        assert rejected_as_due >= 1


# ------------------------------------------------------------------ canal FlatMessage


def _flat_row(table: RefTable, image: dict[str, str | None]) -> dict[str, str | None]:
    return {c.name: canal_text(c, image[c.name]) for c in table.columns if c.name in image}


def _flat_expected(change: RefChange) -> dict[str, Any]:
    table = change.table
    want: dict[str, Any] = {
        "database": table.schema,
        "table": table.name,
        "es": change.commit_us // 1000,
    }
    if change.op == "truncate":
        want.update(type="TRUNCATE", isDdl=True, data=None, old=None)
        return want
    want.update(isDdl=False, sql="", pkNames=list(table.primary_key) or None)
    after = effective_after(change)
    if change.op == "insert":
        want.update(type="INSERT", data=[_flat_row(table, after)], old=None)
    elif change.op == "delete":
        want.update(type="DELETE", data=[_flat_row(table, change.before or {})], old=None)
    else:
        before = change.before or {}
        changed = {k: v for k, v in before.items() if k not in after or after[k] != v}
        if not table.full:
            changed = {k: v for k, v in changed.items() if k in after}
        want.update(type="UPDATE", data=[_flat_row(table, after)], old=[_flat_row(table, changed)])
    return want


@pytest.mark.parametrize("run_name", RUNS)
def test_canal_flatmessage_reads_every_message(
    readers: ReaderHarness, run_name: str, request: pytest.FixtureRequest
) -> None:
    run: Run = request.getfixturevalue(run_name)
    messages = run.messages["canal-adapter"]
    results = readers.read("canal-flatmessage", messages, run.label)
    found = Mismatches("canal FlatMessage (fastjson2)", run.label)
    for index, change, result in pair(run.changes, results):
        if "error" in result:
            found.add(index, change, "message", result["error"], "read")
            continue
        for key, want in _flat_expected(change).items():
            got = result[key]
            if key in ("data", "old") and got is not None and want is not None:
                for n, (got_row, want_row) in enumerate(zip(got, want, strict=False)):
                    for name in sorted(set(got_row) | set(want_row)):
                        g = got_row.get(name, "<absent>")
                        w = want_row.get(name, "<absent>")
                        found.check(index, change, f"{key}[{n}].{name}", g, w)
                found.check(index, change, f"{key} rows", len(got), len(want))
                continue
            found.check(index, change, key, got, want)
        if change.op == "truncate":
            found.check(index, change, "sql", result["sql"].startswith("TRUNCATE TABLE"), True)
        else:
            names = {c.name for c in change.table.columns}
            found.check(index, change, "sqlType columns", set(result["sqlType"] or {}), names)
            found.check(index, change, "mysqlType columns", set(result["mysqlType"] or {}), names)
            found.check(
                index, change, "gtid xid", (result["gtid"] or "").split(":")[0], str(change.xid)
            )
    found.assert_none()

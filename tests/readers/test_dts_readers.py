"""walcast's DTS Avro read by Alibaba's DTS subscription SDK and by Avro Java's generic reader.

Every message of the capture scenario and of a 2,000-change test stream goes through each
reader; each image value the reader produced is compared with what PostgreSQL reported for
that change (:mod:`tests.readers.reference`), as the SDK's own typed ``Value`` objects and as
the raw ``Record`` datum Avro decodes with the vendor's schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.readers.compare import Mismatches, effective_after, pair
from tests.readers.conftest import Run
from tests.readers.expect import (
    NONE_AVRO,
    NONE_SDK,
    dts_avro_item,
    dts_sdk_value,
    same_float,
)
from tests.readers.harness import ReaderHarness
from tests.readers.reference import RefChange, RefColumn

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]

RUNS = ["capture_run", "stream_run"]
_OPS = {"insert": "INSERT", "update": "UPDATE", "delete": "DELETE", "truncate": "DDL"}
_NOT_CHANGES = {"HEARTBEAT", "BEGIN", "COMMIT"}


def _images(
    change: RefChange, value: Callable[[RefColumn, str | None], Any], none: Any
) -> tuple[list[Any] | None, list[Any] | None]:
    """(before, after) image values due for ``change`` (DTS Avro's documented images).

    A column whose value PostgreSQL did not send is ``none`` (EmptyObject.NONE); an UPDATE
    without an old row gives the key's after values as its before values.
    """
    columns = change.table.columns
    after = effective_after(change)

    def image(values: dict[str, str | None]) -> list[Any]:
        return [value(c, values[c.name]) if c.name in values else none for c in columns]

    if change.op == "insert":
        return None, image(after)
    if change.op == "delete":
        return image(change.before or {}), None
    before = change.before
    if before is None:
        before = {k: after[k] for k in change.table.primary_key if k in after}
    return image(before), image(after)


def _check_values(
    found: Mismatches,
    index: int,
    change: RefChange,
    what: str,
    got: list[Any] | None,
    want: list[Any] | None,
    float_key: tuple[str, ...],
) -> None:
    if got is None or want is None:
        found.check(index, change, what, got, want)
        return
    found.check(index, change, f"{what} length", len(got), len(want))
    for column, g, w in zip(change.table.columns, got, want, strict=False):
        floats = column.type_name in ("float4", "float8")
        if floats and isinstance(g, dict) and isinstance(w, dict) and float_key[0] in g:
            g_text, w_text = _dig(g, float_key), _dig(w, float_key)
            rest_g = {k: v for k, v in g.items() if k != float_key[0]}
            rest_w = {k: v for k, v in w.items() if k != float_key[0]}
            single = column.type_name == "float4"
            if not same_float(g_text, w_text, single=single) or rest_g != rest_w:
                found.add(index, change, f"{what} {column.name} ({column.type_name})", g, w)
            continue
        found.check(index, change, f"{what} {column.name} ({column.type_name})", g, w)


def _dig(item: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        item = item[key]
    return item


@pytest.mark.parametrize("run_name", RUNS)
def test_dts_sdk_reads_every_message(
    readers: ReaderHarness, run_name: str, request: pytest.FixtureRequest
) -> None:
    run: Run = request.getfixturevalue(run_name)
    results = readers.read("dts-sdk", run.messages["dts-avro"], run.label)
    found = Mismatches("DTS subscription SDK", run.label)
    keep = lambda r: r.get("op") not in _NOT_CHANGES  # noqa: E731
    for index, change, result in pair(run.changes, results, keep):
        if "error" in result:
            found.add(index, change, "message", result["error"], "read")
            continue
        table = change.table
        found.check(index, change, "operation", result["op"], _OPS[change.op])
        found.check(
            index, change, "objectName", result["objectName"],
            f"{run.database}.{table.schema}.{table.name}",
        )  # fmt: skip
        found.check(index, change, "sourceTimestamp", result["sourceTimestamp"],
                    change.commit_us // 1_000_000)  # fmt: skip
        if change.op == "truncate":
            continue
        # The SDK's RecordSchema knows a database and a table; the PostgreSQL schema is only
        # in its schema identifier (and the record's objectName).
        found.check(
            index, change, "schema",
            [result["database"], result["table"], table.schema in result["schemaIdentifier"]],
            [run.database, table.name, True],
        )  # fmt: skip
        found.check(
            index, change, "fields",
            [(f["name"], f["type"], f["primary"]) for f in result["fields"]],
            [(c.name, c.type_oid, c.name in table.primary_key) for c in table.columns],
        )  # fmt: skip
        before, after = _images(change, dts_sdk_value, NONE_SDK)
        _check_values(found, index, change, "before", result["before"], before, ("float",))
        _check_values(found, index, change, "after", result["after"], after, ("float",))
    found.assert_none()


@pytest.mark.parametrize("run_name", RUNS)
def test_avro_generic_reader_decodes_every_message(
    readers: ReaderHarness, run_name: str, request: pytest.FixtureRequest
) -> None:
    run: Run = request.getfixturevalue(run_name)
    results = readers.read("avro-generic", run.messages["dts-avro"], run.label)
    found = Mismatches("Avro GenericDatumReader", run.label)
    keep = lambda r: r.get("operation") not in _NOT_CHANGES  # noqa: E731
    for index, change, result in pair(run.changes, results, keep):
        if "error" in result:
            found.add(index, change, "datum", result["error"], "decoded")
            continue
        table = change.table
        header = {
            "@type": "com.alibaba.dts.formats.avro.Record",
            "version": 1,
            "operation": _OPS[change.op],
            "objectName": f"{run.database}.{table.schema}.{table.name}",
            "sourceTxid": str(change.xid),
            "sourceTimestamp": change.commit_us // 1_000_000,
        }
        found.check(index, change, "header", {k: result[k] for k in header}, header)
        found.check(index, change, "source type", result["source"]["sourceType"], "PostgreSQL")
        if change.op == "truncate":
            sql = result["afterImages"]
            found.check(index, change, "DDL text", str(sql).startswith("TRUNCATE TABLE"), True)
            continue
        found.check(
            index, change, "fields",
            [(f["name"], f["dataTypeNumber"]) for f in result["fields"]],
            [(c.name, c.type_oid) for c in table.columns],
        )  # fmt: skip
        before, after = _images(change, dts_avro_item, NONE_AVRO)
        _check_values(found, index, change, "beforeImages", result["beforeImages"], before,
                      ("value",))  # fmt: skip
        _check_values(found, index, change, "afterImages", result["afterImages"], after,
                      ("value",))  # fmt: skip
    found.assert_none()

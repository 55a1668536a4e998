"""Every parser types a change with the layout it was encoded with, not the table's newest.

walcast names the layout version in each change message (the ``walcast.layout`` header,
:mod:`capture.formats.layout`). A table whose ``at timestamptz`` is dropped, then added
again as ``text``: the change from before the DROP must keep ``at`` typed as a
``timestamptz`` (canal, for one, writes it without its zone, and only its type brings
PostgreSQL's text back). Typed by the newest layout, it kept the vendor's rendering: the
soak's known bug ``dropped-column-values-by-newest-layout``.

IBM delimited names the version in ``plan_name`` (tests/pipeline/formats/test_ibm.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from capture.events import ChangeEvent, Op, StreamItem, Table, TransactionBegin, TransactionCommit
from capture.formats import EncodedMessage, encoder_for
from capture.formats.layout import layout_record
from capture.synthetic import format_options
from pipeline.formats import FORMAT_NAMES, parser_for
from pipeline.layouts import parse_layouts
from pipeline.normalize import normalize_frame
from tests.pipeline import expected
from tests.pipeline.conftest import records, walcast_records
from tests.support.events import event, keyed_table

pytestmark = pytest.mark.integration

FIRST = keyed_table([("id", "int8", True), ("at", "timestamptz", False), ("note", "text", False)])
DROPPED = keyed_table([("id", "int8", True), ("note", "text", False)])
READDED = keyed_table([("id", "int8", True), ("note", "text", False), ("at", "text", False)])
LAYOUTS = (FIRST, DROPPED, READDED)
"""Published in this order: READDED is the newest."""

ROWS: tuple[tuple[Table, dict[str, str]], ...] = (
    (FIRST, {"id": "1", "at": "2010-10-26 09:05:07.834958+00", "note": "before the drop"}),
    (DROPPED, {"id": "2", "note": "between"}),
    (READDED, {"id": "3", "note": "after the re-add", "at": "tomorrow"}),
)
FORMATS = tuple(f for f in FORMAT_NAMES if f != "ibm")


def transaction(change: ChangeEvent) -> list[StreamItem]:
    return [
        TransactionBegin(change.xid, change.commit_lsn, change.commit_ts, 1),
        change,
        TransactionCommit(
            change.xid, change.commit_lsn, change.commit_lsn + 64, change.commit_ts, 1
        ),
    ]


def encode(fmt: str) -> list[EncodedMessage]:
    """One insert per layout, each its own transaction, with walcast's encoder."""
    encoder = encoder_for(fmt, format_options())
    out: list[EncodedMessage] = []
    for n, (table, row) in enumerate(ROWS):
        change = event(Op.INSERT, table, after=row, xid=700 + n, commit_lsn=0x1000 * (n + 1))
        for item in transaction(change):
            out.extend(encoder.encode(item))
    return [m for m in [*out, *encoder.flush()] if m.kind == "change"]


def normalize(spark, fmt: str, messages: list[EncodedMessage]) -> list[dict[str, Any]]:
    layouts = parse_layouts(
        records(
            spark,
            [
                (
                    f"{t.qualified_name}/{t.layout_version}".encode(),
                    json.dumps(layout_record(t)).encode(),
                )
                for t in LAYOUTS
            ],
        )
    )
    result = normalize_frame(
        walcast_records(spark, messages), parser_for(fmt), layouts, persist=True
    )
    changes = [r.asDict(recursive=True) for r in result.changes.orderBy("kafka_offset").collect()]
    quarantine = result.quarantine.collect()
    result.release()
    assert quarantine == []
    return changes


def types_of(table: Table) -> dict[str, str]:
    return {c.name: c.type_name for c in table.columns}


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_change_is_typed_by_the_layout_it_names(spark, fmt: str) -> None:
    changes = normalize(spark, fmt, encode(fmt))
    assert len(changes) == len(ROWS)
    for change, (table, row) in zip(changes, ROWS, strict=True):
        types = types_of(table)
        assert change["column_types"] == types, (fmt, row["id"])
        after = change["after"]
        assert set(after) == set(row), (fmt, row["id"])
        for name, text in row.items():
            assert expected.same_value(text, after[name], types[name]), (fmt, name, after)


@pytest.mark.parametrize("fmt", ["canal", "json"])
def test_a_change_naming_no_known_layout_is_typed_by_the_newest(spark, fmt: str) -> None:
    """No ``walcast.layout`` header (older walcast, other producers), or a version the
    layout topic does not hold: the table's newest layout, the only one to read it with."""
    messages = encode(fmt)
    unnamed = dataclasses.replace(messages[2], layout=None)
    unknown = dataclasses.replace(messages[1], layout=b"00000000deadbeef")
    changes = normalize(spark, fmt, [unknown, unnamed])
    assert [c["column_types"] for c in changes] == [types_of(READDED)] * 2
    assert [c["after"]["id"] for c in changes] == ["2", "3"]

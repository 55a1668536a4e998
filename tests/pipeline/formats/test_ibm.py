"""``ibm`` parser on records built by hand: unavailable columns and layout versions.

Both cases were found by the differential soak (``bench/soak.py``):

* a row change with two unchanged TOAST columns names both in its identifier
  (``IBM-INVALID-COLUMN-002A-004A-NULL``): neither may become NULL;
* a record is read with the layout it names (``plan_name`` = the layout record's
  ``version``), never with another layout of the same field count: ADD COLUMN then DROP
  COLUMN bring the field count back, and records of both layouts share a batch.
"""

from __future__ import annotations

import json

import pytest

from capture.formats.ibm.encode import format_commit_lsn, format_transaction_id
from capture.formats.layout import layout_record
from pipeline.formats import parser_for
from pipeline.formats.base import ERR_MALFORMED, ERR_UNKNOWN_TABLE
from pipeline.layouts import parse_layouts
from pipeline.normalize import normalize_frame
from tests.pipeline.conftest import records
from tests.support.events import keyed_table

pytestmark = pytest.mark.integration

FIRST = keyed_table([("id", "int8", True), ("a", "text", False), ("b", "text", False)])
ADDED = keyed_table(
    [("id", "int8", True), ("a", "text", False), ("b", "text", False), ("c", "int4", False)]
)
DROPPED = keyed_table([("id", "int8", True), ("b", "text", False), ("c", "int4", False)])
DOCS = keyed_table(
    [
        ("id", "int8", True),
        ("title", "text", False),
        ("body", "text", False),
        ("summary", "text", False),
    ],
    name="docs",
)


def version(table) -> str:
    return str(layout_record(table)["version"])


def record(
    op: str,
    fields: str,
    *,
    plan: str,
    ident: str = "IBM",
    table: str = "orders",
    xid: int = 700,
) -> str:
    """One record as walcast writes it; ``plan`` is the plan_name field (raw). Each
    transaction (``xid``) has its own commit LSN."""
    return (
        f'10,"{ident}","2024123","181729123456","public","{table}","{op}",'
        f'"{format_transaction_id(xid)}","{format_commit_lsn(0x16B3748 + xid)}",'
        f'"2024-05-02-18.17.29",{plan},0000,{fields}\n'
    )


def normalize(spark, messages: list[str], tables) -> tuple[list[dict], list[dict]]:
    """Normalize ``messages`` (one Kafka record each, one batch) with ``tables``' layouts,
    published in that order; returns (changes, quarantine) as dicts."""
    layouts = parse_layouts(
        records(
            spark,
            [(t.qualified_name.encode(), json.dumps(layout_record(t)).encode()) for t in tables],
        )
    )
    result = normalize_frame(
        records(spark, [(None, m.encode()) for m in messages]),
        parser_for("ibm"),
        layouts,
        persist=True,
    )
    changes = [
        r.asDict(recursive=True)
        for r in result.changes.orderBy("kafka_offset", "record_index").collect()
    ]
    quarantine = [
        r.asDict(recursive=True)
        for r in result.quarantine.orderBy("kafka_offset", "record_index").collect()
    ]
    result.release()
    return changes, quarantine


def test_every_flagged_column_is_left_out_of_the_after_image(spark) -> None:
    """Columns 2 and 4 not sent: both are absent (kept by materialize), none is NULL."""
    docs = version(DOCS)
    message = record(
        "REPL",
        '1,,,,1,,"new",',
        plan=f'"{docs}"',
        ident="IBM-INVALID-COLUMN-002A-004A-NULL",
        table="docs",
    ) + record("REPL", '1,,,,1,"t",,', plan=f'"{docs}"', table="docs")
    changes, quarantine = normalize(spark, [message], [DOCS])
    assert quarantine == []
    flagged, plain = changes
    assert flagged["after"] == {"id": "1", "body": "new"}
    assert sorted(flagged["unchanged_toast"]) == ["summary", "title"]
    assert flagged["before"] == {"id": "1"}
    assert plain["after"] == {"id": "1", "title": "t", "body": None, "summary": None}
    assert plain["unchanged_toast"] == []


def test_a_before_flag_and_an_after_flag_of_one_record(spark) -> None:
    docs = version(DOCS)
    message = record(
        "REPL",
        '1,"a",,"s",1,"a",,',
        plan=f'"{docs}"',
        ident="IBM-INVALID-COLUMN-003B-003A-004A-NULL",
        table="docs",
    )
    [change], quarantine = normalize(spark, [message], [DOCS])
    assert quarantine == []
    assert change["before"] == {"id": "1", "title": "a", "summary": "s"}
    assert change["after"] == {"id": "1", "title": "a"}
    assert sorted(change["unchanged_toast"]) == ["body", "summary"]


def test_records_are_read_with_the_layout_they_name(spark) -> None:
    """ADD COLUMN c, then DROP COLUMN a: FIRST and DROPPED both have 18 fields. Records
    of both (and of ADDED) interleave in one batch, a transaction holding two layouts."""
    first, added, dropped = version(FIRST), version(ADDED), version(DROPPED)
    messages = [
        record("ISRT", ',,,1,"a1","b1"', plan=f'"{first}"', xid=701),
        record("ISRT", ',,,,2,"a2","b2",2', plan=f'"{added}"', xid=702)
        + record("ISRT", ',,,3,"b3",3', plan=f'"{dropped}"', xid=702),
        record("REPL", '1,,,1,"a1","B1"', plan=f'"{first}"', xid=703)
        + record("ISRT", ',,,4,"b4",4', plan=f'"{dropped}"', xid=703),
    ]
    changes, quarantine = normalize(spark, messages, [FIRST, ADDED, DROPPED])
    assert quarantine == []
    assert [c["after"] for c in changes] == [
        {"id": "1", "a": "a1", "b": "b1"},
        {"id": "2", "a": "a2", "b": "b2", "c": "2"},
        {"id": "3", "b": "b3", "c": "3"},
        {"id": "1", "a": "a1", "b": "B1"},
        {"id": "4", "b": "b4", "c": "4"},
    ]
    assert changes[0]["column_types"] == {"id": "int8", "a": "text", "b": "text"}
    assert changes[2]["column_types"] == {"id": "int8", "b": "text", "c": "int4"}


def test_without_a_fitting_layout_a_record_is_quarantined_never_guessed(spark) -> None:
    """A version no layout has, a record whose field count is not its layout's, and a
    record naming no version of a table with several layouts: all quarantined, the rest
    of the message kept."""
    first, dropped = version(FIRST), version(DROPPED)
    message = (
        record("ISRT", ',,,1,"a","b"', plan='"00000000deadbeef"')
        + record("ISRT", ',,,,2,"a","b",2', plan=f'"{first}"')
        + record("ISRT", ',,,3,"a","b"', plan="")
        + record("ISRT", ',,,4,"b",4', plan=f'"{dropped}"')
    )
    changes, quarantine = normalize(spark, [message], [FIRST, ADDED, DROPPED])
    assert [c["after"] for c in changes] == [{"id": "4", "b": "b", "c": "4"}]
    reasons = [(q["record_index"], q["reason"]) for q in quarantine]
    assert reasons == [(0, ERR_UNKNOWN_TABLE), (1, ERR_MALFORMED), (2, ERR_UNKNOWN_TABLE)]
    details = [q["detail"] for q in quarantine]
    assert "00000000deadbeef" in details[0]
    assert first in details[1]
    assert "no layout version" in details[2]


def test_a_record_without_a_version_uses_the_tables_only_layout(spark) -> None:
    """Records of other producers (IBM's own, an explicit ibm.plan_name) name no
    version: read with the table's layout only when the topic holds exactly one."""
    [change], quarantine = normalize(
        spark, [record("ISRT", ',,,1,"a","b"', plan='"ASNQCAP"')], [FIRST]
    )
    assert quarantine == []
    assert change["after"] == {"id": "1", "a": "a", "b": "b"}

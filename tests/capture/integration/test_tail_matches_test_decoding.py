"""``walcast tail`` prints exactly what test_decoding reports for the same WAL."""

from __future__ import annotations

import copy
import datetime as dt
import time

import psycopg
import pytest

from tests.support import scenario as sc
from tests.support import test_decoding

pytestmark = pytest.mark.integration

LOW_WORK_MEM = "options='-c logical_decoding_work_mem=64kB'"
# Types with a binary send function but no binary decoder in walcast: in --binary mode
# they arrive as raw bytes and tail shows them as \x-hex (documented); text mode is exact.
BINARY_UNDECODED = {"c_point", "c_money", "c_tsvector"}

MODES = {
    "text_v3": [],
    "binary_v3": ["--binary"],
    "text_v1": ["--proto-version", "1"],
}


@pytest.fixture(scope="module")
def scenario(pg_dsn: str):
    prepared = sc.prepare(pg_dsn, list(MODES))
    sc.run_sql_file(pg_dsn, "scenario_changes.sql")
    sc.run_sql_file(pg_dsn, "scenario_stream.sql")
    reference = test_decoding.parse(sc.reference_lines(prepared), schema=sc.SCHEMA)
    yield prepared, reference
    sc.cleanup(prepared)


def _normalize_tail(event: dict) -> tuple:
    before = event["before"]
    if before is not None:
        before = {k: v for k, v in before.items() if v is not None}
    return (
        event["op"], event["schema"], event["table"], event["xid"], before, event["after"],
        sorted(event["unchanged_toast"]),
    )  # fmt: skip


def _normalize_reference(change: test_decoding.Change) -> tuple:
    return (
        change.op, change.schema, change.table, change.xid, change.before, change.after,
        sorted(change.unchanged_toast),
    )  # fmt: skip


@pytest.mark.parametrize("mode", list(MODES))
def test_tail_equals_test_decoding(scenario, mode: str) -> None:
    prepared, shared_reference = scenario
    reference = copy.deepcopy(shared_reference)
    # The scenario's last change is the marker row; reading exactly as many events as the
    # reference has must end on it.
    assert reference[-1].after == {"id": "7", "owner": "the end", "balance": "0.00"}
    assert len(reference) > 100_000
    events = sc.tail_events(
        f"{prepared.dsn} {LOW_WORK_MEM}", prepared.slots[mode], prepared.publication,
        len(reference), *MODES[mode],
    )  # fmt: skip
    assert len(events) == len(reference)
    if "--binary" in MODES[mode]:
        for event, change in zip(events, reference, strict=True):
            for image, ref in ((event["after"], change.after), (event["before"], change.before)):
                for column in BINARY_UNDECODED & set(image or {}):
                    value = image.pop(column)
                    if ref is not None:
                        ref.pop(column, None)
                    assert value is None or value.startswith("\\x"), (column, value)
    mismatches = [
        (i, got, want)
        for i, (got, want) in enumerate(
            zip(map(_normalize_tail, events), map(_normalize_reference, reference), strict=True)
        )
        if got != want
    ]
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
    for got, want in zip(events, reference, strict=True):
        assert dt.datetime.fromisoformat(got["commit_time"]) == dt.datetime.fromisoformat(
            want.commit_time
        )
    if mode != "text_v1":
        assert _streamed_transactions(prepared.dsn, prepared.slots[mode]) >= 2, (
            "the scenario's big transactions were not streamed"
        )


def _streamed_transactions(dsn: str, slot: str) -> int:
    """pg_stat_replication_slots.stream_txns, once the walsender has reported it."""
    deadline = time.monotonic() + 15
    while True:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
        if (row and row[0]) or time.monotonic() > deadline:
            return int(row[0]) if row else 0
        time.sleep(0.5)


def test_scenario_exercised_what_it_claims(scenario) -> None:
    _, reference = scenario
    ops = {c.op for c in reference}
    assert ops == {"insert", "update", "delete", "truncate"}
    tables = {c.table for c in reference}
    assert {"all_types", "events_full", "docs", "accounts", "ledger", "bulk"} <= tables
    assert any(c.unchanged_toast == ["body"] for c in reference), "no unchanged TOAST column"
    assert not any(c.after and c.after.get("owner") == "ghost" for c in reference)
    assert not any(c.after and c.after.get("val") == "aborted sub" for c in reference)
    xids_with_two_tables = {
        c.xid for c in reference if c.table == "ledger" and c.op == "insert"
    } & {c.xid for c in reference if c.table == "accounts"}
    assert xids_with_two_tables
    biggest = max(sum(1 for c in reference if c.xid == x) for x in {c.xid for c in reference})
    assert biggest >= 100_000

"""``walcast tail`` prints exactly what test_decoding reports for the same WAL."""

from __future__ import annotations

import copy
import datetime as dt
import time

import psycopg
import pytest

from tests.support import scenario as sc
from tests.support import test_decoding

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.core, pytest.mark.xdist_group("scenario")]

LOW_WORK_MEM = "options='-c logical_decoding_work_mem=64kB'"
# money's text depends on the server's lc_monetary: --binary refuses it (binary_check.py),
# so the binary run reads a publication that leaves that column out (a column list, 15+).
BINARY_REFUSED = "c_money"

MODES = {
    "text_v3": [],
    "binary_v3": ["--binary"],
    "text_v1": ["--proto-version", "1"],
}


@pytest.fixture(scope="module")
def scenario(pg_dsn: str):
    prepared = sc.prepare(pg_dsn, list(MODES))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        if conn.info.server_version >= 150000:  # before the changes: decoding sees it
            tables = [
                str(r[0])
                for r in conn.execute(
                    "SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables "
                    "WHERE schemaname = %s ORDER BY 1",
                    (sc.SCHEMA,),
                ).fetchall()
            ]
            columns = [
                str(r[0])
                for r in conn.execute(
                    "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = "
                    "format('%%I.all_types', %s::text)::regclass AND attnum > 0 "
                    "AND NOT attisdropped AND attname <> %s ORDER BY attnum",
                    (sc.SCHEMA, BINARY_REFUSED),
                ).fetchall()
            ]
            listed = [
                f"{t} ({', '.join(columns)})" if t.endswith(".all_types") else t for t in tables
            ]
            conn.execute(
                f"CREATE PUBLICATION {prepared.publication}_bin FOR TABLE {', '.join(listed)}"
            )
    sc.run_sql_file(pg_dsn, "scenario_changes.sql")
    sc.run_sql_file(pg_dsn, "scenario_stream.sql")
    reference = test_decoding.parse(sc.reference_lines(prepared), schema=sc.SCHEMA)
    yield prepared, reference
    sc.cleanup(prepared)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP PUBLICATION IF EXISTS {prepared.publication}_bin")


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
def test_tail_equals_test_decoding(scenario, mode: str, pg_major: int) -> None:
    if "--binary" in MODES[mode] and pg_major < 15:
        pytest.skip(
            "binary mode refuses the scenario's money column, and leaving one column out of a "
            "publication needs PostgreSQL 15 (the refusal itself: test_binary_check.py)"
        )
    prepared, shared_reference = scenario
    reference = copy.deepcopy(shared_reference)
    # The scenario's last change is the marker row; reading exactly as many events as the
    # reference has must end on it.
    assert reference[-1].after == {"id": "7", "owner": "the end", "balance": "0.00"}
    assert len(reference) > 100_000
    binary = "--binary" in MODES[mode]
    publication = f"{prepared.publication}_bin" if binary else prepared.publication
    events = sc.tail_events(
        f"{prepared.dsn} {LOW_WORK_MEM}", prepared.slots[mode], publication,
        len(reference), *MODES[mode],
    )  # fmt: skip
    assert len(events) == len(reference)
    if binary:  # every value exact, in binary as in text: only the refused column is absent
        for event, change in zip(events, reference, strict=True):
            for image, ref in ((event["after"], change.after), (event["before"], change.before)):
                assert BINARY_REFUSED not in (image or {})
                if ref is not None:
                    ref.pop(BINARY_REFUSED, None)
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
    if mode != "text_v1" and pg_major >= 14:  # streaming needs protocol v2 (14+)
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

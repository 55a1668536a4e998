"""``walcast run`` against a real PostgreSQL and a real Kafka broker."""

from __future__ import annotations

import io
import json
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import orjson
import psycopg
import pytest
from fastavro import parse_schema, schemaless_reader

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon, current_lsn, wait_caught_up
from capture.formats import FORMAT_NAMES
from capture.formats.ibm.encode import HEADER_FIELDS
from capture.formats.ibm.records import split_records
from capture.lsn import parse_lsn
from tests.support import scenario as sc
from tests.support import test_decoding
from tests.support.ports import free_port

# The capture scenario's fixed tables and topics: one xdist worker runs these in turn.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("scenario")]
SCHEMAS = sc.REPO / "schemas"


def run_args(
    dsn: str, slot: str, pub: str, bootstrap: str, prefix: str, *formats: str
) -> list[str]:
    args = [
        "--dsn", f"{dsn} options='-c logical_decoding_work_mem=64kB'", "--slot", slot,
        "--publication", pub, "--bootstrap-servers", bootstrap,
        "--topic", prefix + ".{format}.{schema}.{table}",
        "--transaction-topic", prefix + ".{format}",
        "--schema-topic", prefix + ".schemas", "--metrics-port", "0",
        "--heartbeat-interval", "1",
    ]  # fmt: skip
    if "ibm" in formats:
        args += ["--format-option", "ibm.max_message_size=400000"]
    for fmt in formats:
        args += ["--format", fmt]
    return args


def by_format(records: list[k.Record], prefix: str) -> dict[str, list[k.Record]]:
    out: dict[str, list[k.Record]] = defaultdict(list)
    for record in records:
        fmt = record.topic[len(prefix) + 1 :].split(".")[0]
        out[fmt].append(record)
    return out


def test_scenario_reaches_kafka_in_every_format(
    pg_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prepared = sc.prepare(pg_dsn, ["run"])
    slot = prepared.slots["run"]
    prefix = f"it_{uuid.uuid4().hex[:8]}"
    try:
        sc.run_sql_file(pg_dsn, "scenario_changes.sql")
        sc.run_sql_file(pg_dsn, "scenario_stream.sql")
        target = current_lsn(pg_dsn)
        reference = test_decoding.parse(sc.reference_lines(prepared), schema=sc.SCHEMA)
        daemon = RunningDaemon(
            *run_args(pg_dsn, slot, prepared.publication, kafka_bootstrap, prefix, *FORMAT_NAMES),
            log_path=tmp_path / "run.log",
        )
        wait_caught_up(pg_dsn, slot, target, daemon)
        assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        sc.cleanup(prepared)

    records = k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, prefix + "."))
    formats = by_format(records, prefix)
    assert set(FORMAT_NAMES) <= set(formats), sorted(formats)

    # walcast's json: rebuild every change and compare with test_decoding, value for value.
    json_records = sorted(formats["json"], key=lambda r: (parse_lsn(r.position[0]), r.position[1]))
    events = [orjson.loads(r.value) for r in json_records]
    seen = Counter((e["op"], e["table"], e["xid"]) for e in events)
    wanted = Counter((c.op, c.table, c.xid) for c in reference)
    assert seen == wanted, f"walcast has more: {seen - wanted}, fewer: {wanted - seen}"
    for got, want in zip(events, reference, strict=True):
        before = got["before"]
        if before is not None:
            before = {key: v for key, v in before.items() if v is not None}
        assert (got["op"], got["table"], got["xid"], before, got["after"]) == (
            want.op, want.table, want.xid, want.before, want.after,
        )  # fmt: skip
    positions = {r.position for r in json_records}
    assert len(positions) == len(reference), "duplicate (commit_lsn, ordinal) in one run"

    # Every other row format carries the same changes: the same (commit LSN, ordinal) set.
    commits = {p[0] for p in positions}
    for fmt in ("canal", "shareplex", "dataworks", "qlik", "dts-avro"):
        change_positions = {r.position for r in formats[fmt] if r.headers.get("walcast.ordinal")}
        assert change_positions == positions, fmt
    # IBM: one message (or more segments) per transaction; the format has no TRUNCATE, so
    # a transaction of truncates only has no IBM message (ibm.py documents this).
    row_commits = {
        r.position[0] for r, e in zip(json_records, events, strict=True) if e["op"] != "truncate"
    }
    assert row_commits < commits
    assert {r.position[0] for r in formats["ibm"]} == row_commits
    # The schema topic holds a layout per table.
    layouts = [json.loads(r.value) for r in records if r.topic == prefix + ".schemas"]
    assert {(x["schema"], x["table"]) for x in layouts} >= {
        (sc.SCHEMA, "all_types"),
        (sc.SCHEMA, "bulk"),
    }

    # JSON messages validate against their format's schema in schemas/: all of them, but
    # for the 100k-row bulk table, where every 50th stands for the rest (same shape).
    for fmt in ("json", "canal", "shareplex", "dataworks", "qlik"):
        validator = jsonschema.Draft202012Validator(
            json.loads((SCHEMAS / f"{fmt}.schema.json").read_text())
        )
        for i, record in enumerate(formats[fmt]):
            if b"bulk" not in (record.key or b"") or i % 50 == 0:
                validator.validate(orjson.loads(record.value))
    # Every DTS Avro datum decodes with the vendor's Record.avsc, unchanged.
    parsed = parse_schema(json.loads((SCHEMAS / "dts-avro-Record.avsc").read_text()))
    record_schema = next(s for s in parsed if s["name"].endswith(".Record"))
    operations = Counter(
        schemaless_reader(io.BytesIO(r.value), record_schema)["operation"]
        for r in formats["dts-avro"]
    )
    assert operations["INSERT"] > 100_000
    assert {"UPDATE", "DELETE", "DDL"} <= set(operations)
    # IBM records have the 12 header fields plus the before and after values of every
    # column of the layout published for their table.
    fields_of = {(x["schema"], x["table"]): len(x["columns"]) for x in layouts}
    ibm_records = 0
    for record in formats["ibm"]:
        for fields in split_records(record.value):
            assert len(fields) == len(HEADER_FIELDS) + 2 * fields_of[(fields[4], fields[5])]
            ibm_records += 1
    assert ibm_records == sum(1 for e in events if e["op"] != "truncate")


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_metrics_and_health_endpoints(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    table, pub, slot = f"m_{tag}", f"m_pub_{tag}", f"m_slot_{tag}"
    port = free_port()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    args = run_args(pg_dsn, slot, pub, kafka_bootstrap, f"m_{tag}", "json")
    args = [
        a if a != "0" or args[i - 1] != "--metrics-port" else str(port) for i, a in enumerate(args)
    ]
    # --snapshot never: a load of the (empty) table that ran late on a busy machine would
    # read the 500 rows inserted below too, and count them twice (changes_total 1000)
    daemon = RunningDaemon(
        *args, "--create-slot", "--snapshot", "never", log_path=tmp_path / "run.log"
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=2) as reply:
                    health = json.loads(reply.read())
                if health.get("status") == "streaming":
                    break
            except OSError:
                pass
            assert daemon.process.poll() is None, daemon.log()[-3000:]
            assert time.monotonic() < deadline, "daemon never became healthy"
            time.sleep(0.3)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(f"INSERT INTO {table} SELECT g, 'x' FROM generate_series(1, 500) g")
        wait_caught_up(pg_dsn, slot, current_lsn(pg_dsn), daemon)
        time.sleep(6)  # one metrics refresh period
        with urllib.request.urlopen(base + "/metrics", timeout=5) as reply:
            text = reply.read().decode()
        with urllib.request.urlopen(base + "/healthz", timeout=5) as reply:
            assert reply.status == 200
            health = json.loads(reply.read())
        assert health["healthy"] is True
        assert health["slot"] == slot
        assert _metric(text, "walcast_changes_total") == 500
        assert _metric(text, 'walcast_messages_produced_total{format="json"}') == 500
        assert _metric(text, 'walcast_bytes_produced_total{format="json"}') > 500 * 50
        assert _metric(text, "walcast_delivery_latency_seconds_count") >= 1
        assert _metric(text, "walcast_messages_in_flight") == 0
        assert _metric(text, "walcast_slot_retained_wal_bytes") >= 0
        assert _metric(text, "walcast_replication_lag_seconds") >= 0
        assert _metric(text, "walcast_acked_lsn") > 0
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sc.drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION {pub}")
            conn.execute(f"DROP TABLE {table}")

"""Synthetic test streams (``walcast produce-test-stream``) and the normalized change schema."""

from __future__ import annotations

import argparse
import base64
import io
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastavro import parse_schema, schemaless_reader

from capture.errors import ConfigError
from capture.events import (
    ChangeEvent,
    Op,
    TransactionBegin,
    TransactionCommit,
    pg_ts_to_datetime,
)
from capture.formats import FORMAT_NAMES, encoder_for, parse_settings
from capture.formats.ibm.encode import HEADER_FIELDS
from capture.formats.ibm.records import split_records
from capture.lsn import format_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST, ReplicaIdentity
from capture.synthetic import SyntheticClock, format_options
from capture.synthetic.shop import generate
from capture.synthetic.tables import TABLES, build_tables, jsonb_text, table_specs
from capture.teststream import add_parser, produce, without_table_parts
from capture.types import TypeRegistry

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
JSON_FORMATS = [f for f in FORMAT_NAMES if f not in ("ibm", "dts-avro")]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="walcast")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def changes(items) -> list[ChangeEvent]:
    return [i for i in items if isinstance(i, ChangeEvent)]


# --------------------------------------------------------------------------- generate


@pytest.mark.parametrize(("count", "tables"), [(0, 1), (1, 1), (997, 3), (5000, 8), (300, 11)])
def test_count_and_transaction_structure(count: int, tables: int) -> None:
    items = list(generate(count, seed=3, tables=tables))
    assert len(changes(items)) == count
    last_lsn = last_xid = last_ts = -1
    i = 0
    while i < len(items):
        begin = items[i]
        assert isinstance(begin, TransactionBegin)
        assert begin.commit_lsn > last_lsn
        assert begin.xid > last_xid
        assert begin.commit_ts > last_ts
        last_lsn, last_xid, last_ts = begin.commit_lsn, begin.xid, begin.commit_ts
        body = items[i + 1 : i + 1 + begin.change_count]
        assert [e.ordinal for e in body] == list(range(1, begin.change_count + 1))
        for e in body:
            assert isinstance(e, ChangeEvent)
            assert (e.xid, e.commit_lsn, e.commit_ts) == (
                begin.xid,
                begin.commit_lsn,
                begin.commit_ts,
            )
        commit = items[i + 1 + begin.change_count]
        assert isinstance(commit, TransactionCommit)
        assert (commit.xid, commit.commit_lsn, commit.change_count) == (
            begin.xid, begin.commit_lsn, begin.change_count,
        )  # fmt: skip
        assert commit.end_lsn > commit.commit_lsn
        i += begin.change_count + 2


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    def fingerprint(seed: int) -> list[Any]:
        return [
            (e.op, e.table.name, e.ordinal, e.commit_lsn,
             e.before.tuple if e.before else None, e.after.tuple if e.after else None)
            for e in changes(generate(800, seed=seed, tables=8))
        ]  # fmt: skip

    assert fingerprint(1) == fingerprint(1)
    assert fingerprint(1) != fingerprint(2)


def test_mix_of_operations_sizes_and_identities() -> None:
    items = list(generate(20000, seed=0, tables=8))
    events = changes(items)
    ops = Counter(e.op for e in events)
    assert ops[Op.INSERT] > ops[Op.UPDATE] > ops[Op.DELETE] > 1000
    sizes = [i.change_count for i in items if isinstance(i, TransactionBegin)]
    assert min(sizes) == 1
    assert max(sizes) > 50
    assert Counter(sizes)[1] > len(sizes) / 3
    identities = {e.table.name: e.table.replica_identity for e in events}
    assert identities["payments"] is ReplicaIdentity.FULL
    assert identities["audit_log"] is ReplicaIdentity.FULL
    assert identities["inventory"] is ReplicaIdentity.INDEX
    assert identities["orders"] is ReplicaIdentity.DEFAULT
    by_table = {e.table.name: e.table for e in events}
    assert by_table["payments"].primary_key == ("id",)  # from the catalog (key resolver)
    assert by_table["audit_log"].primary_key == ()
    assert by_table["inventory"].primary_key == ("warehouse_id", "sku")  # identity index
    assert {c.name for c in by_table["inventory"].key_columns} == {"warehouse_id", "sku"}
    assert any(e.after is not None and UNCHANGED_TOAST in e.after.tuple.values for e in events), (
        "some updates carry unchanged TOAST"
    )


def test_images_follow_replica_identity() -> None:
    seen = Counter()
    for e in changes(generate(20000, seed=4, tables=8)):
        identity = e.table.replica_identity
        if e.op is Op.INSERT:
            assert e.before is None
            assert e.after is not None
        elif identity is ReplicaIdentity.FULL:
            assert e.before is not None
            assert not e.before.key_only
            seen["full"] += 1
        elif e.op is Op.DELETE:
            assert e.before is not None
            assert e.before.key_only
            assert e.after is None
            seen["key-delete"] += 1
        elif e.before is not None:
            assert e.before.key_only  # the key changed: old key sent
            keys = e.table.key_indexes
            assert [e.before.text(i) for i in keys] != [e.after.text(i) for i in keys]
            seen["key-change"] += 1
        else:
            seen["no-old-image"] += 1
        if e.after is not None and e.before is not None and not e.before.key_only:
            for i, v in enumerate(e.after.tuple.values):
                if v is UNCHANGED_TOAST:
                    assert len(e.before.tuple.values[i]) > 2000
    assert min(seen.values()) > 5, seen


def test_updates_and_deletes_touch_existing_rows() -> None:
    live: dict[str, set[Any]] = {}

    def key(e: ChangeEvent, image) -> Any:
        table = e.table
        if table.replica_identity is ReplicaIdentity.FULL and not table.primary_key:
            return tuple(image.tuple.values)
        return (
            tuple(image.tuple.values[i] for i in table.key_indexes) if table.key_indexes else None
        )

    for e in changes(generate(20000, seed=9, tables=8)):
        rows = live.setdefault(e.table.name, set())
        if e.op is Op.INSERT:
            k = key(e, e.after)
            assert k not in rows
            rows.add(k)
        elif e.op is Op.DELETE:
            k = key(e, e.before)
            assert k in rows, (e.table.name, k)
            rows.remove(k)
        else:
            old = key(e, e.before) if e.before is not None else key(e, e.after)
            assert old in rows
            rows.remove(old)
            if e.table.replica_identity is ReplicaIdentity.FULL and not e.table.primary_key:
                new = tuple(
                    (e.before.tuple.values[i] if v is UNCHANGED_TOAST else v)
                    for i, v in enumerate(e.after.tuple.values)
                )
            else:
                new = key(e, e.after)
            rows.add(new)


def test_values_are_postgresql_text_output() -> None:
    registry = TypeRegistry()
    checked = Counter()
    for e in changes(generate(3000, seed=2, tables=8)):
        for image in (e.before, e.after):
            if image is None:
                continue
            for i, raw in enumerate(image.tuple.values):
                if not isinstance(raw, bytes):
                    continue
                codec = registry.codec(e.table.columns[i].type_oid)
                assert codec.to_text(codec.from_text(raw)) == raw.decode(), (codec.name, raw)
                checked[codec.name] += 1
    assert set(checked) >= {
        "int8", "int4", "text", "varchar", "bpchar", "numeric", "timestamptz", "timestamp",
        "bool", "jsonb", "json", "uuid", "bytea", "date", "float8", "float4", "interval", "inet",
        "_text",
    }  # fmt: skip


def test_jsonb_text_orders_keys_like_postgresql() -> None:
    assert jsonb_text({"bb": 1, "a": [True, None], "ccc": {"z": "é"}}) == (
        '{"a": [true, null], "bb": 1, "ccc": {"z": "é"}}'
    )


def test_tables_repeat_with_suffixes_and_come_from_relation_messages() -> None:
    specs = table_specs(len(TABLES) + 2)
    assert [s.name for s in specs[-2:]] == ["customers_2", "orders_2"]
    tables = build_tables(specs)
    assert len({t.relation_id for t in tables}) == len(tables)
    assert all(t.schema == "shop" for t in tables)
    with pytest.raises(ConfigError, match="--tables"):
        table_specs(0)
    with pytest.raises(ConfigError, match="--count"):
        list(generate(-1))


# --------------------------------------------------------------------------- formats


def _produce(fmt: str, count: int = 400, seed: int = 1, tables: int = 8, settings=None) -> bytes:
    encoder = encoder_for(fmt, format_options(parse_settings(fmt, settings or {})))
    out: list[bytes] = []
    produce(
        encoder,
        generate(count, seed=seed, tables=tables),
        lambda m: out.append(encoder.frame_for_tail(m)),
    )
    return b"".join(out)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_format_is_deterministic(fmt: str) -> None:
    first = _produce(fmt)
    time.sleep(0.01)  # build-time fields would differ without the synthetic clock
    assert _produce(fmt) == first
    assert _produce(fmt, seed=2) != first


def test_synthetic_clock_reads_the_commit_time_plus_a_millisecond() -> None:
    clock = SyntheticClock()
    options = format_options({}, clock)
    assert options.clock is clock
    clock.at_commit(0)
    assert clock() == pytest.approx(946_684_800.001)
    begin = next(iter(generate(1, seed=3)))
    assert isinstance(begin, TransactionBegin)
    clock.at_commit(begin.commit_ts)
    assert clock() == pytest.approx(pg_ts_to_datetime(begin.commit_ts).timestamp() + 0.001)


def test_transaction_topic_drops_the_table_parts_of_the_template() -> None:
    assert without_table_parts("t.{format}.{schema}.{table}") == "t.{format}"
    assert without_table_parts("cdc-{schema}-{table}-x") == "cdc-x"
    assert without_table_parts("plain") == "plain"
    assert without_table_parts("{table}") == "walcast.{format}"


@pytest.mark.parametrize("fmt", JSON_FORMATS)
def test_json_formats_produce_valid_documents(fmt: str) -> None:
    data = _produce(fmt, count=600)
    documents = [json.loads(line) for line in data.splitlines()]
    assert documents
    schema_path = SCHEMAS / f"{fmt}.schema.json"
    if schema_path.exists():
        schema = json.loads(schema_path.read_text())
        validator = jsonschema.validators.validator_for(schema)(schema)
        for document in documents:
            if document is None:
                assert fmt == "debezium", "only debezium writes tombstones (printed as null)"
                continue
            validator.validate(document)


def test_ibm_stream_parses_into_one_record_per_change() -> None:
    items = list(generate(600, seed=1, tables=8))
    data = _produce("ibm", count=600)
    rows = list(split_records(data))
    assert len(rows) == len(changes(items))
    widths = {len(r) for r in rows}
    assert widths <= {len(HEADER_FIELDS) + 2 * len(t.columns) for t in build_tables(table_specs(8))}


def test_dts_avro_stream_decodes_with_the_published_schema() -> None:
    schema = parse_schema(json.loads((SCHEMAS / "dts-avro-Record.avsc").read_text()))
    [record_schema] = [s for s in schema if s["name"].endswith(".Record")]
    lines = _produce("dts-avro", count=600).splitlines()
    assert len(lines) == 600
    ops = Counter(
        schemaless_reader(io.BytesIO(base64.b64decode(x)), record_schema)["operation"]
        for x in lines
    )
    assert set(ops) == {"INSERT", "UPDATE", "DELETE"}


# --------------------------------------------------------------------------- command


def test_command_writes_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stream.txt"
    argv = [
        "produce-test-stream",
        "--format",
        "ibm",
        "--count",
        "50",
        "--seed",
        "7",
        "--tables",
        "8",
    ]
    assert run([*argv, "--output", str(out)]) == 0
    assert "produced 50 changes" in capsys.readouterr().err
    assert out.read_bytes() == _produce("ibm", count=50, seed=7, tables=8)


def test_command_writes_stdout_and_passes_format_options(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    argv = [
        "produce-test-stream",
        "--format",
        "ibm",
        "--count",
        "5",
        "--format-option",
        "ibm.column_delimiter=;",
    ]
    assert run(argv) == 0
    data = capsysbinary.readouterr().out
    assert len(list(split_records(data, column_delimiter=";"))) == 5


def test_command_errors() -> None:
    with pytest.raises(ConfigError, match=r"ibm\.column_delimiter"):
        run(["produce-test-stream", "--format", "ibm", "--format-option", "ibm.column_delimiter=x"])
    with pytest.raises(ConfigError, match="--format-option"):
        run(["produce-test-stream", "--format", "ibm", "--format-option", "novalue"])
    with pytest.raises(ConfigError, match="--output"):
        run(["produce-test-stream", "--format", "ibm", "--output", "/nonexistent/dir/x"])
    with pytest.raises(SystemExit):
        run(["produce-test-stream", "--format", "nope"])
    with pytest.raises(SystemExit):
        run(["produce-test-stream", "--format", "ibm", "--tables", "0"])


# --------------------------------------------------------------------------- normalized


def _normalized(e: ChangeEvent, *, typed_json: bool = False) -> dict[str, Any]:
    """A normalized change built straight from a generated event (what Spark must match).

    Values are PostgreSQL text; ``typed_json`` gives the typed JSON scalars instead.
    """
    typed = (
        {"bool": lambda v: v == "t", "int2": int, "int4": int, "int8": int} if typed_json else {}
    )

    def image(img) -> dict[str, Any] | None:
        if img is None:
            return None
        out = {}
        for i in img.present_indexes():
            col = img.table.columns[i]
            value = img.text(i)
            if value is UNCHANGED_TOAST:
                continue
            out[col.name] = None if value is None else typed.get(col.type_name, str)(value)
        return out

    before, after = image(e.before), image(e.after)
    toast = e.after.unchanged_toast_columns() if e.after is not None else []
    if e.op is Op.INSERT:
        changed = list(after)
    elif e.op is Op.UPDATE and before is not None and not e.before.key_only:
        changed = [k for k in after if before.get(k) != after[k]]
    elif e.op is Op.UPDATE:
        changed = None
    else:
        changed = []
    return {
        "format": "json",
        "database": "shop",
        "schema": e.table.schema,
        "table": e.table.name,
        "op": e.op.value,
        "commit_lsn": format_lsn(e.commit_lsn),
        "commit_lsn_num": e.commit_lsn,
        "commit_time": pg_ts_to_datetime(e.commit_ts).isoformat().replace("+00:00", "Z"),
        "xid": e.xid,
        "ordinal": e.ordinal,
        "primary_key": list(e.table.primary_key),
        "before": before,
        "after": after,
        "unchanged_toast": toast,
        "changed_columns": changed,
        "column_types": {c.name: c.type_name for c in e.table.columns},
        "kafka_topic": None,
        "kafka_partition": None,
        "kafka_offset": None,
    }


def test_normalized_change_schema_is_valid_and_fits_generated_changes() -> None:
    schema = json.loads((SCHEMAS / "normalized-change.schema.json").read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    assert validator_class is jsonschema.Draft202012Validator
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    for example in schema["examples"]:
        validator.validate(example)
    assert set(schema["properties"]["format"]["enum"]) == set(FORMAT_NAMES)
    for e in changes(generate(1500, seed=6, tables=8)):
        validator.validate(_normalized(e))
        validator.validate(_normalized(e, typed_json=True))
    bad = _normalized(changes(generate(1, seed=6))[0])
    bad["op"] = "upsert"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


@pytest.mark.integration
def test_produce_test_stream_to_kafka(kafka_bootstrap: str) -> None:
    from bench.kit import kafka as k  # noqa: PLC0415
    from tests.support.scenario import walcast  # noqa: PLC0415

    prefix = f"pts_{uuid.uuid4().hex[:8]}"
    done = walcast(
        "produce-test-stream", "--format", "canal", "--count", "500", "--seed", "7",
        "--kafka", kafka_bootstrap, "--topic", prefix + ".{format}.{schema}.{table}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, prefix + "."))
    expected = [i for i in generate(500, 7, 4) if isinstance(i, ChangeEvent)]
    assert len(records) == len(expected) == 500
    positions = {
        (r.headers["walcast.commit_lsn"], int(r.headers["walcast.ordinal"])) for r in records
    }
    assert positions == {(format_lsn(e.commit_lsn), e.ordinal) for e in expected}
    assert all(r.topic.startswith(prefix + ".canal.") for r in records)


@pytest.mark.integration
def test_consume_prints_what_produce_test_stream_wrote(kafka_bootstrap: str) -> None:
    from tests.support.scenario import walcast  # noqa: PLC0415

    topic = f"consume_{uuid.uuid4().hex[:8]}"
    produced = walcast(
        "produce-test-stream", "--format", "shareplex", "--count", "20", "--seed", "3",
        "--kafka", kafka_bootstrap, "--topic", topic,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    done = walcast(
        "consume", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--max-messages", "20", "--with-metadata", "--idle-timeout", "20",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 20
    assert {line["topic"] for line in lines} == {topic}
    assert all(json.loads(line["value"])["meta"]["op"] in {"ins", "upd", "del"} for line in lines)
    assert all("walcast.commit_lsn" in line["headers"] for line in lines)

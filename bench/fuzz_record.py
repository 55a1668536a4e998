"""Record real pgoutput traffic from the local PostgreSQL for the pipeline fuzzer.

The capture scenario (tests/data/scenario_schema.sql, the changes of
tests/data/scenario_changes.sql up to its 100k-row transaction) runs in a schema of its own,
followed by tests/data/pgoutput/record.sql (a streamed transaction with an aborted
subtransaction, an aborted streamed one, prepared transactions, logical messages, arrays of
a domain, a 131,072-digit numeric, non-ASCII text). One slot per session is created
first; each slot's pgoutput messages are then read through
``pg_logical_slot_get_binary_changes`` with that session's options and
``logical_decoding_work_mem = 64kB`` (so big transactions are streamed in chunks).

Output: ``tests/data/pgoutput/<session>.bin.gz`` (gzip of records: ``>QI`` WAL start,
length, then the message bytes) and ``sessions.json`` (the options of each). The fuzz test and
bench/fuzz_pipeline.py read them with :mod:`bench.kit.fuzz`.

Usage: eval "$(scripts/local-services start pg)"; python bench/fuzz_record.py
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
OUT = DATA / "pgoutput"
SESSIONS: dict[str, dict[str, object]] = {
    "v1_text": {"proto_version": 1, "binary": False, "streaming": False, "two_phase": False},
    "v2_text_streaming": {
        "proto_version": 2, "binary": False, "streaming": True, "two_phase": False,
    },
    "v3_binary_streaming_two_phase": {
        "proto_version": 3, "binary": True, "streaming": True, "two_phase": True,
    },
}  # fmt: skip
_RECORD = struct.Struct(">QI")


def _schema_sql(schema: str) -> str:
    return (DATA / "scenario_schema.sql").read_text().replace("walcast_it", schema)


def _changes_sql(schema: str) -> str:
    changes = (DATA / "scenario_changes.sql").read_text()
    changes = changes.split("-- A 100k-row transaction.")[0]
    return (changes + "\n" + (OUT / "record.sql").read_text()).replace("walcast_it", schema)


def _psql(dsn: str, sql: str) -> None:
    pg_bin = os.environ.get("WALCAST_TEST_PG_BIN")
    psql = str(Path(pg_bin) / "psql") if pg_bin else "psql"
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(sql)
        script.flush()
        subprocess.run(
            [psql, dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", script.name],
            check=True,
            env={**os.environ, "PGOPTIONS": "-c synchronous_commit=on"},
        )


def main() -> int:
    dsn = os.environ["WALCAST_TEST_DSN"]
    tag = uuid.uuid4().hex[:6]
    schema = f"walcast_fuzz_{tag}"
    publication = f"walcast_fuzz_pub_{tag}"
    slots = {name: f"walcast_fuzz_{name}_{tag}"[:63] for name in SESSIONS}
    _psql(dsn, _schema_sql(schema))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE PUBLICATION {publication} FOR TABLES IN SCHEMA {schema}")
            # --binary refuses money (its text depends on lc_monetary): binary sessions
            # read a publication that leaves that column out (a column list).
            tables = [
                f"{schema}.{r[0]}"
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
                ).fetchall()
            ]
            columns = [
                str(r[0])
                for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped AND attname <> 'c_money' ORDER BY attnum",
                    (f"{schema}.all_types",),
                ).fetchall()
            ]
            listed = [
                f"{t} ({', '.join(columns)})" if t.endswith(".all_types") else t for t in tables
            ]
            conn.execute(f"CREATE PUBLICATION {publication}_bin FOR TABLE {', '.join(listed)}")
            for name, slot in slots.items():
                conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                    (slot, SESSIONS[name]["two_phase"]),
                )
        _psql(dsn, _changes_sql(schema))
        manifest = {}
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET logical_decoding_work_mem = '64kB'")
            for name, slot in slots.items():
                options = SESSIONS[name]
                args = [
                    "proto_version", str(options["proto_version"]),
                    "publication_names",
                    f"{publication}_bin" if options["binary"] else publication,
                    "messages", "true",
                ]  # fmt: skip
                if options["binary"]:
                    args += ["binary", "true"]
                if options["streaming"]:
                    args += ["streaming", "on"]
                if options["two_phase"]:
                    args += ["two_phase", "on"]
                placeholders = ", ".join(["%s"] * len(args))
                rows = conn.execute(
                    "SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes("
                    f"%s, NULL, NULL, {placeholders})",
                    (slot, *args),
                ).fetchall()
                path = OUT / f"{name}.bin.gz"
                records = bytearray()
                for lsn, data in rows:
                    hi, lo = str(lsn).split("/")
                    records += _RECORD.pack((int(hi, 16) << 32) | int(lo, 16), len(data))
                    records += bytes(data)
                path.write_bytes(gzip.compress(bytes(records), mtime=0))
                manifest[name] = {**options, "file": path.name, "messages": len(rows)}
                print(f"{name}: {len(rows)} messages, {path.stat().st_size:,} bytes")
        (OUT / "sessions.json").write_text(json.dumps(manifest, indent=2) + "\n")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for slot in slots.values():
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (slot,),
                )
            conn.execute(f"DROP PUBLICATION IF EXISTS {publication}, {publication}_bin")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return 0


if __name__ == "__main__":
    sys.exit(main())

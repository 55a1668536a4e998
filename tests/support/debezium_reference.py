"""The real Debezium PostgreSQL connector as a test reference (issue 26).

``tests/readers/debezium`` holds a Java harness, ``walcast.debezium.Reference``, that runs
Debezium 3.6.1.Final's embedded engine (``plugin.name=pgoutput``, Kafka Connect's
``JsonConverter``) on a slot and publication the test created beforehand, and writes every
record it emits as one line ``{"topic": ..., "key": <key JSON>, "value": <value JSON>}``,
the key and value being JsonConverter's output inserted verbatim. ``scripts/build-readers``
resolves it from Maven Central once and compiles it (``debezium-jars``,
``classes-debezium`` in its cache directory).

    output = run_reference(dsn, slot, publication, max_records=12)
    for record in output:  # streamed from the output file, one record at a time
        record.topic, record.key, record.value, record.value_text

Invariants:

* The connector runs with its own defaults (``decimal.handling.mode=precise``,
  ``time.precision.mode=adaptive``, ``binary.handling.mode=bytes``, ``tombstones.on.delete``
  ...) except ``publication.autocreate.mode=disabled`` (the test owns the publication);
  ``properties`` overrides any connector, engine or converter setting.
* ``key_text``/``value_text`` are JsonConverter's bytes exactly as Debezium serialized
  them (``None`` for a null key or a tombstone's value), for byte-level comparisons;
  ``key``/``value`` are the same text parsed.
* Missing Java, a failed build, a connector that fails or hangs, or fewer records than
  ``max_records`` is a test failure (``pytest.fail``), never a skip.
* The password reaches the JVM through ``PGPASSWORD``, never its command line.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.readers.harness import build

MAIN_CLASS = "walcast.debezium.Reference"
VERSION = "3.6.1.Final"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class DebeziumRecord:
    """One record as the engine handed it over: destination topic, key and value."""

    topic: str
    key: Any
    value: Any
    key_text: str | None
    value_text: str | None

    @property
    def payload(self) -> Any:
        """The value without JsonConverter's ``{"schema", "payload"}`` envelope, if any."""
        if isinstance(self.value, dict) and set(self.value) == {"schema", "payload"}:
            return self.value["payload"]
        return self.value


def parse_line(line: str) -> DebeziumRecord:
    """One output line; the key's and value's text sliced out verbatim."""
    head = '{"topic":'
    if not line.startswith(head):
        raise ValueError(f"not a reference record: {line[:80]!r}")
    topic, at = _DECODER.raw_decode(line, len(head))
    texts: list[str | None] = []
    values: list[Any] = []
    for field in (',"key":', ',"value":'):
        if not line.startswith(field, at):
            raise ValueError(f"expected {field} at {at}: {line[:80]!r}")
        start = at + len(field)
        value, at = _DECODER.raw_decode(line, start)
        values.append(value)
        texts.append(None if value is None else line[start:at])
    if line[at:] != "}":
        raise ValueError(f"trailing text after the value: {line[at:][:80]!r}")
    return DebeziumRecord(topic, values[0], values[1], texts[0], texts[1])


@dataclass(frozen=True)
class ReferenceOutput:
    """The records Debezium wrote, in its order, read back lazily from ``path``."""

    path: Path
    count: int
    stderr: str

    def __iter__(self) -> Iterator[DebeziumRecord]:
        with self.path.open(encoding="utf-8", newline="\n") as lines:
            for line in lines:
                yield parse_line(line.rstrip("\n"))


def _classpath(cache: Path) -> str:
    jars = sorted((cache / "debezium-jars").glob("*.jar"))
    classes = cache / "classes-debezium"
    if not jars or not (classes / "walcast" / "debezium" / "Reference.class").is_file():
        pytest.fail(
            f"the Debezium reference is not built in {cache}: run scripts/build-readers",
            pytrace=False,
        )
    return ":".join([str(classes), *(str(j) for j in jars)])


def _connection(dsn: str) -> tuple[list[str], dict[str, str]]:
    """Command-line options and environment for the libpq DSN (JDBC: TCP only)."""
    info = conninfo_to_dict(dsn)
    host = str(info.get("host") or os.environ.get("PGHOST") or "localhost")
    if host.startswith("/") or "," in host:
        pytest.fail(
            f"the Debezium reference needs one TCP host in the DSN, not {host!r}", pytrace=False
        )
    user = str(info.get("user") or os.environ.get("PGUSER") or getpass.getuser())
    options = [
        *("--host", host),
        *("--port", str(info.get("port") or os.environ.get("PGPORT") or "5432")),
        *("--user", user),
        *("--dbname", str(info.get("dbname") or os.environ.get("PGDATABASE") or user)),
    ]
    password = info.get("password") or os.environ.get("PGPASSWORD")
    return options, ({"PGPASSWORD": str(password)} if password else {})


def run_reference(
    dsn: str,
    slot: str,
    publication: str,
    *,
    topic_prefix: str = "walcast",
    snapshot_mode: str = "no_data",
    schemas: bool = False,
    max_records: int | None = None,
    idle_timeout: float = 10.0,
    timeout: float = 600.0,
    properties: Mapping[str, str] | None = None,
    workdir: Path | None = None,
) -> ReferenceOutput:
    """Run Debezium on ``slot`` (pgoutput, already created) and ``publication``.

    Stops after ``max_records`` records (and fails if fewer came), or once no record but
    heartbeats came for ``idle_timeout`` seconds after the connector started polling.
    ``snapshot_mode``: ``no_data`` streams only; ``initial`` first loads the tables the
    connector's filters select (set ``schema.include.list`` or ``table.include.list``
    in ``properties``: by default that is every table of the database).
    """
    if shutil.which("java") is None:
        pytest.fail(
            "java not found: the Debezium reference needs a JDK 17+ (apt-get install "
            "default-jdk-headless)",
            pytrace=False,
        )
    classpath = _classpath(build())
    workdir = workdir or Path(tempfile.mkdtemp(prefix="walcast-debezium-"))
    workdir.mkdir(parents=True, exist_ok=True)
    output = workdir / f"{slot}.jsonl"
    connection, secret = _connection(dsn)
    command = [
        *("java", "-Xmx768m", "-cp", classpath, MAIN_CLASS, *connection),
        *("--slot", slot, "--publication", publication, "--topic-prefix", topic_prefix),
        *("--snapshot-mode", snapshot_mode, "--schemas", "true" if schemas else "false"),
        *("--idle-timeout-ms", str(int(idle_timeout * 1000))),
        *("--timeout-ms", str(int(timeout * 1000))),
        *("--output", str(output), "--offsets", str(workdir / f"{slot}.offsets")),
    ]
    if max_records is not None:
        command += ["--max-records", str(max_records)]
    for key, value in (properties or {}).items():
        command += ["--property", f"{key}={value}"]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout + 120,
            env={**os.environ, **secret},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the Debezium reference on slot {slot} hung past {timeout:.0f} s")
    if done.returncode != 0:
        pytest.fail(
            f"the Debezium reference on slot {slot} exited {done.returncode}:\n"
            f"{done.stderr[-4000:]}",
            pytrace=False,
        )
    with output.open("rb") as lines:
        count = sum(1 for _ in lines)
    if max_records is not None and count < max_records:
        pytest.fail(
            f"Debezium wrote {count} of {max_records} records on slot {slot}:\n"
            f"{done.stderr[-4000:]}",
            pytrace=False,
        )
    return ReferenceOutput(output, count, done.stderr)

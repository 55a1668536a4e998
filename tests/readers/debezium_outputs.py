"""The capture scenario read by the real Debezium connector and by walcast's ``debezium``.

:func:`run_both` writes the capture scenario (``tests/data/scenario_*.sql``, every type
walcast covers) after three slots were created on it: one ``test_decoding`` slot (what
PostgreSQL decoded: how many records Debezium must write), and two pgoutput slots read by
Debezium 3.6.1.Final (:mod:`tests.support.debezium_reference`) and by walcast's own pipeline
(replication source, pump, the ``debezium`` encoder) in this process, whose sink keeps every
message with its key and topic parts. ``tests/readers/conftest.py`` runs it once a session
(fixture ``debezium_outputs``) for the comparison and the Flink test.
"""

from __future__ import annotations

import io
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from capture.assembly import OutputPlan, connect_source, replication_pipeline
from capture.events import ChangeEvent
from capture.formats import parse_settings
from capture.formats.base import EncodedMessage
from capture.interfaces import Output
from capture.position import PositionLedger, Unit
from capture.replication.side import SideConnection
from capture.sinks.stream import StreamSink
from capture.source import SourceConfig
from tests.readers import reference
from tests.readers.test_debezium_reference import _scenario_sql, scenario_workload
from tests.support.debezium_reference import DebeziumRecord, run_reference

PREFIX = "wdbzc"
SCHEMA = "dbz_compare"


class RecordingSink(StreamSink):
    """A stream sink that keeps every message (with its key) instead of printing it."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.messages: list[EncodedMessage] = []

    def send(self, output: Output, messages: list[EncodedMessage], unit: Unit | None) -> None:
        self.messages.extend(messages)

    def send_change(self, output: Output, event: ChangeEvent, unit: Unit | None) -> None:
        self.send(output, output.encoder.change(event), unit)


def walcast_messages(
    dsn: str,
    slot: str,
    publication: str,
    want: int,
    *,
    settings: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> list[EncodedMessage]:
    """walcast's debezium messages of ``slot``, all kinds, once ``want`` were written.

    ``settings``: ``debezium.*`` settings besides the topic prefix (:data:`PREFIX`).
    """
    config = SourceConfig(dsn, slot, [publication])
    parsed = parse_settings("debezium", {"debezium.topic_prefix": PREFIX, **(settings or {})})
    sink = RecordingSink()
    side = SideConnection(dsn)
    deadline = time.monotonic() + timeout
    try:
        replication = connect_source(config, ["debezium"], side, load=False)
        pipeline = replication_pipeline(
            replication, [OutputPlan("debezium", parsed)], sink, PositionLedger()
        )
        try:

            def done() -> bool:
                return len(sink.messages) >= want or time.monotonic() > deadline

            pipeline.pump.run(done, poll_timeout=0.5)
        finally:
            pipeline.close()
    finally:
        side.close()
    return sink.messages


@dataclass
class Outputs:
    """Both producers' records of the capture scenario, in order, and the catalog."""

    tables: dict[str, reference.RefTable]
    expected: list[tuple[str, str | None, dict[str, Any] | None]]
    ours: list[EncodedMessage]
    theirs: list[DebeziumRecord]


def run_both(dbz_dsn: str, workdir: Path) -> Outputs:
    """The capture scenario in ``dbz_dsn`` read by Debezium and by walcast (see module doc)."""
    _scenario_sql(dbz_dsn, "scenario_schema.sql", SCHEMA)
    tag = uuid.uuid4().hex[:8]
    publication = f"dbz_cmp_pub_{tag}"
    slots = {name: f"dbz_cmp_{name}_{tag}" for name in ("td", "debezium", "walcast")}
    with psycopg.connect(dbz_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(publication), sql.Identifier(SCHEMA)
            )
        )
        create = "SELECT pg_create_logical_replication_slot(%s, %s)"
        conn.execute(create, (slots["td"], "test_decoding"))
        conn.execute(create, (slots["debezium"], "pgoutput"))
        conn.execute(create, (slots["walcast"], "pgoutput"))
    tables, _, expected = scenario_workload(dbz_dsn, SCHEMA, slots["td"])
    theirs = run_reference(
        dbz_dsn, slots["debezium"], publication, topic_prefix=PREFIX,
        max_records=len(expected), idle_timeout=60,
        properties={"schema.include.list": SCHEMA}, workdir=workdir,
    )  # fmt: skip
    ours = walcast_messages(dbz_dsn, slots["walcast"], publication, len(expected))
    return Outputs(tables, expected, ours, list(theirs))

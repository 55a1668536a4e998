"""``walcast tail``: print every committed row change as it happens, in any format.

A front door of the pump: the replication source, one output format, and a
:class:`~capture.sinks.stream.StreamSink` on stdout. JSON formats print one document per
line, binary formats (DTS Avro) one base64 line per datum, and IBM delimited its own record
stream (see each format's module).

Acknowledgement: output is flushed before the slot is acknowledged, and only whole
transactions are acknowledged (the :class:`~capture.position.PositionLedger` decides). When
the ``--max-events``-th change is the last of its transaction, tail waits (briefly) for the
commit and acknowledges it; when it falls inside a transaction, that transaction is sent
again by the next run (its changes repeat with the same commit LSN and ordinals, so the
duplicates are detectable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import IO, Any

from capture.formats import format_class
from capture.position import PositionLedger
from capture.pump import Output, Pump, needs_transaction_sizes
from capture.replication import catalog
from capture.replication.side import SideConnection
from capture.sinks.stream import StreamSink
from capture.source import ReplicationSource, SourceConfig

FINISH_TIMEOUT = 5.0


def primary_key_resolver(
    side: SideConnection,
) -> Callable[[int, str, str], tuple[str, ...] | None]:
    """The catalog lookup of a REPLICA IDENTITY FULL table's primary key, on ``side``."""

    def resolve(relation_id: int, _schema: str, _table: str) -> tuple[str, ...] | None:
        return side.run(lambda conn: catalog.primary_key(conn, relation_id))

    return resolve


def run_tail(
    config: SourceConfig,
    fmt: str,
    settings: Mapping[str, Any],
    out: IO[bytes],
    *,
    max_events: int | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print changes until ``max_events`` row changes or ``stop()``; return the count."""
    config.hold_transactions = needs_transaction_sizes([fmt])
    side = SideConnection(config.dsn)
    source = ReplicationSource(config, key_resolver=primary_key_resolver(side))
    try:
        encoder = format_class(fmt)(source.format_options(dict(settings)))
        sink = StreamSink(out)
        pump = Pump(source, sink, [Output(fmt, encoder)], PositionLedger())
        pump.run(stop, max_changes=max_events, poll_timeout=1.0)
        pump.finish(FINISH_TIMEOUT)
        return pump.changes
    finally:
        source.close()
        side.close()

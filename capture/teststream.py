"""``walcast produce-test-stream``: a synthetic change stream in any format, with no server.

A front door of the pump: the :class:`~capture.synthetic.SyntheticSource` (a deterministic
shop, see :mod:`capture.synthetic.shop`), one output format, and either a stream sink (a
file or stdout, framed as ``walcast tail`` prints) or the Kafka sink ``walcast run`` uses,
which also publishes every table's layout to the schema topic (``--schema-topic``, default
``walcast.schemas``), so that IBM test streams can be normalized without PostgreSQL. Its
messages and layouts name the source ``synthetic/<database>/seed-<seed>``
(:mod:`capture.state.identity`), so they never pass for a real database's.

The same ``(--count, --seed, --tables)`` and settings always give the same bytes: encoders
read the time from the source's synthetic clock (each transaction's commit time + 1 ms).

Against Kafka every wait is bounded: a broker that does not answer within
:data:`KAFKA_CONNECT_TIMEOUT` seconds, or a message not confirmed within
:data:`KAFKA_DELIVERY_TIMEOUT`, ends the command with one line and a non-zero exit.

``--help`` is :data:`DESCRIPTION` and :data:`EXAMPLES`, written for the terminal (its
timeouts are these constants).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from capture.assembly import OutputPlan, synthetic_pipeline
from capture.errors import ConfigError, WalcastError
from capture.events import ChangeEvent, StreamItem
from capture.flags import add_command, format_settings, int_at_least
from capture.formats import FORMAT_NAMES, EncodedMessage, Encoder
from capture.sinks.stream import StreamSink
from capture.state.identity import SYNTHETIC_SYSTEM, SourceIdentity
from capture.synthetic import (
    SyntheticSource,
    advance_clock,
)
from capture.synthetic.tables import DATABASE

if TYPE_CHECKING:
    from capture.sinks.kafka import KafkaSink

__all__ = ["add_parser", "command", "produce"]

KAFKA_CONNECT_TIMEOUT: Final = 10.0
KAFKA_DELIVERY_TIMEOUT: Final = 60.0
DEFAULT_SCHEMA_TOPIC: Final = "walcast.schemas"


def produce(
    encoder: Encoder,
    items: Iterator[StreamItem],
    write: Callable[[EncodedMessage], None],
) -> tuple[int, int]:
    """Encode ``items`` (a synthetic stream) with ``encoder``; return (changes, messages).

    The encoder's clock follows the stream when it is a synthetic one (see
    :func:`capture.synthetic.format_options`).
    """
    changes = messages = 0
    options = encoder.options
    for item in items:
        advance_clock(options, item)
        if type(item) is ChangeEvent:
            changes += 1
        for message in encoder.encode(item):
            write(message)
            messages += 1
    for message in encoder.flush():
        write(message)
        messages += 1
    return changes, messages


HELP: Final = "write a deterministic synthetic change stream in any format"
"""The line ``walcast --help`` shows for this command."""

DESCRIPTION: Final = f"""\
Write a synthetic change stream in any output format, with no PostgreSQL: the
rows and the inserts, updates and deletes of a small shop database (schema
shop), for developing and load-testing consumers. The same --count, --seed,
--tables and --format-option values always give the same bytes (timestamps
come from the stream's own clock, starting 2024-03-01).

Without --kafka the messages go to --output (default: standard output) as
walcast tail prints them: JSON formats one document per line, DTS Avro one
base64 line per message, IBM its own records. With --kafka they are produced
to Kafka as walcast run produces them, with each table's layout on
--schema-topic, so that walcast spark normalize can read them; their source is
named synthetic/shop/seed-<seed>, never a real database's. Every wait on Kafka
is bounded: a broker that does not answer within {KAFKA_CONNECT_TIMEOUT:.0f} s, or a message
not confirmed within {KAFKA_DELIVERY_TIMEOUT:.0f} s, ends the command with one line and a
non-zero exit."""
"""What ``walcast produce-test-stream --help`` says the command does."""

EXAMPLES: Final = (
    "walcast produce-test-stream --format canal --count 100 > changes.jsonl",
    (
        "walcast produce-test-stream --format ibm --count 5000 --seed 7 --tables 8 \\\n"
        "    --format-option ibm.column_delimiter=';' --output ibm.txt"
    ),
    (
        "walcast produce-test-stream --format dts-avro --kafka localhost:9092 \\\n"
        "    --topic 'test.{format}.{schema}.{table}'"
    ),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``produce-test-stream`` to the CLI (``args.func`` runs it)."""
    parser = add_command(subparsers, "produce-test-stream", HELP, DESCRIPTION, EXAMPLES)
    parser.add_argument("--format", required=True, choices=FORMAT_NAMES, help="output format")
    parser.add_argument(
        "--count",
        type=int_at_least(0),
        default=1000,
        metavar="N",
        help="row changes to produce (default 1000)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    parser.add_argument(
        "--tables",
        type=int_at_least(1),
        default=4,
        metavar="N",
        help="number of tables; past the shop's own, its tables repeat as <table>_2, ... "
        "(default 4)",
    )
    parser.add_argument(
        "--output",
        default="-",
        metavar="FILE|-",
        help="file to write, or - for standard output (default -; not with --kafka)",
    )
    parser.add_argument(
        "--kafka",
        metavar="HOST:PORT",
        help="produce to the Kafka cluster at these bootstrap servers, in plaintext unless "
        "the WALCAST__KAFKA__* settings of walcast run say otherwise (default: write to "
        "--output)",
    )
    parser.add_argument(
        "--topic",
        metavar="TEMPLATE",
        help="topic with --kafka (required there); may use {format}, {schema} and {table}, "
        "e.g. walcast.{format}.{schema}.{table} for one topic per table",
    )
    parser.add_argument(
        "--transaction-topic",
        metavar="TEMPLATE",
        help="topic for messages of no single table (IBM transactions, heartbeats) "
        "(default: --topic without its {schema} and {table} parts)",
    )
    parser.add_argument(
        "--schema-topic",
        default=DEFAULT_SCHEMA_TOPIC,
        metavar="TOPIC",
        help="topic for table layouts with --kafka, as walcast run writes them "
        f"(default {DEFAULT_SCHEMA_TOPIC}; '' writes none)",
    )
    parser.add_argument(
        "--format-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="format setting, the key prefixed with the format's name, e.g. "
        "ibm.column_delimiter=';' (repeatable; default: each format's defaults)",
    )
    parser.set_defaults(func=command)


def without_table_parts(template: str) -> str:
    """``template`` with its ``{schema}``/``{table}`` parts (and their separators) removed."""
    out = template
    for part in ("{schema}", "{table}"):
        for sep in (".", "-", "_"):
            out = out.replace(sep + part, "").replace(part + sep, "")
        out = out.replace(part, "")
    return out.strip(".-_") or "walcast.{format}"


def _stream_sink(args: argparse.Namespace) -> StreamSink:
    if args.topic:
        raise ConfigError("--topic: only used with --kafka")
    if args.output in (None, "-"):
        return StreamSink(sys.stdout.buffer, flush_interval=1.0)
    try:
        handle: IO[bytes] = Path(args.output).open("wb")  # noqa: SIM115 - closed by the sink
    except OSError as exc:
        raise ConfigError(f"--output: cannot write {args.output!r}: {exc.strerror}") from None
    return StreamSink(handle, flush_interval=1.0, close_out=True)


def _kafka_sink(args: argparse.Namespace) -> KafkaSink:
    from capture.sinks.kafka import (  # noqa: PLC0415 - only for --kafka
        KafkaSink,
        KafkaSinkError,
        ProtocolMismatchError,
    )

    if args.output not in (None, "-"):
        raise ConfigError("--output: give either --output or --kafka, not both")
    if not args.topic:
        raise ConfigError("--topic: required with --kafka")
    from capture.kafka.security import client_settings  # noqa: PLC0415

    security = client_settings()  # WALCAST__KAFKA__*, as walcast run reads them
    sink = KafkaSink(
        {
            **security,
            "bootstrap.servers": args.kafka,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": 20,
            "queue.buffering.max.messages": 500_000,
            "message.timeout.ms": int(KAFKA_DELIVERY_TIMEOUT * 1000),
        },
        schema_topic=args.schema_topic,
        error_after=KAFKA_CONNECT_TIMEOUT,
        source=SourceIdentity(SYNTHETIC_SYSTEM, DATABASE, f"seed-{args.seed}"),
    )
    try:
        answered = sink.reachable(KAFKA_CONNECT_TIMEOUT)
    except ProtocolMismatchError as exc:
        if exc.configured is not None:
            raise
        raise exc.plaintext_only("--kafka", "produce-test-stream") from None
    if not answered:
        raise KafkaSinkError(
            f"--kafka: no Kafka broker answered at {args.kafka} within "
            f"{KAFKA_CONNECT_TIMEOUT:.0f} s",
            hint="check the address (host:port) and that the broker runs",
        )
    if args.schema_topic:
        sink.ensure_compacted_topic(args.schema_topic)
    return sink


def command(args: argparse.Namespace) -> int:
    """Run ``walcast produce-test-stream``."""
    settings = format_settings(args.format_option, args.format)
    source = SyntheticSource(args.count, args.seed, args.tables)
    sink: KafkaSink | StreamSink
    limit: int | None = None
    plan = OutputPlan(args.format, settings)
    if args.kafka:
        sink = _kafka_sink(args)
        limit = int(sink.settings.get("message.max.bytes", 1_000_000)) - 1024
        transaction_topic = args.transaction_topic or without_table_parts(args.topic)
        plan = OutputPlan(args.format, settings, args.topic, transaction_topic)
    else:
        sink = _stream_sink(args)
    pipeline = synthetic_pipeline(source, plan, sink, database=DATABASE, max_message_bytes=limit)
    pump = pipeline.pump
    (output,) = pipeline.outputs
    try:
        pump.run(lambda: False, poll_timeout=0)
        undelivered = pump.finish(KAFKA_DELIVERY_TIMEOUT + 5)
    except WalcastError as exc:
        if not args.kafka or exc.message.startswith("--kafka"):
            raise
        raise WalcastError(
            f"--kafka: Kafka at {args.kafka} did not take the test stream: {exc.message}",
            hint="check --kafka (bootstrap address) and the topic's limits",
        ) from None
    finally:
        sink.close()
    if undelivered:
        raise WalcastError(
            f"--kafka: Kafka at {args.kafka} confirmed not all messages "
            f"({undelivered} unconfirmed)",
            hint="check that the broker runs and accepts writes to the topic",
        )
    where = f" in {output.messages} messages" if args.kafka else ""
    print(f"walcast: produced {pump.changes} changes{where}", file=sys.stderr)
    return 0

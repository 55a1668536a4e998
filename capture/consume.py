"""``walcast consume``: print messages of Kafka topics, as a consumer would see them.

A debugging aid for the topics ``walcast run`` writes: each message's value on one line
(base64 for binary values such as DTS Avro), optionally with its topic, key and headers.
Reads from the beginning of each topic unless ``--from-end``; stops after
``--max-messages`` or ``--idle-timeout`` seconds without a message.
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid

import orjson

from capture.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``consume`` to the CLI."""
    parser = subparsers.add_parser(
        "consume", help="print messages of Kafka topics (debugging aid)", description=__doc__
    )
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    parser.add_argument(
        "--topic", action="append", required=True, help="topic, or ^regex (repeatable)"
    )
    parser.add_argument("--max-messages", type=int, help="stop after this many messages")
    parser.add_argument(
        "--idle-timeout", type=float, default=5.0, help="stop after this long without messages"
    )
    parser.add_argument("--from-end", action="store_true", help="only new messages")
    parser.add_argument(
        "--with-metadata",
        action="store_true",
        help="print a JSON object per message with topic, partition, offset, key, headers",
    )
    parser.set_defaults(func=command)


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


def _headers(headers: list[tuple[str, bytes | None]] | None) -> dict[str, str | None]:
    return {key: _text(value) for key, value in headers or []}


def command(args: argparse.Namespace) -> int:
    """Run ``walcast consume``."""
    from confluent_kafka import Consumer  # noqa: PLC0415 - only this command needs it

    from capture.logging import kafka_logger  # noqa: PLC0415

    if args.max_messages is not None and args.max_messages < 1:
        raise ConfigError("--max-messages: must be at least 1")
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": f"walcast-consume-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "latest" if args.from_end else "earliest",
            "enable.auto.commit": False,
        },
        logger=kafka_logger(),
    )
    consumer.subscribe(args.topic)
    out = sys.stdout
    count = 0
    try:
        while args.max_messages is None or count < args.max_messages:
            message = consumer.poll(args.idle_timeout)
            if message is None:
                break
            if message.error():
                continue
            value = _text(message.value())
            if args.with_metadata:
                line = orjson.dumps(
                    {
                        "topic": message.topic(),
                        "partition": message.partition(),
                        "offset": message.offset(),
                        "key": _text(message.key()),
                        "headers": _headers(message.headers()),  # type: ignore[arg-type]
                        "value": value,
                    }
                ).decode()
            else:
                line = value or ""
            out.write(line.rstrip("\n") + "\n")
            count += 1
    finally:
        out.flush()
        consumer.close()
    print(f"walcast: consumed {count} messages", file=sys.stderr)
    return 0

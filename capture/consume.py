"""``walcast consume``: print messages of Kafka topics, as a consumer would see them.

A debugging aid for the topics ``walcast run`` writes: each message's value on one line,
optionally with its topic, key and headers (``--with-metadata``, one JSON object per
message). Reads from the beginning of each topic unless ``--from-end``; stops after
``--max-messages``, or after ``--idle-timeout`` seconds without a message.

Values are printed readably (``--decode auto``, the default): a value that is a whole DTS
Avro ``Record`` datum, decoded with the vendor schema ``schemas/dts-avro-Record.avsc``, is
printed as that record in JSON (a union branch holding a record, such as an image item,
becomes ``{"Integer": {...}}``, named by the record's short name; bytes become text when
they are UTF-8, else ``base64:…``). Any other value is printed as its text, or
``base64:…`` when it is not UTF-8. The test is exact (the datum must decode and use every
byte), so a JSON or delimited message is never taken for Avro. ``--decode none`` prints
every value as text or base64, unchanged. When the schema file is not installed, DTS
values stay base64 and one note on stderr says so.

Bounded waits: a broker that does not answer within ``--connect-timeout`` seconds (default
10) ends the command with one line and a non-zero exit, as does a topic that does not exist
(a ``^regex`` topic is not checked), and a broker lost while reading for longer than
``--idle-timeout``. librdkafka's own log lines never reach the terminal. consume connects
in plaintext: a broker that closes every plaintext connection at once (a TLS listener) is
named as such, in one line, rather than as a broker that did not answer.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from capture.errors import ConfigError, ConnectionLostError
from capture.flags import add_command
from capture.schema_files import schema_path

DTS_SCHEMA_FILE: Final = "dts-avro-Record.avsc"
DTS_RECORD: Final = "com.alibaba.dts.formats.avro.Record"


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``consume`` to the CLI."""
    parser = add_command(
        subparsers, "consume", "print messages of Kafka topics (debugging aid)", __doc__
    )
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    parser.add_argument(
        "--topic", action="append", required=True, help="topic, or ^regex (repeatable)"
    )
    parser.add_argument("--max-messages", type=int, help="stop after this many messages")
    parser.add_argument(
        "--idle-timeout", type=float, default=5.0, help="stop after this long without messages"
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        help="seconds to wait for the brokers before failing (default 10)",
    )
    parser.add_argument("--from-end", action="store_true", help="only new messages")
    parser.add_argument(
        "--with-metadata",
        action="store_true",
        help="print a JSON object per message with topic, partition, offset, key, headers",
    )
    parser.add_argument(
        "--decode",
        choices=("auto", "none"),
        default="auto",
        help="auto: print DTS Avro records as JSON (default); none: values as text/base64",
    )
    parser.set_defaults(func=command)


# -- values ---------------------------------------------------------------------------------


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


def _headers(headers: list[tuple[str, bytes | None]] | None) -> dict[str, str | None]:
    return {key: _text(value) for key, value in headers or []}


def _jsonable(value: Any) -> Any:
    """A decoded Avro datum as JSON values (see the module docstring)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return {value[0].rsplit(".", 1)[-1]: _jsonable(value[1])}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return _text(value)
    return value


def dts_decoder(path: Path) -> Callable[[bytes], Any | None]:
    """A function returning a DTS Avro datum decoded to JSON values, or None if it is not one."""
    from fastavro import parse_schema, schemaless_reader  # noqa: PLC0415

    parsed = parse_schema(json.loads(path.read_text(encoding="utf-8")))
    [record] = [s for s in parsed if isinstance(s, dict) and s.get("name") == DTS_RECORD]

    def decode(value: bytes) -> Any | None:
        buffer = io.BytesIO(value)
        try:
            datum = schemaless_reader(buffer, record, return_record_name=True)
        except Exception:  # noqa: BLE001 - any failure means "not a DTS datum"
            return None
        if buffer.tell() != len(value):
            return None
        return _jsonable(datum)

    return decode


class _Values:
    """Turns message values into what is printed (see the module docstring)."""

    def __init__(self, mode: str) -> None:
        self._decode: Callable[[bytes], Any | None] | None = None
        self._missing_schema = False
        if mode == "auto":
            path = schema_path(DTS_SCHEMA_FILE)
            if path is None:
                self._missing_schema = True
            else:
                self._decode = dts_decoder(path)

    def __call__(self, value: bytes | None) -> Any:
        if value is None:
            return None
        if self._decode is not None:
            decoded = self._decode(value)
            if decoded is not None:
                return decoded
        text = _text(value)
        if self._missing_schema and text and text.startswith("base64:"):
            self._missing_schema = False
            print(
                f"walcast: note: {DTS_SCHEMA_FILE} is not installed, so binary values are "
                "printed as base64 (set $WALCAST_SCHEMA_DIR to the schemas/ directory)",
                file=sys.stderr,
            )
        return text


# -- the command -----------------------------------------------------------------------------


class _SilentLog:
    """A librdkafka ``logger`` that only reads the lines (errors are reported by this command).

    The lines go to a :class:`~capture.sinks.kafka.ProtocolWatch`: a broker that closes
    every plaintext connection (a TLS listener) is named as such, not as silent.
    """

    def __init__(self, watch: Any) -> None:
        self.watch = watch

    def log(self, _level: int, msg: str, *args: object, **_kwargs: object) -> None:
        """Read one line; print nothing."""
        self.watch.note(msg % args if args else msg)


def command(args: argparse.Namespace) -> int:
    """Run ``walcast consume``."""
    from confluent_kafka import Consumer, KafkaError, KafkaException  # noqa: PLC0415

    from capture.sinks.kafka_client import ProtocolWatch  # noqa: PLC0415

    passing = (
        KafkaError._PARTITION_EOF,  # noqa: SLF001 - librdkafka's names
        KafkaError._TRANSPORT,  # noqa: SLF001
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001
    )

    if args.max_messages is not None and args.max_messages < 1:
        raise ConfigError("--max-messages: must be at least 1")
    if args.idle_timeout <= 0:
        raise ConfigError("--idle-timeout: must be more than 0 seconds")
    if args.connect_timeout <= 0:
        raise ConfigError("--connect-timeout: must be more than 0 seconds")
    brokers = args.bootstrap_servers
    errors: list[str] = []  # every client error, for the one line that reports them
    down: list[str] = []  # "all brokers are down" since the last message

    watch = ProtocolWatch(None)  # consume connects in plaintext only

    def on_error(error: Any) -> None:
        errors.append(str(error.str()))
        watch.note(errors[-1])
        if error.code() == KafkaError._ALL_BROKERS_DOWN:  # noqa: SLF001 - librdkafka's name
            down.append(str(error.str()))

    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": f"walcast-consume-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "latest" if args.from_end else "earliest",
            "enable.auto.commit": False,
            "error_cb": on_error,
        },
        logger=_SilentLog(watch),
    )
    values = _Values(args.decode)
    out = sys.stdout
    count = 0
    try:
        try:
            metadata = consumer.list_topics(timeout=args.connect_timeout)
        except KafkaException:
            consumer.poll(0)  # serves error_cb: the reason, e.g. "Connection refused"
            if watch.found is not None:
                raise watch.found.plaintext_only("--bootstrap-servers", "consume") from None
            detail = f" ({errors[-1]})" if errors else ""
            raise ConnectionLostError(
                f"Kafka at {brokers} did not answer within {args.connect_timeout:g} s{detail}",
                hint="check --bootstrap-servers and that the brokers are running",
            ) from None
        for topic in args.topic:
            if not topic.startswith("^") and topic not in metadata.topics:
                raise ConfigError(
                    f"--topic {topic}: no such topic on Kafka at {brokers}",
                    hint="walcast run creates a table's topic with its first change; "
                    "check the name (walcast consume --topic '^prefix.*' matches several)",
                )
        consumer.subscribe(args.topic)
        last_message = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            waited = time.monotonic() - last_message
            if waited >= args.idle_timeout:
                break
            message = consumer.poll(min(args.idle_timeout - waited, 1.0))
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() not in passing:
                    raise ConnectionLostError(
                        f"Kafka at {brokers}: {error.str()}",
                        hint="check the topic's ACLs and the brokers' logs",
                    )
                on_error(error)
                continue
            down.clear()
            last_message = time.monotonic()
            value = values(message.value())
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
            elif isinstance(value, str | None):
                line = value or ""
            else:
                line = orjson.dumps(value).decode()
            out.write(line.rstrip("\n") + "\n")
            count += 1
        if down:
            raise ConnectionLostError(
                f"Kafka at {brokers} was lost while reading ({down[-1]}) after {count} messages",
                hint="check that the brokers are running",
            )
    finally:
        out.flush()
        consumer.close()
    print(f"walcast: consumed {count} messages", file=sys.stderr)
    return 0

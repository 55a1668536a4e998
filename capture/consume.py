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
values stay base64 and one note on stderr says so. A tombstone (a null value: the
debezium format's record after a delete) is printed as ``null``, as ``walcast tail`` prints
it; an empty value is an empty line.

Bounded waits: a broker that does not answer within ``--connect-timeout`` seconds (default
10) ends the command with one line and a non-zero exit, as does a topic that does not exist
(a ``^regex`` topic is not checked), and a broker lost while reading for longer than
``--idle-timeout``. librdkafka's own log lines never reach the terminal. consume connects
in plaintext: a broker that closes every plaintext connection at once (a TLS listener) is
named as such, in one line, rather than as a broker that did not answer.

``--list-topics`` prints the cluster's topics instead of messages, one line each: the
name, a tab, the partition count, sorted by name (for scripts: ``cut -f1``). Without
``--topic`` it lists every topic but Kafka's own (names starting with ``__``); with
``--topic`` (repeatable) only those a ``--topic`` names exactly or, for a ``^regex``,
matches (Python's ``re.search``, so ``^`` anchors it at the start as librdkafka's topic
regexes are). No topic listed is not an error: stdout stays empty and the stderr summary
says so (exit 0). The flags that only shape reading (``--max-messages``, ``--from-end``,
``--with-metadata``, ``--decode``, ``--idle-timeout``) are an error with it, never ignored.
The same ``--connect-timeout`` bounds the wait for the brokers.

``--help`` is :data:`DESCRIPTION` and :data:`EXAMPLES`, written for the terminal.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
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
DEFAULT_IDLE_TIMEOUT: Final = 5.0
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
READING_ONLY: Final = {
    "max_messages": "--max-messages",
    "from_end": "--from-end",
    "with_metadata": "--with-metadata",
    "decode": "--decode",
    "idle_timeout": "--idle-timeout",
}
"""The flags (argument name: flag) that shape reading messages, refused with --list-topics."""

HELP: Final = "print the messages of Kafka topics, or list the topics (debugging aid)"
"""The line ``walcast --help`` shows for this command."""

DESCRIPTION: Final = """\
Print the messages of Kafka topics as a consumer sees them, to look at what
walcast run published: each message's value on one line, from the beginning
of each topic (--from-end: only new ones), until --max-messages messages or
--idle-timeout seconds without one. --with-metadata prints one JSON object per
message instead, with its topic, partition, offset, key and headers.

--list-topics prints the topics instead of messages: one line per topic, its
name, a tab and its number of partitions, sorted by name. Without --topic it
lists every topic but Kafka's own (names starting with __); with --topic only
the topics named, or matched by a ^regex.

Values are printed readably (--decode auto): a DTS Avro record is decoded with
the vendor's schema and printed as JSON, an image item as
{"Integer": {"precision": 8, "value": "42"}}; any other value as its text, or
as base64:... when it is not UTF-8. --decode none prints every value as text
or base64, unchanged.

A broker that does not answer within --connect-timeout seconds, a named topic
that does not exist (a ^regex is not checked), or a broker lost while reading,
is one line and a non-zero exit. consume connects in plaintext unless the
WALCAST__KAFKA__* variables of walcast run (SECURITY_PROTOCOL, SASL_MECHANISM,
SASL_USERNAME, SASL_PASSWORD_ENV or SASL_PASSWORD_FILE, SSL_CA_LOCATION,
SSL_CERTIFICATE_LOCATION, SSL_KEY_LOCATION) say otherwise."""
"""What ``walcast consume --help`` says the command does."""

EXAMPLES: Final = (
    (
        "walcast consume --bootstrap-servers localhost:9092 --list-topics \\\n"
        r"    --topic '^walcast\.'"
    ),
    (
        "walcast consume --bootstrap-servers localhost:9092 \\\n"
        "    --topic walcast.canal.shop.orders --max-messages 10"
    ),
    (
        "walcast consume --bootstrap-servers localhost:9092 \\\n"
        r"    --topic '^walcast\.json\.' --with-metadata --from-end"
    ),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``consume`` to the CLI."""
    parser = add_command(subparsers, "consume", HELP, DESCRIPTION, EXAMPLES)
    parser.add_argument(
        "--bootstrap-servers",
        required=True,
        metavar="HOST:PORT[,...]",
        help="Kafka brokers to connect to (required; plaintext listener)",
    )
    parser.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC|^REGEX",
        help="topic to read, or a regular expression starting with ^ for every topic it "
        "matches (repeatable; required unless --list-topics; with --list-topics: only "
        "these topics)",
    )
    parser.add_argument(
        "--list-topics",
        action="store_true",
        help="print the topics (name, tab, partition count), not messages",
    )
    parser.add_argument(
        "--max-messages",
        type=int,
        metavar="N",
        help="stop after this many messages (default: no limit, stop when idle)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        metavar="SECONDS",
        help=f"stop after this many seconds without a message (default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help="seconds to wait for the brokers to answer before failing (default "
        f"{DEFAULT_CONNECT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--from-end",
        action="store_true",
        help="print only messages that arrive from now on (default: from the beginning)",
    )
    parser.add_argument(
        "--with-metadata",
        action="store_true",
        help="print a JSON object per message with its topic, partition, offset, key, "
        "headers and value (default: the value only)",
    )
    parser.add_argument(
        "--decode",
        choices=("auto", "none"),
        help="auto: print DTS Avro records as JSON; none: every value as text or base64 "
        "(default auto)",
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


class _Client:
    """A consumer of ``brokers`` whose librdkafka errors are kept for one-line reports."""

    def __init__(self, brokers: str, *, from_end: bool) -> None:
        from confluent_kafka import Consumer  # noqa: PLC0415

        from capture.kafka.client import ProtocolWatch  # noqa: PLC0415
        from capture.kafka.security import client_settings  # noqa: PLC0415

        self.brokers = brokers
        self.errors: list[str] = []  # every client error, for the one line that reports them
        self.down: list[str] = []  # "all brokers are down" since the last message
        security = client_settings()  # WALCAST__KAFKA__*, as walcast run reads them
        self.settings: dict[str, Any] = {"bootstrap.servers": brokers, **security}
        """The connection settings (never to be logged: they hold the password)."""
        self.watch = ProtocolWatch(security.get("security.protocol"), self.settings)
        self.consumer = Consumer(
            {
                **security,
                "bootstrap.servers": brokers,
                "group.id": f"walcast-consume-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "latest" if from_end else "earliest",
                "enable.auto.commit": False,
                "error_cb": self.on_error,
            },
            logger=_SilentLog(self.watch),
        )

    def on_error(self, error: Any) -> None:
        """Read an error callback: keep its text, watch it, note brokers down."""
        from confluent_kafka import KafkaError  # noqa: PLC0415

        self.errors.append(str(error.str()))
        self.watch.note(self.errors[-1])
        if error.code() == KafkaError._ALL_BROKERS_DOWN:  # noqa: SLF001 - librdkafka's name
            self.down.append(str(error.str()))

    def metadata(self, timeout: float) -> Any:
        """The cluster's metadata; one line when no broker answers within ``timeout``."""
        from confluent_kafka import KafkaException  # noqa: PLC0415

        from capture.kafka.client import ProtocolMismatchError  # noqa: PLC0415

        deadline = time.monotonic() + timeout
        while True:  # in steps: a refused client (credentials, certificates) is seen at once
            try:
                return self.consumer.list_topics(timeout=min(1.0, timeout))
            except KafkaException:
                self.consumer.poll(0)  # serves error_cb: the reason, e.g. "Connection refused"
                if self.watch.found is not None or time.monotonic() >= deadline:
                    break
        found = self.watch.found
        if isinstance(found, ProtocolMismatchError) and found.configured is None:
            raise found.plaintext_only("--bootstrap-servers", "consume")
        if found is not None:
            raise found
        detail = f" ({self.errors[-1]})" if self.errors else ""
        raise ConnectionLostError(
            f"Kafka at {self.brokers} did not answer within {timeout:g} s{detail}",
            hint="check --bootstrap-servers and that the brokers are running",
        )


def _check_arguments(args: argparse.Namespace) -> None:
    """One ConfigError for the first flag that is out of range or does not apply."""
    if args.max_messages is not None and args.max_messages < 1:
        raise ConfigError("--max-messages: must be at least 1")
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        raise ConfigError("--idle-timeout: must be more than 0 seconds")
    if args.connect_timeout <= 0:
        raise ConfigError("--connect-timeout: must be more than 0 seconds")
    if args.list_topics:
        given = [flag for name, flag in READING_ONLY.items() if getattr(args, name)]
        if given:
            raise ConfigError(
                f"{given[0]}: only applies when reading messages, not with --list-topics",
                hint=f"drop {given[0]} to list the topics, or drop --list-topics to read messages",
            )
    elif not args.topic:
        raise ConfigError(
            "--topic: give a topic to read (repeatable; ^regex for several)",
            hint="walcast consume --bootstrap-servers "
            f"{args.bootstrap_servers} --list-topics lists them",
        )


def topic_filter(topics: list[str] | None) -> Callable[[str], bool]:
    """Which topic names ``--list-topics`` prints (see the module docstring).

    A ``^regex`` that Python cannot compile is a ConfigError naming it.
    """
    if not topics:
        return lambda name: not name.startswith("__")
    names = {t for t in topics if not t.startswith("^")}
    patterns = []
    for topic in topics:
        if topic.startswith("^"):
            try:
                patterns.append(re.compile(topic))
            except re.error as exc:
                raise ConfigError(f"--topic {topic}: not a regular expression ({exc})") from None
    return lambda name: name in names or any(p.search(name) for p in patterns)


def list_topics(args: argparse.Namespace) -> int:
    """Run ``walcast consume --list-topics``."""
    wanted = topic_filter(args.topic)
    client = _Client(args.bootstrap_servers, from_end=False)
    try:
        metadata = client.metadata(args.connect_timeout)
    finally:
        client.consumer.close()
    listed = sorted(
        (name, len(topic.partitions)) for name, topic in metadata.topics.items() if wanted(name)
    )
    sys.stdout.write("".join(f"{name}\t{partitions}\n" for name, partitions in listed))
    sys.stdout.flush()
    where = f"Kafka at {args.bootstrap_servers}"
    if args.topic:
        where += f" matching --topic {' '.join(args.topic)}"
    count = f"{len(listed)} topic{'s' if len(listed) != 1 else ''}" if listed else "no topics"
    print(f"walcast: {count} on {where}", file=sys.stderr)
    return 0


def command(args: argparse.Namespace) -> int:
    """Run ``walcast consume``."""
    _check_arguments(args)
    if args.list_topics:
        return list_topics(args)
    return read_messages(args)


def read_messages(args: argparse.Namespace) -> int:
    """Print the messages of ``--topic`` (see the module docstring)."""
    from confluent_kafka import KafkaError  # noqa: PLC0415

    from capture.kafka.client import client_logger  # noqa: PLC0415
    from capture.kafka.security import hidden_topics, missing_acl  # noqa: PLC0415

    passing = (
        KafkaError._PARTITION_EOF,  # noqa: SLF001 - librdkafka's names
        KafkaError._TRANSPORT,  # noqa: SLF001
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001
    )
    idle_timeout = args.idle_timeout or DEFAULT_IDLE_TIMEOUT
    brokers = args.bootstrap_servers
    client = _Client(brokers, from_end=args.from_end)
    consumer = client.consumer
    values = _Values(args.decode or "auto")
    out = sys.stdout
    count = 0
    try:
        metadata = client.metadata(args.connect_timeout)
        absent = [t for t in args.topic if not t.startswith("^") and t not in metadata.topics]
        hidden_topics(
            client.settings, absent, args.connect_timeout, client_logger()
        )  # a missing ACL
        for topic in args.topic:
            if not topic.startswith("^") and topic not in metadata.topics:
                raise ConfigError(
                    f"--topic {topic}: no such topic on Kafka at {brokers}",
                    hint="walcast run creates a table's topic with its first change; "
                    f"walcast consume --bootstrap-servers {brokers} --list-topics lists the "
                    "topics (--topic '^prefix' reads several)",
                )
        consumer.subscribe(args.topic)
        last_message = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            waited = time.monotonic() - last_message
            if waited >= idle_timeout:
                break
            message = consumer.poll(min(idle_timeout - waited, 1.0))
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    group = "walcast-consume-"
                    raise missing_acl("Read", "Group", group, client.settings, prefixed=True)
                if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    topic = str(message.topic() or ", ".join(args.topic))
                    raise missing_acl("Read", "Topic", topic, client.settings)
                if error.fatal() or error.code() not in passing:
                    raise ConnectionLostError(
                        f"Kafka at {brokers}: {error.str()}",
                        hint="check the topic's ACLs and the brokers' logs",
                    )
                client.on_error(error)
                continue
            client.down.clear()
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
            elif value is None:  # a tombstone (a null value), printed as walcast tail does
                line = "null"
            elif isinstance(value, str):
                line = value
            else:
                line = orjson.dumps(value).decode()
            out.write(line.rstrip("\n") + "\n")
            count += 1
        if client.down:
            raise ConnectionLostError(
                f"Kafka at {brokers} was lost while reading ({client.down[-1]}) after "
                f"{count} messages",
                hint="check that the brokers are running",
            )
    finally:
        out.flush()
        consumer.close()
    print(f"walcast: consumed {count} messages", file=sys.stderr)
    return 0

"""``walcast consume``: readable values (DTS Avro as JSON) and bounded failures."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from capture.consume import DTS_SCHEMA_FILE, dts_decoder, schema_path
from tests.support.formats import decode_dts
from tests.support.scenario import walcast


def assert_one_line_error(done, *needles: str) -> str:
    assert done.returncode not in (0, None), done.stdout
    assert "Traceback" not in done.stderr
    assert "%3|" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("walcast: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_refused_broker_fails_in_bounded_time() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: connections are refused
    started = time.monotonic()
    done = walcast(
        "consume", "--bootstrap-servers", f"127.0.0.1:{port}", "--topic", "t",
        "--connect-timeout", "3", timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started < 20
    assert_one_line_error(done, f"Kafka at 127.0.0.1:{port} did not answer within 3 s")
    assert done.stdout == ""


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A TCP port that accepts connections and never answers (a hung broker)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


def test_a_broker_that_never_answers_fails_in_bounded_time(silent_broker: str) -> None:
    started = time.monotonic()
    done = walcast(
        "consume", "--bootstrap-servers", silent_broker, "--topic", "t",
        "--connect-timeout", "3", "--idle-timeout", "1", timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started < 20
    assert_one_line_error(done, f"Kafka at {silent_broker} did not answer within 3 s")


def test_bad_numbers_are_one_line() -> None:
    for flag in ("--idle-timeout", "--connect-timeout"):
        done = walcast("consume", "--bootstrap-servers", "x:1", "--topic", "t", flag, "0")
        assert_one_line_error(done, f"{flag}: must be more than 0 seconds")


@pytest.mark.integration
def test_dts_avro_is_printed_as_json(kafka_bootstrap: str) -> None:
    topic = f"consume_dts_{uuid.uuid4().hex[:8]}"
    produced = walcast(
        "produce-test-stream", "--format", "dts-avro", "--count", "12", "--seed", "5",
        "--kafka", kafka_bootstrap, "--topic", topic, "--transaction-topic", f"{topic}.tx",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    read = ("consume", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    done = walcast(*read, "--max-messages", "12", "--idle-timeout", "20")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    raw = walcast(*read, "--max-messages", "12", "--idle-timeout", "20", "--decode", "none")
    assert raw.returncode == 0, raw.stderr
    datums = [base64.b64decode(line.removeprefix("base64:")) for line in raw.stdout.splitlines()]
    assert len(records) == len(datums) == 12
    assert all(line.startswith("base64:") for line in raw.stdout.splitlines())
    for record, datum in zip(records, datums, strict=True):
        reference = decode_dts(datum)  # the test helper's own decoding with the vendor schema
        assert record["operation"] == reference["operation"]
        assert record["objectName"] == reference["objectName"]
        assert record["sourcePosition"] == reference["sourcePosition"]
        images = record["afterImages"] or record["beforeImages"]
        assert images
        first = next(item for item in images if item is not None)
        ((kind, value),) = first.items()
        assert kind in {"Integer", "Character", "Decimal", "Timestamp", "TextObject"}
        assert isinstance(value, dict)
    meta = walcast(*read, "--max-messages", "1", "--with-metadata", "--idle-timeout", "20")
    first = json.loads(meta.stdout)
    assert first["topic"] == topic
    assert first["value"]["version"] == 1


def test_only_whole_dts_datums_are_decoded() -> None:
    path = schema_path(DTS_SCHEMA_FILE)
    assert path is not None
    decode = dts_decoder(path)
    for not_avro in (b'{"data": [1, 2]}', b"I|x|y", b"\xff\xfe\x00garbage", b""):
        assert decode(not_avro) is None, not_avro
    done = walcast(
        "produce-test-stream", "--format", "dts-avro", "--count", "1", "--seed", "2", timeout=60
    )
    datum = base64.b64decode(done.stdout.splitlines()[0].strip().removeprefix("base64:"))
    decoded = decode(datum)
    assert decoded is not None
    assert decoded["version"] == 1
    assert decode(datum + b"\x00") is None  # a trailing byte: not one datum


# -- --list-topics (issue 25.9) ---------------------------------------------------------------


@pytest.fixture
def listed_topics(kafka_bootstrap: str) -> Iterator[tuple[str, dict[str, int]]]:
    """Three new topics under one unique prefix, with 3, 1 and 2 partitions; deleted after."""
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    prefix = f"consume_list_{uuid.uuid4().hex[:8]}"
    made = {f"{prefix}.orders": 3, f"{prefix}.customers": 1, f"{prefix}_other": 2}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in made.items()]).values():
        future.result(timeout=30)
    try:
        yield prefix, made
    finally:
        for future in admin.delete_topics(list(made)).values():
            future.result(timeout=30)


@pytest.mark.integration
def test_list_topics_prints_names_and_partition_counts(
    kafka_bootstrap: str, listed_topics: tuple[str, dict[str, int]]
) -> None:
    prefix, made = listed_topics
    listing = ("consume", "--bootstrap-servers", kafka_bootstrap, "--list-topics")
    done = walcast(*listing, "--topic", f"^{prefix}\\.")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{prefix}.customers\t1", f"{prefix}.orders\t3"]
    assert (
        done.stderr
        == f"walcast: 2 topics on Kafka at {kafka_bootstrap} matching --topic ^{prefix}\\.\n"
    )
    exact = walcast(*listing, "--topic", f"{prefix}_other", "--topic", f"{prefix}.orders")
    assert exact.stdout.splitlines() == [f"{prefix}.orders\t3", f"{prefix}_other\t2"]
    everything = walcast(*listing)
    assert everything.returncode == 0, everything.stderr
    names = [line.split("\t")[0] for line in everything.stdout.splitlines()]
    assert names == sorted(names)
    assert set(made) <= set(names)
    assert not [n for n in names if n.startswith("__")]  # Kafka's own are left out
    cut = [line.split("\t") for line in everything.stdout.splitlines()]
    assert all(len(fields) == 2 and fields[1].isdigit() for fields in cut)


@pytest.mark.integration
def test_list_topics_matching_nothing_prints_nothing(kafka_bootstrap: str) -> None:
    pattern = f"^nothing_{uuid.uuid4().hex}"
    done = walcast(
        "consume", "--bootstrap-servers", kafka_bootstrap, "--list-topics", "--topic", pattern
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"walcast: no topics on Kafka at {kafka_bootstrap} matching --topic {pattern}\n"
    )


def test_list_topics_at_a_refused_broker_fails_in_bounded_time() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    done = walcast(
        "consume", "--bootstrap-servers", f"127.0.0.1:{port}", "--list-topics",
        "--connect-timeout", "3", timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started < 20
    assert_one_line_error(done, f"Kafka at 127.0.0.1:{port} did not answer within 3 s")
    assert done.returncode == 4
    assert done.stdout == ""


def test_list_topics_at_a_silent_broker_fails_in_bounded_time(silent_broker: str) -> None:
    started = time.monotonic()
    done = walcast(
        "consume", "--bootstrap-servers", silent_broker, "--list-topics",
        "--connect-timeout", "2", timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started < 20
    assert_one_line_error(done, f"Kafka at {silent_broker} did not answer within 2 s")


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (("--list-topics", "--with-metadata"), ("--with-metadata: only applies when reading",)),
        (("--list-topics", "--max-messages", "3"), ("--max-messages: only applies",)),
        (("--list-topics", "--from-end"), ("--from-end: only applies",)),
        (("--list-topics", "--decode", "none"), ("--decode: only applies",)),
        (("--list-topics", "--idle-timeout", "2"), ("--idle-timeout: only applies",)),
        (("--list-topics", "--topic", "^("), ("--topic ^(: not a regular expression",)),
        ((), ("--topic: give a topic to read", "--list-topics lists them")),
    ],
)
def test_list_topics_usage_errors_are_one_line(
    extra: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    done = walcast("consume", "--bootstrap-servers", "127.0.0.1:1", *extra, timeout=60)
    assert_one_line_error(done, *needles)
    assert done.returncode == 2  # before any connection: the broker address is never tried


@pytest.mark.integration
def test_a_tombstone_is_printed_as_null(kafka_bootstrap: str) -> None:
    from confluent_kafka import Producer  # noqa: PLC0415

    topic = f"consume_tombstone_{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, b'{"id":7}', b'{"id":7}')
    producer.produce(topic, None, b'{"id":7}')  # a debezium delete's tombstone
    producer.produce(topic, b"", b'{"id":8}')  # an empty value is not a tombstone
    assert producer.flush(30) == 0
    done = walcast(
        "consume", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--max-messages", "3", "--idle-timeout", "20",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['{"id":7}', "null", ""]

"""librdkafka's lines: one event per distinct line a minute, and protocol mismatches found.

The lines are librdkafka 2.x's own (``FAIL`` lines as confluent-kafka hands them to the
client's logger, error callback texts), copied from real runs against a PLAINTEXT Kafka 3.9
listener and an SSL one.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError
from structlog.testing import capture_logs

from capture.kafka.client import (
    APIVERSION_CLOSES,
    LOG_REPEAT_SECONDS,
    ProtocolMismatchError,
    ProtocolWatch,
    _KafkaLog,
    cause,
    repeat_key,
    routine,
)
from capture.sinks.kafka import KafkaSink

REFUSED = (
    "FAIL [rdkafka#producer-1] [thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to "
    "ipv4#127.0.0.1:9 failed: Connection refused (after {ms}ms in state CONNECT{suppressed})"
)
TIMED_OUT = (
    "FAIL [rdkafka#producer-1] [thrd:broker-1:9092/1]: broker-1:9092/1: {n} request(s) timed "
    "out: disconnect (average rtt {rtt}ms) (after {ms}ms in state UP{suppressed})"
)
SSL_AT_PLAINTEXT = (
    "sasl_ssl://127.0.0.1:38211/bootstrap: SSL handshake failed: Disconnected: SSL connection "
    "closed by peer: connecting to a PLAINTEXT broker listener? (after 1ms in state "
    "SSL_HANDSHAKE)"
)
PLAINTEXT_AT_SSL = (
    "FAIL [rdkafka#producer-1] [thrd:127.0.0.1:57183/bootstrap]: 127.0.0.1:57183/bootstrap: "
    "Disconnected: connection closed by peer: receive 0 after POLLIN (after {ms}ms in state "
    "APIVERSION_QUERY)"
)
CERTIFICATE = (
    "ssl://127.0.0.1:57183/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified, verify that "
    "ssl.ca.location is correctly configured or root CA certificates are installed (install "
    "ca-certificates package) (after 3ms in state SSL_HANDSHAKE)"
)


def refused(ms: int, suppressed: int = 0) -> str:
    tail = f", {suppressed} identical error(s) suppressed" if suppressed else ""
    return REFUSED.format(ms=ms, suppressed=tail)


# -- one line per distinct line --------------------------------------------------------------


def test_lines_that_differ_only_in_timings_and_counts_have_one_key() -> None:
    first = refused(0)
    for other in (refused(1, 3), refused(1012, 30), refused(7)):
        assert repeat_key(other) == repeat_key(first)
    timed_out = TIMED_OUT.format(n=1, rtt="1.224", ms=60012, suppressed="")
    again = TIMED_OUT.format(
        n=3, rtt="31.500", ms=60003, suppressed=", 2 identical error(s) suppressed"
    )
    assert repeat_key(again) == repeat_key(timed_out)


@pytest.mark.parametrize(
    "other",
    [
        refused(0).replace("Connection refused", "Connection reset by peer"),
        refused(0).replace("127.0.0.1:9", "127.0.0.1:19"),
        refused(0).replace("state CONNECT", "state APIVERSION_QUERY"),
        TIMED_OUT.format(n=1, rtt="1.2", ms=5, suppressed=""),
    ],
)
def test_different_failures_keep_different_keys(other: str) -> None:
    assert repeat_key(other) != repeat_key(refused(0))


def test_an_outage_is_logged_once_a_minute_with_the_first_text() -> None:
    """120 refusals in 170 s (issue 22 item 4) are three events, not 120, and debug ones
    (issue 25.8: the outage is the sink's own kafka_unreachable line)."""
    now = [1000.0]
    handler = _KafkaLog(clock=lambda: now[0])
    logger = logging.getLogger("tests.kafka_log")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    with capture_logs() as events:
        for i in range(120):
            logger.error(refused(i % 7, suppressed=i % 4))
            now[0] += 170 / 120
    assert [e["event"] for e in events] == ["kafka_client"] * 3
    assert events[0]["message"] == refused(0)  # the text as librdkafka wrote it
    assert events[0]["repeated"] is None
    assert all(e["repeated"] for e in events[1:])
    assert sum(e["repeated"] or 0 for e in events) + len(events) <= 120
    assert all(e["log_level"] == "debug" for e in events)


def test_another_line_is_logged_at_once() -> None:
    now = [0.0]
    handler = _KafkaLog(clock=lambda: now[0])
    record = logging.LogRecord("x", logging.WARNING, __file__, 0, refused(0), None, None)
    other = logging.LogRecord("x", logging.WARNING, __file__, 0, PLAINTEXT_AT_SSL, None, None)
    with capture_logs() as events:
        handler.emit(record)
        handler.emit(other)
        now[0] = LOG_REPEAT_SECONDS - 1
        handler.emit(record)
        now[0] = LOG_REPEAT_SECONDS + 1
        handler.emit(record)
    assert [e["message"] for e in events] == [refused(0), PLAINTEXT_AT_SSL, refused(0)]
    assert events[-1]["repeated"] == 1


GETPID = (
    "GETPID [walcast-shop#producer-1] [thrd:main]: Failed to acquire transactional PID from "
    "broker TxnCoordinator/1: Broker: Coordinator load in progress: retrying"
)
"""What an exactly-once start logs while a freshly started broker loads its coordinator."""


@pytest.mark.parametrize(
    "text",
    [
        refused(0),
        TIMED_OUT.format(n=1, rtt="1.2", ms=5, suppressed=""),
        "1/1 brokers are down",
        (
            "FAIL [rdkafka#consumer-2] [thrd:b:9092/bootstrap]: b:9092/bootstrap: Failed to "
            "resolve 'b:9092': Name or service not known (after 3ms in state CONNECT)"
        ),
        GETPID,
        "METADATA [rdkafka#producer-1] [thrd:main]: Topic t partition 0 Leader not available",
        PLAINTEXT_AT_SSL.format(ms=1),
    ],
)
def test_unreachable_brokers_and_retried_conditions_are_debug_events(text: str) -> None:
    assert routine(text)
    handler = _KafkaLog()
    with capture_logs() as events:
        handler.emit(logging.LogRecord("x", logging.WARNING, __file__, 0, text, None, None))
    assert [(e["event"], e["log_level"]) for e in events] == [("kafka_client", "debug")]


@pytest.mark.parametrize(
    "text",
    [
        SSL_AT_PLAINTEXT,
        CERTIFICATE,
        (
            "FAIL [rdkafka#producer-1] [thrd:b:9092/1]: b:9092/1: SASL authentication error: "
            "Authentication failed during authentication due to invalid credentials with SASL "
            "mechanism SCRAM-SHA-512 (after 3ms in state AUTH_REQ)"
        ),
        (
            "CONFWARN [rdkafka#producer-1] [thrd:app]: Configuration property fetch.wait.max.ms "
            "is a consumer property and will be ignored by this producer instance"
        ),
    ],
)
def test_lines_that_need_a_human_stay_warnings(text: str) -> None:
    assert not routine(text)
    handler = _KafkaLog()
    with capture_logs() as events:
        handler.emit(logging.LogRecord("x", logging.WARNING, __file__, 0, text, None, None))
    assert [e["log_level"] for e in events] == ["warning"]


def test_the_cause_of_an_outage_is_librdkafkas_words_without_decoration() -> None:
    assert cause(refused(0)) == (
        "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
    )
    assert (
        cause(
            'KafkaError{code=_TRANSPORT,val=-195,str="Failed to get metadata: Local: Broker '
            'transport failure"}'
        )
        == "Failed to get metadata: Local: Broker transport failure"
    )


# -- security.protocol mismatches ------------------------------------------------------------


@pytest.mark.parametrize("configured", ["SSL", "SASL_SSL", "ssl"])
def test_a_tls_client_at_a_plaintext_listener_is_found_on_the_first_line(configured: str) -> None:
    watch = ProtocolWatch(configured)
    watch.note(SSL_AT_PLAINTEXT)
    found = watch.found
    assert isinstance(found, ProtocolMismatchError)
    assert (found.broker, found.listener) == ("127.0.0.1:38211", "plaintext")
    line = found.one_line()
    assert line.startswith(f"kafka.security_protocol is '{configured}' but the broker at ")
    assert "answers in plaintext (librdkafka: SSL handshake failed: Disconnected:" in line
    assert "(after" not in line
    assert 'set kafka.security_protocol = "PLAINTEXT"' in line
    assert ("SASL_PLAINTEXT" in line) == ("SASL" in configured.upper())
    assert found.exit_code == 6


@pytest.mark.parametrize(
    "text",
    [
        (
            "ssl://b:9093/bootstrap: SSL handshake failed: error:0A00010B:SSL routines::wrong "
            "version number (after 2ms in state SSL_HANDSHAKE)"
        ),
        (
            "ssl://b:9093/1: SSL handshake failed: error:1408F10B:SSL routines:ssl3_get_record:"
            "packet length too long (after 0ms in state SSL_HANDSHAKE, 4 identical error(s) "
            "suppressed)"
        ),
    ],
)
def test_openssl_words_for_a_plaintext_peer(text: str) -> None:
    watch = ProtocolWatch("SSL")
    watch.note(text)
    assert isinstance(watch.found, ProtocolMismatchError)
    assert watch.found.broker == "b:9093"


@pytest.mark.parametrize(
    "text",
    [
        CERTIFICATE,
        refused(0),
        PLAINTEXT_AT_SSL.format(ms=1),  # a TLS client never asks for ApiVersion in plaintext
        "1/1 brokers are down",
    ],
)
def test_other_failures_of_a_tls_client_are_not_a_mismatch(text: str) -> None:
    watch = ProtocolWatch("SASL_SSL")
    for _ in range(10):
        watch.note(text)
    # An untrusted certificate is a refusal of its own (capture.kafka.security), not this.
    assert not isinstance(watch.found, ProtocolMismatchError)
    assert (watch.found is None) == (text != CERTIFICATE)


@pytest.mark.parametrize("configured", [None, "PLAINTEXT", "SASL_PLAINTEXT"])
def test_a_plaintext_client_at_a_tls_listener_takes_closes_in_a_row(configured: str | None) -> None:
    watch = ProtocolWatch(configured)
    for i in range(APIVERSION_CLOSES - 1):
        watch.note(PLAINTEXT_AT_SSL.format(ms=i))
    assert watch.found is None
    watch.note(PLAINTEXT_AT_SSL.format(ms=3))
    found = watch.found
    assert isinstance(found, ProtocolMismatchError)
    assert (found.broker, found.listener) == ("127.0.0.1:57183", "TLS")
    line = found.one_line()
    shown = f"is '{configured}'" if configured else "is not set (plaintext)"
    assert line.startswith(f"kafka.security_protocol {shown} but the broker at 127.0.0.1:57183 ")
    assert "as a TLS listener does" in line
    assert "in state APIVERSION_QUERY)" in line
    tls = "SASL_SSL" if configured == "SASL_PLAINTEXT" else "SSL"
    assert f'set kafka.security_protocol = "{tls}"' in line
    assert "PLAINTEXT listener" in line


def test_closes_broken_by_other_failures_or_an_answer_are_not_a_listener() -> None:
    watch = ProtocolWatch(None)
    for _ in range(3):
        for _ in range(APIVERSION_CLOSES - 1):
            watch.note(PLAINTEXT_AT_SSL.format(ms=1))
        watch.note(refused(0))  # the broker went down meanwhile
    for _ in range(APIVERSION_CLOSES - 1):
        watch.note(PLAINTEXT_AT_SSL.format(ms=1))
    watch.answered()
    watch.note(PLAINTEXT_AT_SSL.format(ms=1))
    assert watch.found is None


@pytest.mark.parametrize(
    "text",
    [
        (
            "FAIL [rdkafka#producer-1] [thrd:b:9093/bootstrap]: b:9093/bootstrap: Disconnected "
            "while requesting ApiVersion: might be caused by incorrect security.protocol "
            "configuration (connecting to a SSL listener?) or broker version is < 0.10 (see "
            "api.version.request) (after 5ms in state APIVERSION_QUERY, 1 identical error(s) "
            "suppressed)"
        ),
        (
            "b:9093/bootstrap: Receive failed: Invalid response size 352518912 (0..100000000): "
            "increase receive.message.max.bytes (after 3ms in state APIVERSION_QUERY)"
        ),
    ],
)
def test_older_librdkafka_words_for_a_tls_listener_are_certain(text: str) -> None:
    watch = ProtocolWatch("PLAINTEXT")
    watch.note(text)
    assert isinstance(watch.found, ProtocolMismatchError)
    assert watch.found.broker == "b:9093"


# -- through the sink --------------------------------------------------------------------------


def _sink(protocol: str | None) -> KafkaSink:
    """A sink of a client that connects nowhere useful (its own lines are refusals)."""
    settings: dict[str, object] = {"bootstrap.servers": "127.0.0.1:1"}
    if protocol:
        settings["security.protocol"] = protocol
    if protocol and "SASL" in protocol:
        settings.update({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"})
    return KafkaSink(settings)


def test_the_sink_stops_on_the_error_callback_of_a_tls_client() -> None:
    sink = _sink("SASL_SSL")
    sink._client_error(KafkaError(KafkaError._TRANSPORT, SSL_AT_PLAINTEXT))
    with pytest.raises(ProtocolMismatchError, match=r"kafka\.security_protocol is 'SASL_SSL'"):
        sink.service(0)
    with pytest.raises(ProtocolMismatchError):  # and on every later check
        sink.service(0)
    with pytest.raises(ProtocolMismatchError):
        sink.reachable(0.5)


def test_the_sink_stops_on_the_log_lines_of_a_plaintext_client() -> None:
    sink = _sink(None)
    log = sink._client_log  # the logger librdkafka calls
    sink.service(0)
    with capture_logs() as events:
        for i in range(APIVERSION_CLOSES):
            log.log(logging.INFO, "%s", PLAINTEXT_AT_SSL.format(ms=i))
    assert events == []  # INFO lines are read, not logged
    with pytest.raises(ProtocolMismatchError, match="as a TLS listener does"):
        sink.service(0)


def test_lines_served_by_reachable_are_read_not_logged() -> None:
    sink = _sink(None)
    log = sink._client_log
    with capture_logs() as events:
        log.quiet = True
        log.log(logging.ERROR, "%s", refused(0))
        log.quiet = False
        log.log(logging.ERROR, "%s", refused(0).replace("127.0.0.1:9", "127.0.0.1:29"))
    assert [e["message"] for e in events if "127.0.0.1:1/" not in e["message"]] == [
        refused(0).replace("127.0.0.1:9", "127.0.0.1:29")
    ]


# -- the outage report: after error_after, then once a minute --------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_one_line_after_error_after_then_one_a_minute() -> None:
    clock = _Clock()
    sink = KafkaSink({"bootstrap.servers": "127.0.0.1:1"}, error_after=30, clock=clock)
    sink._client_error(KafkaError(KafkaError._TRANSPORT, refused(0)))
    sink._client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    reported = []
    with capture_logs() as events:
        for _ in range(200):  # 200 s of unanswered requests, one a second
            sink.note_unreachable("Failed to get metadata: Local: Broker transport failure")
            clock.now += 1
        reported = [e for e in events if e["event"] == "kafka_unreachable"]
    assert [e["seconds"] for e in reported] == [30, 90, 150]
    assert all(e["log_level"] == "error" for e in reported)
    # librdkafka's own words, not the metadata request's, nor "brokers are down"
    assert {e["last_error"] for e in reported} == {
        "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
    }
    assert "has not answered for 30 s" in reported[0]["detail"]
    assert "kafka.bootstrap_servers" in reported[0]["detail"]
    assert "still does not answer, for 90 s now" in reported[1]["detail"]
    with capture_logs() as events:
        sink.note_reachable()
        sink.note_reachable()
    assert [e["event"] for e in events if e["event"] != "kafka_client"] == ["kafka_reachable"]
    assert all(e["log_level"] == "debug" for e in events if e["event"] == "kafka_client")
    with capture_logs() as events:  # a new outage starts its own clock
        sink.note_unreachable("x")
        clock.now += 29
        sink.note_unreachable("x")
        clock.now += 1
        sink.note_unreachable("x")
    assert [(e["event"], e["seconds"]) for e in events if e["event"] != "kafka_client"] == [
        ("kafka_unreachable", 30)
    ]


def test_a_stale_outage_with_nothing_waiting_is_not_reported() -> None:
    """An error callback said the brokers were down, but nothing waits: the sink asks a
    broker before it reports, and a broker that answers ends the outage quietly."""
    clock = _Clock()
    sink = KafkaSink({"bootstrap.servers": "127.0.0.1:1"}, error_after=30, clock=clock)
    sink._client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    answers = [True]
    sink._answers = lambda: answers[0]  # type: ignore[method-assign]
    with capture_logs() as events:
        clock.now += 31
        sink.service(0)
    assert [e for e in events if e["event"] != "kafka_client"] == []
    assert sink.outage_seconds == 0
    answers[0] = False
    sink._client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    with capture_logs() as events:
        clock.now += 31
        sink.service(0)
    # (librdkafka's own lines, ``kafka_client``, come when its reconnects do: not counted)
    outage = [e["event"] for e in events if e["event"].startswith("kafka_")]
    assert [e for e in outage if e != "kafka_client"] == ["kafka_unreachable"]

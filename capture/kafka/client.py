"""librdkafka's side of walcast's Kafka clients: its log lines, its errors, its protocols.

Every Kafka client walcast makes (the sinks' producers, the readers of compacted topics,
the admin clients, ``walcast consume``, the Spark jobs' preflight) hands librdkafka a logger
from here, so that:

* librdkafka's own log lines never reach the terminal raw: they go through structlog as
  ``kafka_client`` events, each distinct line at most once per :data:`LOG_REPEAT_SECONDS`.
  Lines that differ only in their timings and counts (``(after 3ms in state CONNECT, 4
  identical error(s) suppressed)``) are the same line (:func:`repeat_key`); the first text
  is the one logged, with how many were left out;
* a line that only says a broker cannot be reached (``Connect to … failed: Connection
  refused``, ``1/1 brokers are down``, a timed-out request, a failed name lookup) or that
  librdkafka meets and retries on a healthy cluster (``Coordinator load in progress`` while
  a broker starts, ``not the leader`` …) is a debug event (:func:`routine`; seen with
  ``--log-level debug``): an outage is walcast's own ``kafka_unreachable`` line, which the
  sink writes once Kafka stayed away for ``kafka.connect_timeout`` seconds and once a
  minute after that, with librdkafka's words as its cause (issue 25.8). Every other line
  (TLS, SASL, configuration) stays a warning or an error;
* a ``security.protocol`` the listener does not speak (:class:`ProtocolWatch`): a TLS
  client at a plaintext listener, or a plaintext client at a TLS one, fails the same way on
  every attempt, and librdkafka reports it only as a transport failure that it retries for
  ever; the watch turns it into :class:`ProtocolMismatchError`, naming the setting.

The error families of the sinks (:class:`KafkaSinkError`, :class:`SourceChangedError`) and
the fatal-error helpers live here too, so that every client module can raise them without
importing the sink.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import structlog
from confluent_kafka import KafkaError, KafkaException

from capture.errors import KafkaSinkError, WalcastError
from capture.kafka.security import refusal

log = structlog.get_logger("walcast.kafka")

LOG_REPEAT_SECONDS: Final = 60.0
"""A librdkafka log line repeated within this time is counted, not logged again."""
OUTAGE_CODES: Final = frozenset(
    {
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001 - librdkafka's public error codes
        KafkaError._TRANSPORT,  # noqa: SLF001
        KafkaError._RESOLVE,  # noqa: SLF001
    }
)
FATAL_CODES: Final = frozenset(
    {
        KafkaError._AUTHENTICATION,  # noqa: SLF001
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


class SourceChangedError(WalcastError):
    """The server behind the DSN is another source than the one this daemon streamed."""

    exit_code = 2


_SUPPRESSED: Final = re.compile(r",?\s*\d+ identical error\(s\) suppressed")
_MILLISECONDS: Final = re.compile(r"\b\d+(?:\.\d+)?\s*ms\b")
_COUNTED: Final = re.compile(r"\b\d+ (\w+)\(s\)")
_AFTER_CLAUSE: Final = re.compile(r"\(after [^()]*\)")


def repeat_key(text: str) -> str:
    """``text`` without what changes between repeats of one librdkafka line.

    librdkafka appends timings and counts to a repeated failure: ``Connection refused
    (after 0ms in state CONNECT)``, then ``(after 1ms in state CONNECT, 3 identical error(s)
    suppressed)``; ``3 request(s) timed out: disconnect (average rtt 1.224ms)``. Those are
    one line to a reader: the suppressed count is dropped, every millisecond value and
    ``N thing(s)`` count becomes ``N``, and so does any number left in an ``(after …)``
    clause. Everything else (brokers, states, error text, ``1/2 brokers are down``) stays,
    so different failures remain different lines.
    """
    key = _SUPPRESSED.sub("", text)
    key = _MILLISECONDS.sub("Nms", key)
    key = _COUNTED.sub(r"N \1(s)", key)
    return _AFTER_CLAUSE.sub(lambda m: re.sub(r"\d+", "N", m.group(0)), key)


_UNREACHABLE: Final = re.compile(
    r"Connection refused|Connect to \S+ failed|Failed to resolve|brokers are down|"
    r"Broker transport failure|request\(s\) timed out|Connection timed out|timed out|"
    r"Connection reset|Broken pipe|No route to host|Network is unreachable|"
    r"Host is unreachable|Disconnected",
    re.IGNORECASE,
)
"""What librdkafka says when a broker cannot be reached (an outage, reported by walcast)."""
_RETRIED: Final = re.compile(
    r"coordinator load in progress|COORDINATOR_LOAD_IN_PROGRESS|not coordinator|"
    r"NOT_COORDINATOR|coordinator not available|COORDINATOR_NOT_AVAILABLE|"
    r"leader not available|LEADER_NOT_AVAILABLE|not leader|NOT_LEADER",
    re.IGNORECASE,
)
"""What librdkafka meets and retries on a healthy cluster (a broker starting, a leader
moving): nothing for a user to do."""
_NEEDS_A_HUMAN: Final = re.compile(r"SSL|SASL|authenticat|certificate|listener\?", re.IGNORECASE)
"""Words of a failure that retrying does not mend (a wrong protocol, credentials)."""
_ADDRESS: Final = re.compile(r"\b[a-z_]+://\S+")
"""A broker's address as librdkafka writes it (``sasl_ssl://127.0.0.1:9093/1``)."""


def routine(text: str) -> bool:
    """Whether librdkafka's line ``text`` is a debug event (see the module docstring)."""
    if _NEEDS_A_HUMAN.search(_ADDRESS.sub("", text)):  # not "sasl_ssl://host:port"
        return False
    return bool(_UNREACHABLE.search(text) or _RETRIED.search(text))


_LINE_PREFIX: Final = re.compile(r"^[A-Z]+ \[[^\]]*\] \[thrd:[^\]]*\]: ")
_TIMING: Final = re.compile(r"\s*\(after \d+ms in state [^()]*\)\s*$")


def cause(text: str) -> str:
    """The words of librdkafka for an outage, for walcast's own line.

    Without the facility and thread (``FAIL [rdkafka#producer-1] [thrd:…]:``), the timing
    suffix (``(after 0ms in state CONNECT)``) and confluent-kafka's wrapping
    (``KafkaError{…,str="…"}``).
    """
    found = re.search(r'str="([^"]*)"', text)
    if found:
        text = found.group(1)
    return _TIMING.sub("", _LINE_PREFIX.sub("", text.strip()))


class _KafkaLog(logging.Handler):
    """librdkafka's log lines as structlog events, each distinct one rate-limited.

    Lines are told apart by :func:`repeat_key`; a repeat within :data:`LOG_REPEAT_SECONDS`
    is only counted, and the next line logged after that time says how many were left out
    (``repeated``). The text logged is the line as librdkafka wrote it; a :func:`routine`
    line is a debug event.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(logging.WARNING)
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}
        """By :func:`repeat_key`: when the line was last logged, and repeats since."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        key = repeat_key(text)
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < LOG_REPEAT_SECONDS:
            self._seen[key] = (seen[0], seen[1] + 1)
            return
        suppressed = seen[1] if seen is not None else 0
        self._seen[key] = (now, 0)
        if routine(text):
            level = "debug"
        else:
            level = "error" if record.levelno >= logging.ERROR else "warning"
        getattr(log, level)("kafka_client", message=text, repeated=suppressed or None)


def client_logger() -> logging.Logger:
    """The stdlib logger handed to every librdkafka client (producer, admin)."""
    logger = logging.getLogger("walcast.kafka.client")
    if not logger.handlers:
        logger.addHandler(_KafkaLog())
        logger.propagate = False
    logger.setLevel(logging.WARNING)
    return logger


# -- security.protocol mismatches ------------------------------------------------------------

_TLS_AT_PLAINTEXT: Final = re.compile(
    r"connecting to a PLAINTEXT broker listener\?|wrong version number|packet length too long",
    re.IGNORECASE,
)
"""What librdkafka (and OpenSSL under it) say when a TLS client meets a plaintext listener."""
_PLAINTEXT_AT_TLS: Final = re.compile(
    r"connecting to a SSL listener\?|Invalid response size (?:3525|3692)\d{5}\b"
)
"""What older librdkafka versions say when a plaintext client meets a TLS listener (a TLS
alert or handshake record read as a Kafka response size: 0x1503…, 0x1603…)."""
_APIVERSION_CLOSED: Final = re.compile(r"Disconnected\b.*\bin state APIVERSION_QUERY")
_FAILURE_STATE: Final = re.compile(r"\(after \d+ms in state ")
_BROKER_PREFIX: Final = re.compile(r"(?:[a-z_]+://)?(\S+?:\d+)/(?:bootstrap|-?\d+): ")
_TIMING_SUFFIX: Final = re.compile(r"\s*\(after \d+ms in state ([^,()]*)[^()]*\)\s*$")
_TLS_PROTOCOLS: Final = frozenset({"SSL", "SASL_SSL"})
APIVERSION_CLOSES: Final = 5
"""Connections a broker closes in a row while asked for its API versions (and nothing else
failing between them) that make a plaintext client conclude the listener speaks TLS."""


class ProtocolMismatchError(KafkaSinkError):
    """``kafka.security_protocol`` is not what the broker's listener speaks.

    ``listener`` is what the listener seems to speak: ``"plaintext"`` or ``"TLS"``;
    ``broker`` its address, ``detail`` librdkafka's words (without timings).
    """

    def __init__(self, configured: str | None, broker: str, detail: str, listener: str) -> None:
        self.configured = configured
        self.broker = broker
        self.detail = detail
        self.listener = listener
        shown = f"is {configured!r}" if configured else "is not set (plaintext)"
        if listener == "plaintext":
            sasl = "SASL" in (configured or "").upper()
            keep_sasl = ' (or "SASL_PLAINTEXT" to keep SASL)' if sasl else ""
            message = (
                f"kafka.security_protocol {shown} but the broker at {broker} answers in "
                f"plaintext (librdkafka: {detail})"
            )
            hint = (
                f'set kafka.security_protocol = "PLAINTEXT"{keep_sasl}, or point '
                "kafka.bootstrap_servers at the broker's SSL listener"
            )
        else:
            message = (
                f"kafka.security_protocol {shown} but the broker at {broker} closes every "
                f"plaintext connection before answering, as a TLS listener does "
                f"(librdkafka: {detail})"
            )
            sasl = "SASL" in (configured or "").upper()
            hint = (
                'set kafka.security_protocol = "SASL_SSL" (with kafka.ssl_ca_location), or '
                "point kafka.bootstrap_servers at the broker's SASL_PLAINTEXT listener"
                if sasl
                else 'set kafka.security_protocol = "SSL" (or "SASL_SSL" with the kafka.sasl_* '
                "settings), or point kafka.bootstrap_servers at the broker's PLAINTEXT "
                "listener"
            )
        super().__init__(message, hint=hint)

    def plaintext_only(self, flag: str, command: str) -> KafkaSinkError:
        """The line for a command that has no ``security.protocol`` and speaks plaintext."""
        return KafkaSinkError(
            f"{flag}: the broker at {self.broker} closes every plaintext connection before "
            f"answering, as a TLS listener does (librdkafka: {self.detail}); walcast "
            f"{command} connects in plaintext only while WALCAST__KAFKA__SECURITY_PROTOCOL "
            "is unset",
            hint=f"point {flag} at the broker's PLAINTEXT listener, or export the "
            "WALCAST__KAFKA__* settings of walcast run (SECURITY_PROTOCOL, SSL_CA_LOCATION, "
            "...)",
        )


class ProtocolWatch:
    """Reads a client's error callbacks and log lines for a ``security.protocol`` mismatch.

    librdkafka retries a connection whose protocol the listener does not speak for ever, as
    it would a broker that is down, so walcast decides from what librdkafka says:

    * a TLS client (``SSL``, ``SASL_SSL``) at a plaintext listener: the handshake fails with
      ``connecting to a PLAINTEXT broker listener?`` (or OpenSSL's ``wrong version number``,
      ``packet length too long``). Certain on the first line.
    * a plaintext client (unset, ``PLAINTEXT``, ``SASL_PLAINTEXT``) at a TLS listener: the
      listener closes the connection at the client's first request (ApiVersion); librdkafka
      2.x says only ``Disconnected … (after 1ms in state APIVERSION_QUERY)``, at INFO level
      and never to the error callback. A broker going down can close one connection that
      way, so it takes :data:`APIVERSION_CLOSES` in a row, with no other failure between
      them and no answer since (:meth:`answered`). Older librdkafka versions said
      ``connecting to a SSL listener?``, which is certain at once.

    It also reads every line for a refusal of the client's security settings that
    retrying cannot mend (:func:`capture.kafka.security.refusal`: wrong SASL credentials, a
    mechanism the broker does not offer, a broker certificate not trusted or for another
    host, a client certificate the broker refuses): certain on the first line. ``settings``
    are the client's librdkafka settings, for the messages (never the password).

    ``found`` is the error to stop with (None: nothing seen): a
    :class:`ProtocolMismatchError` or a :class:`~capture.kafka.security.SecurityRefusedError`.
    """

    def __init__(self, configured: str | None, settings: Mapping[str, Any] | None = None) -> None:
        self.configured = configured or None
        self.tls = (configured or "").upper() in _TLS_PROTOCOLS
        self.settings: Mapping[str, Any] = settings or {}
        self.found: KafkaSinkError | None = None
        self._closes = 0

    def note(self, text: str) -> None:
        """Read one librdkafka line (an error callback's text or a log line)."""
        if self.found is not None:
            return
        refused = refusal(text, self.settings)
        if refused is not None:
            self.found = refused
            return
        if self.tls:
            if _TLS_AT_PLAINTEXT.search(text):
                self._found(text, "plaintext")
            return
        if _PLAINTEXT_AT_TLS.search(text):
            self._found(text, "TLS")
        elif _APIVERSION_CLOSED.search(text):
            self._closes += 1
            if self._closes >= APIVERSION_CLOSES:
                self._found(text, "TLS")
        elif _FAILURE_STATE.search(text):
            self._closes = 0  # another failure between them: not a listener's pattern

    def answered(self) -> None:
        """A broker answered (metadata, a delivery): earlier closes were not the listener's."""
        self._closes = 0

    def _found(self, text: str, listener: str) -> None:
        prefixes = list(_BROKER_PREFIX.finditer(text))
        broker, detail = "?", text
        if prefixes:
            broker, detail = prefixes[-1].group(1), text[prefixes[-1].end() :]
        detail = _TIMING_SUFFIX.sub(r", in state \1", detail)
        self.found = ProtocolMismatchError(self.configured, broker, detail.strip(), listener)


class ClientLog:
    """The ``logger`` of one librdkafka client: every line is read by a :class:`ProtocolWatch`.

    Then it goes on to :func:`client_logger` (and so to ``kafka_client`` events), unless
    ``quiet``: while :meth:`KafkaSink.reachable` serves the client's queue, whose outcome
    its caller reports itself. librdkafka calls ``log(level, format, *args)``.
    """

    def __init__(self, watch: ProtocolWatch) -> None:
        self.watch = watch
        self.quiet = False

    def log(self, level: int, msg: str, *args: object, **_kwargs: object) -> None:
        """Read the line, then hand it on (see the class docstring)."""
        self.watch.note(msg % args if args else msg)
        if not self.quiet:
            client_logger().log(level, msg, *args)


def fatal_error(exc: BaseException) -> KafkaError | None:
    """The fatal client error behind ``exc`` (raised by confluent-kafka), if it is one."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args:
            error = seen.args[0]
            if isinstance(error, KafkaError) and error.fatal():
                return error
        seen = seen.__cause__ or seen.__context__
    return None


def describe_brokers(settings: dict[str, Any]) -> str:
    """The bootstrap servers, for messages (never credentials)."""
    return str(settings.get("bootstrap.servers", "?"))

"""Daemon configuration: a TOML file, overridden by environment variables, then CLI flags.

One declarative table, :data:`SETTINGS` (plus :data:`OUTPUT_SETTINGS` for each
``[[outputs]]`` entry), names every setting: its section, key, type, default, one line of
help and whether it may hold a secret. Everything else comes from that table, so nothing
can drift from it:

* validation (:func:`load`): unknown sections and keys are errors, each value is checked
  against its type, and every error is one :class:`~capture.errors.ConfigError` naming the
  setting (``kafka.bootstrap_servers: required setting is missing``);
* environment overrides: ``WALCAST__<SECTION>__<KEY>`` for every scalar or list setting
  (e.g. ``WALCAST__KAFKA__BOOTSTRAP_SERVERS``, ``WALCAST__DAEMON__METRICS_PORT``); lists are
  comma-separated; tables (``kafka.producer``) and ``[[outputs]]`` come from the file or
  flags only;
* ``walcast.example.toml`` at the top of the repository: every key with its default and
  its help (:func:`example_toml`; regenerate with ``python -m capture.daemon.config``; a
  test compares the file with it);
* ``walcast run --print-config`` (:func:`render_toml`): the effective settings as TOML,
  secrets redacted (a password in ``source.dsn`` shows as ``********``; password sources
  show the file or variable name, never its content).

Precedence: the file, then the environment, then flags (later wins). The sections:

``[source]``
    the PostgreSQL side: ``dsn``, ``slot`` and ``publications`` are required; also
    ``password_file``/``password_env``, ``create_slot`` with ``failover_slot``,
    ``create_publication`` with ``publish_tables`` (the ``schema.table`` list a created
    publication gets; empty: FOR ALL TABLES), ``proto_version``, ``binary``, ``streaming``,
    ``two_phase``, ``spill_dir`` (where held transactions spill when they outgrow memory;
    unset: the system's temporary directory), ``receive_timeout``, and the initial load:
    ``snapshot``, ``snapshot_workers``, ``snapshot_chunk_rows``.
``[kafka]``
    ``bootstrap_servers`` (required), SASL/TLS settings, ``exactly_once`` with its
    ``offsets_topic``, and ``[kafka.producer]``: any librdkafka producer setting, applied
    over walcast's durable defaults (idempotence and ``acks=all`` cannot be turned off).
``[[outputs]]``
    at least one: ``format``, ``topic`` and ``transaction_topic`` templates (placeholders
    ``{format}``, ``{database}``, ``{schema}``, ``{table}``) and ``[outputs.settings]``,
    the format's settings with fully prefixed keys (``"ibm.column_delimiter" = ";"``),
    checked by :func:`capture.formats.parse_settings` at load time, before any connection.
``[daemon]``
    heartbeats, metrics (``metrics_port``, ``metrics_host``), the schema and snapshot
    progress topics, status and reconnect intervals, and the health thresholds
    ``unhealthy_after`` and ``kafka_error_after``.

Renamed settings (:data:`DEPRECATED`): the old name is still read, from the file and the
environment, when the new one is not given (given both, the new one wins), and each use is
one ``setting_deprecated`` warning event naming both (``walcast run`` has set up logging
before it loads the settings, so the warning is an event like every other of the daemon).
The old name is not in ``walcast.example.toml`` nor in ``--print-config``, which show the
new one. ``daemon.degraded_after`` is ``daemon.unhealthy_after`` now: the threshold holds in
every mode and for anything that stopped moving, not only Kafka deliveries.

Passwords (issue 22.5): a password in ``source.dsn`` *in the file* is refused when the file
is read (a file is copied, committed and shared; the password belongs in
``source.password_env``/``_file``, ``$PGPASSWORD`` or ``~/.pgpass``). From the environment
(``WALCAST__SOURCE__DSN``, ``$WALCAST_DSN``) it is accepted, as containers pass it; from
the ``--dsn`` flag it is accepted with one warning (``capture.cli``), as the command line
is visible to every user of the machine.

``source.snapshot`` is ``auto`` by default: the runner resolves it to ``initial`` when the
run creates the slot, else ``never``. :class:`DaemonConfig` keeps the string ``"auto"``.

Secrets (the PostgreSQL password, the SASL password) come from an environment variable or
a file and are held in :class:`Secret`, whose ``repr``/``str`` never show the value.
"""

from __future__ import annotations

import enum
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
import structlog

from capture import dsn as dsn_util
from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES, FormatSettings
from capture.formats.settings import settings_text
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, MODES, SnapshotMode
from capture.sinks.topics import LEGAL_TOPIC, validate_template

log = structlog.get_logger("walcast.config")

ENV_PREFIX: Final = "WALCAST__"
DEFAULT_TOPIC: Final = "walcast.{format}.{schema}.{table}"
DEFAULT_TRANSACTION_TOPIC: Final = "walcast.{format}"
REDACTED: Final = "********"
_SECRET_PRODUCER_KEY: Final = re.compile(
    r"password|secret|token|ssl\.key\.pem|keystore", re.IGNORECASE
)


class Kind(enum.Enum):
    """The type of a setting: how a raw value (TOML, environment text, flag) is checked."""

    TEXT = "text"
    """Any string."""
    BOOL = "bool"
    """``true``/``false`` (from text also ``1``/``0``, ``yes``/``no``, ``on``/``off``)."""
    INT = "int"
    """An integer within ``minimum``/``maximum``."""
    NUMBER = "number"
    """A float within ``minimum``/``maximum``."""
    LIST = "list"
    """A list of names (comma-separated text from the environment or a flag)."""
    CHOICE = "choice"
    """One of ``choices``."""
    TOPIC = "topic"
    """A legal Kafka topic name (``""`` too when ``empty_disables``)."""
    TEMPLATE = "template"
    """A topic template with the placeholders of :data:`TOPIC_FIELDS`."""
    TABLE = "table"
    """A table of string keys and values (file or flags only, not the environment)."""
    DSN = "dsn"
    """A libpq connection string or URI."""
    AUTO_BOOL = "auto_bool"
    """``true``/``false``, or ``auto`` (from text; in the file: the key left out): None."""


class _Required:
    """Marker default of a required setting."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration key: where it lives, its type, default and help.

    The key is also the name of the :class:`DaemonConfig` (or :class:`OutputConfig`) field
    that holds the validated value; ``default`` is that field's default (or
    :data:`REQUIRED`). ``example`` is what ``walcast.example.toml`` shows for a setting
    without a default.
    """

    section: str
    key: str
    kind: Kind
    default: Any
    help: str
    secret: bool = False
    """The value may hold a secret: ``--print-config`` redacts it."""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    empty_disables: bool = False
    """For topics: ``""`` is allowed and turns the feature off."""
    example: Any = None

    @property
    def name(self) -> str:
        """``section.key``, as error messages name the setting."""
        return f"{self.section}.{self.key}"

    @property
    def env_name(self) -> str | None:
        """``WALCAST__SECTION__KEY``, or None for settings the environment cannot set."""
        if self.kind is Kind.TABLE or self.section == "outputs":
            return None
        return f"{ENV_PREFIX}{self.section.upper()}__{self.key.upper()}"

    @property
    def required(self) -> bool:
        """Whether the setting has no default."""
        return self.default is REQUIRED


def _s(section: str, key: str, kind: Kind, default: Any, help_text: str, **extra: Any) -> Setting:
    return Setting(section, key, kind, default, help_text, **extra)


def _flag(section: str, key: str, help_text: str) -> Setting:
    """A boolean setting; every walcast flag is off by default."""
    return Setting(section, key, Kind.BOOL, default=False, help=help_text)


SETTINGS: Final[tuple[Setting, ...]] = (
    # -- [source] ---------------------------------------------------------------------------
    _s("source", "dsn", Kind.DSN, REQUIRED,
       "libpq connection string or URI (or $WALCAST_DSN); a password in it is refused "
       "here (use password_env or password_file)",
       secret=True, example="host=localhost dbname=app user=cdc"),
    _s("source", "password_file", Kind.TEXT, None,
       "file holding the PostgreSQL password (e.g. a container secret)",
       example="/run/secrets/pg_password"),
    _s("source", "password_env", Kind.TEXT, None,
       "environment variable holding the PostgreSQL password", example="PGPASSWORD"),
    _s("source", "slot", Kind.TEXT, REQUIRED, "logical replication slot (pgoutput) to stream",
       example="walcast"),
    _s("source", "publications", Kind.LIST, REQUIRED,
       "publications to stream (comma-separated in the environment)", example=["walcast"]),
    _flag("source", "create_slot", "create the slot if it does not exist"),
    _s("source", "failover_slot", Kind.AUTO_BOOL, None,
       "whether create_slot makes a failover slot (unset or auto: yes where the server "
       "supports it, PostgreSQL 17+ on a primary)", example=True),
    _flag("source", "create_publication",
       "create missing publications (FOR ALL TABLES unless publish_tables is set)"),
    _s("source", "publish_tables", Kind.LIST, [],
       "schema.table list a created publication gets (empty: FOR ALL TABLES)"),
    _s("source", "proto_version", Kind.INT, None,
       "pgoutput protocol version 1-4 (unset: the highest the server supports)",
       minimum=1, maximum=4, example=4),
    _flag("source", "binary",
       "ask for binary column values (decoded client-side to the same text)"),
    _s("source", "streaming", Kind.CHOICE, None,
       "stream in-progress transactions: on, off, parallel (unset: on where supported)",
       choices=("on", "off", "parallel"), example="on"),
    _flag("source", "two_phase",
       "decode prepared transactions at PREPARE (v3+; the slot must be created with it)"),
    _s("source", "spill_dir", Kind.TEXT, None,
       "directory where held transactions spill to disk (unset: the system temp directory)",
       example="/var/lib/walcast/spill"),
    _s("source", "receive_timeout", Kind.NUMBER, None,
       "seconds without any message from the server (not even a keepalive) before the "
       "connection counts as lost and is retried (unset: a little above the server's "
       "wal_sender_timeout)", minimum=1, example=90.0),
    _s("source", "snapshot", Kind.CHOICE, SnapshotMode.AUTO.value,
       "load existing rows first: auto, initial, never, initial-only (auto: initial "
       "when this run creates the slot, else never)",
       choices=MODES),
    _s("source", "snapshot_workers", Kind.INT, DEFAULT_WORKERS,
       "connections that read tables for the initial load", minimum=1),
    _s("source", "snapshot_chunk_rows", Kind.INT, DEFAULT_CHUNK_ROWS,
       "rows per key-range chunk of the initial load", minimum=1),
    # -- [kafka] ----------------------------------------------------------------------------
    _s("kafka", "bootstrap_servers", Kind.TEXT, REQUIRED, "Kafka bootstrap servers",
       example="localhost:9092"),
    _s("kafka", "security_protocol", Kind.TEXT, None,
       "librdkafka security.protocol (unset: plaintext)", example="SASL_SSL"),
    _s("kafka", "sasl_mechanism", Kind.TEXT, None,
       "SASL mechanism; needs sasl_username and a sasl_password source",
       example="SCRAM-SHA-512"),
    _s("kafka", "sasl_username", Kind.TEXT, None, "SASL user name", example="walcast"),
    _s("kafka", "sasl_password_env", Kind.TEXT, None,
       "environment variable holding the SASL password", example="KAFKA_PASSWORD"),
    _s("kafka", "sasl_password_file", Kind.TEXT, None, "file holding the SASL password",
       example="/run/secrets/kafka_password"),
    _flag("kafka", "exactly_once",
       "write in Kafka transactions (read_committed readers see each change once)"),
    _s("kafka", "offsets_topic", Kind.TOPIC, "walcast.offsets",
       "compacted topic of exactly-once positions (with exactly_once)"),
    _s("kafka", "producer", Kind.TABLE, {},
       "librdkafka producer settings over walcast's durable defaults",
       example={"compression.type": "zstd"}),
    # -- [daemon] ---------------------------------------------------------------------------
    _s("daemon", "heartbeat_interval", Kind.NUMBER, 10.0,
       "seconds between heartbeat messages (0 disables)", minimum=0),
    _s("daemon", "metrics_port", Kind.INT, 9187,
       "TCP port of /metrics and /healthz (0 disables)", minimum=0, maximum=65535),
    _s("daemon", "metrics_host", Kind.TEXT, "127.0.0.1",
       "address /metrics and /healthz listen on (0.0.0.0 in a container)"),
    _flag("daemon", "split_key_updates",
       "send an UPDATE that changes the key as DELETE + INSERT"),
    _s("daemon", "schema_topic", Kind.TOPIC, "walcast.schemas",
       'compacted topic of table layouts for consumers ("" disables)', empty_disables=True),
    _s("daemon", "snapshot_topic", Kind.TOPIC, "walcast.snapshots",
       "compacted topic of initial-load progress"),
    _s("daemon", "status_interval", Kind.NUMBER, 10.0,
       "seconds between status updates to the server", minimum=0.1),
    _s("daemon", "reconnect_max_backoff", Kind.NUMBER, 30.0,
       "longest wait in seconds between reconnection attempts", minimum=0.1),
    _s("daemon", "unhealthy_after", Kind.NUMBER, 60.0,
       "seconds that nothing moved (no Kafka delivery or commit) while work waits, before "
       "/healthz answers 503 (every mode)", minimum=0.1),
    _s("daemon", "kafka_error_after", Kind.NUMBER, 30.0,
       "seconds of unreachable brokers before one error line names them", minimum=0.1),
)  # fmt: skip
"""Every setting of the ``[source]``, ``[kafka]`` and ``[daemon]`` sections, in file order."""

OUTPUT_SETTINGS: Final[tuple[Setting, ...]] = (
    _s("outputs", "format", Kind.CHOICE, REQUIRED, "output format: " + ", ".join(FORMAT_NAMES),
       choices=FORMAT_NAMES, example="canal"),
    _s("outputs", "topic", Kind.TEMPLATE, DEFAULT_TOPIC,
       "topic template of row changes ({format}, {database}, {schema}, {table})"),
    _s("outputs", "transaction_topic", Kind.TEMPLATE, DEFAULT_TRANSACTION_TOPIC,
       "topic template of messages of no single table (transaction markers)"),
    _s("outputs", "settings", Kind.TABLE, {},
       "format settings, keys prefixed by the format (see the README's Formats section)",
       example={"canal.database_name": "schema"}),
)  # fmt: skip
"""The keys of one ``[[outputs]]`` entry."""

SECTIONS: Final = ("source", "kafka", "daemon")
_BY_SECTION: Final = {s: {x.key: x for x in SETTINGS if x.section == s} for s in SECTIONS}
_BY_ENV: Final = {x.env_name: x for x in SETTINGS if x.env_name}

DEPRECATED: Final[dict[str, str]] = {"daemon.degraded_after": "daemon.unhealthy_after"}
"""Old setting names still read (``section.key`` → the setting that replaced it)."""
_DEPRECATED_BY_ENV: Final = {
    f"{ENV_PREFIX}{old.replace('.', '__').upper()}": old for old in DEPRECATED
}
_OUTPUT_BY_KEY: Final = {x.key: x for x in OUTPUT_SETTINGS}


class Secret:
    """A secret value that never shows itself in logs, reprs or error messages."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The value, for handing to a client library only."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


@dataclass(slots=True)
class OutputConfig:
    """One output format and where its messages go (see :data:`OUTPUT_SETTINGS`)."""

    format: str
    topic: str = DEFAULT_TOPIC
    transaction_topic: str = DEFAULT_TRANSACTION_TOPIC
    settings: FormatSettings | None = None
    """The format's settings, parsed once at load (None: the format's defaults)."""


@dataclass(slots=True)
class DaemonConfig:
    """Everything ``walcast run`` needs, validated.

    Each field named like a key of :data:`SETTINGS` holds that setting, with the same
    default; ``password`` and ``sasl_password`` hold the secrets read from their sources.
    """

    dsn: str
    slot: str
    publications: list[str]
    bootstrap_servers: str
    outputs: list[OutputConfig]
    password: Secret | None = None
    password_file: str | None = None
    password_env: str | None = None
    create_slot: bool = False
    create_publication: bool = False
    publish_tables: list[str] = field(default_factory=list)
    proto_version: int | None = None
    binary: bool = False
    streaming: str | None = None
    two_phase: bool = False
    spill_dir: str | None = None
    failover_slot: bool | None = None
    """Create the slot as a failover slot: None is auto (where the server supports it)."""
    receive_timeout: float | None = None
    """Seconds of silence from the server before the connection counts as lost (None: the
    runner's default, a little above the server's ``wal_sender_timeout``)."""
    snapshot: SnapshotMode = SnapshotMode.AUTO
    """``auto`` (initial when the run creates the slot, else never), ``initial``,
    ``never`` or ``initial-only``."""
    snapshot_workers: int = DEFAULT_WORKERS
    snapshot_chunk_rows: int = DEFAULT_CHUNK_ROWS
    producer: dict[str, str] = field(default_factory=dict)
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    sasl_password_env: str | None = None
    sasl_password_file: str | None = None
    exactly_once: bool = False
    offsets_topic: str = "walcast.offsets"
    heartbeat_interval: float = 10.0
    metrics_port: int = 9187
    metrics_host: str = "127.0.0.1"
    split_key_updates: bool = False
    schema_topic: str = "walcast.schemas"
    snapshot_topic: str = "walcast.snapshots"
    status_interval: float = 10.0
    reconnect_max_backoff: float = 30.0
    unhealthy_after: float = 60.0
    kafka_error_after: float = 30.0

    def full_dsn(self) -> str:
        """The DSN with the password from its secret source (never log this)."""
        if self.password is None:
            return self.dsn
        from psycopg.conninfo import make_conninfo  # noqa: PLC0415

        return make_conninfo(self.dsn, password=self.password.reveal())

    def producer_settings(self) -> dict[str, Any]:
        """Librdkafka settings: walcast's durable defaults, then the user's."""
        settings: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "compression.type": "lz4",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": 0,  # never give up on a message: outages stall, not drop
            "client.id": f"walcast-{self.slot}",
        }
        if self.security_protocol:
            settings["security.protocol"] = self.security_protocol
        if self.sasl_mechanism:
            settings["sasl.mechanism"] = self.sasl_mechanism
            settings["sasl.username"] = self.sasl_username or ""
            if self.sasl_password is not None:
                settings["sasl.password"] = self.sasl_password.reveal()
        settings.update(self.producer)
        for forced in ("enable.idempotence", "acks"):
            if str(settings[forced]).lower() not in ("true", "all", "-1"):
                raise ConfigError(
                    f"kafka.producer.{forced}: walcast requires enable.idempotence=true and "
                    "acks=all (no data loss)"
                )
        return settings


# -- loading -------------------------------------------------------------------------------


def load(
    path: str | None, cli: Mapping[str, Mapping[str, Any]], environ: Mapping[str, str]
) -> DaemonConfig:
    """Merge file, environment and CLI values (later wins) and validate them.

    ``cli`` maps sections to ``{key: value}`` (None values are ignored); its
    ``{"outputs": {"list": [...]}}`` replaces the file's ``[[outputs]]``.
    """
    raw: dict[str, Any] = {"source": {}, "kafka": {}, "daemon": {}, "outputs": []}
    if path:
        from_file = _read_toml(path)
        _refuse_password_in_file(from_file, path)
        raw = _merge(raw, from_file)
    raw = _merge(raw, _from_environ(environ))
    cli_outputs = cli.get("outputs", {}).get("list")
    raw = _merge(raw, {k: dict(v) for k, v in cli.items() if k != "outputs"})
    if cli_outputs:
        raw["outputs"] = cli_outputs
    return _validate(raw, environ)


def _refuse_password_in_file(values: Mapping[str, Any], path: str) -> None:
    """Refuse a password in the file's ``source.dsn`` (a flag or variable may replace it).

    A configuration file is copied, committed and shared, and its passwords end up where
    nobody meant them to, so none is read from it (see the module docstring), even one the
    environment or a flag overrides: the file itself must not hold it.
    """
    source = values.get("source")
    dsn = source.get("dsn") if isinstance(source, Mapping) else None
    if isinstance(dsn, str) and dsn_util.has_password(dsn):
        raise ConfigError(
            f"source.dsn: the DSN in {path!r} holds a password, and walcast takes no password "
            "from the file",
            hint="remove it from the file and give it in $PGPASSWORD, ~/.pgpass, "
            "source.password_env or source.password_file",
        )


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"--config: file {path!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"--config: {path!r} is a directory, not a TOML file") from None
    except PermissionError:
        raise ConfigError(f"--config: cannot read {path!r} (permission denied)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {path!r} is not valid TOML: {exc}") from None


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        setting = _BY_ENV.get(name.upper())
        old = _DEPRECATED_BY_ENV.get(name.upper())
        if old is not None:
            section, _, key = old.partition(".")
            out.setdefault(section, {})[key] = value
            continue
        if setting is None:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
            if _BY_SECTION.get(section, {}).get(key) is not None:
                raise ConfigError(
                    f"{name}: {section}.{key} is a table; set it in the file or with flags"
                )
            raise ConfigError(f"{name}: unknown setting (expected WALCAST__<SECTION>__<KEY>)")
        out.setdefault(setting.section, {})[setting.key] = value
    return out


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **{k: v for k, v in value.items() if v is not None}}
        elif value is not None:
            merged[key] = value
    return merged


# -- validation ----------------------------------------------------------------------------


def _bool(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{setting}: {value!r} is not a boolean (true/false)")


def _number(
    value: Any,
    setting: str,
    *,
    minimum: float | None = 0.0,
    maximum: float | None = None,
    integer: bool = False,
) -> Any:
    if isinstance(value, bool):
        value = str(value).lower()  # true is not 1 here
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError, OverflowError):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{setting}: {value!r} is not {kind}") from None
    if number != number:  # noqa: PLR0124 - NaN
        raise ConfigError(f"{setting}: {value!r} is not a number")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{setting}: {value!r} must be at least {minimum:g}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{setting}: {value!r} must be at most {maximum:g}")
    return number


def _list(value: Any, setting: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{setting}: expected a list of names, got {value!r}")
    return [i for i in items if i]


def _table(value: Any, setting: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{setting}: must be a table of settings")
    for key, item in value.items():
        if isinstance(item, Mapping | list):
            raise ConfigError(f"{setting}.{key}: must be a single value, not {item!r}")
    return {str(k): _scalar_text(v) for k, v in value.items()}


def _scalar_text(value: Any) -> str:
    """A TOML scalar as the text librdkafka and format settings take (``true``, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _topic(value: Any, setting: Setting) -> str:
    text = str(value)
    if text == "" and setting.empty_disables:
        return text
    if not LEGAL_TOPIC.match(text) or not text.strip("."):
        raise ConfigError(
            f"{setting.name}: {text!r} is not a legal Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)"
        )
    return text


def _convert(setting: Setting, value: Any, name: str) -> Any:
    """``value`` checked and converted as ``setting`` says (``name``: for messages)."""
    kind = setting.kind
    if kind is Kind.BOOL:
        return _bool(value, name)
    if kind in (Kind.INT, Kind.NUMBER):
        return _number(
            value,
            name,
            minimum=setting.minimum,
            maximum=setting.maximum,
            integer=kind is Kind.INT,
        )
    if kind is Kind.LIST:
        return _list(value, name)
    if kind is Kind.CHOICE:
        if str(value) not in setting.choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(setting.choices)}")
        return str(value)
    if kind is Kind.TOPIC:
        return _topic(value, setting)
    if kind is Kind.TEMPLATE:
        return validate_template(str(value), name)
    if kind is Kind.TABLE:
        return _table(value, name)
    if kind is Kind.AUTO_BOOL:
        if not isinstance(value, bool) and str(value).strip().lower() in ("auto", ""):
            return None
        try:
            return _bool(value, name)
        except ConfigError:
            raise ConfigError(f"{name}: {value!r} is not true, false or auto") from None
    if kind is Kind.DSN:
        text = str(value)
        dsn_util.parse(text, setting=name)
        return text
    if isinstance(value, Mapping | list):
        raise ConfigError(f"{name}: expected a single value, got {type(value).__name__}")
    return str(value)


def _value(setting: Setting, values: Mapping[str, Any], name: str) -> Any:
    """The validated value of ``setting`` from ``values`` (its default when absent)."""
    value = values.get(setting.key)
    if setting.required:
        if value is None or value in ("", []):
            raise ConfigError(f"{name}: required setting is missing")
    elif value is None:
        default = setting.default
        return dict(default) if isinstance(default, dict) else default
    converted = _convert(setting, value, name)
    if setting.required and converted in ("", []):
        raise ConfigError(f"{name}: required setting is missing")
    return converted


def _secret(values: Mapping[str, Any], environ: Mapping[str, str], setting: str) -> Secret | None:
    """The secret of ``<setting>_env`` / ``<setting>_file`` (validated text values)."""
    key = setting.partition(".")[2]
    env_name, file_name = values[f"{key}_env"], values[f"{key}_file"]
    if env_name and file_name:
        raise ConfigError(f"{setting}_env / {setting}_file: give one source for the secret")
    if env_name:
        if env_name not in environ:
            raise ConfigError(f"{setting}_env: environment variable {env_name!r} is not set")
        return Secret(environ[env_name])
    if file_name:
        try:
            return Secret(Path(file_name).read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise ConfigError(
                f"{setting}_file: cannot read {file_name!r}: {exc.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(f"{setting}_file: {file_name!r} is not UTF-8 text") from None
    return None


def _outputs(raw: Any) -> list[OutputConfig]:
    """The ``[[outputs]]`` entries, each checked against :data:`OUTPUT_SETTINGS`."""
    from capture.formats import parse_settings  # noqa: PLC0415

    if not isinstance(raw, list) or not raw:
        raise ConfigError("outputs: at least one [[outputs]] entry with a format is required")
    outputs = []
    for i, entry in enumerate(raw):
        where = f"outputs[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: must be a table")
        for key in entry:
            if key not in _OUTPUT_BY_KEY:
                raise ConfigError(f"{where}.{key}: unknown setting")
        fmt = entry.get("format")
        if fmt is not None and str(fmt) not in FORMAT_NAMES:
            raise ConfigError(
                f"{where}.format: unknown format {fmt!r}; valid formats: {', '.join(FORMAT_NAMES)}"
            )
        values = {s.key: _value(s, entry, f"{where}.{s.key}") for s in OUTPUT_SETTINGS}
        try:
            values["settings"] = parse_settings(values["format"], values["settings"])
        except ConfigError as exc:
            raise ConfigError(f"{where}.settings: {exc.message}", hint=exc.hint) from None
        outputs.append(OutputConfig(**values))
    return outputs


def _renamed(section: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with each :data:`DEPRECATED` key of ``section`` moved to its new name.

    The old value is checked under its own name (an error names the setting the user
    wrote), used when the new setting is not given, and ignored when it is; either way one
    ``setting_deprecated`` warning event names both.
    """
    out = dict(given)
    for old, new in DEPRECATED.items():
        old_section, _, old_key = old.partition(".")
        if old_section != section or old_key not in out:
            continue
        new_key = new.partition(".")[2]
        value = _convert(_BY_SECTION[section][new_key], out.pop(old_key), old)
        if out.get(new_key) is None:
            out[new_key] = value
            detail = f"{old} is deprecated; it is used as {new}, which replaces it: rename it"
            log.warning("setting_deprecated", setting=old, replaced_by=new, detail=detail)
        else:
            detail = f"{old} is deprecated and ignored, as {new} is set too: remove it"
            log.warning(
                "setting_deprecated", setting=old, replaced_by=new, ignored=True, detail=detail
            )
    return out


def _validate(raw: Mapping[str, Any], environ: Mapping[str, str]) -> DaemonConfig:
    extra = set(raw) - {*SECTIONS, "outputs"}
    if extra:
        raise ConfigError(
            f"{min(extra)}: unknown section (sections: source, kafka, daemon, outputs)"
        )
    values: dict[str, Any] = {}
    for section in SECTIONS:
        given = raw.get(section, {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"{section}: must be a table of settings")
        given = _renamed(section, given)
        for key in given:
            if key not in _BY_SECTION[section]:
                raise ConfigError(f"{section}.{key}: unknown setting")
        for setting in _BY_SECTION[section].values():
            values[setting.key] = _value(setting, given, setting.name)
    outputs = _outputs(raw.get("outputs") or [])
    values["snapshot"] = SnapshotMode(values["snapshot"])
    for key in values["producer"]:
        if "password" in key.lower() or "secret" in key.lower():
            raise ConfigError(
                f"kafka.producer.{key}: put secrets in kafka.sasl_password_env or "
                "kafka.sasl_password_file, not in the file"
            )
    config = DaemonConfig(
        outputs=outputs,
        password=_secret(values, environ, "source.password"),
        sasl_password=_secret(values, environ, "kafka.sasl_password"),
        **values,
    )
    if (
        "password" in dsn_util.parse(config.dsn, setting="source.dsn")
        and config.password is not None
    ):
        raise ConfigError("source.password_file/_env: the DSN already holds a password")
    if config.sasl_mechanism and config.sasl_password is None:
        raise ConfigError("kafka.sasl_password_env: SASL needs a password (env var or file)")
    config.producer_settings()  # validates the forced durability settings
    return config


# -- rendering: --print-config and walcast.example.toml -----------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return orjson.dumps(str(value)).decode()  # a JSON string is a TOML basic string


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def _comment(text: str) -> str:
    return f"# {text}"


def _setting_lines(setting: Setting, value: Any, *, example: bool) -> list[str]:
    """The help comment and ``key = value`` line(s) of one scalar/list setting."""
    help_text = setting.help + (" (required)" if setting.required else "")
    lines = [_comment(help_text)]
    if value is None:
        shown = setting.example if example else None
        if shown is None:
            lines.append(f"# {setting.key} =   (not set)")
        else:
            lines.append(f"# {setting.key} = {_toml_value(shown)}")
    else:
        lines.append(f"{setting.key} = {_toml_value(value)}")
    return lines


def _table_lines(
    header: str, setting: Setting, table: Mapping[str, str], example: bool
) -> list[str]:
    lines = [_comment(setting.help), header]
    if table:
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    elif example and setting.example:
        lines += [f"# {_toml_key(k)} = {_toml_value(v)}" for k, v in setting.example.items()]
    return lines


def _document(
    values: Mapping[str, Any], outputs: Sequence[Mapping[str, Any]], head: list[str], example: bool
) -> str:
    lines = list(head)
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        tables = []
        for setting in _BY_SECTION[section].values():
            if setting.kind is Kind.TABLE:
                tables.append(setting)
                continue
            lines += _setting_lines(setting, values.get(setting.key), example=example)
        for setting in tables:
            lines.append("")
            lines += _table_lines(
                f"[{section}.{setting.key}]", setting, values.get(setting.key) or {}, example
            )
    for output in outputs:
        lines += ["", "[[outputs]]"]
        for setting in OUTPUT_SETTINGS:
            if setting.kind is not Kind.TABLE:
                lines += _setting_lines(setting, output.get(setting.key), example=example)
        settings = OUTPUT_SETTINGS[-1]
        lines += _table_lines("[outputs.settings]", settings, output.get("settings") or {}, example)
    return "\n".join(lines) + "\n"


def example_toml() -> str:
    """The text of ``walcast.example.toml``: every setting with its default and help."""
    values = {s.key: s.example if s.required else s.default for s in SETTINGS}
    output = {s.key: s.example if s.required else s.default for s in OUTPUT_SETTINGS}
    head = [
        "# walcast.example.toml: every setting of `walcast run`, with its default.",
        "# Generated from capture/daemon/config.py (SETTINGS): python -m capture.daemon.config",
        "# Values marked (required) are examples. Each scalar setting can also be set with",
        "# WALCAST__<SECTION>__<KEY> (lists comma-separated); flags of `walcast run` win over",
        "# both. `walcast run --print-config` shows the effective settings.",
    ]
    return _document(values, [output], head, example=True)


def render_toml(config: DaemonConfig) -> str:
    """``config`` as TOML (``--print-config``): the effective settings, secrets redacted.

    The result loads back into the same configuration (given the same password sources),
    except that a password in ``source.dsn`` (from ``--dsn`` or the environment) shows as
    ``********``, and such a file is refused: passwords never come from the file.
    """
    values = {s.key: getattr(config, s.key) for s in SETTINGS}
    for setting in SETTINGS:
        if setting.secret and values[setting.key] is not None:
            values[setting.key] = redact_dsn(values[setting.key])
    values["producer"] = {
        k: REDACTED if _SECRET_PRODUCER_KEY.search(k) else v for k, v in config.producer.items()
    }
    outputs = [{s.key: getattr(o, s.key) for s in OUTPUT_SETTINGS} for o in config.outputs]
    for output in outputs:
        given = output["settings"]
        output["settings"] = settings_text(given) if given is not None else {}
    head = [
        "# Effective settings of `walcast run` (file, then environment, then flags); secrets",
        "# redacted. Producer settings apply over walcast's durable defaults.",
    ]
    return _document(values, outputs, head, example=False)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password (and ssl password) replaced by ``********``."""
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415

    params = dsn_util.parse(dsn, setting="source.dsn")
    if not {"password", "sslpassword"} & set(params):
        return dsn
    for key in ("password", "sslpassword"):
        if key in params:
            params[key] = REDACTED
    return make_conninfo("", **params)


if __name__ == "__main__":
    sys.stdout.write(example_toml())

"""Daemon configuration: a TOML file, overridden by environment variables, then CLI flags.

Layout of the file (every key optional unless marked)::

    [source]
    dsn = "host=db dbname=app user=cdc"       # required (or $WALCAST_DSN)
    password_file = "/run/secrets/pg"         # or password_env = "PGPASSWORD"
    slot = "walcast"                          # required
    publications = ["walcast"]                # required
    create_slot = false
    create_publication = false
    proto_version = 4                         # default: the highest the server supports
    binary = false
    streaming = "on"                          # on | off | parallel
    two_phase = false

    [kafka]
    bootstrap_servers = "broker:9092"         # required
    sasl_mechanism = "SCRAM-SHA-512"          # with sasl_username and sasl_password_env/file
    security_protocol = "SASL_SSL"
    [kafka.producer]                          # any librdkafka producer setting
    "compression.type" = "zstd"

    [[outputs]]                               # at least one
    format = "canal"
    topic = "walcast.{format}.{schema}.{table}"
    transaction_topic = "walcast.{format}"    # messages of no single table
    [outputs.settings]
    "canal.database_name" = "schema"

    [daemon]
    heartbeat_interval = 10.0                 # seconds; 0 disables
    metrics_port = 9187                       # 0 disables /metrics and /healthz
    metrics_host = "127.0.0.1"
    split_key_updates = false
    schema_topic = "walcast.schemas"          # table layouts (compacted); "" disables
    status_interval = 10.0
    reconnect_max_backoff = 30.0

Topic templates take ``{format}``, ``{database}``, ``{schema}`` and ``{table}``; characters
of schema or table names that Kafka does not allow in topic names become ``_``.

Environment overrides: ``WALCAST__<SECTION>__<KEY>`` (e.g. ``WALCAST__KAFKA__BOOTSTRAP_SERVERS``,
``WALCAST__DAEMON__METRICS_PORT``); lists are comma-separated.

Secrets (the PostgreSQL password, the SASL password) come from an environment variable or
a file and are held in :class:`Secret`, whose ``repr``/``str`` never show the value.
Every validation error is a :class:`~capture.errors.ConfigError` naming the setting,
e.g. ``kafka.bootstrap_servers``.
"""

from __future__ import annotations

import re
import string
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from capture import dsn as dsn_util
from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES

ENV_PREFIX: Final = "WALCAST__"
DEFAULT_TOPIC: Final = "walcast.{format}.{schema}.{table}"
DEFAULT_TRANSACTION_TOPIC: Final = "walcast.{format}"
TOPIC_FIELDS: Final = frozenset({"format", "database", "schema", "table"})

_SECTIONS: Final = {
    "source": {
        "dsn", "password_file", "password_env", "slot", "publications", "create_slot",
        "create_publication", "publish_tables", "proto_version", "binary", "streaming",
        "two_phase", "spill_dir",
    },
    "kafka": {
        "bootstrap_servers", "producer", "security_protocol", "sasl_mechanism",
        "sasl_username", "sasl_password_env", "sasl_password_file",
    },
    "daemon": {
        "heartbeat_interval", "metrics_port", "metrics_host", "split_key_updates",
        "schema_topic", "status_interval", "reconnect_max_backoff",
    },
}  # fmt: skip
_OUTPUT_KEYS: Final = {"format", "topic", "transaction_topic", "settings"}


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
    """One output format and where its messages go."""

    format: str
    topic: str = DEFAULT_TOPIC
    transaction_topic: str = DEFAULT_TRANSACTION_TOPIC
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class DaemonConfig:
    """Everything ``walcast run`` needs, validated."""

    dsn: str
    slot: str
    publications: list[str]
    bootstrap_servers: str
    outputs: list[OutputConfig]
    password: Secret | None = None
    create_slot: bool = False
    create_publication: bool = False
    publish_tables: list[str] = field(default_factory=list)
    proto_version: int | None = None
    binary: bool = False
    streaming: str | None = None
    two_phase: bool = False
    spill_dir: str | None = None
    producer: dict[str, str] = field(default_factory=dict)
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    heartbeat_interval: float = 10.0
    metrics_port: int = 9187
    metrics_host: str = "127.0.0.1"
    split_key_updates: bool = False
    schema_topic: str = "walcast.schemas"
    status_interval: float = 10.0
    reconnect_max_backoff: float = 30.0

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
    """Merge file, environment and CLI values (later wins) and validate them."""
    raw: dict[str, Any] = {"source": {}, "kafka": {}, "daemon": {}, "outputs": []}
    if path:
        raw = _merge(raw, _read_toml(path))
    raw = _merge(raw, _from_environ(environ))
    cli_outputs = cli.get("outputs", {}).get("list")
    raw = _merge(raw, {k: dict(v) for k, v in cli.items() if k != "outputs"})
    if cli_outputs:
        raw["outputs"] = cli_outputs
    return _validate(raw, environ)


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"--config: file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {path!r} is not valid TOML: {exc}") from None


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        if section not in _SECTIONS or key not in _SECTIONS[section]:
            raise ConfigError(f"{name}: unknown setting (expected WALCAST__<SECTION>__<KEY>)")
        out.setdefault(section, {})[key] = value
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


def _number(value: Any, setting: str, *, minimum: float = 0.0, integer: bool = False) -> Any:
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{setting}: {value!r} is not {kind}") from None
    if number < minimum:
        raise ConfigError(f"{setting}: {value!r} must be at least {minimum:g}")
    return number


def _list(value: Any, setting: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{setting}: expected a list of names, got {value!r}")
    return [i for i in items if i]


def _required(section: Mapping[str, Any], key: str, setting: str) -> Any:
    value = section.get(key)
    if value is None or value in ("", []):
        raise ConfigError(f"{setting}: required setting is missing")
    return value


def _secret(
    section: Mapping[str, Any], prefix: str, environ: Mapping[str, str], setting: str
) -> Secret | None:
    env_name = section.get(f"{prefix}_env")
    file_name = section.get(f"{prefix}_file")
    if env_name and file_name:
        raise ConfigError(f"{setting}_env / {setting}_file: give one source for the secret")
    if env_name:
        if env_name not in environ:
            raise ConfigError(f"{setting}_env: environment variable {env_name!r} is not set")
        return Secret(environ[env_name])
    if file_name:
        try:
            return Secret(Path(file_name).read_text().strip())
        except OSError as exc:
            raise ConfigError(
                f"{setting}_file: cannot read {file_name!r}: {exc.strerror}"
            ) from None
    return None


TOPIC_NAME: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def topic_name(text: str) -> str:
    """``text`` as a legal Kafka topic name: other characters become ``_``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:249]
    return cleaned if cleaned.strip(".") else "_"


def _template(value: Any, setting: str) -> str:
    text = str(value)
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(text) if name}
    except ValueError as exc:
        raise ConfigError(f"{setting}: {text!r} is not a valid template: {exc}") from None
    unknown = names - TOPIC_FIELDS
    if unknown:
        raise ConfigError(
            f"{setting}: unknown placeholder(s) {sorted(unknown)}; use {sorted(TOPIC_FIELDS)}"
        )
    literal = re.sub(r"\{[a-z]+\}", "x", text)
    if not TOPIC_NAME.match(literal):
        raise ConfigError(
            f"{setting}: {text!r} does not make a legal Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)"
        )
    return text


def _schema_topic(value: Any) -> str:
    text = str(value)
    if text and not TOPIC_NAME.match(text):
        raise ConfigError(
            f"daemon.schema_topic: {text!r} is not a legal Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)"
        )
    return text


def _validate(raw: Mapping[str, Any], environ: Mapping[str, str]) -> DaemonConfig:
    for section, keys in _SECTIONS.items():
        values = raw.get(section, {})
        if not isinstance(values, Mapping):
            raise ConfigError(f"{section}: must be a table of settings")
        for key in values:
            if key not in keys:
                raise ConfigError(f"{section}.{key}: unknown setting")
    extra = set(raw) - {*_SECTIONS, "outputs"}
    if extra:
        raise ConfigError(f"{min(extra)}: unknown section")
    source, kafka, daemon = raw["source"], raw["kafka"], raw["daemon"]

    dsn = str(_required(source, "dsn", "source.dsn"))
    dsn_util.parse(dsn, setting="source.dsn")
    publications = _list(
        _required(source, "publications", "source.publications"), "source.publications"
    )
    streaming = source.get("streaming")
    if streaming is not None and streaming not in ("on", "off", "parallel"):
        raise ConfigError(f"source.streaming: {streaming!r} is not one of on, off, parallel")
    proto = source.get("proto_version")
    if proto is not None:
        proto = _number(proto, "source.proto_version", minimum=1, integer=True)
        if proto > 4:
            raise ConfigError(f"source.proto_version: {proto} is not 1 to 4")

    outputs_raw = raw.get("outputs") or []
    if not isinstance(outputs_raw, list) or not outputs_raw:
        raise ConfigError("outputs: at least one [[outputs]] entry with a format is required")
    outputs = []
    for i, entry in enumerate(outputs_raw):
        where = f"outputs[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: must be a table")
        for key in entry:
            if key not in _OUTPUT_KEYS:
                raise ConfigError(f"{where}.{key}: unknown setting")
        fmt = str(_required(entry, "format", f"{where}.format"))
        if fmt not in FORMAT_NAMES:
            raise ConfigError(
                f"{where}.format: unknown format {fmt!r}; valid formats: {', '.join(FORMAT_NAMES)}"
            )
        settings = entry.get("settings", {})
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{where}.settings: must be a table")
        outputs.append(
            OutputConfig(
                fmt,
                _template(entry.get("topic", DEFAULT_TOPIC), f"{where}.topic"),
                _template(
                    entry.get("transaction_topic", DEFAULT_TRANSACTION_TOPIC),
                    f"{where}.transaction_topic",
                ),
                {str(k): str(v) for k, v in settings.items()},
            )
        )

    producer = kafka.get("producer", {})
    if not isinstance(producer, Mapping):
        raise ConfigError("kafka.producer: must be a table of librdkafka settings")
    for key in producer:
        if "password" in key.lower() or "secret" in key.lower():
            raise ConfigError(
                f"kafka.producer.{key}: put secrets in kafka.sasl_password_env or "
                "kafka.sasl_password_file, not in the file"
            )
    config = DaemonConfig(
        dsn=dsn,
        slot=str(_required(source, "slot", "source.slot")),
        publications=publications,
        bootstrap_servers=str(_required(kafka, "bootstrap_servers", "kafka.bootstrap_servers")),
        outputs=outputs,
        password=_secret(source, "password", environ, "source.password"),
        create_slot=_bool(source.get("create_slot", False), "source.create_slot"),
        create_publication=_bool(
            source.get("create_publication", False), "source.create_publication"
        ),
        publish_tables=_list(source.get("publish_tables", []), "source.publish_tables"),
        proto_version=proto,
        binary=_bool(source.get("binary", False), "source.binary"),
        streaming=streaming,
        two_phase=_bool(source.get("two_phase", False), "source.two_phase"),
        spill_dir=source.get("spill_dir"),
        producer={str(k): str(v) for k, v in producer.items()},
        security_protocol=kafka.get("security_protocol"),
        sasl_mechanism=kafka.get("sasl_mechanism"),
        sasl_username=kafka.get("sasl_username"),
        sasl_password=_secret(kafka, "sasl_password", environ, "kafka.sasl_password"),
        heartbeat_interval=_number(
            daemon.get("heartbeat_interval", 10.0), "daemon.heartbeat_interval"
        ),
        metrics_port=_number(daemon.get("metrics_port", 9187), "daemon.metrics_port", integer=True),
        metrics_host=str(daemon.get("metrics_host", "127.0.0.1")),
        split_key_updates=_bool(daemon.get("split_key_updates", False), "daemon.split_key_updates"),
        schema_topic=_schema_topic(daemon.get("schema_topic", "walcast.schemas")),
        status_interval=_number(
            daemon.get("status_interval", 10.0), "daemon.status_interval", minimum=0.1
        ),
        reconnect_max_backoff=_number(
            daemon.get("reconnect_max_backoff", 30.0), "daemon.reconnect_max_backoff", minimum=0.1
        ),
    )
    if config.metrics_port > 65535:
        raise ConfigError(f"daemon.metrics_port: {config.metrics_port} is not a TCP port")
    if "password" in dsn_util.parse(dsn, setting="source.dsn") and config.password is not None:
        raise ConfigError("source.password_file/_env: the DSN already holds a password")
    if config.sasl_mechanism and config.sasl_password is None:
        raise ConfigError("kafka.sasl_password_env: SASL needs a password (env var or file)")
    config.producer_settings()  # validates the forced durability settings
    return config

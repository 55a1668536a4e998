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
  its help (:mod:`capture.daemon.render`; regenerate with ``python -m
  capture.daemon.render``; a test compares the file with it);
* ``walcast run --print-config`` (:mod:`capture.daemon.render`): the effective settings as
  TOML, secrets redacted (a password in ``source.dsn`` shows as ``********``; password sources
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

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from capture import dsn as dsn_util
from capture.daemon.settings import (
    BY_ENV,
    BY_SECTION,
    DEFAULT_TOPIC,
    DEFAULT_TRANSACTION_TOPIC,
    DEPRECATED,
    DEPRECATED_BY_ENV,
    ENV_PREFIX,
    OUTPUT_BY_KEY,
    OUTPUT_SETTINGS,
    SECTIONS,
    Kind,
    Setting,
)
from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES, FormatSettings
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, SnapshotMode
from capture.sinks.topics import LEGAL_TOPIC, validate_template

log = structlog.get_logger("walcast.config")


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
        setting = BY_ENV.get(name.upper())
        old = DEPRECATED_BY_ENV.get(name.upper())
        if old is not None:
            section, _, key = old.partition(".")
            out.setdefault(section, {})[key] = value
            continue
        if setting is None:
            section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
            if BY_SECTION.get(section, {}).get(key) is not None:
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
            if key not in OUTPUT_BY_KEY:
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
        value = _convert(BY_SECTION[section][new_key], out.pop(old_key), old)
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
            if key not in BY_SECTION[section]:
                raise ConfigError(f"{section}.{key}: unknown setting")
        for setting in BY_SECTION[section].values():
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

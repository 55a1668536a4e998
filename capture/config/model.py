"""Daemon configuration: what ``walcast run`` runs with, validated (:class:`DaemonConfig`).

How the settings are read (a TOML file, overridden by environment variables, then CLI
flags) and checked is :mod:`capture.config.reading`; converting one raw value is
:mod:`capture.config.values`. This module holds only the result, so the runner, the
renderer and the tests depend on the model and not on the reading.

One declarative table, :data:`~capture.config.settings.SETTINGS` (plus
:data:`~capture.config.settings.OUTPUT_SETTINGS` for each ``[[outputs]]`` entry), names
every setting: its section, key, flag, type, default, one line of help and whether it may
hold a secret. Each setting is held by the field its
:attr:`~capture.config.settings.Setting.field` names: a field of the replication source's
own :class:`~capture.source.SourceConfig` (:data:`SOURCE_FIELDS`: the slot, publications,
protocol options) in :attr:`DaemonConfig.source`, declared once there and handed to the
source as it is (:meth:`DaemonConfig.source_config` only adds the password and what the
outputs need); every other one a field of :class:`DaemonConfig` itself.

The sections:

``[source]``
    the PostgreSQL side: ``dsn``, ``slot`` and ``publications`` are required; also
    ``password_file``/``password_env``, ``create_slot`` with ``failover_slot``,
    ``create_publication`` with ``publish_tables`` (the ``schema.table`` list a created
    publication gets; empty: FOR ALL TABLES), ``proto_version``, ``binary``, ``streaming``,
    ``two_phase``, ``spill_dir`` (where held transactions spill when they outgrow memory;
    unset: the system's temporary directory), ``connect_timeout`` (how long a daemon that
    never reached PostgreSQL keeps trying, :mod:`capture.daemon.runner`),
    ``receive_timeout``, and the initial load: ``snapshot``, ``snapshot_workers``,
    ``snapshot_chunk_rows``.
``[kafka]``
    ``bootstrap_servers`` (required), ``connect_timeout`` (how long Kafka may stay
    unreachable before one error line names it), SASL/TLS settings, ``exactly_once`` with
    its ``offsets_topic``, and ``[kafka.producer]``: any librdkafka producer setting,
    applied over walcast's durable defaults (idempotence and ``acks=all`` cannot be turned
    off).
``[[outputs]]``
    at least one: ``format``, ``topic`` and ``transaction_topic`` templates (placeholders
    ``{format}``, ``{database}``, ``{schema}``, ``{table}``) and ``[outputs.settings]``,
    the format's settings with fully prefixed keys (``"ibm.column_delimiter" = ";"``),
    checked by :func:`capture.formats.parse_settings` at load time, before any connection.
``[daemon]``
    heartbeats, metrics (``metrics_port``, ``metrics_host``), the schema and snapshot
    progress topics, status and reconnect intervals, the health threshold
    ``unhealthy_after`` and the bound of side queries ``side_query_timeout``.

``source.snapshot`` is ``auto`` by default: the runner resolves it to ``initial`` when the
run creates the slot, else ``never``. :class:`DaemonConfig` keeps the string ``"auto"``.

Secrets (the PostgreSQL password, the SASL password) come from an environment variable or
a file and are held in :class:`Secret`, whose ``repr``/``str`` never show the value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final

from capture.config.settings import BY_NAME
from capture.errors import ConfigError
from capture.formats import FormatSettings
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, SnapshotMode
from capture.sinks.topics import DEFAULT_TOPIC, DEFAULT_TRANSACTION_TOPIC
from capture.source import SourceConfig

SOURCE_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(SourceConfig))
"""The settings held by :attr:`DaemonConfig.source` (by config field)."""


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
    """One output format and where its messages go (see ``OUTPUT_SETTINGS``)."""

    format: str
    topic: str = DEFAULT_TOPIC
    transaction_topic: str = DEFAULT_TRANSACTION_TOPIC
    settings: FormatSettings | None = None
    """The format's settings, parsed once at load (None: the format's defaults)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a value came from, named the way the user gave it.

    ``label`` starts an error line (``--dsn``, ``WALCAST__SOURCE__DSN``, ``walcast.toml:
    source.dsn``); ``mention`` names it inside a sentence (``source.dsn in walcast.toml``).
    """

    label: str
    mention: str

    @classmethod
    def file(cls, path: str, key: str) -> Origin:
        """``key`` (``section.key``, ``outputs[0].format``) of the file at ``path``."""
        return cls(f"{path}: {key}", f"{key} in {path}")

    @classmethod
    def named(cls, name: str) -> Origin:
        """A flag or an environment variable: the same name in both places."""
        return cls(name, name)


# -- the result of parsing -------------------------------------------------------------------


@dataclass(slots=True)
class DaemonConfig:
    """Everything ``walcast run`` needs, validated.

    Each field named like a setting's :attr:`~capture.config.settings.Setting.field` holds
    that setting, with the same default, here or in :attr:`source` (:meth:`value` finds
    it); ``password`` and ``sasl_password`` hold the secrets
    read from their sources; ``origins`` says where each given setting came from (by
    ``section.key``), for messages that name it as the user gave it (:meth:`mention`).
    """

    source: SourceConfig
    """The replication source's settings (:data:`SOURCE_FIELDS`), its ``dsn`` without the
    password held in :attr:`password`."""
    bootstrap_servers: str
    outputs: list[OutputConfig]
    password: Secret | None = None
    password_file: str | None = None
    password_env: str | None = None
    connect_timeout: float = 30.0
    """``source.connect_timeout``: seconds a daemon that never reached PostgreSQL keeps
    trying (0: for ever)."""
    snapshot: SnapshotMode = SnapshotMode.AUTO
    """``auto`` (initial when the run creates the slot, else never), ``initial``,
    ``never`` or ``initial-only``."""
    snapshot_workers: int = DEFAULT_WORKERS
    snapshot_chunk_rows: int = DEFAULT_CHUNK_ROWS
    kafka_connect_timeout: float = 30.0
    """``kafka.connect_timeout``: seconds Kafka may stay unreachable before one error line."""
    producer: dict[str, str] = field(default_factory=dict)
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    sasl_password_env: str | None = None
    sasl_password_file: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    exactly_once: bool = False
    offsets_topic: str = "walcast.offsets"
    heartbeat_interval: float = 10.0
    metrics_port: int = 9187
    metrics_host: str = "127.0.0.1"
    split_key_updates: bool = False
    schema_topic: str = "walcast.schemas"
    snapshot_topic: str = "walcast.snapshots"
    reconnect_max_backoff: float = 30.0
    unhealthy_after: float = 60.0
    side_query_timeout: float = 15.0
    """``daemon.side_query_timeout``: the client-side bound of every side query."""
    origins: dict[str, Origin] = field(default_factory=dict, repr=False, compare=False)

    def mention(self, name: str) -> str:
        """Setting ``name`` (``section.key``) as the user gave it, for inside a sentence.

        A setting left at its default is named by its flag when it has one, else by its
        TOML name.
        """
        origin = self.origins.get(name)
        if origin is not None:
            return origin.mention
        setting = BY_NAME.get(name)
        return setting.flag if setting is not None and setting.flag else name

    def value(self, config_field: str) -> Any:
        """The value of the setting held by ``config_field`` (here or in :attr:`source`)."""
        holder = self.source if config_field in SOURCE_FIELDS else self
        return getattr(holder, config_field)

    def full_dsn(self) -> str:
        """The DSN with the password from its secret source (never log this)."""
        dsn = self.source.dsn
        if self.password is None:
            return dsn
        from psycopg.conninfo import make_conninfo  # noqa: PLC0415

        return make_conninfo(dsn, password=self.password.reveal())

    def source_config(self, *, hold_transactions: bool) -> SourceConfig:
        """What the replication source takes: :attr:`source` with the password in its DSN.

        Never log it. ``hold_transactions``: whether the outputs need each transaction's
        size before its first change.
        """
        return dataclasses.replace(
            self.source, dsn=self.full_dsn(), hold_transactions=hold_transactions
        )

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
            "client.id": f"walcast-{self.source.slot}",
        }
        if self.security_protocol:
            settings["security.protocol"] = self.security_protocol
        if self.sasl_mechanism:
            settings["sasl.mechanism"] = self.sasl_mechanism
            settings["sasl.username"] = self.sasl_username or ""
            if self.sasl_password is not None:
                settings["sasl.password"] = self.sasl_password.reveal()
        tls = {
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
        }
        settings.update({key: value for key, value in tls.items() if value})
        settings.update(self.producer)
        for forced in FORCED_PRODUCER_KEYS:
            if not durable(settings[forced]):
                raise ConfigError(
                    f"kafka.producer.{forced}: walcast requires enable.idempotence=true and "
                    "acks=all (no data loss)"
                )
        return settings


FORCED_PRODUCER_KEYS: Final = ("enable.idempotence", "acks")
"""Producer settings walcast does not let a user turn off (no data loss)."""


def durable(value: Any) -> bool:
    """Whether a producer setting's value keeps ``enable.idempotence``/``acks`` durable."""
    return str(value).lower() in ("true", "all", "-1")

"""The settings of ``walcast run``: one table that everything else is built from.

The file, the environment, the flags, the validation, ``--print-config`` and
``walcast.example.toml`` all read it.

Each :class:`Setting` names its section and key, its :class:`Kind` (how its value is
checked and converted), its default (or :data:`REQUIRED`), one line of help and, where the
default is not a good illustration, an example. :mod:`capture.config.model` loads and
validates them; :mod:`capture.config.render` writes them out.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Final

from capture.formats import FORMAT_NAMES
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, MODES, SnapshotMode
from capture.sinks.topics import DEFAULT_TOPIC, DEFAULT_TRANSACTION_TOPIC

ENV_PREFIX: Final = "WALCAST__"
REDACTED: Final = "********"
SECRET_PRODUCER_KEY: Final = re.compile(
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

    :attr:`field` (the key, unless ``attr`` names another) is the name of the
    :class:`DaemonConfig` (or :class:`OutputConfig`) field that holds the validated value;
    ``default`` is that field's default (or :data:`REQUIRED`). ``example`` is what
    ``walcast.example.toml`` shows for a setting without a default.
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
    flag: str | None = None
    """The ``walcast run`` flag that sets it (None: the file and the environment only)."""
    attr: str | None = None
    """The config field when it is not ``key`` (two sections share the key)."""

    @property
    def name(self) -> str:
        """``section.key``, as the file and ``--print-config`` name the setting."""
        return f"{self.section}.{self.key}"

    @property
    def field(self) -> str:
        """The name of the config field that holds the validated value."""
        return self.attr or self.key

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


def _switch(section: str, key: str, help_text: str, flag: str | None = None) -> Setting:
    """A boolean setting; every walcast switch is off by default."""
    return Setting(section, key, Kind.BOOL, default=False, help=help_text, flag=flag)


SETTINGS: Final[tuple[Setting, ...]] = (
    # -- [source] ---------------------------------------------------------------------------
    _s("source", "dsn", Kind.DSN, REQUIRED,
       "libpq connection string or URI (or $WALCAST_DSN); a password in it is refused "
       "here (use password_env or password_file)",
       secret=True, example="host=localhost dbname=app user=cdc", flag="--dsn"),
    _s("source", "password_file", Kind.TEXT, None,
       "file holding the PostgreSQL password (e.g. a container secret)",
       example="/run/secrets/pg_password"),
    _s("source", "password_env", Kind.TEXT, None,
       "environment variable holding the PostgreSQL password", example="PGPASSWORD"),
    _s("source", "slot", Kind.TEXT, REQUIRED, "logical replication slot (pgoutput) to stream",
       example="walcast", flag="--slot"),
    _s("source", "publications", Kind.LIST, REQUIRED,
       "publications to stream (comma-separated in the environment)", example=["walcast"],
       flag="--publication"),
    _switch("source", "create_slot", "create the slot if it does not exist", "--create-slot"),
    _s("source", "failover_slot", Kind.AUTO_BOOL, None,
       "whether create_slot makes a failover slot (unset or auto: yes where the server "
       "supports it, PostgreSQL 17+ on a primary)", example=True, flag="--failover-slot"),
    _switch("source", "create_publication",
       "create missing publications (FOR ALL TABLES unless publish_tables is set)",
       "--create-publication"),
    _s("source", "publish_tables", Kind.LIST, [],
       "schema.table list a created publication gets (empty: FOR ALL TABLES)",
       flag="--publish-tables"),
    _s("source", "proto_version", Kind.INT, None,
       "pgoutput protocol version 1-4 (unset: the highest the server supports)",
       minimum=1, maximum=4, example=4),
    _switch("source", "binary",
       "ask for binary column values (decoded client-side to the same text)"),
    _s("source", "streaming", Kind.CHOICE, None,
       "stream in-progress transactions: on, off, parallel (unset: on where supported)",
       choices=("on", "off", "parallel"), example="on"),
    _switch("source", "two_phase",
       "decode prepared transactions at PREPARE (v3+; the slot must be created with it)"),
    _s("source", "spill_dir", Kind.TEXT, None,
       "directory where held transactions spill to disk (unset: the system temp directory)",
       example="/var/lib/walcast/spill"),
    _s("source", "connect_timeout", Kind.NUMBER, 30.0,
       "seconds a walcast that has not reached PostgreSQL yet keeps trying before it stops "
       "with one line (0: try for ever, as libpq's connect_timeout=0; once it has "
       "connected, it always reconnects)", minimum=0, flag="--connect-timeout"),
    _s("source", "receive_timeout", Kind.NUMBER, None,
       "seconds without any message from the server (not even a keepalive) before the "
       "connection counts as lost and is retried (unset: a little above the server's "
       "wal_sender_timeout)", minimum=1, example=90.0, flag="--receive-timeout"),
    _s("source", "snapshot", Kind.CHOICE, SnapshotMode.AUTO.value,
       "load existing rows first: auto, initial, never, initial-only (auto: initial "
       "when this run creates the slot, else never)",
       choices=MODES, flag="--snapshot"),
    _s("source", "snapshot_workers", Kind.INT, DEFAULT_WORKERS,
       "connections that read tables for the initial load", minimum=1,
       flag="--snapshot-workers"),
    _s("source", "snapshot_chunk_rows", Kind.INT, DEFAULT_CHUNK_ROWS,
       "rows per key-range chunk of the initial load", minimum=1,
       flag="--snapshot-chunk-rows"),
    # -- [kafka] ----------------------------------------------------------------------------
    _s("kafka", "bootstrap_servers", Kind.TEXT, REQUIRED, "Kafka bootstrap servers",
       example="localhost:9092", flag="--bootstrap-servers"),
    _s("kafka", "connect_timeout", Kind.NUMBER, 30.0,
       "seconds Kafka may stay unreachable (at the start or later) before one "
       "kafka_unreachable error names the brokers and the cause; it repeats once a minute "
       "while Kafka stays down, and walcast keeps waiting", minimum=0.1,
       attr="kafka_connect_timeout"),
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
    _s("kafka", "ssl_ca_location", Kind.TEXT, None,
       "PEM file of the CA(s) that signed the brokers' certificates (SSL, SASL_SSL; unset: "
       "the system's CAs)", example="/etc/walcast/kafka-ca.pem"),
    _s("kafka", "ssl_certificate_location", Kind.TEXT, None,
       "PEM file of walcast's client certificate, for brokers that ask for one (mTLS)",
       example="/etc/walcast/walcast.crt"),
    _s("kafka", "ssl_key_location", Kind.TEXT, None,
       "PEM file of the client certificate's private key (unencrypted; keep it 0600)",
       example="/run/secrets/walcast.key"),
    _switch("kafka", "exactly_once",
       "write in Kafka transactions (read_committed readers see each change once)",
       "--exactly-once"),
    _s("kafka", "offsets_topic", Kind.TOPIC, "walcast.offsets",
       "compacted topic of exactly-once positions (with exactly_once)"),
    _s("kafka", "producer", Kind.TABLE, {},
       "librdkafka producer settings over walcast's durable defaults",
       example={"compression.type": "zstd"}, flag="--producer-option"),
    # -- [daemon] ---------------------------------------------------------------------------
    _s("daemon", "heartbeat_interval", Kind.NUMBER, 10.0,
       "seconds between heartbeat messages (0 disables)", minimum=0,
       flag="--heartbeat-interval"),
    _s("daemon", "metrics_port", Kind.INT, 9187,
       "TCP port of /metrics and /healthz (0 disables)", minimum=0, maximum=65535,
       flag="--metrics-port"),
    _s("daemon", "metrics_host", Kind.TEXT, "127.0.0.1",
       "address /metrics and /healthz listen on (0.0.0.0 in a container)"),
    _switch("daemon", "split_key_updates",
       "send an UPDATE that changes the key as DELETE + INSERT", "--split-key-updates"),
    _s("daemon", "schema_topic", Kind.TOPIC, "walcast.schemas",
       'compacted topic of table layouts for consumers ("" disables)', empty_disables=True,
       flag="--schema-topic"),
    _s("daemon", "snapshot_topic", Kind.TOPIC, "walcast.snapshots",
       "compacted topic of initial-load progress"),
    _s("daemon", "status_interval", Kind.NUMBER, 10.0,
       "seconds between status updates to the server", minimum=0.1),
    _s("daemon", "reconnect_max_backoff", Kind.NUMBER, 30.0,
       "longest wait in seconds between reconnection attempts", minimum=0.1),
    _s("daemon", "unhealthy_after", Kind.NUMBER, 60.0,
       "seconds that nothing moved while work waits (no Kafka delivery or commit while "
       "messages wait, no WAL received while the server has some to send), before "
       "/healthz answers 503 with the reason (every mode; keep it above status_interval)",
       minimum=0.1),
    _s("daemon", "side_query_timeout", Kind.NUMBER, 15.0,
       "seconds a side query (heartbeat, lag sample, catalog lookup, walsender "
       "bookkeeping; its connection attempt included) may take before it is abandoned, "
       "its connection dropped and reopened, with one warning; the stream never waits "
       "on one", minimum=0.1),
)  # fmt: skip
"""Every setting of the ``[source]``, ``[kafka]`` and ``[daemon]`` sections, in file order."""

OUTPUT_SETTINGS: Final[tuple[Setting, ...]] = (
    _s("outputs", "format", Kind.CHOICE, REQUIRED, "output format: " + ", ".join(FORMAT_NAMES),
       choices=FORMAT_NAMES, example="canal", flag="--format"),
    _s("outputs", "topic", Kind.TEMPLATE, DEFAULT_TOPIC,
       "topic template of row changes ({format}, {database}, {schema}, {table})",
       flag="--topic"),
    _s("outputs", "transaction_topic", Kind.TEMPLATE, DEFAULT_TRANSACTION_TOPIC,
       "topic template of messages of no single table (transaction markers)",
       flag="--transaction-topic"),
    _s("outputs", "settings", Kind.TABLE, {},
       "format settings, keys prefixed by the format (see the README's Formats section)",
       example={"canal.database_name": "schema"}, flag="--format-option"),
)  # fmt: skip
"""The keys of one ``[[outputs]]`` entry."""

SECTIONS: Final = ("source", "kafka", "daemon")
BY_SECTION: Final = {s: {x.key: x for x in SETTINGS if x.section == s} for s in SECTIONS}
BY_ENV: Final = {x.env_name: x for x in SETTINGS if x.env_name}

DEPRECATED: Final[dict[str, str]] = {
    "daemon.degraded_after": "daemon.unhealthy_after",
    "daemon.kafka_error_after": "kafka.connect_timeout",
}
"""Old setting names still read (``section.key`` → the setting that replaced it, which may
live in another section)."""
BY_NAME: Final = {x.name: x for x in SETTINGS}
"""Every setting of :data:`SETTINGS` by ``section.key``."""
DEPRECATED_BY_ENV: Final = {
    f"{ENV_PREFIX}{old.replace('.', '__').upper()}": old for old in DEPRECATED
}
OUTPUT_BY_KEY: Final = {x.key: x for x in OUTPUT_SETTINGS}

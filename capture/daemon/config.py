"""Daemon configuration: a TOML file, overridden by environment variables, then CLI flags.

One declarative table, :data:`~capture.daemon.settings.SETTINGS` (plus
:data:`~capture.daemon.settings.OUTPUT_SETTINGS` for each ``[[outputs]]`` entry), names
every setting: its section, key, flag, type, default, one line of help and whether it may
hold a secret. Everything else comes from that table, so nothing can drift from it:

* validation (:func:`load`, :func:`parse`): unknown sections and keys are errors, each
  value is checked against its type;
* environment overrides: ``WALCAST__<SECTION>__<KEY>`` for every scalar or list setting
  (e.g. ``WALCAST__KAFKA__BOOTSTRAP_SERVERS``, ``WALCAST__DAEMON__METRICS_PORT``); lists are
  comma-separated; tables (``kafka.producer``) and ``[[outputs]]`` come from the file or
  flags only; ``$WALCAST_DSN`` is the default of ``--dsn`` (it wins over
  ``WALCAST__SOURCE__DSN`` and the file, and a ``--dsn`` flag wins over it);
* ``walcast.example.toml`` at the top of the repository: every key with its default and
  its help (:mod:`capture.daemon.render`; regenerate with ``python -m
  capture.daemon.render``; a test compares the file with it);
* ``walcast run --print-config`` (:mod:`capture.daemon.render`): the effective settings as
  TOML, secrets redacted (a password in ``source.dsn`` shows as ``********``; password sources
  show the file or variable name, never its content).

Precedence: the file, then the environment, then flags (later wins).

**Errors (issue 25.5).** Decisions:

* Every problem of the configuration is found in one pass and reported at once: the CLI
  prints one ``walcast: error: <problem>`` line per problem (:class:`InvalidSettingsError`), in the
  order of the settings table (unknown names first, as they are met), and exits 2. Each
  line stands alone (a reader greps one, a log keeps one), as every other walcast error
  line does. Only a file that cannot be read at all (missing, not TOML) stops at once, as
  one line: nothing in it can be checked.
* Each line names the setting the way the user gave it (:class:`Origin`): the flag
  (``--receive-timeout: 0.5 must be at least 1``), the environment variable
  (``WALCAST__SOURCE__RECEIVE_TIMEOUT: …``, ``$WALCAST_DSN: …``), or the file and the
  TOML key (``walcast.toml: source.receive_timeout: …``). A missing required setting names
  every way to give it: ``missing --slot (or WALCAST__SOURCE__SLOT, or source.slot in
  walcast.toml): …``.
* An unknown section, key or environment variable, an unknown format, an unknown value
  of a setting with a fixed set of values and an unknown format setting get "did you mean
  …" for a near miss (:func:`suggestion`, difflib), also across sections
  (``kafka.snapshot_workers``: did you mean ``source.snapshot_workers``).
* ``--print-config`` prints what it can even when the settings are not valid
  (:func:`parse` keeps every valid value; :func:`capture.daemon.render.render_parsed`
  marks the missing and invalid ones in comments), then the error lines, exit 2.

**A flag and the file never disagree silently (issue 25.6)**: a flag wins over the file
(and the environment) for its setting, always. ``--format`` replaces the file's
``[[outputs]]``; without ``--format``, ``--topic`` and ``--transaction-topic`` set the topics
of every output of the file, and each ``--format-option`` sets its key in the file's outputs
of the format it names (one of them, or an error line naming the outputs there are).
``--producer-option`` sets its keys over the file's ``[kafka.producer]`` table, key by key
(the other keys of the file stay). A switch (``--exactly-once``) has a ``--no-`` form that
turns off what the file turned on. Two values that cannot both hold (a password in the DSN
and ``source.password_env``) are one line naming both, as the user gave them.

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
    progress topics, status and reconnect intervals, and the health threshold
    ``unhealthy_after``.

Renamed settings (:data:`~capture.daemon.settings.DEPRECATED`): the old name is still
read, from the file and the environment, when the new one is not given (given both, the new
one wins), and each use is one ``setting_deprecated`` warning event naming both (``walcast
run`` has set up logging before it loads the settings, so the warning is an event like every
other of the daemon). The old name is not in ``walcast.example.toml`` nor in
``--print-config``, which show the new one. ``daemon.degraded_after`` is
``daemon.unhealthy_after`` now: the threshold holds in every mode and for anything that
stopped moving, not only Kafka deliveries. ``daemon.kafka_error_after`` is
``kafka.connect_timeout`` now: the same wait, named where the other Kafka settings are and
as ``source.connect_timeout`` is for PostgreSQL.

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

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import structlog

from capture import dsn as dsn_util
from capture.daemon.settings import (
    BY_ENV,
    BY_NAME,
    BY_SECTION,
    DEFAULT_TOPIC,
    DEFAULT_TRANSACTION_TOPIC,
    DEPRECATED,
    DEPRECATED_BY_ENV,
    ENV_PREFIX,
    OUTPUT_BY_KEY,
    OUTPUT_SETTINGS,
    SECTIONS,
    SETTINGS,
    Kind,
    Setting,
)
from capture.errors import ConfigError, InvalidSettingsError
from capture.formats import FORMAT_NAMES, FormatSettings
from capture.load_mode import DEFAULT_CHUNK_ROWS, DEFAULT_WORKERS, SnapshotMode
from capture.sinks.topics import LEGAL_TOPIC, validate_template

log = structlog.get_logger("walcast.config")

DSN_ENV: Final = "WALCAST_DSN"
"""The environment variable ``--dsn`` defaults to."""
SUGGEST_CUTOFF: Final = 0.75
"""How close (difflib's ratio) a name must be to a known one to be suggested."""
REQUIRED_WHAT: Final = {
    "source.dsn": "the database to stream from (a libpq connection string or URI)",
    "source.slot": "the logical replication slot to stream",
    "source.publications": "the publications to stream",
    "kafka.bootstrap_servers": "the Kafka brokers to write to (host:port, comma-separated)",
}
"""What a missing required setting is, in its error line."""


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


@dataclass(slots=True)
class DaemonConfig:
    """Everything ``walcast run`` needs, validated.

    Each field named like a setting's :attr:`~capture.daemon.settings.Setting.field` holds
    that setting, with the same default; ``password`` and ``sasl_password`` hold the secrets
    read from their sources; ``origins`` says where each given setting came from (by
    ``section.key``), for messages that name it as the user gave it (:meth:`mention`).
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
    connect_timeout: float = 30.0
    """``source.connect_timeout``: seconds a daemon that never reached PostgreSQL keeps
    trying (0: for ever)."""
    receive_timeout: float | None = None
    """Seconds of silence from the server before the connection counts as lost (None: the
    runner's default, a little above the server's ``wal_sender_timeout``)."""
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
        for forced in FORCED_PRODUCER_KEYS:
            if not _durable(settings[forced]):
                raise ConfigError(
                    f"kafka.producer.{forced}: walcast requires enable.idempotence=true and "
                    "acks=all (no data loss)"
                )
        return settings


FORCED_PRODUCER_KEYS: Final = ("enable.idempotence", "acks")
"""Producer settings walcast does not let a user turn off (no data loss)."""


def _durable(value: Any) -> bool:
    return str(value).lower() in ("true", "all", "-1")


# -- suggestions -----------------------------------------------------------------------------


def suggestion(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word`` if it is a near miss (difflib), else None."""
    found = difflib.get_close_matches(word, list(known), n=1, cutoff=SUGGEST_CUTOFF)
    return found[0] if found else None


def _did_you_mean(found: str | None) -> str:
    return f"; did you mean {found}?" if found else ""


def _key_suggestion(section: str, key: str) -> str | None:
    """A known ``section.key`` for an unknown one.

    The section's own keys first, then the same key in another section, then a near miss
    among every setting's and every old name.
    """
    own = suggestion(key, BY_SECTION.get(section, {}))
    if own is not None:
        return f"{section}.{own}"
    for other in SECTIONS:
        if key in BY_SECTION[other]:
            return f"{other}.{key}"
    return suggestion(f"{section}.{key}", [*BY_NAME, *DEPRECATED])


# -- the result of parsing -------------------------------------------------------------------


@dataclass(slots=True)
class Parsed:
    """The settings as far as they are valid, and every problem found.

    ``values`` holds each valid setting by its config field (a missing or invalid one is
    absent); ``outputs`` each ``[[outputs]]`` entry's valid values by key; ``notes`` a short
    word on each missing or invalid setting by ``section.key`` (``outputs[0].format``), for
    ``--print-config``; ``problems`` one error per problem, in the order found.
    """

    values: dict[str, Any] = field(default_factory=dict)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)
    problems: list[ConfigError] = field(default_factory=list)
    origins: dict[str, Origin] = field(default_factory=dict)

    def problem(
        self, label: str, message: str, *, hint: str | None = None, at: str | None = None
    ) -> None:
        """Record one problem: ``label: message`` (``at``: the setting to mark)."""
        self.add(ConfigError(f"{label}: {message}", hint=hint), at=at)

    def add(self, error: ConfigError, *, at: str | None = None, note: str | None = None) -> None:
        """Record ``error`` (its message names the setting already)."""
        self.problems.append(error)
        if at is not None and at not in self.notes:
            self.notes[at] = note or _note(error, at)

    def config(self) -> DaemonConfig:
        """The validated configuration; :class:`InvalidSettingsError` when anything is wrong."""
        if self.problems:
            raise InvalidSettingsError(self.problems)
        outputs = [OutputConfig(**entry) for entry in self.outputs]
        return DaemonConfig(outputs=outputs, origins=dict(self.origins), **self.values)


def _note(error: ConfigError, at: str) -> str:
    """The part of ``error``'s line after the setting's name (what --print-config shows)."""
    text = error.one_line()
    marker = f"{at}: "
    if marker in text:
        return text.split(marker, 1)[1]
    return text.split(": ", 1)[1] if ": " in text else text


# -- loading -------------------------------------------------------------------------------


def load(path: str | None, flags: Mapping[str, Any], environ: Mapping[str, str]) -> DaemonConfig:
    """Merge file, environment and flag values (later wins) and validate them.

    Raises :class:`InvalidSettingsError` with every problem (see the module docstring). ``flags``
    is what :func:`capture.cli.run_flag_values` makes of ``walcast run``'s flags (see
    :func:`parse`).
    """
    return parse(path, flags, environ).config()


def parse(path: str | None, flags: Mapping[str, Any], environ: Mapping[str, str]) -> Parsed:
    """The settings of the file at ``path``, ``environ`` and ``flags``, checked.

    ``flags`` maps each section to ``{key: value}`` (None: the flag was not given), and may
    hold ``"outputs"``: ``{"formats": [...], "topic": ..., "transaction_topic": ...,
    "format_options": ["ibm.x=1", ...]}`` and ``"producer_options": ["k=v", ...]``. A file
    that cannot be read is the one problem raised at once (:class:`ConfigError`).
    """
    layers = _Layers()
    if path:
        layers.read_file(path)
    layers.read_environ(environ)
    layers.read_flags(flags)
    return layers.validate(environ)


class _Layers:
    """The raw values of every layer, merged, with where each came from."""

    def __init__(self) -> None:
        self.parsed = Parsed()
        self.raw: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
        self.origins: dict[str, Origin] = self.parsed.origins
        self.outputs: list[dict[str, Any]] = []
        self.output_origins: list[dict[str, Origin]] = []
        self.outputs_origin: Origin | None = None
        """Where the outputs came from (None: nowhere yet)."""
        self.producer: dict[str, str] = {}
        self.path: str | None = None
        self.refused: set[str] = set()
        """Settings the file gave and walcast refused (already a problem; not missing)."""

    # -- the file ---------------------------------------------------------------------------

    def read_file(self, path: str) -> None:
        self.path = path
        data = _read_toml(path)
        parsed = self.parsed
        for section, table in data.items():
            if section == "outputs":
                self._file_outputs(path, table)
                continue
            known = section in SECTIONS or any(
                old.partition(".")[0] == section for old in DEPRECATED
            )
            if not known:
                found = suggestion(section, [*SECTIONS, "outputs"])
                parsed.problem(
                    f"{path}: [{section}]",
                    "unknown section"
                    + _did_you_mean(f"[{found}]" if found else None)
                    + " (sections: source, kafka, daemon, outputs)",
                )
                continue
            if not isinstance(table, Mapping):
                parsed.problem(f"{path}: {section}", "must be a table of settings ([section])")
                continue
            for key, value in table.items():
                name = f"{section}.{key}"
                if name == "source.dsn" and isinstance(value, str) and dsn_util.has_password(value):
                    parsed.problem(
                        f"{path}: source.dsn",
                        "the DSN holds a password, and walcast takes no password from the file",
                        hint="remove it from the file and give it in $PGPASSWORD, ~/.pgpass, "
                        "source.password_env or source.password_file",
                        at="source.dsn",
                    )
                    self.refused.add(name)
                    continue
                if name == "kafka.producer":
                    if isinstance(value, Mapping):
                        self._producer_table(path, value)
                    else:
                        parsed.problem(
                            f"{path}: {name}",
                            "must be a table of settings ([kafka.producer])",
                            at=name,
                        )
                    continue
                self.raw.setdefault(section, {})[key] = value
                self.origins[name] = Origin.file(path, name)

    def _producer_table(self, path: str, table: Mapping[str, Any]) -> None:
        for key, value in table.items():
            name = f"kafka.producer.{key}"
            if isinstance(value, Mapping | list):
                self.parsed.problem(
                    f"{path}: {name}", f"must be a single value, not {value!r}", at=name
                )
                continue
            self.producer[str(key)] = _scalar_text(value)
            self.origins[name] = Origin.file(path, name)

    def _file_outputs(self, path: str, entries: Any) -> None:
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            self.parsed.problem(
                f"{path}: outputs", "must be [[outputs]] tables (one per output format)"
            )
            return
        self.outputs_origin = Origin.file(path, "outputs")
        for i, entry in enumerate(entries):
            values: dict[str, Any] = {}
            origins: dict[str, Origin] = {}
            for key, value in entry.items():
                where = f"outputs[{i}].{key}"
                if key not in OUTPUT_BY_KEY:
                    found = suggestion(key, OUTPUT_BY_KEY)
                    self.parsed.problem(
                        f"{path}: {where}",
                        "unknown setting"
                        + _did_you_mean(f"outputs[{i}].{found}" if found else None),
                    )
                    continue
                values[key] = value
                origins[key] = Origin.file(path, where)
            self.outputs.append(values)
            self.output_origins.append(origins)

    # -- the environment ---------------------------------------------------------------------

    def read_environ(self, environ: Mapping[str, str]) -> None:
        for name, value in environ.items():
            if not name.upper().startswith(ENV_PREFIX):
                continue
            upper = name.upper()
            setting = BY_ENV.get(upper)
            old = DEPRECATED_BY_ENV.get(upper)
            if old is not None:
                section, _, key = old.partition(".")
                self.raw.setdefault(section, {})[key] = value
                self.origins[old] = Origin.named(name)
                continue
            if setting is None:
                self._unknown_variable(name)
                continue
            self.raw[setting.section][setting.key] = value
            self.origins[setting.name] = Origin.named(name)
        dsn = environ.get(DSN_ENV)
        if dsn:
            self.raw["source"]["dsn"] = dsn
            self.origins["source.dsn"] = Origin.named(f"${DSN_ENV}")

    def _unknown_variable(self, name: str) -> None:
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        setting = BY_SECTION.get(section, {}).get(key)
        if setting is not None:  # a table
            self.parsed.problem(
                name, f"{section}.{key} is a table; set it in the file or with {setting.flag}"
            )
            return
        known = [*BY_ENV, *DEPRECATED_BY_ENV]
        found = suggestion(name.upper(), known)
        if found is None:
            other = _key_suggestion(section, key)
            found = BY_NAME[other].env_name if other in BY_NAME else None
        self.parsed.problem(
            name,
            "unknown setting"
            + _did_you_mean(found)
            + ("" if found else " (expected WALCAST__<SECTION>__<KEY>)"),
        )

    # -- the flags ---------------------------------------------------------------------------

    def read_flags(self, flags: Mapping[str, Any]) -> None:
        for section in SECTIONS:
            for key, value in (flags.get(section) or {}).items():
                if value is None:
                    continue
                setting = BY_SECTION[section][key]
                self.raw[section][key] = value
                self.origins[setting.name] = Origin.named(setting.flag or f"{setting.name}")
        for pair in flags.get("producer_options") or ():
            key, sep, value = str(pair).partition("=")
            if not sep or not key.strip():
                self.parsed.problem("--producer-option", f"{pair!r} is not KEY=VALUE")
                continue
            self.producer[key.strip()] = value
            self.origins[f"kafka.producer.{key.strip()}"] = Origin.named(
                f"--producer-option {key.strip()}"
            )
        self._flag_outputs(flags.get("outputs") or {})

    def _flag_outputs(self, given: Mapping[str, Any]) -> None:
        formats = given.get("formats")
        topics = {k: given.get(k) for k in ("topic", "transaction_topic")}
        options = list(given.get("format_options") or ())
        if formats:  # --format replaces the file's outputs
            self.outputs = [{"format": f} for f in formats]
            self.output_origins = [{"format": Origin.named("--format")} for _ in formats]
            self.outputs_origin = Origin.named("--format")
        for i, output in enumerate(self.outputs):  # the flags win over the file's values
            for key, value in topics.items():
                if value is not None:
                    output[key] = value
                    self.output_origins[i][key] = Origin.named(OUTPUT_BY_KEY[key].flag or key)
        if options and self.outputs:
            self._format_options(options)

    def _format_options(self, options: list[str]) -> None:
        """Each ``--format-option`` into the outputs of the format its key names."""
        from capture.flags import format_of  # noqa: PLC0415 - the CLI's key rules

        present = [str(o.get("format")) for o in self.outputs]
        for pair in options:
            key, sep, value = pair.partition("=")
            key = key.strip()
            if not sep or not key:
                self.parsed.problem("--format-option", f"{pair!r} is not KEY=VALUE")
                continue
            fmt = format_of(key)
            if fmt is None:
                self.parsed.problem(
                    "--format-option",
                    f"{key!r} names no format; prefix the key with its format, e.g. "
                    f"{present[0]}.{key}",
                )
                continue
            targets = [i for i, name in enumerate(present) if name == fmt]
            if not targets:
                where = self.outputs_origin.mention if self.outputs_origin else "--format"
                self.parsed.problem(
                    "--format-option",
                    f"{key!r} is a setting of format {fmt}, which is not an output here "
                    f"(outputs of {where}: {', '.join(present)})",
                )
                continue
            for i in targets:
                settings = dict(self.outputs[i].get("settings") or {})
                settings[key] = value
                self.outputs[i]["settings"] = settings
                self.output_origins[i]["settings"] = Origin.named("--format-option")

    # -- validation --------------------------------------------------------------------------

    def validate(self, environ: Mapping[str, str]) -> Parsed:
        parsed = self.parsed
        self._rename_deprecated()
        for section in SECTIONS:
            for key in list(self.raw[section]):
                if key not in BY_SECTION[section]:
                    origin = self.origins.get(f"{section}.{key}")
                    label = origin.label if origin else f"{section}.{key}"
                    found = _key_suggestion(section, key)
                    parsed.problem(label, "unknown setting" + _did_you_mean(found))
        for setting in SETTINGS:
            if setting.name == "kafka.producer":
                parsed.values[setting.field] = self._producer()
                continue
            self._setting(setting)
        self._validate_outputs()
        if "snapshot" in parsed.values:
            parsed.values["snapshot"] = SnapshotMode(parsed.values["snapshot"])
        self._secrets(environ)
        return parsed

    def _rename_deprecated(self) -> None:
        """Each old name given moves to its new one (see the module docstring)."""
        for old, new in DEPRECATED.items():
            old_section, _, old_key = old.partition(".")
            if old_key not in self.raw.get(old_section, {}):
                continue
            new_section, _, new_key = new.partition(".")
            value = self.raw[old_section].pop(old_key)
            origin = self.origins.pop(old, Origin.named(old))
            try:
                _convert(BY_NAME[new], value, origin.label)
            except ConfigError as exc:
                self.parsed.add(exc, at=new)
                continue
            if self.raw[new_section].get(new_key) is None:
                self.raw[new_section][new_key] = value
                self.origins[new] = origin
                detail = f"{old} is deprecated; it is used as {new}, which replaces it: rename it"
                log.warning("setting_deprecated", setting=old, replaced_by=new, detail=detail)
            else:
                detail = f"{old} is deprecated and ignored, as {new} is set too: remove it"
                log.warning(
                    "setting_deprecated", setting=old, replaced_by=new, ignored=True, detail=detail
                )

    def _setting(self, setting: Setting) -> None:
        parsed = self.parsed
        value = self.raw[setting.section].get(setting.key)
        origin = self.origins.get(setting.name)
        if value is None and setting.name in self.refused:
            return
        if value is None or (setting.required and value in ("", [])):
            if setting.required:
                self._missing(setting, origin if value is not None else None)
                return
            default = setting.default
            parsed.values[setting.field] = dict(default) if isinstance(default, dict) else default
            return
        label = origin.label if origin else setting.name
        try:
            converted = _convert(setting, value, label)
        except ConfigError as exc:
            parsed.add(exc, at=setting.name)
            return
        if setting.required and converted in ("", []):
            self._missing(setting, origin)
            return
        parsed.values[setting.field] = converted

    def _missing(self, setting: Setting, given: Origin | None) -> None:
        """A required setting that was not given (or given empty, at ``given``)."""
        if given is not None:
            self.parsed.problem(given.label, f"must not be empty ({setting.help})", at=setting.name)
            return
        ways = [w for w in (setting.flag, setting.env_name) if w]
        if setting.name == "source.dsn":
            ways.insert(1, f"${DSN_ENV}")
        first, others = ways[0], [*ways[1:], f"{setting.name} in {self._file_name()}"]
        what = REQUIRED_WHAT.get(setting.name, setting.help)
        self.parsed.add(
            ConfigError(f"missing {first} (or {', or '.join(others)}): {what}"),
            at=setting.name,
            note=f"missing: give {first}, {', '.join(others[:-1])} or {others[-1]}",
        )

    def _file_name(self) -> str:
        return self.path or "a --config file"

    def _producer(self) -> dict[str, str]:
        parsed = self.parsed
        for key, value in self.producer.items():
            name = f"kafka.producer.{key}"
            origin = self.origins.get(name, Origin.named(name))
            lowered = key.lower()
            if "password" in lowered or "secret" in lowered:
                parsed.problem(
                    origin.label,
                    "put secrets in kafka.sasl_password_env or kafka.sasl_password_file, "
                    "not in the settings",
                    at="kafka.producer",
                )
            elif key in FORCED_PRODUCER_KEYS and not _durable(value):
                parsed.problem(
                    origin.label,
                    f"{value!r}: walcast requires enable.idempotence=true and acks=all "
                    "(no data loss)",
                    at="kafka.producer",
                )
        return dict(self.producer)

    def _validate_outputs(self) -> None:
        from capture.formats import parse_settings  # noqa: PLC0415

        parsed = self.parsed
        if not self.outputs:
            parsed.add(
                ConfigError(
                    "missing --format (or [[outputs]] entries in "
                    f"{self._file_name()}): at least one output format: " + ", ".join(FORMAT_NAMES)
                ),
                at="outputs",
                note="missing: give --format or [[outputs]] entries",
            )
            return
        for i, entry in enumerate(self.outputs):
            origins = self.output_origins[i]
            values: dict[str, Any] = {}
            for setting in OUTPUT_SETTINGS:
                where = f"outputs[{i}].{setting.key}"
                origin = origins.get(setting.key)
                label = origin.label if origin else where
                value = entry.get(setting.key)
                if value is None:
                    if setting.required:
                        parsed.problem(
                            origin.label if origin else f"{self._file_name()}: outputs[{i}]",
                            "no format (format = one of " + ", ".join(FORMAT_NAMES) + ")",
                            at=where,
                        )
                        continue
                    default = setting.default
                    values[setting.key] = dict(default) if isinstance(default, dict) else default
                    continue
                try:
                    values[setting.key] = _convert(setting, value, label)
                except ConfigError as exc:
                    parsed.add(exc, at=where)
            fmt = values.get("format")
            if fmt is not None and "settings" in values:
                origin = origins.get("settings")
                label = origin.label if origin else f"outputs[{i}].settings"
                try:
                    values["settings"] = parse_settings(fmt, values["settings"])
                except ConfigError as exc:
                    parsed.problem(
                        label,
                        exc.message + _format_setting_suggestion(fmt, values["settings"]),
                        hint=exc.hint,
                        at=f"outputs[{i}].settings",
                    )
                    del values["settings"]
            parsed.outputs.append(values)

    def _secrets(self, environ: Mapping[str, str]) -> None:
        parsed = self.parsed
        values = parsed.values
        for setting in ("source.password", "kafka.sasl_password"):
            key = setting.partition(".")[2]
            if f"{key}_env" not in values or f"{key}_file" not in values:
                continue
            try:
                values[key] = _secret(values, environ, setting, self.origins)
            except ConfigError as exc:
                parsed.add(exc, at=f"{setting}_env")
        password = values.get("password")
        dsn = values.get("dsn")
        if password is not None and dsn is not None and "password" in dsn_util.parse(dsn):
            source = "source.password_env" if values.get("password_env") else "source.password_file"
            parsed.problem(
                self._mention_label("source.dsn"),
                f"the DSN holds a password, and {self._mention(source)} gives one too: give "
                "one of them",
                at="source.dsn",
            )
        sasl = values.get("sasl_mechanism")
        if sasl and "sasl_password" in values and values["sasl_password"] is None:
            parsed.problem(
                self._mention_label("kafka.sasl_mechanism"),
                "SASL needs a password: set kafka.sasl_password_env or kafka.sasl_password_file",
                at="kafka.sasl_password_env",
            )

    def _mention(self, name: str) -> str:
        origin = self.origins.get(name)
        return origin.mention if origin else name

    def _mention_label(self, name: str) -> str:
        origin = self.origins.get(name)
        return origin.label if origin else name


def _format_setting_suggestion(fmt: str, settings: Mapping[str, Any]) -> str:
    """A suggestion for the first key of ``settings`` that format ``fmt`` does not have."""
    import dataclasses  # noqa: PLC0415

    from capture.formats import format_class  # noqa: PLC0415
    from capture.formats.settings import prefixes  # noqa: PLC0415

    cls = format_class(fmt).settings_class
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    own = prefixes(fmt)
    for key in settings:
        prefix, dot, name = str(key).partition(".")
        if dot and prefix in own and name not in names:
            found = suggestion(name, names)
            return _did_you_mean(f"{fmt}.{found}" if found else None)
    return ""


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


# -- validation of one value ---------------------------------------------------------------


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


def _topic(value: Any, setting: Setting, label: str) -> str:
    text = str(value)
    if text == "" and setting.empty_disables:
        return text
    if not LEGAL_TOPIC.match(text) or not text.strip("."):
        raise ConfigError(
            f"{label}: {text!r} is not a legal Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)"
        )
    return text


def _choice(setting: Setting, value: Any, label: str) -> str:
    text = str(value)
    if text in setting.choices:
        return text
    if setting.key == "format":
        found = suggestion(text, setting.choices)
        raise ConfigError(
            f"{label}: unknown format {value!r}; valid formats: "
            + ", ".join(setting.choices)
            + _did_you_mean(found)
        )
    found = suggestion(text, setting.choices)
    raise ConfigError(
        f"{label}: {value!r} is not one of {', '.join(setting.choices)}{_did_you_mean(found)}"
    )


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
        return _choice(setting, value, name)
    if kind is Kind.TOPIC:
        return _topic(value, setting, name)
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


def _secret(
    values: Mapping[str, Any],
    environ: Mapping[str, str],
    setting: str,
    origins: Mapping[str, Origin],
) -> Secret | None:
    """The secret of ``<setting>_env`` / ``<setting>_file`` (validated text values)."""
    key = setting.partition(".")[2]
    env_name, file_name = values[f"{key}_env"], values[f"{key}_file"]

    def label(name: str) -> str:
        origin = origins.get(name)
        return origin.label if origin else name

    if env_name and file_name:
        raise ConfigError(
            f"{label(setting + '_env')} / {label(setting + '_file')}: give one source for the "
            "secret"
        )
    if env_name:
        if env_name not in environ:
            raise ConfigError(
                f"{label(setting + '_env')}: environment variable {env_name!r} is not set"
            )
        return Secret(environ[env_name])
    if file_name:
        try:
            return Secret(Path(file_name).read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise ConfigError(
                f"{label(setting + '_file')}: cannot read {file_name!r}: {exc.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(
                f"{label(setting + '_file')}: {file_name!r} is not UTF-8 text"
            ) from None
    return None

"""Reading ``walcast run``'s settings: a TOML file, environment variables, then flags.

:func:`parse` merges the three layers and checks every value
(:mod:`capture.config.values`), keeping what is valid and every problem
(:class:`Parsed`); :func:`load` is the same, raising unless all is valid. The result is a
:class:`~capture.config.model.DaemonConfig`. Everything comes from the settings table
(:mod:`capture.config.settings`):

* validation (:func:`load`, :func:`parse`): unknown sections and keys are errors, each
  value is checked against its type;
* environment overrides: ``WALCAST__<SECTION>__<KEY>`` for every scalar or list setting
  (e.g. ``WALCAST__KAFKA__BOOTSTRAP_SERVERS``, ``WALCAST__DAEMON__METRICS_PORT``); lists are
  comma-separated; tables (``kafka.producer``) and ``[[outputs]]`` come from the file or
  flags only; ``$WALCAST_DSN`` is the default of ``--dsn`` (it wins over
  ``WALCAST__SOURCE__DSN`` and the file, and a ``--dsn`` flag wins over it);
* ``walcast.example.toml`` at the top of the repository: every key with its default and
  its help (:mod:`capture.config.render`; regenerate with ``python -m
  capture.config.render``; a test compares the file with it);
* ``walcast run --print-config`` (:mod:`capture.config.render`): the effective settings as
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
  (:func:`parse` keeps every valid value; :func:`capture.config.render.render_parsed`
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

Renamed settings (:data:`~capture.config.settings.DEPRECATED`): the old name is still
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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog

from capture import dsn as dsn_util
from capture.config.model import FORCED_PRODUCER_KEYS, DaemonConfig, Origin, durable
from capture.config.parsed import Parsed, read_secret
from capture.config.settings import (
    BY_ENV,
    BY_NAME,
    BY_SECTION,
    DEPRECATED,
    DEPRECATED_BY_ENV,
    ENV_PREFIX,
    OUTPUT_BY_KEY,
    OUTPUT_SETTINGS,
    SECTIONS,
    SETTINGS,
    Setting,
)
from capture.config.values import (
    convert,
    did_you_mean,
    format_setting_suggestion,
    key_suggestion,
    read_toml,
    scalar_text,
    suggestion,
)
from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES
from capture.load_mode import SnapshotMode

log = structlog.get_logger("walcast.config")

DSN_ENV: Final = "WALCAST_DSN"
"""The environment variable ``--dsn`` defaults to."""
REQUIRED_WHAT: Final = {
    "source.dsn": "the database to stream from (a libpq connection string or URI)",
    "source.slot": "the logical replication slot to stream",
    "source.publications": "the publications to stream",
    "kafka.bootstrap_servers": "the Kafka brokers to write to (host:port, comma-separated)",
}
"""What a missing required setting is, in its error line."""


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
        data = read_toml(path)
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
                    + did_you_mean(f"[{found}]" if found else None)
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
            self.producer[str(key)] = scalar_text(value)
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
                        + did_you_mean(f"outputs[{i}].{found}" if found else None),
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
            other = key_suggestion(section, key)
            found = BY_NAME[other].env_name if other in BY_NAME else None
        self.parsed.problem(
            name,
            "unknown setting"
            + did_you_mean(found)
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
                    found = key_suggestion(section, key)
                    parsed.problem(label, "unknown setting" + did_you_mean(found))
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
                convert(BY_NAME[new], value, origin.label)
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
            converted = convert(setting, value, label)
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
            elif key in FORCED_PRODUCER_KEYS and not durable(value):
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
                    values[setting.key] = convert(setting, value, label)
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
                        exc.message + format_setting_suggestion(fmt, values["settings"]),
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
                values[key] = read_secret(values, environ, setting, self.origins)
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

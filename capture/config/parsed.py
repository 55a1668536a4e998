"""The settings as far as they are valid (:class:`Parsed`), and where each came from.

:class:`Origin` names a value the way the user gave it (a flag, an environment variable,
or a file and its TOML key), so that every error line and every ``--print-config`` note
speaks the user's words. :meth:`Parsed.config` is the only place a
:class:`~capture.config.model.DaemonConfig` is built from parsed values: the settings of
:data:`~capture.config.model.SOURCE_FIELDS` go to its ``source``, the others to itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture.config.model import SOURCE_FIELDS, DaemonConfig, Origin, OutputConfig, Secret
from capture.errors import ConfigError, InvalidSettingsError
from capture.source import SourceConfig


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
        source = {k: v for k, v in self.values.items() if k in SOURCE_FIELDS}
        others = {k: v for k, v in self.values.items() if k not in SOURCE_FIELDS}
        return DaemonConfig(
            source=SourceConfig(**source), outputs=outputs, origins=dict(self.origins), **others
        )


def _note(error: ConfigError, at: str) -> str:
    """The part of ``error``'s line after the setting's name (what --print-config shows)."""
    text = error.one_line()
    marker = f"{at}: "
    if marker in text:
        return text.split(marker, 1)[1]
    return text.split(": ", 1)[1] if ": " in text else text


def read_secret(
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

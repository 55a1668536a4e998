"""Typed format settings: one frozen ``Settings`` dataclass per format, one parsing rule.

Every encoder module declares ``Settings``, a frozen dataclass derived from
:class:`FormatSettings` whose fields are that format's settings, with their defaults.
:func:`parse_settings` turns ``KEY=VALUE`` text into it, by one rule for every format:

* Keys arrive fully prefixed with the format they belong to: ``ibm.column_delimiter``.
  The prefix is the format name, or the name with ``-`` as ``_`` (``dts_avro.heartbeats``).
* A key without a prefix, a key of another format and an unknown key are each a
  :class:`~capture.errors.ConfigError` that names the key and lists the valid keys. Nothing
  is ever silently ignored.
* Values are converted by the field's type: ``bool`` (true/false, 1/0, yes/no, on/off),
  ``int``, ``str``, or a ``Literal[...]`` of the allowed choices. A field may name its own
  parser in ``field(metadata={PARSE: fn})``; ``fn(key, value)`` returns the value or raises
  a ConfigError naming ``key``. :meth:`FormatSettings.check` validates combinations.

Settings are parsed once, where they are given (the daemon's config, the ``--format-option``
flags), before any connection; encoders receive the parsed object in
``FormatOptions.settings`` (:func:`own_settings`), never text.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal, TypeVar

from capture.errors import ConfigError

PARSE: Final = "parse"
"""``field(metadata={PARSE: fn})``: the field's own parser, ``fn(key, value) -> value``."""

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})

S = TypeVar("S", bound="FormatSettings")


class FormatSettings:
    """Base of every format's ``Settings`` dataclass (frozen; fields = settings)."""

    __slots__ = ()

    format_name: ClassVar[str] = ""
    """The format these settings belong to (each ``Settings`` class sets it)."""

    def check(self) -> None:
        """Validate combinations of fields; raise a ConfigError naming the setting."""


def setting_flag(key: str, value: Any) -> bool:
    """A boolean setting; the error names ``key``."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{key}: {value!r} is not a boolean; expected true or false")


def setting_choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    """A setting that must be one of ``allowed``; the error names ``key``."""
    text = str(value).strip()
    if text not in allowed:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(allowed)}")
    return text


def setting_text(key: str, value: Any) -> str:
    """A setting that takes any text but the empty one; the error names ``key``."""
    text = str(value)
    if not text:
        raise ConfigError(f"{key}: must not be empty")
    return text


def setting_int(key: str, value: Any) -> int:
    """An integer setting; the error names ``key``."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: {value!r} is not an integer")
    try:
        return int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not an integer") from None


def _parser(key_type: Any) -> Callable[[str, Any], Any]:
    """The parser of a field annotated ``key_type``."""
    if key_type is bool:
        return setting_flag
    if key_type is int:
        return setting_int
    if typing.get_origin(key_type) is Literal:
        allowed = tuple(str(a) for a in typing.get_args(key_type))
        return lambda key, value: setting_choice(key, value, allowed)
    return lambda _key, value: str(value)


def prefixes(format_name: str) -> tuple[str, ...]:
    """The key prefixes that name ``format_name`` (``dts-avro.`` and ``dts_avro.``)."""
    alias = format_name.replace("-", "_")
    return (format_name,) if alias == format_name else (format_name, alias)


def valid_keys(format_name: str, cls: type[FormatSettings]) -> list[str]:
    """Every valid key of ``format_name``, fully prefixed, in field order."""
    return [f"{format_name}.{f.name}" for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


def _listing(format_name: str, cls: type[FormatSettings]) -> str:
    keys = valid_keys(format_name, cls)
    return f"valid settings: {', '.join(keys)}" if keys else f"format {format_name} has no settings"


def parse_into(cls: type[S], format_name: str, settings: Mapping[str, Any]) -> S:
    """Parse fully prefixed ``settings`` of ``format_name`` into ``cls`` (see module doc)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    own = prefixes(format_name)
    values: dict[str, Any] = {}
    for key, raw in settings.items():
        prefix, dot, name = key.partition(".")
        if not dot:
            raise ConfigError(
                f"{key}: a format setting names its format; write {format_name}.{key} "
                f"({_listing(format_name, cls)})"
            )
        if prefix not in own:
            raise ConfigError(
                f"{key}: not a setting of format {format_name} ({_listing(format_name, cls)})"
            )
        found = fields.get(name)
        if found is None:
            raise ConfigError(
                f"{key}: unknown setting of format {format_name} ({_listing(format_name, cls)})"
            )
        parse = found.metadata.get(PARSE) or _parser(hints[name])
        values[name] = parse(f"{format_name}.{name}", raw)
    parsed = cls(**values)
    parsed.check()
    return parsed


def settings_text(settings: FormatSettings) -> dict[str, str]:
    """The settings that differ from the format's defaults, as fully prefixed text.

    What a user would write to get ``settings`` (``--print-config``): parsing it gives
    ``settings`` back.
    """
    cls = type(settings)
    defaults = cls()
    text: dict[str, str] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        if value != getattr(defaults, f.name):
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            text[f"{cls.format_name}.{f.name}"] = shown
    return text


def own_settings(cls: type[S], format_name: str, settings: FormatSettings | None) -> S:
    """``settings`` as ``cls`` (None: the defaults).

    Parsed settings of another format are a ConfigError (they belong to another output).
    """
    if settings is None:
        defaults = cls()
        defaults.check()
        return defaults
    if not isinstance(settings, cls):
        raise ConfigError(
            f"settings of format {type(settings).format_name or type(settings).__module__} "
            f"given to format {format_name}"
        )
    return settings


__all__ = [
    "PARSE",
    "FormatSettings",
    "own_settings",
    "parse_into",
    "prefixes",
    "setting_choice",
    "setting_flag",
    "setting_int",
    "settings_text",
    "valid_keys",
]

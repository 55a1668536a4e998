"""Command-line values shared by several commands: ``KEY=VALUE`` lists and format settings.

``--format-option KEY=VALUE`` keys name their format: ``ibm.column_delimiter=;`` (the prefix
is the format name, or the name with ``-`` as ``_``: ``dts_avro.…``). A key that names no
format, or a format that is not an output of the command, is an error naming the key; it is
never ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES, parse_settings


def key_values(pairs: Sequence[str], flag: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` as a dict; a pair without ``=`` is an error naming ``flag``."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: {pair!r} is not KEY=VALUE")
        values[key.strip()] = value
    return values


def format_of(key: str) -> str | None:
    """The format a setting key names by its prefix, or None."""
    prefix = key.split(".", 1)[0] if "." in key else ""
    for name in FORMAT_NAMES:
        if prefix in (name, name.replace("-", "_")):
            return name
    return None


def format_settings(
    pairs: Sequence[str], formats: Sequence[str], flag: str = "--format-option"
) -> dict[str, dict[str, str]]:
    """Split ``KEY=VALUE`` format settings by the output format each key names.

    Each format's settings are validated (``capture.formats.parse_settings``) on the way.
    """
    by_format: dict[str, dict[str, str]] = {f: {} for f in formats}
    for key, value in key_values(pairs, flag).items():
        fmt = format_of(key)
        if fmt is None:
            raise ConfigError(
                f"{flag}: {key!r} names no format; prefix the key with its format, e.g. "
                f"{formats[0] if formats else 'ibm'}.{key}",
            )
        if fmt not in by_format:
            raise ConfigError(
                f"{flag}: {key!r} is a setting of format {fmt}, which is not an output here "
                f"(outputs: {', '.join(formats)})"
            )
        by_format[fmt][key] = value
    for fmt, settings in by_format.items():
        if fmt in FORMAT_NAMES:
            parse_settings(fmt, settings)  # a bad value fails here, before any connection
    return by_format

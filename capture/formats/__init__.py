"""Output formats: a registry of encoders behind one interface (:mod:`.base`).

Each format lives in its own module, named in ``_MODULES``; its encoder class states its
``name`` (the ``--format`` value) and ``Settings`` in its class statement
(``class CanalEncoder(Encoder, name="canal", settings=Settings)``). :func:`format_class`
loads a format on first use and gives a clear error listing the valid names for an
unknown one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from capture.errors import ConfigError
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.settings import FormatSettings, parse_into

_MODULES: dict[str, tuple[str, str]] = {
    "json": ("capture.formats.tail_json.encode", "TailJsonEncoder"),
    "canal": ("capture.formats.canal.encode", "CanalEncoder"),
    "shareplex": ("capture.formats.shareplex.encode", "ShareplexEncoder"),
    "dataworks": ("capture.formats.dataworks.encode", "DataWorksEncoder"),
    "qlik": ("capture.formats.qlik.encode", "QlikEncoder"),
    "ibm": ("capture.formats.ibm.encode", "IbmDelimitedEncoder"),
    "dts-avro": ("capture.formats.dts_avro.encode", "DtsAvroEncoder"),
    "debezium": ("capture.formats.debezium.encode", "DebeziumEncoder"),
}
FORMAT_NAMES: tuple[str, ...] = tuple(_MODULES)
"""Every ``--format`` value, in the order the docs list them."""


def format_class(name: str, *, setting: str = "--format") -> type[Encoder]:
    """The encoder class called ``name``."""
    try:
        module_name, class_name = _MODULES[name]
    except KeyError:
        raise ConfigError(
            f"{setting}: unknown format {name!r}; valid formats: {', '.join(FORMAT_NAMES)}"
        ) from None
    cls: type[Encoder] = getattr(importlib.import_module(module_name), class_name)
    return cls


def encoder_for(
    name: str, options: FormatOptions | None = None, *, setting: str = "--format"
) -> Encoder:
    """Instantiate the encoder called ``name`` with ``options``."""
    return format_class(name, setting=setting)(options)


def parse_settings(format_name: str, settings: Mapping[str, str]) -> FormatSettings:
    """Parse the fully prefixed ``settings`` of format ``format_name`` into its ``Settings``.

    Keys name their format (``ibm.column_delimiter``, ``dts_avro.heartbeats``); an
    unprefixed key, a key of another format, an unknown key or a bad value is a ConfigError
    naming the key (and listing the valid keys). The result can be given to the encoder as
    ``FormatOptions.settings``. See :mod:`capture.formats.settings`.
    """
    cls = format_class(format_name)
    return parse_into(cls.settings_class, format_name, settings)


__all__ = [
    "FORMAT_NAMES",
    "EncodedMessage",
    "Encoder",
    "FormatOptions",
    "FormatSettings",
    "encoder_for",
    "format_class",
    "parse_settings",
]

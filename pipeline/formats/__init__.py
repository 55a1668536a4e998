"""Format parsers: one module per format, one interface (:class:`.base.Parser`), a registry.

The names are walcast's ``--format`` values. :func:`parser_for` builds a parser with its
options (``KEY=VALUE`` settings named in each parser's ``option_names``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing pyspark is deferred: the CLI lists formats without it
    from pipeline.formats.base import Parser

_MODULES: dict[str, tuple[str, str]] = {
    "json": ("pipeline.formats.tail_json.decode", "JsonParser"),
    "canal": ("pipeline.formats.canal.decode", "CanalParser"),
    "shareplex": ("pipeline.formats.shareplex.decode", "ShareplexParser"),
    "dataworks": ("pipeline.formats.dataworks.decode", "DataWorksParser"),
    "qlik": ("pipeline.formats.qlik.decode", "QlikParser"),
    "ibm": ("pipeline.formats.ibm.decode", "IbmParser"),
    "dts-avro": ("pipeline.formats.dts_avro.decode", "DtsAvroParser"),
    "debezium": ("pipeline.formats.debezium.decode", "DebeziumParser"),
}
FORMAT_NAMES: tuple[str, ...] = tuple(_MODULES)


def parser_class(name: str) -> type[Parser]:
    """The parser class of format ``name``."""
    try:
        module_name, class_name = _MODULES[name]
    except KeyError:
        raise ValueError(
            f"unknown format {name!r}; valid formats: {', '.join(FORMAT_NAMES)}"
        ) from None
    cls: type[Parser] = getattr(importlib.import_module(module_name), class_name)
    return cls


def parser_for(name: str, options: Mapping[str, str] | None = None) -> Parser:
    """A parser for format ``name`` with ``options``."""
    return parser_class(name)(options)


__all__ = ["FORMAT_NAMES", "parser_class", "parser_for"]

"""Parsers of the ``debezium.*`` settings whose values are more than a type or a choice.

``capture.formats.debezium.encode.Settings`` names them in its fields' metadata
(:data:`capture.formats.settings.PARSE`); each raises a ConfigError naming the key.
"""

from __future__ import annotations

import re
from typing import Any, Final

from capture.errors import ConfigError

_OPERATIONS: Final = ("c", "u", "d", "t")
_PREFIX: Final = re.compile(r"^[A-Za-z0-9._-]+$")


def skipped_setting(key: str, value: Any) -> str:
    """``skipped.operations``: ``none`` or a comma list of c, u, d, t (normalised)."""
    text = str(value).strip().lower()
    if text in ("", "none"):
        return "none"
    parts = [p.strip() for p in text.split(",") if p.strip()]
    wrong = [p for p in parts if p not in _OPERATIONS]
    if wrong:
        raise ConfigError(
            f"{key}: {value!r} is not 'none' or a comma list of c, u, d, t "
            f"(unknown: {', '.join(wrong)})"
        )
    return ",".join(op for op in _OPERATIONS if op in parts)


def prefix_setting(key: str, value: Any) -> str:
    """``topic.prefix``: a legal Kafka topic name part."""
    text = str(value).strip()
    if not _PREFIX.match(text):
        raise ConfigError(
            f"{key}: {value!r} is not a topic prefix (letters, digits, '.', '_', '-')"
        )
    return text


__all__ = ["prefix_setting", "skipped_setting"]

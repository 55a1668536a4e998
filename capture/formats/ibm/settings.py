"""The ``ibm.*`` settings, their parsers, and the segment limit derived from the sink.

``capture.formats.ibm.encode`` documents each setting ("Settings") and how the limit is derived
("Segmentation and memory"); every error is a ConfigError naming the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from capture.errors import ConfigError
from capture.formats.base import FormatOptions
from capture.formats.settings import PARSE, FormatSettings, setting_text

PREFIX: Final = "ibm."
DEFAULT_MAX_MESSAGE_SIZE: Final = 1_000_000
"""The segment limit when the sink has none (stdout, files)."""
MIN_MESSAGE_SIZE: Final = 256
HEADER_BYTES: Final = 272
"""Most that walcast's four Kafka headers take: names (58 bytes), the largest values
(``FFFFFFFF/FFFFFFFF``, a 10-digit xid, a 20-digit ordinal, a source
``<20 digits>/<63-byte database>/<63-byte slot>``) and their length prefixes."""
RECORD_OVERHEAD: Final = 128
"""Kafka's own bytes around one message: the v2 record's varints and attributes (at most
36 bytes) and the record batch header (61) that a message alone in its batch carries."""
LAYOUT_VERSION: Final = re.compile("[0-9a-f]{16}")
"""A ``plan_name`` that is a layout version (:attr:`capture.events.Table.layout_version`)."""
_DELIMITERS: Final = (
    "column_delimiter",
    "record_delimiter",
    "string_delimiter",
    "decimal_character",
)
_ESCAPES: Final = {"\\n": "\n", "\\r": "\r", "\\t": "\t", "\\\\": "\\"}


def _delimiter(setting: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{setting}: {value!r} is not a character")
    text = _ESCAPES.get(value, value)
    if len(value) == 4 and value.startswith("\\x"):
        try:
            text = chr(int(value.removeprefix("\\x"), 16))
        except ValueError:
            raise ConfigError(f"{setting}: {value!r} is not a \\xHH escape") from None
    if len(text) != 1:
        raise ConfigError(f"{setting}: {value!r} must be a single character")
    if ord(text) > 127:
        raise ConfigError(f"{setting}: {value!r} must be an ASCII character")
    if text.isalnum():
        raise ConfigError(f"{setting}: {value!r} must not be alphanumeric")
    if text in "+-":
        raise ConfigError(f"{setting}: {value!r} must not be + or - (bare numbers contain them)")
    return text


def _plan_name(setting: str, value: Any) -> str:
    text = str(value)
    if LAYOUT_VERSION.fullmatch(text):
        raise ConfigError(
            f"{setting}: {text!r} looks like a layout version (16 hex digits), which is what "
            "walcast writes in plan_name when the setting is empty",
            hint="choose another plan name, or leave it empty",
        )
    return text


def _size(setting: str, value: Any) -> int:
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{setting}: {value!r} is not a number of bytes") from None
    if size < MIN_MESSAGE_SIZE:
        raise ConfigError(f"{setting}: {size} is below the minimum of {MIN_MESSAGE_SIZE} bytes")
    return size


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``ibm.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "ibm"

    column_delimiter: str = field(default=",", metadata={PARSE: _delimiter})
    record_delimiter: str = field(default="\n", metadata={PARSE: _delimiter})
    string_delimiter: str = field(default='"', metadata={PARSE: _delimiter})
    decimal_character: str = field(default=".", metadata={PARSE: _delimiter})
    identifier: str = field(default="IBM", metadata={PARSE: setting_text})
    plan_name: str = field(default="", metadata={PARSE: _plan_name})
    """Empty: each record's plan_name is its table's layout version (see the docstring)."""
    max_message_size: int | None = field(default=None, metadata={PARSE: _size})
    """Largest message value in bytes; None: derived from the sink (see the docstring)."""

    def check(self) -> None:
        """The four delimiters must all be different."""
        seen: dict[str, str] = {}
        for name in _DELIMITERS:
            char = getattr(self, name)
            if char in seen:
                raise ConfigError(
                    f"{PREFIX}{name}: {char!r} is already the {PREFIX}{seen[char]}; "
                    "the four delimiters must all be different"
                )
            seen[char] = name


def segment_limit(setting: int | None, options: FormatOptions) -> int:
    """The largest message value to write: see "Segmentation and memory" above."""
    sink = options.max_message_bytes
    if sink is None:
        return DEFAULT_MAX_MESSAGE_SIZE if setting is None else setting
    derived = sink - len(options.database.encode()) - HEADER_BYTES - RECORD_OVERHEAD
    if setting is None:
        if derived < MIN_MESSAGE_SIZE:
            raise ConfigError(
                f"{PREFIX}max_message_size: the sink takes messages of {sink} bytes, too small "
                f"for IBM messages (at least {MIN_MESSAGE_SIZE} bytes plus key and headers)",
                hint="raise the producer's message.max.bytes",
            )
        return derived
    if setting > derived:
        raise ConfigError(
            f"{PREFIX}max_message_size: {setting} bytes do not fit in the sink's messages "
            f"({sink} bytes, {derived} for the value after key and headers)",
            hint="lower ibm.max_message_size or raise the producer's message.max.bytes",
        )
    return setting

"""Log sequence numbers: PostgreSQL's ``X/Y`` text form and the 64-bit integer behind it."""

from __future__ import annotations

import re

from capture.errors import ConfigError, lsn_text

_LSN_RE = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")

format_lsn = lsn_text
"""Render an LSN the way PostgreSQL does (``pg_lsn`` output): upper-case hex, ``hi/lo``."""


def parse_lsn(text: str, *, setting: str = "lsn") -> int:
    """Parse ``X/Y`` into an integer; ``setting`` names the option in the error message."""
    match = _LSN_RE.match(text.strip())
    if match is None:
        raise ConfigError(
            f"{setting}: {text!r} is not an LSN; expected the form X/Y, e.g. 0/16B3748"
        )
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)

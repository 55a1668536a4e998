"""structlog set-up: JSON events on stderr, one per state change (never one per row).

Invariant: no event carries a DSN or password; callers log ``dsn.describe(...)`` only.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", *, json: bool = True) -> None:
    """Send structlog events at ``level`` or above to stderr."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )

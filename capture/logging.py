"""structlog set-up: JSON events on stderr, one per state change (never one per row).

Invariant: no event carries a DSN or password; callers log ``dsn.describe(...)`` only.
"""

from __future__ import annotations

import logging
import sys

import structlog


class _StructlogHandler(logging.Handler):
    """Forwards stdlib records (librdkafka's, via confluent-kafka) as structlog events."""

    def emit(self, record: logging.LogRecord) -> None:
        logger = structlog.get_logger(record.name)
        level = record.levelname.lower()
        method = getattr(
            logger, level if level in ("debug", "info", "warning", "error") else "info"
        )
        method("kafka_client", message=record.getMessage())


def kafka_logger() -> logging.Logger:
    """A stdlib logger for confluent-kafka that ends up in walcast's JSON event log."""
    logger = logging.getLogger("walcast.kafka")
    if not logger.handlers:
        logger.addHandler(_StructlogHandler())
        logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


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

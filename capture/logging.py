"""structlog set-up: JSON events on stderr, one per state change (never one per row).

Invariant: no event carries a DSN or password; callers log ``dsn.describe(...)`` only.

Levels: ``--log-level`` (default ``$WALCAST_LOG_LEVEL``) takes one of :data:`LEVELS`, in
any case, or the aliases ``warn`` and ``fatal``; anything else, from the flag or from the
environment variable, is argparse's one-line usage error (exit 2), never a silent
fallback. :func:`add_log_level_argument` is the one definition of the flag.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Final

import structlog

LEVELS: Final = ("debug", "info", "warning", "error", "critical")
"""The levels ``--log-level`` accepts, most verbose first."""

ALIASES: Final = {"warn": "warning", "fatal": "critical"}
"""Other spellings Python's logging accepts, mapped to the level they mean."""

LEVEL_ENV: Final = "WALCAST_LOG_LEVEL"
"""The environment variable that gives ``--log-level`` its default."""


def level(text: str) -> str:
    """An argparse ``type``: ``text`` as one of :data:`LEVELS`, else a one-line error.

    The error names ``$WALCAST_LOG_LEVEL`` when that is where the value came from.
    """
    name = text.strip().lower()
    name = ALIASES.get(name, name)
    if name not in LEVELS:
        where = f" (from ${LEVEL_ENV})" if os.environ.get(LEVEL_ENV) == text else ""
        raise argparse.ArgumentTypeError(
            f"{text!r}{where} is not a log level; choose from {', '.join(LEVELS)}"
        )
    return name


def add_log_level_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-level`` to ``parser`` (default ``$WALCAST_LOG_LEVEL``, checked too)."""
    parser.add_argument(
        "--log-level",
        type=level,
        choices=LEVELS,
        default=os.environ.get(LEVEL_ENV),
        help="least severe log events printed on stderr (default: $WALCAST_LOG_LEVEL, "
        "else warning, and info for walcast run)",
    )


def configure(level_name: str = "info", *, json: bool = True) -> None:
    """Send structlog events at ``level_name`` (one of :data:`LEVELS`) or above to stderr.

    A name that is not a level falls back to info; the CLI never passes one (its flag is
    checked by :func:`level`).
    """
    name = ALIASES.get(level_name.lower(), level_name.lower())
    numeric = logging.getLevelName(name.upper()) if name in LEVELS else logging.INFO
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

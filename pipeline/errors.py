"""The Spark jobs' errors: each is one line on the terminal (``walcast: error: …``).

They are WalcastErrors (:class:`capture.errors.WalcastError`), so ``walcast spark …`` prints them as
every other walcast command does, with the exit code of their family.
"""

from __future__ import annotations

from capture.errors import ConfigError, WalcastError


class TopicMissingError(ConfigError):
    """A topic the job was told to read does not exist (exit 2)."""


class KafkaUnavailableError(WalcastError):
    """No broker answered within ``--kafka-timeout`` seconds (exit 4)."""

    exit_code = 4


class WrongFormatError(WalcastError):
    """More of the messages were quarantined than ``--max-quarantine-ratio`` allows (exit 5)."""

    exit_code = 5


class SparkJobError(WalcastError):
    """The streaming query failed inside Spark; the message is Spark's first line (exit 1)."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's text (Spark's are pages long)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(exc).__name__

"""Error families of walcast, each mapped to a retry policy.

Every error a user can cause is a :class:`WalcastError`. The CLI prints it as one line
(``walcast: error: <message>`` followed by an optional ``hint:``) and exits non-zero,
never with a traceback. Messages name the setting, table or LSN involved and never
contain secrets (DSNs are redacted before they reach a message).

:class:`RetryPolicy` tells a supervising loop what to do: ``TERMINAL`` errors need a
human (bad config, bad input); ``TRANSIENT`` ones are retried with backoff (lost
connections, a broker that is down).
"""

from __future__ import annotations

import enum


class RetryPolicy(enum.Enum):
    """What a supervising loop does when it catches an error."""

    TERMINAL = "terminal"
    """Stop and report: retrying cannot help until a human changes something."""

    TRANSIENT = "transient"
    """Reconnect with backoff and resume from the last acknowledged LSN."""


class WalcastError(Exception):
    """Base of every error walcast reports to a user.

    ``hint`` says how to fix the problem; ``exit_code`` is what the CLI exits with.
    """

    retry = RetryPolicy.TERMINAL
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """Return the message and hint on one line, as the CLI prints them."""
        text = f"{self.message} (hint: {self.hint})" if self.hint else self.message
        return " ".join(text.split())


class ConfigError(WalcastError):
    """A setting is missing or malformed; the message names the setting."""

    exit_code = 2


class SetupError(WalcastError):
    """The server is not ready for replication: wal_level, permissions, slot, publication."""

    exit_code = 3


class ConnectionLostError(WalcastError):
    """The replication connection broke or could not be made; retried with backoff."""

    retry = RetryPolicy.TRANSIENT
    exit_code = 4


class DecodeError(WalcastError):
    """A pgoutput or replication protocol message could not be decoded.

    ``message_type`` is the message's type byte as a character, ``offset`` the byte
    offset within the message where decoding failed, ``lsn`` the WAL position of the
    XLogData that carried it, when known.
    """

    exit_code = 5

    def __init__(
        self,
        reason: str,
        *,
        message_type: str,
        offset: int,
        lsn: int | None = None,
    ) -> None:
        self.reason = reason
        self.message_type = message_type
        self.offset = offset
        self.lsn = lsn
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"message {self.message_type!r} at offset {self.offset}"
        if self.lsn is not None:
            from capture.lsn import format_lsn  # noqa: PLC0415 - avoids an import cycle

            where += f", WAL position {format_lsn(self.lsn)}"
        return f"cannot decode pgoutput {where}: {self.reason}"

    def at_lsn(self, lsn: int) -> DecodeError:
        """Return a copy that also names the WAL position ``lsn``."""
        return DecodeError(self.reason, message_type=self.message_type, offset=self.offset, lsn=lsn)


class UnknownRelationError(WalcastError):
    """A change names a relation OID for which no Relation message was received."""

    exit_code = 5

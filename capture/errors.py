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
from dataclasses import KW_ONLY, dataclass, replace


def lsn_text(lsn: int) -> str:
    """PostgreSQL's ``X/Y`` form of ``lsn`` (:func:`capture.lsn.format_lsn` is this function).

    It lives here because this module is the bottom of walcast's import graph: every
    other module may import it, and it imports nothing of walcast.
    """
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


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

    def lines(self) -> list[str]:
        """The lines the CLI prints, each after ``walcast: error:``.

        One line, but for :class:`InvalidSettingsError`.
        """
        return [self.one_line()]


class ConfigError(WalcastError):
    """A setting is missing or malformed; the message names the setting."""

    exit_code = 2


class InvalidSettingsError(ConfigError):
    """Every problem of a configuration, found at once (``walcast run``'s settings).

    The CLI prints one ``walcast: error:`` line per problem, in the order they were found;
    :meth:`one_line` joins them with ``; `` for the places that take one line.
    """

    def __init__(self, problems: list[ConfigError]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(p.one_line() for p in self.problems))

    def one_line(self) -> str:
        """Every problem's line, joined with ``; ``."""
        return self.message

    def lines(self) -> list[str]:
        """One line per problem."""
        return [p.one_line() for p in self.problems]


class SetupError(WalcastError):
    """The server is not ready for replication: wal_level, permissions, slot, publication."""

    exit_code = 3


class AccessDeniedError(SetupError):
    """The server refused walcast's credentials, or its role lacks a privilege.

    A wrong or missing password, an unknown role or database, pg_hba.conf, or a missing
    privilege (REPLICATION, CONNECT, SELECT on a published table). Terminal, never
    retried: the same attempt fails the same way until a human changes the credentials or
    grants. The message names the role and the missing privilege.
    """


class SlotInUseError(SetupError):
    """Another process streams the slot (``pid``, the walsender serving it).

    Terminal for a front door: walcast never ends another consumer's connection. The daemon
    recognises its own previous walsender, left behind by a network cut that the server has
    not noticed yet, and ends that one (see :mod:`capture.daemon.runner`).
    """

    def __init__(self, slot: str, pid: int, *, detail: str = "") -> None:
        self.slot = slot
        self.pid = pid
        super().__init__(
            f"replication slot {slot!r} is in use by another process (PID {pid})"
            + (f": {detail}" if detail else ""),
            hint="stop the other consumer, or use a different --slot; a walcast that lost "
            "its connection is let go by the server within wal_sender_timeout",
        )


class ConnectionLostError(WalcastError):
    """The replication connection broke or could not be made; retried with backoff."""

    retry = RetryPolicy.TRANSIENT
    exit_code = 4


class UnreadableTextError(WalcastError):
    """A load read text that is not valid UTF-8 (an SQL_ASCII database's bytes); not retried.

    The stream's counterpart is :class:`DecodeError`, with the same exit code: walcast never
    guesses an encoding (:mod:`capture.replication.session`), and reading again gives the same
    bytes.
    """

    exit_code = 5


@dataclass(eq=False, repr=False)
class DecodeError(WalcastError):
    """A message could not be decoded, or decoded into a change that does not fit its table.

    The change may disagree with its Relation (a column count) or hold a value its type
    cannot hold (text that is not UTF-8, a 1-byte binary int4).
    ``message_type`` is the message's type byte as a character, ``offset`` the byte
    offset within the message where decoding failed (None when the failure is not in the
    bytes' layout), ``lsn`` the WAL position of the XLogData that carried it (or, for a
    change found inconsistent after decoding, its transaction's commit LSN), when known.
    ``relation`` (``schema.table``) and ``column`` name what the message was about. Nothing
    at or after the message is acknowledged: the server sends it again on restart.
    """

    exit_code = 5

    reason: str
    _: KW_ONLY
    message_type: str
    offset: int | None
    lsn: int | None = None
    relation: str | None = None
    column: str | None = None

    def __post_init__(self) -> None:
        super().__init__(
            self._render(),
            hint="nothing from this position on was acknowledged; report it with the server "
            "version and the WAL position (the slot sends it again after a restart)",
        )

    def _render(self) -> str:
        where = f"message {self.message_type!r}"
        if self.offset is not None:
            where += f" at offset {self.offset}"
        if self.lsn is not None:
            where += f", WAL position {lsn_text(self.lsn)}"
        if self.relation is not None:
            where += f", relation {self.relation}"
            if self.column is not None:
                where += f" column {self.column}"
        return f"cannot decode pgoutput {where}: {self.reason}"

    def at_lsn(self, lsn: int) -> DecodeError:
        """Return a copy that also names the WAL position ``lsn``."""
        return replace(self, lsn=lsn)


class UnknownRelationError(WalcastError):
    """A change names a relation OID for which no Relation message was received."""

    exit_code = 5


@dataclass(eq=False, repr=False)
class BinaryTypeError(ConfigError):
    """In binary mode (``--binary``), a published column has a type walcast cannot decode.

    walcast never emits bytes it cannot render: a column whose type's binary send format
    cannot be turned back into the type's exact text (money, regclass, an unknown
    extension type ...) stops the stream instead. Raised at start-up for the columns the
    publications already have, and by the relation cache when a Relation message brings
    one (DDL while streaming), naming the table, column, type and WAL position. Terminal:
    the same column fails the same way until a human drops ``--binary``, leaves the table
    out of the publication, or changes the column's type.
    """

    message: str
    _: KW_ONLY
    relation: str
    column: str
    type_name: str
    lsn: int | None = None
    hint: str | None = None

    def __post_init__(self) -> None:
        super().__init__(
            self.message,
            hint=self.hint
            or f"run without --binary, leave {self.relation} out of the publication, or change "
            f"the type of column {self.column}",
        )


class KafkaSinkError(WalcastError):
    """Kafka refused messages for good, or refused the client; the slot stays before it."""

    exit_code = 6

"""The session walcast pins on every PostgreSQL connection it opens, whatever the DBA set.

A DBA may set almost any session default per database or per role (``ALTER DATABASE … SET``,
``ALTER ROLE … SET``), and managed services ship their own. Settings sent in the startup
packet (libpq's ``options``) take precedence over both, so every connection that
:func:`capture.replication.connect.connect` opens carries :func:`startup_options` (appended
to any ``options`` the user gave: walcast's win where they name the same setting). A value
therefore reaches walcast in one form on every server, and the bytes walcast emits are the
same as on a default server.

What is pinned, and why (every connection, the walsender's included):

- ``DateStyle=ISO``, ``IntervalStyle=postgres``, ``TimeZone=UTC``: the text of date, time,
  timestamp, timestamptz and interval values (pgoutput sends the walsender's text output)
  and of psycopg's own reads (psycopg cannot read a timestamptz in ``SQL, DMY`` or German
  style at all).
- ``extra_float_digits=1``: the shortest text that reads back as the same float4/float8
  (PostgreSQL 12+); a DBA's ``-15`` would round values.
- ``bytea_output=hex``: ``escape`` is another text for the same bytes.
- ``standard_conforming_strings=on``: backslashes in literals mean themselves.
- ``client_encoding=UTF8``: text arrives in UTF-8 whatever the database encoding (the
  server converts, LATIN1 included). SQL_ASCII declares no encoding: the server passes its
  bytes through, and a value that is not valid UTF-8 stops the stream with one line naming
  the LSN, or a load with one line naming the table (exit 5 both: decision, refuse, never
  guess an encoding; see ``Preflight.server`` and
  :func:`capture.snapshot.connection.unreadable_text`).
- ``search_path=pg_catalog,public``: ``pg_catalog`` first, so no user object can shadow a
  catalog table, function or operator that walcast's queries name; ``public`` after it so a
  ``regclass`` value renders as on a default server. walcast qualifies every user table it
  names (:mod:`psycopg.sql`).
- ``row_security=off``: a load never reads a subset filtered by a row-level security policy
  without saying so; a policy that would filter is an error naming the table (as pg_dump).
- ``default_transaction_read_only=off``, ``default_transaction_isolation=read committed``,
  ``default_transaction_deferrable=off``: walcast's few writes (watermark messages,
  heartbeats, ``CREATE PUBLICATION`` when asked) work on a database whose default is
  read-only, and its reads use the isolation they ask for explicitly (a load chunk:
  ``REPEATABLE READ READ ONLY``). These are defaults, not permissions: a role without the
  right privilege is still refused, in one line.
- ``client_min_messages=warning``: a DBA's ``debug`` would send walcast a stream of notices.
- ``fallback_application_name=walcast``: the DBA sees who is connected (a DSN's
  ``application_name`` wins).
- Timeouts, by :class:`Purpose` (see each member): a DBA's 30-second ``statement_timeout``
  must not end a two-hour load or the stream; walcast's short catalog queries get bounds of
  their own instead. ``idle_session_timeout`` (14+) and ``transaction_timeout`` (17+) do not
  exist on older servers, where a startup option naming them would refuse the connection:
  they are set by ``SET`` right after connecting (:func:`after_connect`), on ordinary
  connections only (a walsender does not enforce them while streaming).

How walcast stays a good citizen without the DBA's timeouts: a load reads a table in
chunks (:mod:`capture.snapshot.chunks`), each in a transaction of its own, so no snapshot or
lock is held for the whole load; network waits are bounded by TCP keepalives and
``tcp_user_timeout`` (:data:`TCP_BOUNDS`), so a silent cut ends the connection within about
a minute instead of the kernel's 15.

Not pinned: ``lc_messages`` (only a superuser may set it; walcast matches the server's
English messages where it must, and falls back to the SQLSTATE), ``lc_monetary`` (``money``
is refused by the type registry: its text depends on it).
"""

from __future__ import annotations

import enum
from typing import Final

import psycopg
from psycopg import sql


class Purpose(enum.Enum):
    """What a connection is for; it decides the timeouts walcast pins on it."""

    STREAM = "stream"
    """The walsender (``replication=database``): unbounded statements (creating a slot
    waits for running transactions; the stream is one long command); its liveness is the
    stream's receive timeout and :data:`TCP_BOUNDS`."""

    CATALOG = "catalog"
    """Short queries: set-up checks, catalog lookups, slot metrics, heartbeats, ``status``,
    ``slot drop``, ``snapshot``. Each statement is bounded by :data:`CATALOG_STATEMENT_TIMEOUT`
    and each lock wait by :data:`CATALOG_LOCK_TIMEOUT`: a stuck query ends in one line and
    the caller retries, it never holds walcast."""

    LOAD = "load"
    """A load's chunk reads and its catalog queries: unbounded statements (a chunk of a
    wide table on a busy server may take minutes) and no idle-in-transaction limit (a
    reader waits while Kafka drains); each chunk is a short transaction of its own."""


CATALOG_STATEMENT_TIMEOUT: Final = "30s"
"""``statement_timeout`` of a :attr:`Purpose.CATALOG` session."""
CATALOG_LOCK_TIMEOUT: Final = "10s"
"""``lock_timeout`` of a :attr:`Purpose.CATALOG` session (``CREATE PUBLICATION`` behind a
long DDL, for example): walcast gives up and says so rather than queue others behind it."""

PINNED: Final[tuple[tuple[str, str], ...]] = (
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("TimeZone", "UTC"),
    ("extra_float_digits", "1"),
    ("bytea_output", "hex"),
    ("standard_conforming_strings", "on"),
    ("client_encoding", "UTF8"),
    ("search_path", "pg_catalog,public"),
    ("row_security", "off"),
    ("default_transaction_read_only", "off"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_deferrable", "off"),
    ("client_min_messages", "warning"),
)
"""The settings every connection carries (see the module docstring for each reason)."""

TIMEOUTS: Final[dict[Purpose, tuple[tuple[str, str], ...]]] = {
    Purpose.STREAM: (
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
    ),
    Purpose.CATALOG: (
        ("statement_timeout", CATALOG_STATEMENT_TIMEOUT),
        ("lock_timeout", CATALOG_LOCK_TIMEOUT),
        ("idle_in_transaction_session_timeout", "60s"),
    ),
    Purpose.LOAD: (
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
    ),
}
"""The timeouts pinned per purpose (a DBA's own never apply to walcast's sessions)."""

LATER_TIMEOUTS: Final[tuple[tuple[int, str], ...]] = (
    (140000, "idle_session_timeout"),
    (170000, "transaction_timeout"),
)
"""Timeouts that only newer servers know (version, setting): set to 0 after connecting."""

TCP_BOUNDS: Final = {
    "keepalives": "1",
    "keepalives_idle": "15",
    "keepalives_interval": "5",
    "keepalives_count": "4",
    "tcp_user_timeout": "60000",
}
"""libpq settings of every connection, unless the DSN sets them: the kernel probes an idle
connection after 15 s and gives up after 4 unanswered probes 5 s apart, and data
unacknowledged for 60 s ends it, so a peer that vanished (a firewall, a NAT or a load
balancer that dropped the connection, a frozen relay) is noticed within about a minute
instead of the kernel's 15 minutes of retransmissions."""

APPLICATION_NAME: Final = "walcast"


def startup_options(purpose: Purpose) -> str:
    """The ``-c name=value`` words of ``purpose``'s session (spaces escaped for libpq)."""
    pairs = (*PINNED, *TIMEOUTS[purpose])
    return " ".join(f"-c {name}={value.replace(' ', chr(92) + ' ')}" for name, value in pairs)


def after_connect(conn: psycopg.Connection[tuple[object, ...]], purpose: Purpose) -> None:
    """Pin the timeouts older servers do not know (:data:`LATER_TIMEOUTS`) on ``conn``."""
    if purpose is Purpose.STREAM:
        return
    version = conn.info.server_version
    for since, name in LATER_TIMEOUTS:
        if version >= since:
            conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(name)))

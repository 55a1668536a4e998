"""Connections to PostgreSQL, and libpq's errors as one line.

:func:`connect` is the one door: every connection walcast opens (the walsender, set-up
checks, catalog and side queries, heartbeats, a load's readers, ``status``, ``slot drop``,
``snapshot``) goes through it, and ``tests/capture/test_one_door.py`` fails when any other
module calls ``psycopg.connect``. Its invariants:

- the session is walcast's, whatever the DBA set per database or role: the settings of
  :mod:`capture.replication.session` for the connection's :class:`Purpose`, and the TCP
  bounds (:data:`~capture.replication.session.TCP_BOUNDS`) unless the DSN sets them;
- the password never reaches a message (every text goes through :func:`capture.dsn.scrub`);
- a refusal that needs a human (credentials, role, privilege, pg_hba.conf, database, a
  server limit such as ``max_wal_senders``) is a terminal error, anything else a transient
  :class:`~capture.errors.ConnectionLostError`;
- a server older than :data:`MIN_SERVER_VERSION` is refused before any query.
"""

from __future__ import annotations

import re
from typing import Final

import psycopg
from psycopg.conninfo import make_conninfo

from capture import dsn as dsn_util
from capture.errors import AccessDeniedError, ConnectionLostError, SetupError, WalcastError
from capture.replication import session
from capture.replication.session import Purpose


def format_version(num: int) -> str:
    """``server_version_num`` as PostgreSQL writes it (``150004`` is ``15.4``)."""
    if num >= 100000:
        return f"{num // 10000}.{num % 10000}"
    return f"{num // 10000}.{num // 100 % 100}.{num % 100}"  # 9.6.24 is 90624


CONNECT_TIMEOUT: Final = 10
"""Seconds libpq waits for a server to answer a connection attempt (per host)."""

MIN_SERVER_VERSION: Final = 130000
"""The oldest PostgreSQL walcast supports (13): pgoutput v1 with the catalog it reads."""


_REFUSALS: Final = (
    ("password authentication failed", "the server refused the password of role {user}",
     ("fix the password where it comes from ($PGPASSWORD, ~/.pgpass, or walcast run's "
      "source.password_env / source.password_file); retrying cannot help")),
    ("no password supplied", "the server wants a password for role {user} and none was given",
     ("put it in $PGPASSWORD or ~/.pgpass (walcast run: also source.password_env or "
      "source.password_file)")),
    ("authentication failed", "the server refused to authenticate role {user}",
     "check the authentication method for this role in pg_hba.conf"),
    ("no pg_hba.conf entry", "pg_hba.conf has no entry for role {user} from this host",
     "add a 'host' line (a 'host replication' one for the stream) to pg_hba.conf and reload"),
    ("pg_hba.conf rejects", "pg_hba.conf rejects role {user} from this host",
     "change the matching pg_hba.conf line and reload"),
    ("must be superuser or replication role",
     "role {user} may not open a replication connection (it lacks the REPLICATION attribute)",
     "ALTER ROLE {user} WITH REPLICATION, and allow 'replication' in pg_hba.conf"),
    ("permission denied to start WAL sender",
     "role {user} may not open a replication connection (it lacks the REPLICATION attribute)",
     "ALTER ROLE {user} WITH REPLICATION, and allow 'replication' in pg_hba.conf"),
    ("is not permitted to log in", "role {user} may not log in (NOLOGIN)",
     "ALTER ROLE {user} WITH LOGIN"),
    ("permission denied for database", "role {user} may not connect to this database",
     "GRANT CONNECT ON DATABASE ... TO {user}"),
    ("does not exist", "{detail}", "fix user= or dbname= in --dsn"),
    ("does not support SSL", "{detail}", "change sslmode in --dsn, or enable SSL on the server"),
    ("certificate", "{detail}", "check the sslmode/sslrootcert/sslcert settings of --dsn"),
)  # fmt: skip
"""Connection failures that need a human (message fragment, message, hint): terminal
:class:`~capture.errors.AccessDeniedError`. Everything else (refused, timed out, reset,
the server starting up or shutting down, too many connections) is a transient
:class:`~capture.errors.ConnectionLostError`."""


TCP_KEEPALIVES: Final = session.TCP_BOUNDS
"""Kept for callers of the old name: the TCP bounds of every connection."""


def connect(
    dsn: str, *, purpose: Purpose = Purpose.CATALOG
) -> psycopg.Connection[tuple[object, ...]]:
    """Open an autocommit connection for ``purpose`` (a walsender one for ``STREAM``).

    The session carries walcast's settings (:mod:`capture.replication.session`) and the TCP
    bounds where the DSN does not set them. Failures become one-line errors that name the
    target without its password: a refusal (credentials, role, privilege, pg_hba.conf,
    database, a server limit) is terminal, anything else a lost connection, retried.
    """
    given = dsn_util.parse(dsn)
    extra = {k: v for k, v in session.TCP_BOUNDS.items() if k not in given}
    if purpose is Purpose.STREAM:
        extra["replication"] = "database"
    options = " ".join(x for x in (given.get("options", ""), session.startup_options(purpose)) if x)
    try:
        conn = psycopg.connect(
            make_conninfo(
                dsn,
                options=options,
                fallback_application_name=session.APPLICATION_NAME,
                **extra,
            ),
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
        )
    except psycopg.OperationalError as exc:
        raise connection_error(exc, dsn) from None
    version = conn.info.server_version
    if 0 < version < MIN_SERVER_VERSION:
        conn.close()
        raise SetupError(
            f"PostgreSQL {format_version(version)} ({dsn_util.describe(dsn)}) is too old: "
            f"walcast needs PostgreSQL {MIN_SERVER_VERSION // 10000} or newer",
            hint="upgrade the server, or point --dsn at a newer one",
        )
    try:
        session.after_connect(conn, purpose)
    except psycopg.Error as exc:
        conn.close()
        raise connection_error(exc, dsn) from None
    return conn


_LIMITS: Final = (
    ("exceeds max_wal_senders",
     "the server has no walsender left for role {user}: {detail}",
     ("raise max_wal_senders (postgresql.conf, then a restart), or end a replication client "
      "you no longer need (SELECT pid, application_name FROM pg_stat_replication)")),
)  # fmt: skip
"""Server limits that refuse a connection (message fragment, message, hint): terminal
:class:`~capture.errors.SetupError`s naming the setting and its value (the server's words
carry it), since retrying only repeats the refusal until a human frees one or raises it."""


def connection_error(exc: BaseException, dsn: str) -> WalcastError:
    """The walcast error for a failed connection attempt to ``dsn`` (see :data:`_REFUSALS`)."""
    target = dsn_util.describe(dsn)
    text = dsn_util.scrub(str(exc).strip(), dsn)
    detail = _server_detail(text)
    for fragment, message, hint in _LIMITS:
        if fragment in text:
            user = repr(dsn_util.parse(dsn).get("user") or "(the OS user)")
            return SetupError(message.format(user=user, detail=detail) + f" ({target})", hint=hint)
    user = repr(dsn_util.parse(dsn).get("user") or "(the OS user)")
    for fragment, message, hint in _REFUSALS:
        if fragment in text:
            bare = user.strip("'")
            return AccessDeniedError(
                message.format(user=user, detail=detail) + f" ({target})",
                hint=hint.format(user=bare),
            )
    return ConnectionLostError(
        f"cannot connect to PostgreSQL ({target}): {detail}",
        hint="check --dsn (host, port, dbname, user) and that the server is running",
    )


def _server_detail(text: str) -> str:
    """The server's or libpq's own words from a psycopg connection error, on one line."""
    return libpq_message(text) or "unknown error"


_ATTEMPTS_HEADER: Final = "Multiple connection attempts failed. All failures were:"
_ATTEMPT: Final = re.compile(r"^- host: '([^']*)', port: '([^']*)'(?:, hostaddr: '[^']*')?: (.*)$")


def libpq_message(text: str) -> str:
    """The error text of libpq (or psycopg) on one line, with nothing dropped.

    libpq puts the cause on the first line and its explanations on tab-indented lines after
    it (``server closed the connection unexpectedly`` / ``This probably means the server
    terminated abnormally`` / ``before or while processing the request.``): they follow the
    cause in parentheses. When psycopg tried several hosts (a multi-host DSN), every host's
    own reason is kept, ``host:port: reason``, joined by ``; ``.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if _ATTEMPTS_HEADER in lines:
        attempts: list[list[str]] = []
        for line in lines[lines.index(_ATTEMPTS_HEADER) + 1 :]:
            found = _ATTEMPT.match(line)
            if found:
                attempts.append([f"{found[1]}:{found[2]}", _reason(found[3])])
            elif attempts:
                attempts[-1].append(line)
        if attempts:
            return "; ".join(f"{a[0]}: {_explained(a[1:])}" for a in attempts)
    return _explained([_reason(lines[0]), *lines[1:]]) if lines else ""


def _reason(line: str) -> str:
    """``line`` without libpq's ``connection to server at … failed:`` and severity prefixes."""
    for marker in ("FATAL:  ", "ERROR:  ", "failed: "):
        if marker in line:
            return line.rsplit(marker, 1)[1]
    return line


def _explained(lines: list[str]) -> str:
    """The cause, then the lines explaining it in parentheses."""
    return f"{lines[0]} ({' '.join(lines[1:])})" if len(lines) > 1 else lines[0]

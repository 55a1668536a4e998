"""Connection strings: validation and safe descriptions.

The session walcast pins on every connection is :mod:`capture.replication.session`'s.

Invariant: nothing built here ever contains a password. :func:`describe` keeps only
host, port, dbname and user; :func:`scrub` removes the password from any text (for
example a driver's error message) before it is logged or printed.

A DSN libpq cannot parse has no parsed password, yet libpq's message quotes pieces of it
(``password=S3cr3t Pw0rd`` gives ``missing "=" after "Pw0rd"``; a bad percent-escape in a
URI password is quoted whole). So :func:`scrub` also reads the raw text the way a human
would: every word after ``password=``/``sslpassword=`` up to the next ``key=`` (or the
closing quote), the password of a URI's user info, and ``password=`` query parameters,
raw and percent-decoded, are secrets too.

Where a password may come from (issue 22.5): libpq's ``$PGPASSWORD`` and ``~/.pgpass``,
``walcast run``'s ``source.password_env``/``source.password_file``, or the DSN itself in an
environment variable (``$WALCAST_DSN``, ``WALCAST__SOURCE__DSN``), which only the user and
root can read. A password in the ``--dsn`` flag works but is visible to every user of the
machine (``ps``, ``/proc/<pid>/cmdline``): each command that takes ``--dsn`` says so once
(:func:`command_line_warning`), never quoting it. A password in ``source.dsn`` in a
configuration file is refused (:mod:`capture.config.model`).
"""

from __future__ import annotations

import re
import sys
from typing import IO, Final
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from capture.errors import ConfigError

_SECRET_KEYS: Final = ("password", "sslpassword")
_MASK: Final = "********"
_KEYWORD_VALUE: Final = re.compile(r"(?:^|\s)(?:ssl)?password\s*=\s*", re.IGNORECASE)
_NEXT_KEY: Final = re.compile(r"\s+[A-Za-z_]+\s*=")
_URI: Final = re.compile(r"^\s*postgres(?:ql)?://([^/?#]*)", re.IGNORECASE)
_QUERY_SECRET: Final = re.compile(r"[?&](?:ssl)?password=([^&#]*)", re.IGNORECASE)
_PASSWORD_KEYWORD: Final = re.compile(r"(?:^|\s)password\s*=\s*(?!\s*(?:''|$))", re.IGNORECASE)
_PASSWORD_QUERY: Final = re.compile(r"[?&]password=[^&#]", re.IGNORECASE)
SAFER_PLACES: Final = "$PGPASSWORD or ~/.pgpass"
"""Where a password for libpq belongs, for every command (``walcast run`` adds its own)."""
_SHORT: Final = 4
"""Secrets shorter than this are masked only where they stand as a whole word."""


def parse(dsn: str, *, setting: str = "--dsn") -> dict[str, str]:
    """Parse a libpq key=value string or URI; raise a ConfigError naming ``setting``."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"{setting}: not a valid PostgreSQL connection string ({scrub(str(exc).strip(), dsn)})",
            hint="use 'host=... port=... dbname=... user=...' or postgresql://user@host/db",
        ) from None
    return {k: str(v) for k, v in params.items() if v is not None}


def describe(dsn: str) -> str:
    """A password-free description of where ``dsn`` points, for logs and errors."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    parts = [f"{k}={params[k]}" for k in ("host", "port", "dbname", "user") if params.get(k)]
    return " ".join(parts) or "<libpq defaults>"


def scrub(text: str, dsn: str) -> str:
    """Remove every secret of ``dsn`` (and the DSN itself) from ``text``.

    Works for DSNs libpq cannot parse too (see the module docstring).
    """
    if dsn:
        text = text.replace(dsn, describe(dsn))
    for secret in sorted(secrets(dsn), key=len, reverse=True):
        if len(secret) >= _SHORT:
            text = text.replace(secret, _MASK)
        else:
            text = re.sub(rf"(?<![^\s\"'=:]){re.escape(secret)}(?![^\s\"'@,;])", _MASK, text)
    return text


def secrets(dsn: str) -> set[str]:
    """Every piece of ``dsn`` that may be (part of) a password, parseable or not."""
    found: set[str] = set()
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        params = {}
    for key in _SECRET_KEYS:
        if params.get(key):
            found.add(str(params[key]))
    for match in _KEYWORD_VALUE.finditer(dsn):
        found.update(_value_words(dsn[match.end() :]))
    uri = _URI.match(dsn)
    if uri is not None:
        userinfo, at, _host = uri.group(1).rpartition("@")
        if at and ":" in userinfo:
            found.add(userinfo.partition(":")[2])
        for query in _QUERY_SECRET.finditer(dsn):
            found.add(query.group(1))
    for piece in list(found):
        found.add(unquote(piece))
        found.update(piece.split())
    found.discard("")
    return found


def _value_words(rest: str) -> list[str]:
    """The value starting ``rest`` (quoted, or up to the next ``key=``), and its words."""
    if rest[:1] == "'":
        end = rest.find("'", 1)
        while end > 0 and rest[end - 1] == "\\":
            end = rest.find("'", end + 1)
        value = rest[1:end] if end > 0 else rest[1:]
    else:
        following = _NEXT_KEY.search(rest)
        value = rest[: following.start()] if following else rest
    value = value.strip()
    return [value, value.replace("\\", ""), *value.split()]


def has_password(dsn: str | None) -> bool:
    """Whether ``dsn`` holds a password, parseable or not.

    ``password=``, a URI's ``user:password@`` or ``?password=``; ``sslpassword`` (the
    passphrase of a client key) is not one.
    """
    if not dsn:
        return False
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        uri = _URI.match(dsn)
        userinfo = uri.group(1).rpartition("@") if uri is not None else ("", "", "")
        return bool(
            _PASSWORD_KEYWORD.search(dsn)
            or (userinfo[1] and ":" in userinfo[0] and userinfo[0].partition(":")[2])
            or (uri is not None and _PASSWORD_QUERY.search(dsn))
        )
    return bool(params.get("password"))


def command_line_warning(extra_places: str = "") -> str:
    """The one warning about a password in ``--dsn`` (it never quotes the password).

    ``extra_places``: the command's own safer places, after libpq's.
    """
    places = f"$PGPASSWORD, ~/.pgpass, {extra_places}" if extra_places else SAFER_PLACES
    return (
        "--dsn holds a password, and a command line is visible to every user of this machine "
        f"(ps); give the password in {places} instead, or the whole DSN in $WALCAST_DSN"
    )


def warn_password_in_flag(dsn: str | None, out: IO[str] | None = None) -> None:
    """Print ``walcast: warning: …`` once when the ``--dsn`` flag's value holds a password.

    For the one-shot commands (``tail``, ``status``, ``slot drop``, ``snapshot``); ``walcast
    run`` logs it as an event instead. Only the flag is checked: a DSN from ``$WALCAST_DSN``
    is not visible to others and is accepted silently.
    """
    if has_password(dsn):
        print(f"walcast: warning: {command_line_warning()}", file=out or sys.stderr, flush=True)

"""Connection strings: validation, safe descriptions, and the session settings walcast needs.

Invariant: nothing built here ever contains a password. :func:`describe` keeps only
host, port, dbname and user; :func:`scrub` removes the password from any text (for
example a driver's error message) before it is logged or printed.
"""

from __future__ import annotations

from typing import Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from capture.errors import ConfigError

SESSION_OPTIONS: Final = (
    "-c DateStyle=ISO -c IntervalStyle=postgres -c TimeZone=UTC "
    "-c extra_float_digits=1 -c bytea_output=hex"
)
"""GUCs for the walsender so text values have one canonical form (UTC, ISO dates)."""

_SECRET_KEYS: Final = ("password", "sslpassword")


def parse(dsn: str, *, setting: str = "--dsn") -> dict[str, str]:
    """Parse a libpq key=value string or URI; raise a ConfigError naming ``setting``."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"{setting}: not a valid PostgreSQL connection string ({scrub(str(exc), dsn)})",
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
    """Remove every secret of ``dsn`` (and the DSN itself) from ``text``."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        params = {}
    if dsn:
        text = text.replace(dsn, describe(dsn))
    for key in _SECRET_KEYS:
        secret = params.get(key)
        if secret:
            text = text.replace(str(secret), "********")
    return text


def with_session_options(dsn: str, **extra: str) -> str:
    """``dsn`` plus walcast's session options (appended to any the user gave)."""
    params = parse(dsn)
    options = " ".join(x for x in (params.get("options", ""), SESSION_OPTIONS) if x)
    return make_conninfo(dsn, options=options, **extra)

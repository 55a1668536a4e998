"""The load's own connection: the catalog queries of a load, as one-line walcast errors.

The chunk assigner (:mod:`capture.snapshot.assigner`: layouts, chunk bounds, published
tables) and the splice (:mod:`capture.snapshot.splice`: type names, unchanged TOAST values)
share one autocommit connection with walcast's load session
(:attr:`~capture.replication.session.Purpose.LOAD`), opened when first needed
and again after it broke. Readers keep connections of their own
(:mod:`capture.snapshot.reader`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from capture import dsn as dsn_util
from capture.errors import (
    AccessDeniedError,
    ConnectionLostError,
    UnreadableTextError,
    WalcastError,
)
from capture.replication.connect import connect
from capture.replication.session import Purpose

T = TypeVar("T")


_NOT_UTF8: tuple[type[BaseException], ...] = (
    psycopg.errors.CharacterNotInRepertoire,
    psycopg.errors.UntranslatableCharacter,
    UnicodeDecodeError,
)
"""What a read raises for text that is not valid UTF-8 (the server's check, or psycopg's)."""


def unreadable_text(exc: BaseException, name: str, dsn: str) -> UnreadableTextError | None:
    """The one-line error for a read of ``name`` that met text that is not UTF-8, else None.

    The server checks every text it sends against walcast's ``client_encoding`` (UTF8);
    a database in SQL_ASCII declares no encoding, so bytes that are not UTF-8 fail there.
    Reading again gives the same bytes: the error is terminal, never retried.
    """
    if not isinstance(exc, _NOT_UTF8):
        return None
    return UnreadableTextError(
        f"load of {name}: a text value is not valid UTF-8 ({describe(exc, dsn)})",
        hint="walcast reads text as UTF-8 and never guesses another encoding (an SQL_ASCII "
        "database declares none): correct the value to UTF-8, or leave the table out of "
        "the publication",
    )


class TableGone(Exception):  # noqa: N818 - an outcome, handled where it is raised
    """The table being loaded was dropped (``relation … does not exist``)."""


def describe(exc: BaseException, dsn: str) -> str:
    """The first line of ``exc``, without the DSN's secrets."""
    lines = dsn_util.scrub(str(exc), dsn).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class LoadConnection:
    """One connection for a load's queries (see the module docstring)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    def run(
        self, what: str, query: Callable[[psycopg.Connection[Any]], T], *, table: str = ""
    ) -> T:
        """``query`` on the connection; failures become one-line walcast errors.

        A table dropped meanwhile raises :class:`TableGone`; a table the role may not read
        (``table``, when the query reads one) an :class:`~capture.errors.AccessDeniedError`
        whose hint is the GRANT.
        """
        try:
            return query(self._connection())
        except psycopg.errors.UndefinedTable as exc:
            raise TableGone(f"the table was dropped ({describe(exc, self.dsn)})") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            user = self._conn.info.user if self._conn is not None else "the walcast role"
            raise AccessDeniedError(
                f"load: {what} failed: {describe(exc, self.dsn)}",
                hint=f"GRANT SELECT ON {table or 'the table'} TO {user}, or leave the table out "
                "of the publication",
            ) from None
        except psycopg.OperationalError as exc:
            if self._conn is not None:
                self._conn.close()
            raise ConnectionLostError(
                f"load: {what} failed: {describe(exc, self.dsn)}", hint="walcast retries"
            ) from None
        except psycopg.Error as exc:
            unreadable = unreadable_text(exc, table, self.dsn) if table else None
            if unreadable is not None:
                raise unreadable from None  # a chunk bound's text key that is not UTF-8
            raise WalcastError(f"load: {what} failed: {describe(exc, self.dsn)}") from None

    def close(self) -> None:
        """Close the connection (a later query opens a new one)."""
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = connect(self.dsn, purpose=Purpose.LOAD)
            except ConnectionLostError as exc:
                raise ConnectionLostError(f"load: {exc.message}", hint="walcast retries") from None
        return self._conn

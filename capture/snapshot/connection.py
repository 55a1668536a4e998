"""The load's own connection: the catalog queries of a load, as one-line walcast errors.

The chunk assigner (:mod:`capture.snapshot.assigner`: layouts, chunk bounds, published
tables) and the splice (:mod:`capture.snapshot.splice`: type names, unchanged TOAST values)
share one autocommit connection with walcast's session options, opened when first needed
and again after it broke. Readers keep connections of their own
(:mod:`capture.snapshot.reader`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from capture import dsn as dsn_util
from capture.errors import ConnectionLostError, WalcastError

T = TypeVar("T")


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

    def run(self, what: str, query: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``query`` on the connection; failures become one-line walcast errors.

        A table dropped meanwhile raises :class:`TableGone`.
        """
        try:
            return query(self._connection())
        except psycopg.errors.UndefinedTable as exc:
            raise TableGone(f"the table was dropped ({describe(exc, self.dsn)})") from None
        except psycopg.OperationalError as exc:
            if self._conn is not None:
                self._conn.close()
            raise ConnectionLostError(
                f"load: {what} failed: {describe(exc, self.dsn)}", hint="walcast retries"
            ) from None
        except psycopg.Error as exc:
            raise WalcastError(f"load: {what} failed: {describe(exc, self.dsn)}") from None

    def close(self) -> None:
        """Close the connection (a later query opens a new one)."""
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(
                    dsn_util.with_session_options(self.dsn), autocommit=True, connect_timeout=10
                )
            except psycopg.OperationalError as exc:
                text = dsn_util.scrub(str(exc), self.dsn).strip().splitlines()
                raise ConnectionLostError(
                    f"load: cannot connect to PostgreSQL ({dsn_util.describe(self.dsn)}): "
                    f"{text[-1] if text else 'connection failed'}",
                    hint="walcast retries",
                ) from None
        return self._conn

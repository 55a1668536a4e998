"""A side connection: an ordinary (non-replication) connection beside the stream.

Front doors use it for catalog queries (:mod:`capture.replication.catalog`: primary keys of
REPLICA IDENTITY FULL tables, publication tables, slot metrics) and for heartbeats. It is
opened lazily, dropped on any error and reopened on next use, so a failing side query never
stops the stream; each failure is logged once per reconnect, without the DSN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import structlog

from capture import dsn as dsn_util
from capture.replication.connect import libpq_message

log = structlog.get_logger("walcast.side")

T = TypeVar("T")


class SideConnection:
    """A lazily opened autocommit connection whose failures are logged, not raised."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    def run(self, query: Callable[[psycopg.Connection[Any]], T]) -> T | None:
        """``query(connection)``, or None when the server cannot be reached or it failed."""
        conn = self._connection()
        if conn is None:
            return None
        try:
            return query(conn)
        except psycopg.Error as exc:
            log.warning("side_query_failed", error=self._scrub(exc))
            self.close()
            return None

    def _connection(self) -> psycopg.Connection[Any] | None:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
            except psycopg.Error as exc:
                log.warning(
                    "side_connection_failed",
                    target=dsn_util.describe(self._dsn),
                    error=self._scrub(exc),
                )
                self._conn = None
        return self._conn

    def _scrub(self, exc: BaseException) -> str:
        return libpq_message(dsn_util.scrub(str(exc), self._dsn)) or type(exc).__name__

    def close(self) -> None:
        """Close the connection (it reopens on next use)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = None

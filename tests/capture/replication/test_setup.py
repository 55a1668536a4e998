"""Connection failures sorted into terminal refusals and transient losses (no server)."""

from __future__ import annotations

import psycopg
import pytest

from capture.errors import AccessDeniedError, ConnectionLostError, RetryPolicy
from capture.replication.connect import connection_error

DSN = "host=db port=5433 dbname=app user=cdc password=S3cr3tPw0rd"
PREFIX = 'connection failed: connection to server at "10.0.0.5", port 5433 failed: '


@pytest.mark.parametrize(
    ("server_said", "expected"),
    [
        ('FATAL:  password authentication failed for user "cdc"', "refused the password"),
        ("fe_sendauth: no password supplied", "wants a password"),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "cdc", database "app"',
         "pg_hba.conf has no entry"),
        ('FATAL:  pg_hba.conf rejects connection for host "10.0.0.9"', "pg_hba.conf rejects"),
        ("FATAL:  must be superuser or replication role to start walsender",
         "lacks the REPLICATION attribute"),
        ('FATAL:  role "cdc" is not permitted to log in', "may not log in"),
        ('FATAL:  permission denied for database "app"', "may not connect to this database"),
        ('FATAL:  database "app" does not exist', 'database "app" does not exist'),
        ('FATAL:  role "cdc" does not exist', 'role "cdc" does not exist'),
        ('FATAL:  Ident authentication failed for user "cdc"', "refused to authenticate"),
    ],
)  # fmt: skip
def test_refusals_are_terminal_and_name_the_role(server_said: str, expected: str) -> None:
    error = connection_error(psycopg.OperationalError(PREFIX + server_said), DSN)
    assert isinstance(error, AccessDeniedError)
    assert error.retry is RetryPolicy.TERMINAL
    line = error.one_line()
    assert expected in line
    assert "host=db port=5433 dbname=app user=cdc" in line
    assert "S3cr3tPw0rd" not in line
    assert "hint:" in line


@pytest.mark.parametrize(
    "server_said",
    [
        (
            "Connection refused\n\tIs the server running on that host and accepting TCP/IP "
            "connections?"
        ),
        "timeout expired",
        "FATAL:  the database system is starting up",
        "FATAL:  the database system is shutting down",
        "FATAL:  sorry, too many clients already",
        "server closed the connection unexpectedly",
        'could not translate host name "db" to address: Temporary failure in name resolution',
    ],
)
def test_everything_else_is_a_transient_loss(server_said: str) -> None:
    error = connection_error(psycopg.OperationalError(PREFIX + server_said), DSN)
    assert type(error) is ConnectionLostError
    assert error.retry is RetryPolicy.TRANSIENT
    line = error.one_line()
    assert line.startswith("cannot connect to PostgreSQL (host=db port=5433 dbname=app user=cdc)")
    assert "\n" not in str(error)

"""The one door: every PostgreSQL connection walcast opens carries walcast's session.

Unit tests, no server: the source tree is read for connections opened anywhere else, and
the connection string the door builds is checked setting by setting. The integration side
(a server whose DBA set other defaults) is ``tests/capture/integration/test_any_server.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from capture.replication import connect as door
from capture.replication import session
from capture.replication.session import Purpose

ROOT = Path(__file__).resolve().parents[2]
DOOR = ROOT / "capture" / "replication" / "connect.py"
OPENERS = {"connect"}
"""Attribute names that open a connection when called on psycopg or one of its classes."""


def _connection_openers(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line`` of every call of ``psycopg.connect``/``(Async)Connection.connect``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in OPENERS:
            continue
        owner = ast.unparse(node.func.value)
        if owner.split(".")[0] in {"psycopg", "Connection", "AsyncConnection", "pq", "PGconn"}:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_only_the_door_opens_connections() -> None:
    offenders = [
        hit
        for package in ("capture", "pipeline")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != DOOR
        for hit in _connection_openers(path)
    ]
    assert offenders == [], "open connections through capture.replication.connect.connect"


def test_the_scan_finds_a_connection_opened_elsewhere(tmp_path: Path) -> None:
    rogue = tmp_path / "rogue.py"
    rogue.write_text(
        "import psycopg\nfrom psycopg import Connection\n\n"
        "def f(d):\n    psycopg.connect(d)\n    return Connection.connect(d)\n"
    )
    assert _connection_openers(rogue, tmp_path) == [
        "rogue.py:5: psycopg.connect",
        "rogue.py:6: Connection.connect",
    ]


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The connection strings the door hands psycopg (no server: the call is recorded)."""
    calls: list[dict[str, Any]] = []

    def fake_connect(conninfo: str, **kwargs: Any) -> Any:
        calls.append({"params": conninfo_to_dict(conninfo), **kwargs})
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(door.psycopg, "connect", fake_connect)
    return calls


def _options(text: str) -> dict[str, str]:
    """``-c name=value`` words of a libpq options string (backslash-escaped spaces kept)."""
    words = text.replace("\\ ", "\0").split()
    pairs = [w.replace("\0", " ") for w in words if w != "-c"]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize("purpose", list(Purpose))
def test_every_purpose_pins_the_session(opened: list[dict[str, Any]], purpose: Purpose) -> None:
    with pytest.raises(Exception, match="cannot connect"):
        door.connect(
            "host=db user=cdc options='-c work_mem=4MB -c DateStyle=German'", purpose=purpose
        )
    (call,) = opened
    params = call["params"]
    assert params["options"].startswith("-c work_mem=4MB -c DateStyle=German -c DateStyle=ISO")
    pinned = _options(params["options"])
    for name, value in (*session.PINNED, *session.TIMEOUTS[purpose]):
        assert pinned[name] == value, name
    assert pinned["DateStyle"] == "ISO"  # walcast's come last: the later -c wins
    assert params["fallback_application_name"] == "walcast"
    for name, value in session.TCP_BOUNDS.items():
        assert params[name] == value
    assert ("replication" in params) == (purpose is Purpose.STREAM)
    assert call["autocommit"] is True


def test_catalog_queries_are_bounded_and_loads_are_not() -> None:
    catalog = dict(session.TIMEOUTS[Purpose.CATALOG])
    load = dict(session.TIMEOUTS[Purpose.LOAD])
    assert catalog["statement_timeout"] != "0"
    assert catalog["lock_timeout"] != "0"
    assert load["statement_timeout"] == "0"
    assert load["idle_in_transaction_session_timeout"] == "0"


def test_a_dsn_s_own_tcp_bounds_win(opened: list[dict[str, Any]]) -> None:
    with pytest.raises(Exception, match="cannot connect"):
        door.connect("host=db tcp_user_timeout=5000 keepalives_idle=3")
    params = opened[0]["params"]
    assert params["tcp_user_timeout"] == "5000"
    assert params["keepalives_idle"] == "3"


def test_a_value_with_a_space_survives_libpq_s_word_splitting() -> None:
    text = session.startup_options(Purpose.CATALOG)
    assert "-c default_transaction_isolation=read\\ committed" in text
    assert _options(text)["default_transaction_isolation"] == "read committed"


def test_max_wal_senders_exhausted_is_one_terminal_line_naming_the_setting() -> None:
    exc = psycopg.OperationalError(
        'connection to server at "127.0.0.1", port 5432 failed: FATAL:  number of requested '
        "standby connections exceeds max_wal_senders (currently 1)"
    )
    error = door.connection_error(exc, "host=127.0.0.1 user=cdc password=S3cr3tPw")
    line = error.one_line()
    assert "max_wal_senders (currently 1)" in line
    assert "raise max_wal_senders" in line
    assert error.retry.name == "TERMINAL"
    assert "S3cr3tPw" not in line

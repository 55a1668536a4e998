"""DSN handling never lets a password through."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from capture import dsn
from capture.errors import ConfigError

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    "text",
    [
        f"host=db port=5433 dbname=app user=cdc password={SECRET}",
        f"postgresql://cdc:{SECRET}@db:5433/app",
    ],
)
def test_describe_keeps_only_where(text: str) -> None:
    described = dsn.describe(text)
    assert described == "host=db port=5433 dbname=app user=cdc"
    assert SECRET not in described


def test_scrub_removes_dsn_and_password_from_any_text() -> None:
    text = f"host=db user=cdc password={SECRET}"
    message = f"connect failed for {text}; password was {SECRET}"
    cleaned = dsn.scrub(message, text)
    assert SECRET not in cleaned
    assert "host=db user=cdc" in cleaned


def test_parse_error_names_the_setting_without_secret() -> None:
    with pytest.raises(ConfigError) as info:
        dsn.parse(f"host=db nonsense password={SECRET}", setting="source.dsn")
    assert str(info.value).startswith("source.dsn: not a valid PostgreSQL connection string")
    assert SECRET not in str(info.value)


def test_session_options_are_appended_to_user_options() -> None:
    out = conninfo_to_dict(dsn.with_session_options("host=db options='-c work_mem=4MB'"))
    assert out["options"].startswith("-c work_mem=4MB -c DateStyle=ISO")
    assert "TimeZone=UTC" in out["options"]
    extra = conninfo_to_dict(dsn.with_session_options("host=db", replication="database"))
    assert extra["replication"] == "database"

"""DSN handling never lets a password through."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("host=db password=S3cr3t Pw0rd", ["S3cr3t", "Pw0rd"]),
        ("host=db password = S3cr3t Pw0rd dbname=x", ["S3cr3t", "Pw0rd"]),
        ("host=db password='S3cr3t Pw0rd", ["S3cr3t", "Pw0rd"]),
        ("host=db sslpassword=K3yPass extra junk", ["K3yPass", "junk"]),
        ("postgresql://cdc:S3cr%zzPw0rd@db/app", ["S3cr%zzPw0rd", "S3cr", "Pw0rd"]),
        ("postgresql://cdc:S3cr3tPw0rd@db/app?password=Xy%zzPw0rd", ["Xy%zzPw0rd", "S3cr3tPw0rd"]),
        ("postgresql://cdc:S3cr3tPw0rd@[::1/app", ["S3cr3tPw0rd"]),
    ],
)
def test_a_dsn_libpq_cannot_parse_never_echoes_its_password(text: str, pieces: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        dsn.parse(text)
    message = info.value.one_line()
    assert message.startswith("--dsn: not a valid PostgreSQL connection string")
    for piece in pieces:
        assert piece not in message
    assert "\n" not in str(info.value)


def test_scrub_masks_raw_and_decoded_uri_passwords() -> None:
    text = "postgresql://cdc:p%40ss%20W0rd@db/app"
    message = "auth for p@ss W0rd (raw p%40ss%20W0rd) failed"
    cleaned = dsn.scrub(message, text)
    assert "p@ss W0rd" not in cleaned
    assert "p%40ss%20W0rd" not in cleaned
    assert "W0rd" not in cleaned


def test_a_short_password_is_masked_only_as_a_whole_word() -> None:
    text = "host=db password=ab"
    assert dsn.scrub('password "ab" rejected for table abc', text) == (
        'password "********" rejected for table abc'
    )


# -- a password in --dsn (issue 22.5) --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"host=db user=cdc password={SECRET}", True),
        (f"host=db user=cdc password='{SECRET} two'", True),
        (f"postgresql://cdc:{SECRET}@db/app", True),
        (f"postgresql://cdc@db/app?sslmode=require&password={SECRET}", True),
        (f"host=db nonsense password={SECRET}", True),  # libpq cannot parse it
        (f"postgresql://cdc:{SECRET}@[::1/app", True),  # nor this
        ("host=db user=cdc", False),
        ("host=db user=cdc password=''", False),
        ("postgresql://cdc@db/app", False),
        ("postgresql://cdc:@db/app", False),
        (f"host=db sslpassword={SECRET}", False),  # a client key's passphrase
        ("", False),
        (None, False),
    ],
)
def test_has_password(text: str | None, expected: bool) -> None:
    assert dsn.has_password(text) is expected


def test_the_command_line_warning_names_the_safer_places_never_the_password() -> None:
    import io  # noqa: PLC0415

    out = io.StringIO()
    dsn.warn_password_in_flag(f"host=db user=cdc password={SECRET}", out)
    line = out.getvalue()
    assert line.count("\n") == 1
    assert line.startswith("walcast: warning: --dsn holds a password")
    for place in ("$PGPASSWORD", "~/.pgpass", "$WALCAST_DSN", "(ps)"):
        assert place in line
    assert SECRET not in line
    quiet = io.StringIO()
    dsn.warn_password_in_flag("host=db user=cdc", quiet)
    dsn.warn_password_in_flag(None, quiet)
    assert quiet.getvalue() == ""
    run = dsn.command_line_warning("source.password_env or source.password_file")
    assert "$PGPASSWORD, ~/.pgpass, source.password_env or source.password_file" in run

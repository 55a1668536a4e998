from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capture.errors import ConfigError
from capture.lsn import format_lsn, parse_lsn


def test_format_like_postgres() -> None:
    assert format_lsn(0) == "0/0"
    assert format_lsn(0x16B3748) == "0/16B3748"
    assert format_lsn(0x1_0000_00AB) == "1/AB"


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_round_trip(lsn: int) -> None:
    assert parse_lsn(format_lsn(lsn)) == lsn


@pytest.mark.parametrize("bad", ["", "16B3748", "0/", "x/1", "0/123456789"])
def test_bad_lsn_names_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match="--start-lsn"):
        parse_lsn(bad, setting="--start-lsn")

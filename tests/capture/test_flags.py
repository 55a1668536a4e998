"""Format settings on the command line: every key names its format, none is ignored."""

from __future__ import annotations

import pytest

from capture.errors import ConfigError
from capture.flags import format_of, format_settings, key_values


def test_keys_go_to_the_format_they_name() -> None:
    routed = format_settings(
        ["ibm.column_delimiter=;", "dts_avro.heartbeats=false", "canal.bytea=hex"],
        ["ibm", "dts-avro", "canal"],
    )
    assert routed == {
        "ibm": {"ibm.column_delimiter": ";"},
        "dts-avro": {"dts_avro.heartbeats": "false"},
        "canal": {"canal.bytea": "hex"},
    }


def test_an_unprefixed_key_is_an_error_with_the_fix() -> None:
    with pytest.raises(
        ConfigError, match=r"'column_delimiter' names no format.*ibm\.column_delimiter"
    ):
        format_settings(["column_delimiter=;"], ["ibm"])


def test_a_key_of_a_format_that_is_not_an_output_is_an_error() -> None:
    with pytest.raises(ConfigError, match="setting of format ibm, which is not an output here"):
        format_settings(["ibm.column_delimiter=;"], ["canal"])


def test_bad_values_fail_before_any_connection() -> None:
    with pytest.raises(ConfigError, match=r"ibm\.column_delimiter"):
        format_settings(["ibm.column_delimiter=x"], ["ibm"])
    with pytest.raises(ConfigError, match=r"canal\.nope"):
        format_settings(["canal.nope=1"], ["canal"])


def test_pairs_need_an_equals_sign() -> None:
    assert key_values(["a=1", "b = 2", "c="], "--x") == {"a": "1", "b": " 2", "c": ""}
    with pytest.raises(ConfigError, match="--producer-option: 'novalue' is not KEY=VALUE"):
        key_values(["novalue"], "--producer-option")
    assert format_of("qlik.x") == "qlik"
    assert format_of("x") is None

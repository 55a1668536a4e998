"""Format settings on the command line: every key names its format, none is ignored."""

from __future__ import annotations

import argparse

import pytest

from capture.errors import ConfigError
from capture.flags import (
    add_command,
    format_of,
    format_settings,
    int_at_least,
    key_values,
    settings_by_format,
)


def test_keys_go_to_the_format_they_name() -> None:
    routed = settings_by_format(
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
        settings_by_format(["column_delimiter=;"], ["ibm"])


def test_a_key_of_a_format_that_is_not_an_output_is_an_error() -> None:
    with pytest.raises(ConfigError, match="setting of format ibm, which is not an output here"):
        settings_by_format(["ibm.column_delimiter=;"], ["canal"])


def test_bad_values_fail_before_any_connection() -> None:
    with pytest.raises(ConfigError, match=r"ibm\.column_delimiter"):
        format_settings(["ibm.column_delimiter=x"], "ibm")
    with pytest.raises(ConfigError, match=r"canal\.nope"):
        format_settings(["canal.nope=1"], "canal")


def test_one_format_s_settings_are_parsed_once_into_its_settings_class() -> None:
    parsed = format_settings(["ibm.column_delimiter=;", "ibm.identifier=PG"], "ibm")
    assert (parsed.column_delimiter, parsed.identifier) == (";", "PG")  # type: ignore[attr-defined]


def test_pairs_need_an_equals_sign() -> None:
    assert key_values(["a=1", "b = 2", "c="], "--x") == {"a": "1", "b": " 2", "c": ""}
    with pytest.raises(ConfigError, match="--producer-option: 'novalue' is not KEY=VALUE"):
        key_values(["novalue"], "--producer-option")
    assert format_of("qlik.x") == "qlik"
    assert format_of("x") is None


@pytest.mark.parametrize(
    ("minimum", "text", "error"),
    [
        (1, "0", "'0' must be positive"),
        (0, "-1", "'-1' must not be negative"),
        (5, "4", "'4' must be at least 5"),
        (1, "two", "'two' is not an integer"),
    ],
)
def test_int_at_least_names_the_bound(minimum: int, text: str, error: str) -> None:
    parse = int_at_least(minimum)
    assert parse(str(minimum)) == minimum
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{error}$"):
        parse(text)


def test_add_command_prints_the_module_docstring_as_written() -> None:
    parser = argparse.ArgumentParser(prog="walcast")
    commands = parser.add_subparsers()
    doc = "Line one.\n\n    indented example\n"
    add_command(commands, "demo", "the one-line help", doc)
    assert "the one-line help" in parser.format_help()
    sub = commands.choices["demo"]
    assert "    indented example" in sub.format_help()

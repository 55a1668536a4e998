"""Typed format settings: one parsing rule for every format (``capture.formats.settings``)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES, FormatOptions, format_class, parse_settings
from capture.formats.settings import FormatSettings, valid_keys

OTHER = {name: FORMAT_NAMES[(i + 1) % len(FORMAT_NAMES)] for i, name in enumerate(FORMAT_NAMES)}


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_format_declares_a_frozen_settings_dataclass(fmt: str) -> None:
    cls = format_class(fmt).settings_class
    assert issubclass(cls, FormatSettings)
    assert dataclasses.is_dataclass(cls)
    assert cls.format_name == fmt
    home = format_class(fmt).__module__  # capture.formats.<format>.encode
    package = home.rpartition(".")[0]
    assert cls.__module__ in (home, f"{package}.settings")  # in the encoder, or beside it
    assert cls.__name__ == "Settings"
    defaults = parse_settings(fmt, {})
    assert defaults == cls()
    if dataclasses.fields(cls):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(defaults, dataclasses.fields(cls)[0].name, None)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_an_unprefixed_key_is_an_error_naming_it_and_the_valid_keys(fmt: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(fmt, {"column_delimiter": ";"})
    text = str(info.value)
    assert text.startswith("column_delimiter: ")
    assert f"{fmt}.column_delimiter" in text
    for key in valid_keys(fmt, format_class(fmt).settings_class):
        assert key in text


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_key_of_another_format_is_an_error(fmt: str) -> None:
    other = OTHER[fmt]
    key = f"{other}.truncate"
    with pytest.raises(ConfigError, match=f"^{key}: not a setting of format {fmt}"):
        parse_settings(fmt, {key: "skip"})


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_an_unknown_key_is_an_error_listing_the_valid_keys(fmt: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(fmt, {f"{fmt}.no_such_setting": "1"})
    text = str(info.value)
    assert text.startswith(f"{fmt}.no_such_setting: unknown setting of format {fmt}")
    keys = valid_keys(fmt, format_class(fmt).settings_class)
    assert all(k in text for k in keys)
    if not keys:
        assert "has no settings" in text


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_encoders_take_their_parsed_settings_or_the_defaults(fmt: str) -> None:
    cls = format_class(fmt)
    parsed = parse_settings(fmt, {})
    assert cls(FormatOptions(settings=parsed)).settings is parsed
    assert cls(FormatOptions()).settings == parsed  # no settings: the defaults
    other = parse_settings(OTHER[fmt], {})
    with pytest.raises(ConfigError, match=f"given to format {fmt}"):
        cls(FormatOptions(settings=other))


def test_the_prefix_may_spell_dashes_as_underscores() -> None:
    parsed = parse_settings("dts-avro", {"dts_avro.transaction_records": "yes"})
    assert parsed.transaction_records is True
    assert parse_settings("dts-avro", {"dts-avro.heartbeats": "off"}).heartbeats is False


def test_values_are_converted_by_the_field_type() -> None:
    ibm = parse_settings("ibm", {"ibm.max_message_size": " 4096 ", "ibm.column_delimiter": "\\t"})
    assert ibm.max_message_size == 4096
    assert ibm.column_delimiter == "\t"
    canal = parse_settings("canal", {"canal.walcast_keys": "True", "canal.truncate": "skip"})
    assert canal.walcast_keys is True
    assert canal.truncate == "skip"


BAD_VALUES = [
    ("canal", "canal.walcast_keys", "maybe", "is not a boolean"),
    ("canal", "canal.truncate", "drop", "is not one of emit, skip"),
    ("canal", "canal.database_name", "catalog", "is not one of schema, database"),
    ("canal", "canal.boolean", "yes-no", "is not one of true-false, 1-0, t-f"),
    ("canal", "canal.timestamptz", "local", "is not one of utc, offset"),
    ("canal", "canal.bytea", "base32", "is not one of base64, latin1, hex"),
    ("shareplex", "shareplex.truncate", "maybe", "is not one of emit, skip"),
    ("dataworks", "dataworks.timestamp_type", "epoch", "is not one of auto, date, string"),
    ("dataworks", "dataworks.update_records", "both", "is not one of split, single"),
    ("dataworks", "dataworks.transaction_records", "sometimes", "is not a boolean"),
    ("qlik", "qlik.task", " ", "must not be empty"),
    ("dts-avro", "dts-avro.heartbeats", "maybe", "is not a boolean"),
    ("ibm", "ibm.column_delimiter", "a", "alphanumeric"),
    ("ibm", "ibm.column_delimiter", "7", "alphanumeric"),
    ("ibm", "ibm.string_delimiter", ",", "must all be different"),
    ("ibm", "ibm.decimal_character", "\\n", "must all be different"),
    ("ibm", "ibm.record_delimiter", ";;", "single character"),
    ("ibm", "ibm.record_delimiter", "", "single character"),
    ("ibm", "ibm.column_delimiter", "§", "ASCII"),
    ("ibm", "ibm.column_delimiter", "-", "+ or -"),
    ("ibm", "ibm.decimal_character", "+", "+ or -"),
    ("ibm", "ibm.column_delimiter", "\\xZZ", "escape"),
    ("ibm", "ibm.max_message_size", "10", "minimum"),
    ("ibm", "ibm.max_message_size", "lots", "is not a number of bytes"),
    ("ibm", "ibm.identifier", "", "must not be empty"),
]
"""A bad value of every setting kind: the error starts with the key and says what is wrong."""


@pytest.mark.parametrize(("fmt", "key", "value", "message"), BAD_VALUES)
def test_bad_values_name_the_key(fmt: str, key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        parse_settings(fmt, {key: value})
    assert str(info.value).startswith(key)

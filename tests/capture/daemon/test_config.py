"""Daemon configuration: file, environment, flags; every error names its setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture.daemon.config import Secret, load
from capture.errors import ConfigError

GOOD = """
[source]
dsn = "host=db dbname=app user=cdc"
slot = "walcast"
publications = ["pub_a", "pub_b"]

[kafka]
bootstrap_servers = "broker:9092"
[kafka.producer]
"compression.type" = "zstd"

[[outputs]]
format = "canal"
[outputs.settings]
"canal.database_name" = "schema"

[[outputs]]
format = "ibm"
transaction_topic = "cdc.ibm"

[daemon]
metrics_port = 0
heartbeat_interval = 5
"""

NO_CLI: dict = {}


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "walcast.toml"
    path.write_text(text)
    return str(path)


def test_file_is_loaded(tmp_path: Path) -> None:
    config = load(write(tmp_path, GOOD), NO_CLI, {})
    assert config.publications == ["pub_a", "pub_b"]
    assert [o.format for o in config.outputs] == ["canal", "ibm"]
    assert config.outputs[0].settings == {"canal.database_name": "schema"}
    assert config.outputs[1].transaction_topic == "cdc.ibm"
    settings = config.producer_settings()
    assert settings["compression.type"] == "zstd"
    assert settings["enable.idempotence"] is True
    assert settings["acks"] == "all"
    assert (config.metrics_port, config.heartbeat_interval) == (0, 5.0)


def test_environment_overrides_file_and_flags_override_environment(tmp_path: Path) -> None:
    env = {"WALCAST__KAFKA__BOOTSTRAP_SERVERS": "env:9092", "WALCAST__SOURCE__SLOT": "from_env"}
    config = load(write(tmp_path, GOOD), {"source": {"slot": "from_cli"}}, env)
    assert config.bootstrap_servers == "env:9092"
    assert config.slot == "from_cli"
    config = load(write(tmp_path, GOOD), {"outputs": {"list": [{"format": "dts-avro"}]}}, {})
    assert [o.format for o in config.outputs] == ["dts-avro"]


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        (('dsn = "host=db dbname=app user=cdc"', ""), "source.dsn"),
        (('slot = "walcast"', ""), "source.slot"),
        (('publications = ["pub_a", "pub_b"]', ""), "source.publications"),
        (('bootstrap_servers = "broker:9092"', ""), "kafka.bootstrap_servers"),
        (('format = "canal"', 'format = "xml"'), "outputs[0].format"),
        (("metrics_port = 0", 'metrics_port = "nine"'), "daemon.metrics_port"),
        (("metrics_port = 0", "metrics_port = 70000"), "daemon.metrics_port"),
        (("heartbeat_interval = 5", "heartbeat_interval = -1"), "daemon.heartbeat_interval"),
        (("heartbeat_interval = 5", "heartbeat_intervl = 5"), "daemon.heartbeat_intervl"),
        (
            ('transaction_topic = "cdc.ibm"', 'transaction_topic = "cdc.{tabel}"'),
            "outputs[1].transaction_topic",
        ),
        (('"compression.type" = "zstd"', '"acks" = "1"'), "kafka.producer.acks"),
        (('"compression.type" = "zstd"', '"sasl.password" = "x"'), "kafka.producer.sasl.password"),
        (('slot = "walcast"', 'slot = "walcast"\nstreaming = "sometimes"'), "source.streaming"),
        (("metrics_port = 0", 'schema_topic = "a b"'), "daemon.schema_topic"),
        (
            ('transaction_topic = "cdc.ibm"', 'transaction_topic = "cdc/{format}"'),
            "outputs[1].transaction_topic",
        ),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, change: tuple[str, str], setting: str) -> None:
    old, new = change
    assert old in GOOD
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, GOOD.replace(old, new)), NO_CLI, {})
    message = str(info.value)
    assert message.startswith(f"{setting}:"), message
    assert "\n" not in info.value.one_line()


def test_unknown_format_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="valid formats: json, canal, shareplex, dataworks, qlik, ibm, dts-avro"
    ):
        load(write(tmp_path, GOOD.replace('format = "canal"', 'format = "avro"')), NO_CLI, {})


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--config: file .* does not exist"):
        load(str(tmp_path / "nope.toml"), NO_CLI, {})
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load(write(tmp_path, "[source\n"), NO_CLI, {})
    with pytest.raises(ConfigError, match="WALCAST__SOURCE__SLTO: unknown setting"):
        load(write(tmp_path, GOOD), NO_CLI, {"WALCAST__SOURCE__SLTO": "x"})


def test_secrets_come_from_env_or_file_and_never_show(tmp_path: Path) -> None:
    secret_file = tmp_path / "pg.secret"
    secret_file.write_text("file-pass\n")
    text = GOOD.replace('slot = "walcast"', f'slot = "walcast"\npassword_file = "{secret_file}"')
    text = text.replace(
        'bootstrap_servers = "broker:9092"',
        'bootstrap_servers = "broker:9092"\nsasl_mechanism = "PLAIN"\nsasl_username = "u"\n'
        'sasl_password_env = "KAFKA_PW"',
    )
    config = load(write(tmp_path, text), NO_CLI, {"KAFKA_PW": "env-pass"})
    assert "password=file-pass" in config.full_dsn()
    assert config.producer_settings()["sasl.password"] == "env-pass"
    shown = repr(config) + str(config.password) + str(config.sasl_password)
    assert "file-pass" not in shown
    assert "env-pass" not in shown
    assert isinstance(config.password, Secret)
    with pytest.raises(
        ConfigError, match=r"kafka\.sasl_password_env: environment variable 'KAFKA_PW'"
    ):
        load(write(tmp_path, text), NO_CLI, {})


def test_topic_names_are_made_legal() -> None:
    from capture.daemon.config import topic_name  # noqa: PLC0415

    assert topic_name("walcast.json.public.orders") == "walcast.json.public.orders"
    assert topic_name("walcast.json.Sales Data.Ünits") == "walcast.json.Sales_Data._nits"
    assert len(topic_name("x" * 400)) == 249

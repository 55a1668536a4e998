"""Daemon configuration: file, environment, flags; every error names its setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture.config.model import Secret
from capture.config.reading import load
from capture.errors import ConfigError, InvalidSettingsError
from capture.formats import parse_settings

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
    assert config.source.publications == ["pub_a", "pub_b"]
    assert [o.format for o in config.outputs] == ["canal", "ibm"]
    assert config.outputs[0].settings == parse_settings("canal", {"canal.database_name": "schema"})
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
    assert config.source.slot == "from_cli"
    config = load(write(tmp_path, GOOD), {"outputs": {"formats": ["dts-avro"]}}, {})
    assert [o.format for o in config.outputs] == ["dts-avro"]


def only_line(info: pytest.ExceptionInfo[ConfigError]) -> str:
    """The one problem's line of a configuration error."""
    lines = info.value.lines()
    assert len(lines) == 1, lines
    assert "\n" not in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("removed", "flag"),
    [
        ('dsn = "host=db dbname=app user=cdc"', "--dsn"),
        ('slot = "walcast"', "--slot"),
        ('publications = ["pub_a", "pub_b"]', "--publication"),
        ('bootstrap_servers = "broker:9092"', "--bootstrap-servers"),
    ],
)
def test_a_missing_setting_names_every_way_to_give_it(
    tmp_path: Path, removed: str, flag: str
) -> None:
    path = write(tmp_path, GOOD.replace(removed, ""))
    with pytest.raises(ConfigError) as info:
        load(path, NO_CLI, {})
    line = only_line(info)
    key = removed.split(" = ", maxsplit=1)[0]
    section = "kafka" if key == "bootstrap_servers" else "source"
    env = f"WALCAST__{section.upper()}__{key.upper()}"
    assert line.startswith(f"missing {flag} (or "), line
    assert env in line
    assert f"{section}.{key} in {path}" in line
    assert ("$WALCAST_DSN" in line) == (flag == "--dsn")


@pytest.mark.parametrize(
    ("change", "setting"),
    [
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
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load(path, NO_CLI, {})
    line = only_line(info)
    assert line.startswith(f"{path}: {setting}:"), line


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


# -- the settings table: example file, environment, --print-config --------------------------

REPO = Path(__file__).resolve().parents[3]


def test_example_file_is_generated_from_the_settings_table() -> None:
    from capture.config.render import example_toml  # noqa: PLC0415

    assert (REPO / "walcast.example.toml").read_text() == example_toml(), (
        "walcast.example.toml is out of date: python -m capture.config.render > "
        "walcast.example.toml"
    )


def test_every_setting_is_in_the_example_and_loads_with_its_default() -> None:
    import dataclasses  # noqa: PLC0415

    from capture.config.model import SOURCE_FIELDS, DaemonConfig, OutputConfig  # noqa: PLC0415
    from capture.config.settings import OUTPUT_SETTINGS, SETTINGS  # noqa: PLC0415
    from capture.source import SourceConfig  # noqa: PLC0415

    text = (REPO / "walcast.example.toml").read_text()
    config = load(str(REPO / "walcast.example.toml"), NO_CLI, {})
    fields = {f.name: f for f in dataclasses.fields(DaemonConfig)}
    fields |= {f.name: f for f in dataclasses.fields(SourceConfig) if f.name in SOURCE_FIELDS}
    assert not SOURCE_FIELDS & {f.name for f in dataclasses.fields(DaemonConfig)}, (
        "a setting is declared twice: in SourceConfig and in DaemonConfig"
    )
    for setting in SETTINGS:
        assert (
            f"\n{setting.key} = " in text
            or f"\n# {setting.key} = " in text
            or (f"[{setting.section}.{setting.key}]" in text)
        ), setting.name
        assert setting.help.strip(), setting.name
        assert "\n" not in setting.help, setting.name
        assert setting.field in fields, f"{setting.name} has no DaemonConfig field"
        if setting.required:
            assert setting.example is not None, setting.name
            continue
        field = fields[setting.field]
        default = (
            field.default_factory()  # type: ignore[misc]
            if field.default_factory is not dataclasses.MISSING
            else field.default
        )
        assert default == setting.default, setting.name
        assert config.value(setting.field) == setting.default, setting.name
    output_fields = {f.name for f in dataclasses.fields(OutputConfig)}
    assert {s.key for s in OUTPUT_SETTINGS} == output_fields


def test_new_settings_have_the_contract_defaults(tmp_path: Path) -> None:
    config = load(write(tmp_path, GOOD), NO_CLI, {})
    assert config.snapshot == "auto"
    assert (config.snapshot_workers, config.snapshot_chunk_rows) == (2, 50_000)
    assert config.snapshot_topic == "walcast.snapshots"
    assert (config.exactly_once, config.offsets_topic) == (False, "walcast.offsets")
    assert (config.unhealthy_after, config.kafka_connect_timeout) == (60.0, 30.0)
    assert (config.source.receive_timeout, config.source.failover_slot) == (None, None)
    assert config.connect_timeout == 30.0


def test_every_scalar_setting_comes_from_the_environment(tmp_path: Path) -> None:
    env = {
        "WALCAST__SOURCE__SNAPSHOT": "initial-only",
        "WALCAST__SOURCE__SNAPSHOT_WORKERS": "4",
        "WALCAST__SOURCE__SNAPSHOT_CHUNK_ROWS": "1000",
        "WALCAST__SOURCE__PUBLISH_TABLES": "a.b, c.d",
        "WALCAST__SOURCE__SPILL_DIR": "/tmp/spill",
        "WALCAST__KAFKA__EXACTLY_ONCE": "true",
        "WALCAST__KAFKA__OFFSETS_TOPIC": "my.offsets",
        "WALCAST__DAEMON__SNAPSHOT_TOPIC": "my.snapshots",
        "WALCAST__DAEMON__UNHEALTHY_AFTER": "3",
        "WALCAST__SOURCE__RECEIVE_TIMEOUT": "45",
        "WALCAST__SOURCE__FAILOVER_SLOT": "false",
        "WALCAST__KAFKA__CONNECT_TIMEOUT": "2.5",
        "WALCAST__SOURCE__CONNECT_TIMEOUT": "0",
        "WALCAST__DAEMON__METRICS_HOST": "0.0.0.0",
    }
    config = load(write(tmp_path, GOOD), NO_CLI, env)
    assert config.snapshot == "initial-only"
    assert (config.snapshot_workers, config.snapshot_chunk_rows) == (4, 1000)
    assert config.source.publish_tables == ["a.b", "c.d"]
    assert config.source.spill_dir == "/tmp/spill"
    assert (config.exactly_once, config.offsets_topic) == (True, "my.offsets")
    assert config.snapshot_topic == "my.snapshots"
    assert (config.unhealthy_after, config.kafka_connect_timeout) == (3.0, 2.5)
    assert config.connect_timeout == 0.0
    assert (config.source.receive_timeout, config.source.failover_slot) == (45.0, False)
    assert config.metrics_host == "0.0.0.0"
    flags = {"source": {"snapshot": "never"}, "kafka": {"exactly_once": False}}
    config = load(write(tmp_path, GOOD), flags, env)
    assert (config.snapshot, config.exactly_once) == ("never", False)
    with pytest.raises(ConfigError, match=r"WALCAST__KAFKA__PRODUCER: kafka\.producer is a table"):
        load(write(tmp_path, GOOD), NO_CLI, {"WALCAST__KAFKA__PRODUCER": "x"})


@pytest.mark.parametrize(
    ("section", "line", "setting"),
    [
        ("[source]", 'snapshot = "sometimes"', "source.snapshot"),
        ("[source]", "snapshot_workers = 0", "source.snapshot_workers"),
        ("[source]", 'snapshot_chunk_rows = "many"', "source.snapshot_chunk_rows"),
        ("[source]", "proto_version = 5", "source.proto_version"),
        ("[source]", "publish_tables = 3", "source.publish_tables"),
        ("[kafka]", 'exactly_once = "maybe"', "kafka.exactly_once"),
        ("[kafka]", 'offsets_topic = ""', "kafka.offsets_topic"),
        ("[kafka]", 'offsets_topic = "a b"', "kafka.offsets_topic"),
        ("[daemon]", 'snapshot_topic = ".."', "daemon.snapshot_topic"),
        ("[daemon]", "unhealthy_after = 0", "daemon.unhealthy_after"),
        ("[daemon]", "degraded_after = 0", "daemon.degraded_after"),
        ("[source]", "receive_timeout = 0.5", "source.receive_timeout"),
        ("[source]", 'receive_timeout = "soon"', "source.receive_timeout"),
        ("[source]", 'failover_slot = "maybe"', "source.failover_slot"),
        ("[daemon]", "kafka_error_after = -1", "daemon.kafka_error_after"),
        ("[kafka]", "connect_timeout = 0", "kafka.connect_timeout"),
        ("[source]", "connect_timeout = -1", "source.connect_timeout"),
        ("[source]", 'connect_timeout = "soon"', "source.connect_timeout"),
        ("[daemon]", "metrics_host = [1]", "daemon.metrics_host"),
        ("[[outputs]]", '[outputs.settings]\n"canal.nope" = "1"', "outputs[2].settings"),
        ("[[outputs]]", '[outputs.settings]\n"ibm.max_message_size" = "x"', "outputs[2].settings"),
        ("[[outputs]]", 'topc = "x"', "outputs[2].topc"),
    ],
)
def test_bad_new_settings_are_named(tmp_path: Path, section: str, line: str, setting: str) -> None:
    if section == "[[outputs]]":
        fmt = "ibm" if "ibm." in line else "canal"
        text = f'{GOOD}\n[[outputs]]\nformat = "{fmt}"\n{line}\n'
    else:
        text = GOOD.replace(f"{section}\n", f"{section}\n{line}\n", 1)
        assert text != GOOD
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load(path, NO_CLI, {})
    line = only_line(info)
    assert line.startswith(f"{path}: {setting}:"), line


def test_print_config_loads_back_and_redacts_secrets(tmp_path: Path) -> None:
    from capture.config.render import render_toml  # noqa: PLC0415

    secret_file = tmp_path / "kafka.secret"
    secret_file.write_text("kafka-S3cret\n")
    text = GOOD.replace(
        'bootstrap_servers = "broker:9092"',
        'bootstrap_servers = "broker:9092"\nsasl_mechanism = "PLAIN"\nsasl_username = "u"\n'
        f'sasl_password_file = "{secret_file}"\nexactly_once = true',
    )
    env = {"WALCAST__DAEMON__UNHEALTHY_AFTER": "7", "PGPW": "pg-S3cret"}
    config = load(
        write(
            tmp_path, text.replace('slot = "walcast"', 'slot = "walcast"\npassword_env = "PGPW"')
        ),
        {"outputs": {"formats": ["ibm"], "format_options": ["ibm.column_delimiter=;"]}},
        env,
    )
    shown = render_toml(config)
    assert "kafka-S3cret" not in shown
    assert "pg-S3cret" not in shown
    assert 'password_env = "PGPW"' in shown
    assert "unhealthy_after = 7.0" in shown
    assert '"ibm.column_delimiter" = ";"' in shown
    again_path = tmp_path / "again.toml"
    again_path.write_text(shown)
    again = load(str(again_path), NO_CLI, {"PGPW": "pg-S3cret"})
    assert repr(again) == repr(config)
    assert again.full_dsn() == config.full_dsn()
    assert again.producer_settings() == config.producer_settings()

    with_password = load(  # from the environment: a password in the file is refused
        write(tmp_path, GOOD),
        NO_CLI,
        {"WALCAST__SOURCE__DSN": "host=db dbname=app user=cdc password='pg S3cret'"},
    )
    shown = render_toml(with_password)
    assert "S3cret" not in shown
    assert "password=********" in shown
    producer_secret = GOOD.replace('"compression.type" = "zstd"', '"ssl.key.pem" = "PEM-S3cret"')
    shown = render_toml(load(write(tmp_path, producer_secret), NO_CLI, {}))
    assert "PEM-S3cret" not in shown
    assert '"ssl.key.pem" = "********"' in shown


def test_run_print_config_through_the_cli(tmp_path: Path) -> None:
    from tests.support.scenario import walcast  # noqa: PLC0415

    done = walcast(
        "run", "--config", write(tmp_path, GOOD), "--print-config", "--exactly-once",
        "--dsn", "host=db user=cdc password=Pr1nt-S3cret", "--snapshot", "never",
        env={"WALCAST__KAFKA__CONNECT_TIMEOUT": "5"},
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Pr1nt-S3cret" not in done.stdout + done.stderr
    assert "exactly_once = true" in done.stdout
    assert 'snapshot = "never"' in done.stdout
    assert "\n[kafka]\n" in done.stdout
    kafka = done.stdout.split("\n[kafka]\n", 1)[1].split("\n[daemon]\n", 1)[0]
    assert "\nconnect_timeout = 5.0\n" in kafka
    assert 'format = "ibm"' in done.stdout


# -- passwords in source.dsn (issue 22.5) ----------------------------------------------------

PLACES = ("$PGPASSWORD", "~/.pgpass", "source.password_env", "source.password_file")


@pytest.mark.parametrize(
    "dsn",
    [
        "host=db dbname=app user=cdc password=F1le-S3cret",
        "host=db dbname=app user=cdc password='F1le S3cret'",
        "postgresql://cdc:F1le-S3cret@db/app",
        "postgresql://cdc@db/app?password=F1le-S3cret",
        "host=db user=cdc password=F1le S3cret unparseable",  # libpq cannot parse it
    ],
)
def test_a_password_in_the_files_dsn_is_refused(tmp_path: Path, dsn: str) -> None:
    text = GOOD.replace('dsn = "host=db dbname=app user=cdc"', f'dsn = """{dsn}"""')
    assert text != GOOD
    path = write(tmp_path, text)
    for flags, env in (
        (NO_CLI, {}),
        # Overridden or not, the file itself must not hold it.
        ({"source": {"dsn": "host=db user=cdc"}}, {}),
        (NO_CLI, {"WALCAST__SOURCE__DSN": "host=db user=cdc"}),
    ):
        with pytest.raises(ConfigError) as info:
            load(path, flags, env)
        line = only_line(info)
        assert line.startswith(f"{path}: source.dsn: the DSN holds a password"), line
        assert all(place in line for place in PLACES), line
        assert "S3cret" not in line
        assert info.value.exit_code == 2


def test_a_password_in_the_dsn_from_the_environment_or_a_flag_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    dsn = "host=db dbname=app user=cdc password=Env-S3cret"
    assert "password=Env-S3cret" in load(path, NO_CLI, {"WALCAST__SOURCE__DSN": dsn}).source.dsn
    assert "password=Env-S3cret" in load(path, {"source": {"dsn": dsn}}, {}).source.dsn
    # A file without a password in source.dsn (sslpassword is a key's passphrase) loads.
    ssl = GOOD.replace('user=cdc"', 'user=cdc sslpassword=k3y"')
    assert "sslpassword" in load(write(tmp_path, ssl), NO_CLI, {}).source.dsn


# -- the new settings: receive_timeout, failover_slot, unhealthy_after ------------------------


def _with(section: str, line: str) -> str:
    return GOOD.replace(f"[{section}]\n", f"[{section}]\n{line}\n", 1)


def test_receive_timeout_from_file_environment_and_flags(tmp_path: Path) -> None:
    path = write(tmp_path, _with("source", "receive_timeout = 30"))
    assert load(path, NO_CLI, {}).source.receive_timeout == 30.0
    env = {"WALCAST__SOURCE__RECEIVE_TIMEOUT": "40.5"}
    assert load(path, NO_CLI, env).source.receive_timeout == 40.5
    assert load(path, {"source": {"receive_timeout": 50.0}}, env).source.receive_timeout == 50.0
    with pytest.raises(ConfigError, match=r"^--receive-timeout: 0\.2 must be at least 1$"):
        load(path, {"source": {"receive_timeout": 0.2}}, {})


@pytest.mark.parametrize(
    ("file_line", "env", "flag", "expected"),
    [
        (None, None, None, None),
        ("failover_slot = true", None, None, True),
        ("failover_slot = false", None, None, False),
        ("failover_slot = true", "false", None, False),
        ("failover_slot = true", "auto", None, None),
        ("failover_slot = false", "AUTO", None, None),
        (None, "yes", None, True),
        ("failover_slot = true", None, False, False),
        (None, "auto", True, True),
    ],
)
def test_failover_slot_is_true_false_or_auto(
    tmp_path: Path, file_line: str | None, env: str | None, flag: bool | None, expected: bool | None
) -> None:
    path = write(tmp_path, _with("source", file_line) if file_line else GOOD)
    environ = {"WALCAST__SOURCE__FAILOVER_SLOT": env} if env is not None else {}
    config = load(path, {"source": {"failover_slot": flag}}, environ)
    assert config.source.failover_slot is expected


def test_failover_slot_auto_is_not_set_in_print_config(tmp_path: Path) -> None:
    from capture.config.render import render_toml  # noqa: PLC0415

    config = load(write(tmp_path, GOOD), NO_CLI, {"WALCAST__SOURCE__FAILOVER_SLOT": "auto"})
    shown = render_toml(config)
    assert "# failover_slot =   (not set)" in shown
    again = tmp_path / "again.toml"
    again.write_text(render_toml(load(write(tmp_path, _with("source", "failover_slot = false")),
                                      NO_CLI, {})))  # fmt: skip
    assert "\nfailover_slot = false\n" in again.read_text()
    assert load(str(again), NO_CLI, {}).source.failover_slot is False
    with pytest.raises(
        ConfigError, match=r"^WALCAST__SOURCE__FAILOVER_SLOT|^source\.failover_slot"
    ):
        load(write(tmp_path, GOOD), NO_CLI, {"WALCAST__SOURCE__FAILOVER_SLOT": "perhaps"})


def test_degraded_after_is_a_deprecated_name_of_unhealthy_after(tmp_path: Path) -> None:
    from structlog.testing import capture_logs  # noqa: PLC0415

    from capture.config.render import render_toml  # noqa: PLC0415

    old_file = write(tmp_path, _with("daemon", "degraded_after = 12"))
    with capture_logs() as events:
        config = load(old_file, NO_CLI, {})
    assert config.unhealthy_after == 12.0
    (event,) = events
    assert event["event"] == "setting_deprecated"
    assert event["log_level"] == "warning"
    assert (event["setting"], event["replaced_by"]) == (
        "daemon.degraded_after",
        "daemon.unhealthy_after",
    )
    assert "ignored" not in event
    shown = render_toml(config)
    assert "unhealthy_after = 12.0" in shown
    assert "degraded_after" not in shown

    with capture_logs() as events:  # from the environment too
        config = load(write(tmp_path, GOOD), NO_CLI, {"WALCAST__DAEMON__DEGRADED_AFTER": "8"})
    assert config.unhealthy_after == 8.0
    assert [e["setting"] for e in events] == ["daemon.degraded_after"]

    with capture_logs() as events:  # the new name wins, and the old one is said to be ignored
        config = load(
            write(tmp_path, _with("daemon", "degraded_after = 12\nunhealthy_after = 5")), NO_CLI, {}
        )
    assert config.unhealthy_after == 5.0
    (event,) = events
    assert event["ignored"] is True
    assert "ignored" in event["detail"]

    with capture_logs() as events:  # the new name alone: no warning
        assert load(write(tmp_path, _with("daemon", "unhealthy_after = 5")), NO_CLI, {})
    assert events == []


# -- every problem at once, named as given (issue 25.5) --------------------------------------


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        GOOD.replace('slot = "walcast"', 'slot = "walcast"\nsnapshot_worker = 3\nstreaming = "of"')
        .replace('bootstrap_servers = "broker:9092"', 'bootstrap_server = "broker:9092"')
        .replace('format = "canal"', 'format = "canel"')
        .replace("metrics_port = 0", "metrics_port = -1")
    )
    path = write(tmp_path, text)
    with pytest.raises(InvalidSettingsError) as info:
        load(path, {"source": {"receive_timeout": "soon"}}, {"WALCAST__SOURCE__SLTO": "x"})
    lines = info.value.lines()
    expected = [
        "WALCAST__SOURCE__SLTO: unknown setting; did you mean WALCAST__SOURCE__SLOT?",
        f"{path}: source.snapshot_worker: unknown setting; did you mean source.snapshot_workers?",
        f"{path}: kafka.bootstrap_server: unknown setting; did you mean kafka.bootstrap_servers?",
        f"{path}: source.streaming: 'of' is not one of on, off, parallel; did you mean off?",
        "--receive-timeout: 'soon' is not a number",
        (
            "missing --bootstrap-servers (or WALCAST__KAFKA__BOOTSTRAP_SERVERS, or "
            f"kafka.bootstrap_servers in {path}): the Kafka brokers to write to (host:port, "
            "comma-separated)"
        ),
        f"{path}: daemon.metrics_port: -1 must be at least 0",
        (
            f"{path}: outputs[0].format: unknown format 'canel'; valid formats: json, canal, "
            "shareplex, dataworks, qlik, ibm, dts-avro, debezium; did you mean canal?"
        ),
    ]
    assert lines == expected
    assert info.value.exit_code == 2
    assert info.value.one_line() == "; ".join(expected)


@pytest.mark.parametrize(
    ("flags", "env", "file_line", "label"),
    [
        ({"daemon": {"heartbeat_interval": "often"}}, {}, None, "--heartbeat-interval"),
        ({}, {"WALCAST__DAEMON__HEARTBEAT_INTERVAL": "often"}, None,
         "WALCAST__DAEMON__HEARTBEAT_INTERVAL"),
        ({}, {}, 'heartbeat_interval = "often"', "{path}: daemon.heartbeat_interval"),
    ],
)  # fmt: skip
def test_a_bad_value_is_named_where_it_came_from(
    tmp_path: Path, flags: dict, env: dict, file_line: str | None, label: str
) -> None:
    text = GOOD.replace("heartbeat_interval = 5", file_line or "")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load(path, flags, env)
    assert only_line(info) == label.format(path=path) + ": 'often' is not a number"


@pytest.mark.parametrize(
    ("where", "given", "expected"),
    [
        ("[kafka]", "bootstrap_server", "kafka.bootstrap_servers"),
        ("[source]", "snapshot_worker", "source.snapshot_workers"),
        ("[kafka]", "snapshot_workers", "source.snapshot_workers"),
        ("[daemon]", "kafka_eror_after", "daemon.kafka_error_after"),
        ("[source]", "pubications", "source.publications"),
    ],
)
def test_unknown_keys_get_did_you_mean(
    tmp_path: Path, where: str, given: str, expected: str
) -> None:
    path = write(tmp_path, GOOD.replace(f"{where}\n", f"{where}\n{given} = 1\n", 1))
    with pytest.raises(ConfigError) as info:
        load(path, NO_CLI, {})
    section = where.strip("[]")
    assert only_line(info) == (
        f"{path}: {section}.{given}: unknown setting; did you mean {expected}?"
    )


def test_no_suggestion_for_a_name_far_from_every_setting(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("[daemon]\n", "[daemon]\nzebra = 1\n"))
    with pytest.raises(ConfigError) as info:
        load(path, NO_CLI, {})
    assert only_line(info) == f"{path}: daemon.zebra: unknown setting"


def test_unknown_sections_environment_names_and_format_settings_get_did_you_mean(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, GOOD + '\n[sources]\nslot = "x"\n')
    with pytest.raises(ConfigError) as info:
        load(path, NO_CLI, {"WALCAST__KAFKA__BOOTSTRAP_SERVER": "b:1"})
    assert info.value.lines() == [
        (
            f"{path}: [sources]: unknown section; did you mean [source]? (sections: source, "
            "kafka, daemon, outputs)"
        ),
        (
            "WALCAST__KAFKA__BOOTSTRAP_SERVER: unknown setting; did you mean "
            "WALCAST__KAFKA__BOOTSTRAP_SERVERS?"
        ),
    ]
    text = GOOD.replace('"canal.database_name" = "schema"', '"canal.databse_name" = "schema"')
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), NO_CLI, {})
    line = only_line(info)
    assert line.startswith(f"{path}: outputs[0].settings: canal.databse_name: unknown setting")
    assert line.endswith("did you mean canal.database_name?")


def test_several_problems_in_the_environment_and_flags_alone() -> None:
    with pytest.raises(InvalidSettingsError) as info:
        load(None, {"source": {"slot": "s"}}, {"WALCAST__DAEMON__METRICS_PORT": "x"})
    lines = info.value.lines()
    assert [line.split(" ")[0] for line in lines] == [
        "missing", "missing", "missing", "WALCAST__DAEMON__METRICS_PORT:", "missing",
    ]  # fmt: skip
    assert lines[0].startswith("missing --dsn (or $WALCAST_DSN, or WALCAST__SOURCE__DSN, or ")
    assert lines[0].endswith("source.dsn in a --config file): the database to stream from "
                             "(a libpq connection string or URI)")  # fmt: skip
    assert lines[-1].startswith("missing --format (or [[outputs]] entries in a --config file)")


# -- a flag and the file never disagree silently (issue 25.6) --------------------------------


def test_every_flag_wins_over_the_file(tmp_path: Path) -> None:
    """For each setting a flag sets, the file says one thing and the flag another."""
    from capture.config.arguments import FLAGGED  # noqa: PLC0415

    given = {
        "dsn": ("host=file", "host=flag"),
        "slot": ("file_slot", "flag_slot"),
        "publications": (["file_pub"], "flag_a,flag_b"),
        "create_slot": (True, False),
        "failover_slot": (True, False),
        "create_publication": (False, True),
        "publish_tables": (["f.t"], "a.b"),
        "connect_timeout": (5, 0.0),
        "receive_timeout": (30, 45.0),
        "snapshot": ("initial", "never"),
        "snapshot_workers": (3, 4),
        "snapshot_chunk_rows": (100, 200),
        "bootstrap_servers": ("file:9092", "flag:9092"),
        "exactly_once": (True, False),
        "heartbeat_interval": (1, 2.0),
        "metrics_port": (1000, 2000),
        "split_key_updates": (True, False),
        "schema_topic": ("file.schemas", ""),
    }
    assert {s.key for s in FLAGGED} == set(given), "a flagged setting without a case here"
    lines = {"source": [], "kafka": [], "daemon": []}
    flags: dict = {"source": {}, "kafka": {}, "daemon": {}}
    for setting in FLAGGED:
        file_value, flag_value = given[setting.key]
        shown = (
            str(file_value).lower()
            if isinstance(file_value, bool)
            else repr(file_value).replace("'", '"')
        )
        lines[setting.section].append(f"{setting.key} = {shown}")
        flags[setting.section][setting.key] = flag_value
    text = (
        "\n".join(f"[{section}]\n" + "\n".join(keys) for section, keys in lines.items())
        + '\n[[outputs]]\nformat = "json"\n'
    )
    path = write(tmp_path, text)
    from_file = load(path, NO_CLI, {})
    from_flags = load(path, flags, {})
    for setting in FLAGGED:
        file_value, flag_value = given[setting.key]
        got_file = from_file.value(setting.field)
        got_flag = from_flags.value(setting.field)
        assert got_file != got_flag, setting.name
        if setting.key in ("publications", "publish_tables"):
            assert got_flag == flag_value.split(","), setting.name
        else:
            assert got_flag == flag_value, setting.name


def test_topic_flags_set_the_topics_of_the_files_outputs(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    flags = {"outputs": {"topic": "cdc.{format}.{table}", "transaction_topic": "cdc.{format}"}}
    config = load(path, flags, {})
    assert [o.format for o in config.outputs] == ["canal", "ibm"]
    assert [o.topic for o in config.outputs] == ["cdc.{format}.{table}"] * 2
    assert [o.transaction_topic for o in config.outputs] == ["cdc.{format}"] * 2
    assert config.outputs[0].settings == parse_settings("canal", {"canal.database_name": "schema"})


def test_format_options_set_their_key_in_the_files_outputs_of_their_format(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, GOOD)
    flags = {"outputs": {"format_options": ["canal.database_name=database",
                                            "ibm.column_delimiter=;"]}}  # fmt: skip
    config = load(path, flags, {})
    assert config.outputs[0].settings == parse_settings(
        "canal", {"canal.database_name": "database"}
    )
    assert config.outputs[1].settings == parse_settings("ibm", {"ibm.column_delimiter": ";"})
    with pytest.raises(ConfigError) as info:
        load(path, {"outputs": {"format_options": ["qlik.include_before=false"]}}, {})
    assert only_line(info) == (
        "--format-option: 'qlik.include_before' is a setting of format qlik, which is not an "
        f"output here (outputs of outputs in {path}: canal, ibm)"
    )
    with pytest.raises(ConfigError) as info:  # a bad value is named by the flag
        load(path, {"outputs": {"format_options": ["ibm.max_message_size=x"]}}, {})
    assert only_line(info).startswith("--format-option: ibm.max_message_size")


def test_format_replaces_the_files_outputs(tmp_path: Path) -> None:
    flags = {"outputs": {"formats": ["json"], "topic": "t.{table}"}}
    config = load(write(tmp_path, GOOD), flags, {})
    assert [(o.format, o.topic, o.settings) for o in config.outputs] == [
        ("json", "t.{table}", parse_settings("json", {}))
    ]


def test_producer_options_set_their_keys_over_the_files_table(tmp_path: Path) -> None:
    extra = '"compression.type" = "zstd"\n"linger.ms" = 5'
    path = write(tmp_path, GOOD.replace('"compression.type" = "zstd"', extra))
    config = load(path, {"producer_options": ["linger.ms=50", "batch.size=1000"]}, {})
    assert config.producer == {"compression.type": "zstd", "linger.ms": "50", "batch.size": "1000"}
    with pytest.raises(ConfigError) as info:
        load(path, {"producer_options": ["acks=1"]}, {})
    assert only_line(info) == (
        "--producer-option acks: '1': walcast requires enable.idempotence=true and acks=all "
        "(no data loss)"
    )


def test_a_dsn_password_and_a_password_source_are_one_line_naming_both(tmp_path: Path) -> None:
    path = write(tmp_path, _with("source", 'password_env = "PGPW"'))
    with pytest.raises(ConfigError) as info:
        load(path, {"source": {"dsn": "host=db password=x"}}, {"PGPW": "y"})
    assert only_line(info) == (
        f"--dsn: the DSN holds a password, and source.password_env in {path} gives one too: "
        "give one of them"
    )


def test_kafka_error_after_is_a_deprecated_name_of_kafka_connect_timeout(tmp_path: Path) -> None:
    from structlog.testing import capture_logs  # noqa: PLC0415

    with capture_logs() as events:
        config = load(write(tmp_path, _with("daemon", "kafka_error_after = 12")), NO_CLI, {})
    assert config.kafka_connect_timeout == 12.0
    (event,) = events
    assert (event["event"], event["setting"], event["replaced_by"]) == (
        "setting_deprecated", "daemon.kafka_error_after", "kafka.connect_timeout",
    )  # fmt: skip
    with capture_logs() as events:
        config = load(
            write(tmp_path, _with("kafka", "connect_timeout = 5")),
            NO_CLI,
            {"WALCAST__DAEMON__KAFKA_ERROR_AFTER": "12"},
        )
    assert config.kafka_connect_timeout == 5.0
    assert events[0]["ignored"] is True

"""``walcast run``'s flags, help and settings errors, met as a user meets them (issue 25).

Each case runs ``python -m capture run …`` in a subprocess and reads stderr line by line;
none needs PostgreSQL or Kafka (the settings are checked before any connection).
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest

from capture.cli import build_parser
from capture.config.arguments import FLAGGED, dest
from capture.config.settings import OUTPUT_SETTINGS, SETTINGS
from capture.formats import FORMAT_NAMES
from tests.support.scenario import walcast

NO_DSN = {"WALCAST_DSN": ""}


def run(*args: str, env: dict[str, str] | None = None):
    return walcast("run", *args, env={**NO_DSN, **(env or {})}, timeout=60)


def error_lines(stderr: str) -> list[str]:
    """The ``walcast: error:`` lines of stderr; every other line must be a JSON event."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [
        line.removeprefix("walcast: error: ")
        for line in lines
        if line.startswith("walcast: error: ")
    ]
    others = [line for line in lines if not line.startswith("walcast: error: ")]
    assert all(line.startswith("{") for line in others), stderr
    return errors


def run_parser() -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["run"]
    raise AssertionError("no run command")


# -- the flags are the settings' (item 4, item 6) ----------------------------------------------


def test_every_flag_of_run_sets_a_setting_and_its_help_names_it() -> None:
    parser = run_parser()
    options = {
        a.option_strings[0]: a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction)
    }
    by_flag = {s.flag: s for s in (*SETTINGS, *OUTPUT_SETTINGS) if s.flag}
    assert set(options) - set(by_flag) == {"--config", "--print-config"}
    assert set(by_flag) <= set(options), "a setting's flag is missing from run"
    for flag, setting in by_flag.items():
        assert f"{setting.name}" in (options[flag].help or ""), flag
    for setting in FLAGGED:
        assert options[setting.flag].dest == dest(setting.flag)


def test_run_help_explains_the_switches_and_lists_the_formats() -> None:
    done = walcast("run", "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for switch in ("--create-slot", "--create-publication", "--exactly-once"):
        assert f"{switch}, --no-{switch[2:]}" in text
    assert "create the slot if it does not exist (source.create_slot; default: no)" in text
    assert "create missing publications: FOR ALL TABLES, or the tables of --publish-tables" in text
    assert "output format: " + ", ".join(FORMAT_NAMES) in text
    assert "(source.connect_timeout; default: 30)" in text
    assert "examples:" in done.stdout


def test_tail_help_is_written_for_users() -> None:
    done = walcast("tail", "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0
    assert "Print every committed row change" in done.stdout
    for internal in ("WalcastError", "capture.", "``", ":class:", "tracebacks"):
        assert internal not in done.stdout
    assert "output format: " + ", ".join(FORMAT_NAMES) + " (default: json)" in " ".join(
        done.stdout.split()
    )


# -- every problem at once, in the names the user typed (item 5) -----------------------------


def test_nothing_given_lists_every_required_setting_at_once() -> None:
    done = run()
    assert done.returncode == 2
    assert done.stdout == ""
    assert error_lines(done.stderr) == [
        (
            "missing --dsn (or $WALCAST_DSN, or WALCAST__SOURCE__DSN, or source.dsn in a --config "
            "file): the database to stream from (a libpq connection string or URI)"
        ),
        (
            "missing --slot (or WALCAST__SOURCE__SLOT, or source.slot in a --config file): the "
            "logical replication slot to stream"
        ),
        (
            "missing --publication (or WALCAST__SOURCE__PUBLICATIONS, or source.publications in a "
            "--config file): the publications to stream"
        ),
        (
            "missing --bootstrap-servers (or WALCAST__KAFKA__BOOTSTRAP_SERVERS, or "
            "kafka.bootstrap_servers in a --config file): the Kafka brokers to write to "
            "(host:port, comma-separated)"
        ),
        "missing --format (or [[outputs]] entries in a --config file): at least one output "
        "format: " + ", ".join(FORMAT_NAMES),
    ]


BAD_FILE = """\
[source]
dsn = "host=db dbname=app user=cdc"
snapshot_worker = 3
publications = ["shop"]

[kafka]
bootstrap_server = "broker:9092"

[daemon]
metrics_port = "nine"

[[outputs]]
format = "canel"
"""


def test_file_environment_and_flag_problems_are_each_named_as_given(tmp_path: Path) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(BAD_FILE)
    done = run(
        "--config", str(config), "--receive-timeout", "0.5", "--bootstrap-servers", "b:9092",
        env={"WALCAST__SOURCE__SLOT": "", "WALCAST__SOURCE__STREAMING": "of"},
    )  # fmt: skip
    assert done.returncode == 2
    assert error_lines(done.stderr) == [
        f"{config}: source.snapshot_worker: unknown setting; did you mean source.snapshot_workers?",
        f"{config}: kafka.bootstrap_server: unknown setting; did you mean kafka.bootstrap_servers?",
        "WALCAST__SOURCE__SLOT: must not be empty (logical replication slot (pgoutput) to stream)",
        "WALCAST__SOURCE__STREAMING: 'of' is not one of on, off, parallel; did you mean off?",
        "--receive-timeout: 0.5 must be at least 1",
        f"{config}: daemon.metrics_port: 'nine' is not an integer",
        f"{config}: outputs[0].format: unknown format 'canel'; valid formats: "
        + ", ".join(FORMAT_NAMES)
        + "; did you mean canal?",
    ]


def test_print_config_prints_what_it_can_and_marks_the_rest(tmp_path: Path) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(BAD_FILE.replace("snapshot_worker = 3\n", ""))
    done = run("--config", str(config), "--print-config", "--heartbeat-interval", "3")
    assert done.returncode == 2
    shown = tomllib.loads(done.stdout)  # still TOML, the problems in comments
    assert shown["source"]["dsn"] == "host=db dbname=app user=cdc"
    assert shown["source"]["publications"] == ["shop"]
    assert shown["daemon"]["heartbeat_interval"] == 3.0
    assert "metrics_port" not in shown["daemon"]
    assert "format" not in shown["outputs"][0]  # the invalid format is a comment
    lines = done.stdout.splitlines()
    assert (
        "# slot =   (missing: give --slot, WALCAST__SOURCE__SLOT or source.slot in "
        + str(config)
        + ")"
        in lines
    )
    assert "# metrics_port =   (invalid: 'nine' is not an integer)" in lines
    assert (
        "# format =   (invalid: unknown format 'canel'; valid formats: "
        + ", ".join(FORMAT_NAMES)
        + "; did you mean canal?)"
        in lines
    )
    assert [line.split(": ")[0] for line in error_lines(done.stderr)] == [
        f"{config}",  # kafka.bootstrap_server: unknown setting
        f"missing --slot (or WALCAST__SOURCE__SLOT, or source.slot in {config})",
        (
            "missing --bootstrap-servers (or WALCAST__KAFKA__BOOTSTRAP_SERVERS, or "
            f"kafka.bootstrap_servers in {config})"
        ),
        f"{config}",  # daemon.metrics_port
        f"{config}",  # outputs[0].format
    ]


def test_print_config_never_shows_a_password_of_a_broken_configuration(tmp_path: Path) -> None:
    done = run(
        "--print-config", "--dsn", "host=db user=cdc password=Br0ken-S3cret", "--format", "xml"
    )
    assert done.returncode == 2
    assert "Br0ken-S3cret" not in done.stdout + done.stderr
    (dsn,) = [line for line in done.stdout.splitlines() if line.startswith("dsn = ")]
    assert "password=********" in dsn


# -- a flag and the file never disagree silently (item 6) -------------------------------------

TWO_OUTPUTS = """\
[source]
dsn = "host=db dbname=app user=cdc"
slot = "walcast"
publications = ["shop"]

[kafka]
bootstrap_servers = "broker:9092"
exactly_once = true
[kafka.producer]
"compression.type" = "zstd"

[[outputs]]
format = "canal"
topic = "file.{format}.{table}"

[[outputs]]
format = "ibm"
transaction_topic = "file.ibm"
"""


def test_topic_flags_without_format_set_the_files_outputs(tmp_path: Path) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(TWO_OUTPUTS)
    done = run(
        "--config", str(config), "--print-config", "--topic", "flag.{format}.{schema}.{table}",
        "--transaction-topic", "flag.{format}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outputs = tomllib.loads(done.stdout)["outputs"]
    assert [(o["format"], o["topic"], o["transaction_topic"]) for o in outputs] == [
        ("canal", "flag.{format}.{schema}.{table}", "flag.{format}"),
        ("ibm", "flag.{format}.{schema}.{table}", "flag.{format}"),
    ]


def test_format_options_without_format_set_the_files_outputs_of_their_format(
    tmp_path: Path,
) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(TWO_OUTPUTS)
    done = run(
        "--config", str(config), "--print-config", "--format-option", "ibm.column_delimiter=;"
    )
    assert done.returncode == 0, done.stderr
    outputs = tomllib.loads(done.stdout)["outputs"]
    assert outputs[0]["settings"] == {}
    assert outputs[1]["settings"] == {"ibm.column_delimiter": ";"}
    done = run("--config", str(config), "--format-option", "qlik.include_before=false")
    assert done.returncode == 2
    assert error_lines(done.stderr) == [
        (
            "--format-option: 'qlik.include_before' is a setting of format qlik, which is not an "
            f"output here (outputs of outputs in {config}: canal, ibm)"
        )
    ]


def test_switches_and_producer_options_win_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(TWO_OUTPUTS)
    done = run(
        "--config", str(config), "--print-config", "--no-exactly-once",
        "--producer-option", "linger.ms=5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = tomllib.loads(done.stdout)
    assert shown["kafka"]["exactly_once"] is False
    assert shown["kafka"]["producer"] == {"compression.type": "zstd", "linger.ms": "5"}


def test_format_replaces_the_files_outputs_as_its_help_says(tmp_path: Path) -> None:
    config = tmp_path / "walcast.toml"
    config.write_text(TWO_OUTPUTS)
    done = run("--config", str(config), "--print-config", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [o["format"] for o in tomllib.loads(done.stdout)["outputs"]] == ["json"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--connect-timeout", "-1"), "--connect-timeout: -1.0 must be at least 0"),
        (("--metrics-port", "70000"), "--metrics-port: 70000 must be at most 65535"),
        (("--schema-topic", "a b"), "--schema-topic: 'a b' is not a legal Kafka topic name"),
    ],
)
def test_a_bad_flag_value_is_named_by_its_flag(args: tuple[str, ...], expected: str) -> None:
    done = run(
        "--dsn", "host=db", "--slot", "s", "--publication", "p", "--bootstrap-servers", "b:1",
        "--format", "json", *args,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = error_lines(done.stderr)
    assert line.startswith(expected), line

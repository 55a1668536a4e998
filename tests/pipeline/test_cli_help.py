"""``walcast spark …`` help and hints, as a user meets them (issue 25.4 and 25.9).

The help of ``spark``, ``spark normalize`` and ``spark materialize`` says what each job does
and which store materialize writes when neither ``--delta`` nor ``--parquet`` is given; the
missing-topic hints of normalize give a ``walcast consume --list-topics`` command line that,
pasted as it is, lists the topic names (not messages).
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.formats import FORMAT_NAMES
from tests.support import scenario as sc


def help_of(*command: str) -> str:
    done = sc.walcast(*command, "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def option_help(text: str, flag: str) -> str:
    """The help of ``flag`` in an argparse ``--help``: its line and the indented ones after."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(flag))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 10):
            break
        block.append(line)
    return " ".join(" ".join(block).split())


def test_spark_help_describes_both_jobs() -> None:
    text = help_of("spark")
    assert "normalize reads the topics of one format" in text
    assert "materialize folds that table" in text
    assert "walcast spark normalize --bootstrap-servers" in text.split("examples:")[1]


def test_materialize_help_names_the_default_store() -> None:
    text = help_of("spark", "materialize")
    assert "Delta Lake tables (one MERGE per table and batch) when" in text
    delta = option_help(text, "--delta")
    parquet = option_help(text, "--parquet")
    assert "default when delta-spark and its jar are installed" in delta, delta
    assert "default when Delta Lake is not installed" in parquet, parquet
    assert "walcast spark materialize --input" in text.split("examples:")[1]


def test_normalize_help_lists_formats_and_defaults() -> None:
    text = help_of("spark", "normalize")
    for name in FORMAT_NAMES:
        assert name in option_help(text, "--format")
    assert "(default 30)" in option_help(text, "--kafka-timeout")
    assert "default earliest" in option_help(text, "--starting-offsets")
    assert "walcast spark normalize --bootstrap-servers" in text.split("examples:")[1]


# -- the missing-topic hints run as they are written ---------------------------------------


@pytest.fixture
def walcast_topic(kafka_bootstrap: str) -> Iterator[str]:
    """A new topic under walcast's default prefix (unique; deleted after)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    topic = f"walcast.help_hint_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    try:
        yield topic
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


def suggested_command(stderr: str) -> list[str]:
    """The ``walcast consume … --list-topics …`` command the one error line suggests."""
    (line,) = stderr.splitlines()
    assert line.startswith("walcast: error: "), line
    found = re.search(r"(walcast consume .*?--list-topics(?: --topic '[^']*')?) lists", line)
    assert found, line
    words = shlex.split(found.group(1))
    assert words[:2] == ["walcast", "consume"]
    return words[1:]


def normalize(tmp_path: Path, bootstrap: str, *topics: str) -> list[str]:
    done = sc.walcast(
        "spark", "normalize", "--bootstrap-servers", bootstrap, *topics, "--format", "canal",
        "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "cp"),
        "--available-now", timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    return suggested_command(done.stderr)


@pytest.mark.integration
def test_the_missing_topic_hint_lists_the_topics(
    kafka_bootstrap: str, walcast_topic: str, tmp_path: Path
) -> None:
    command = normalize(tmp_path, kafka_bootstrap, "--topic", f"walcast.missing_{uuid.uuid4().hex}")
    assert command[-2:] == ["--topic", "^walcast\\."]
    listed = sc.walcast(*command)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [walcast_topic, "2"] in rows
    assert all(name.startswith("walcast.") for name, _ in rows)  # names, not messages


@pytest.mark.integration
def test_the_pattern_hint_lists_the_topics(
    kafka_bootstrap: str, walcast_topic: str, tmp_path: Path
) -> None:
    pattern = f"nothing[.]matches[.]{uuid.uuid4().hex}"
    command = normalize(tmp_path, kafka_bootstrap, "--topic-pattern", pattern)
    assert "--topic" not in command
    listed = sc.walcast(*command)
    assert listed.returncode == 0, listed.stderr
    assert f"{walcast_topic}\t2" in listed.stdout.splitlines()

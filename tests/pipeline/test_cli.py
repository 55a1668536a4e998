"""``walcast spark normalize`` as a user meets it: a summary, and one-line errors.

Each mistake (a missing topic, a dead broker, a wrong ``--format``) ends with one
``walcast: error:`` line naming what to fix, a non-zero exit and no Java stack trace; a
good run prints one line per batch and a summary.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from bench.kit import kafka as k
from tests.support import scenario as sc

pytestmark = pytest.mark.integration


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("walcast: error:")]


def assert_one_line_error(done, *needles: str) -> None:
    (line,) = done.stderr.splitlines()  # nothing else: no Spark or JVM start-up notice
    assert error_lines(line) == [line]
    for needle in needles:
        assert needle in line, line
    assert "Traceback" not in done.stderr
    assert "\tat org.apache" not in done.stderr  # no Java stack trace


def normalize(tmp_path: Path, *args: str, timeout: float = 300):
    return sc.walcast(
        "spark", "normalize", "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "cp"), "--available-now", *args, timeout=timeout,
    )  # fmt: skip


def test_a_missing_topic_is_one_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"missing.{uuid.uuid4().hex[:8]}"
    done = normalize(
        tmp_path, "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--format", "canal"
    )
    assert done.returncode == 2
    assert_one_line_error(done, repr(topic), "does not exist", "--topic")


def test_a_pattern_matching_nothing_is_one_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    done = normalize(
        tmp_path, "--bootstrap-servers", kafka_bootstrap,
        "--topic-pattern", r"nothing\.matches\.[0-9a-f]{32}", "--format", "canal",
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line_error(done, "--topic-pattern", "matches no topic")


def test_a_dead_broker_is_one_line_within_the_timeout(tmp_path: Path, refused: int) -> None:
    dead = f"127.0.0.1:{refused}"
    started = time.monotonic()
    done = normalize(
        tmp_path, "--bootstrap-servers", dead, "--topic", "t", "--format", "canal",
        "--kafka-timeout", "3",
    )  # fmt: skip
    assert time.monotonic() - started < 60
    assert done.returncode == 4
    assert_one_line_error(done, dead, "did not answer within 3 s", "--bootstrap-servers")


def test_a_wrong_format_fails_and_a_right_one_summarises(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"cli.qlik.{uuid.uuid4().hex[:8]}"
    layouts = f"{topic}.layouts"  # its own: the shared walcast.schemas may hold other records
    made = sc.walcast(
        "produce-test-stream", "--format", "qlik", "--count", "200",
        "--kafka", kafka_bootstrap, "--topic", topic, "--schema-topic", layouts,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    wrong = normalize(
        tmp_path / "wrong", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--format", "canal", "--layout-topic", layouts,
    )  # fmt: skip
    assert wrong.returncode == 5
    assert_one_line_error(wrong, "do not parse as canal", "--max-quarantine-ratio", "--format")
    assert not list((tmp_path / "wrong" / "out").glob("**/*.parquet"))  # nothing written

    right = normalize(
        tmp_path / "right", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--format", "qlik", "--layout-topic", layouts,
    )  # fmt: skip
    assert right.returncode == 0, right.stderr[-3000:]
    lines = right.stderr.splitlines()
    assert all(line.startswith("walcast spark normalize: ") for line in lines), lines[:3]
    (batch,) = [line for line in lines if ": batch 0: " in line]
    assert ": batch 0: 200 changes written, quarantined none, " in batch
    last = len(k.read_all(kafka_bootstrap, [topic])) - 1  # 200 changes and qlik's MD messages
    assert batch.endswith(f"rows/s; offsets {topic}[0] 0-{last}"), batch  # one partition
    assert lines[-1].startswith("walcast spark normalize: done: 1 batch, 200 changes written")

    folded = sc.walcast(
        "spark", "materialize", "--input", str(tmp_path / "right" / "out"),
        "--output", str(tmp_path / "state"), "--checkpoint", str(tmp_path / "state-cp"),
        "--bootstrap-servers", kafka_bootstrap, "--layout-topic", layouts, "--parquet",
        "--available-now",
    )  # fmt: skip
    assert folded.returncode == 0, folded.stderr[-3000:]
    batch, done = folded.stderr.splitlines()  # nothing else: no Spark or JVM notice
    assert batch.startswith("walcast spark materialize: batch 0: 200 changes into "), batch
    # The synthetic stream's source (synthetic/shop/seed-0) has a directory of its own.
    (source_dir,) = (tmp_path / "state").glob("source-*")
    assert source_dir.name == "source-shop.seed-0.synthetic"
    tables = sorted(p.name for p in (source_dir / "shop").iterdir())
    assert f" {len(tables)} tables (" in batch
    assert all(f"shop.{t} " in batch for t in tables), (batch, tables)
    assert done.startswith(
        f"walcast spark materialize: done: 1 batch, 200 changes into {len(tables)} tables "
        f"under {tmp_path / 'state'}, "
    ), done


def parsed(add_arguments, *argv: str):
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(("given", "expected"), [([], None), (["--min-partitions", "0"], 0)])
def test_min_partitions_reaches_the_job(given: list[str], expected: int | None) -> None:
    from pipeline.cli import add_normalize_arguments, normalize_job  # noqa: PLC0415

    args = parsed(
        add_normalize_arguments, "--bootstrap-servers", "b:9092", "--topic", "t",
        "--format", "ibm", "--output", "o", "--checkpoint", "c", *given,
    )  # fmt: skip
    assert normalize_job(args).min_partitions == expected


SHARED = ("--bootstrap-servers", "b:9092", "--checkpoint", "c", "--kafka-timeout", "7")
NORMALIZE = ("--topic", "t", "--format", "canal", "--output", "o")
MATERIALIZE = ("--input", "i", "--output", "o")


def test_the_shared_flags_reach_both_jobs() -> None:
    from pipeline import cli  # noqa: PLC0415

    more = ("--layout-topic", "l", "--processing-time", "5 seconds")
    normalize = cli.normalize_job(parsed(cli.add_normalize_arguments, *SHARED, *more, *NORMALIZE))
    materialize = cli.materialize_job(
        parsed(cli.add_materialize_arguments, *SHARED, *more, *MATERIALIZE)
    )
    for job in (normalize, materialize):
        assert (job.bootstrap, job.checkpoint, job.layout_topic) == ("b:9092", "c", "l")
        assert (job.available_now, job.processing_time, job.kafka_timeout) == (
            False,
            "5 seconds",
            7.0,
        )
    assert (normalize.topics, normalize.format, normalize.output) == (["t"], "canal", "o")
    assert (materialize.normalized, materialize.state) == ("i", "o")


def test_a_bad_kafka_timeout_is_a_config_error_of_both_jobs() -> None:
    from capture.errors import ConfigError  # noqa: PLC0415
    from pipeline import cli  # noqa: PLC0415

    bad = (*SHARED, "--kafka-timeout", "0")  # the last one counts
    with pytest.raises(ConfigError, match=r"^--kafka-timeout: 0 must be positive$"):
        cli.materialize_job(parsed(cli.add_materialize_arguments, *bad, *MATERIALIZE))
    with pytest.raises(ConfigError, match=r"^--kafka-timeout: 0 must be positive$"):
        cli.normalize_job(parsed(cli.add_normalize_arguments, *bad, *NORMALIZE))
    ratio = ("--max-quarantine-ratio", "2")
    with pytest.raises(ConfigError, match=r"^--max-quarantine-ratio: 2 is not in"):  # first
        cli.normalize_job(parsed(cli.add_normalize_arguments, *bad, *NORMALIZE, *ratio))


def test_a_negative_min_partitions_is_one_line(tmp_path: Path) -> None:
    done = normalize(tmp_path, "--bootstrap-servers", "b:9092", "--topic", "t",
                     "--format", "ibm", "--min-partitions", "-1")  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()  # argparse's usage error, one line
    assert line.startswith("walcast spark normalize: error: argument --min-partitions: '-1'")


def test_materialize_of_a_missing_input_is_one_line(tmp_path: Path) -> None:
    done = sc.walcast(
        "spark", "materialize", "--input", str(tmp_path / "never-normalized"),
        "--output", str(tmp_path / "state"), "--checkpoint", str(tmp_path / "cp"),
        "--available-now",
    )  # fmt: skip
    assert done.returncode == 2
    assert_one_line_error(done, "--input", "never-normalized", "walcast spark normalize")


def test_materialize_with_a_dead_broker_is_one_line_within_the_timeout(
    tmp_path: Path, refused: int
) -> None:
    dead = f"127.0.0.1:{refused}"
    (tmp_path / "in").mkdir()
    started = time.monotonic()
    done = sc.walcast(
        "spark", "materialize", "--input", str(tmp_path / "in"),
        "--output", str(tmp_path / "state"), "--checkpoint", str(tmp_path / "cp"),
        "--bootstrap-servers", dead, "--kafka-timeout", "3", "--available-now",
    )  # fmt: skip
    assert time.monotonic() - started < 60
    assert done.returncode == 4
    assert_one_line_error(done, dead, "did not answer within 3 s", "--bootstrap-servers")

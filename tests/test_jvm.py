"""The tests' class-data archive (:mod:`tests.support.jvm`) is used by a driver JVM
that Spark's launcher starts: a change of the class path, the JDK or the options that made
it unusable would only make every test slower, so this test says so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import jvm
from tests.support.jvm import LIGHT_JVM_OPTIONS

pytestmark = pytest.mark.integration


def _classes_from_archive(options: str, log: Path) -> int:
    """How many classes a ``spark-submit --version`` driver with ``options`` loaded from the
    archive (``-Xlog:class+load``: ``source: shared objects file (top)``)."""
    import pyspark  # noqa: PLC0415

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run(
        [str(submit), "--version"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SPARK_SUBMIT_OPTS": f"{options} -Xlog:class+load=info:file={log}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return log.read_text().count("source: shared objects file (top)")


def test_a_spark_driver_maps_its_classes_from_the_archive(tmp_path: Path) -> None:
    archive = jvm.ensure(LIGHT_JVM_OPTIONS)
    options = f"{LIGHT_JVM_OPTIONS} {jvm.options(archive)}"
    assert _classes_from_archive(options, tmp_path / "with.log") > 1000
    # without it, none: what the count above measures is the archive
    assert _classes_from_archive(LIGHT_JVM_OPTIONS, tmp_path / "without.log") == 0


def test_an_archive_that_does_not_match_is_silent(tmp_path: Path) -> None:
    """A class path the archive was not made with: the JVM runs without it, and prints
    nothing of it (the commands under test keep their output)."""
    archive = jvm.ensure(LIGHT_JVM_OPTIONS)
    java = os.environ.get("JAVA_HOME", "")
    done = subprocess.run(
        [f"{java}/bin/java" if java else "java", *jvm.options(archive).split(),
         "-cp", str(tmp_path), "-version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "archive" not in done.stderr, done.stderr

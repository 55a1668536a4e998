"""Drive the Java reader harness (``tests/readers/src``): one JVM for the whole session.

``scripts/build-readers`` fetches the readers' jars from Maven Central once into
``~/.cache/walcast/readers-<hash>`` and compiles the harness; :class:`ReaderHarness`
starts it and sends one request per batch of messages. A missing Java, Maven or jar is a
test failure (``pytest.fail``), never a skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "build-readers"
AVRO_SCHEMA = REPO / "schemas" / "dts-avro-Record.avsc"

# The DTS SDK's DateTime reads the JVM's time-zone data through sun.util.calendar, which
# Java 9+ only opens on request (the SDK targets Java 8).
JVM_FLAGS = ["--add-exports", "java.base/sun.util.calendar=ALL-UNNAMED", "-Xss4m", "-Xmx512m"]

# What each reader is, for reports and the README.
READERS = {
    "flink-canal": "Apache Flink flink-json 1.20.3 CanalJsonDecodingFormat (canal-json)",
    "flink-debezium": "Apache Flink flink-json 1.20.3 DebeziumJsonDecodingFormat (debezium-json)",
    "canal-flatmessage": "canal 1.1.8 FlatMessage via fastjson2 2.0.31 JSON.parseObject",
    "dts-sdk": "Alibaba DTS dts-new-subscribe-sdk 2.0.0 AvroDeserializer + DefaultUserRecord",
    "avro-generic": "Apache Avro 1.12.2 GenericDatumReader with schemas/dts-avro-Record.avsc",
}


def _classpath(directory: Path) -> str:
    jars = sorted(directory.glob("*.jar"))
    if not jars:
        pytest.fail(f"no jars in {directory}: run scripts/build-readers", pytrace=False)
    return ":".join(str(j) for j in jars)


def build() -> Path:
    """Run ``scripts/build-readers`` (a no-op when its cache is complete)."""
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} not found: the reader tests need a JDK 17+ and Maven "
                "(apt-get install default-jdk-headless maven)",
                pytrace=False,
            )
    done = subprocess.run(
        [str(BUILD)], capture_output=True, text=True, check=False, timeout=900, cwd=REPO
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/build-readers failed:\n{done.stderr[-4000:]}", pytrace=False)
    return Path(done.stdout.strip().splitlines()[-1])


class ReaderHarness:
    """One running harness JVM; :meth:`read` feeds it a batch of messages."""

    def __init__(self, cache: Path, workdir: Path) -> None:
        self.workdir = workdir
        self.avro_classpath = f"{cache / 'classes-avro'}:{_classpath(cache / 'avro-jars')}"
        classpath = f"{cache / 'classes'}:{_classpath(cache / 'jars')}"
        self.stderr = (workdir / "harness.stderr").open("wb")
        self.process = subprocess.Popen(
            ["java", *JVM_FLAGS, "-cp", classpath, "walcast.readers.Harness"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=workdir,  # the DTS SDK's log4j writes dts-new-subscribe.log into its cwd
            text=True,
            encoding="utf-8",
        )
        self._batch = 0
        self.counts: dict[tuple[str, str], tuple[int, int]] = {}
        """(reader, label) → (messages read, messages given), for the session report."""

    def read(
        self, reader: str, messages: list[str], label: str, **options: Any
    ) -> list[dict[str, Any]]:
        """What ``reader`` understood of each message (``{"error": ...}`` where it failed)."""
        self._batch += 1
        source = self.workdir / f"{self._batch:03d}-{reader}.in"
        target = self.workdir / f"{self._batch:03d}-{reader}.out"
        source.write_text("".join(m + "\n" for m in messages), encoding="utf-8")
        if reader == "avro-generic":
            options = {"schema": str(AVRO_SCHEMA), "avroClasspath": self.avro_classpath, **options}
        request = {
            "reader": reader,
            "input": str(source),
            "output": str(target),
            "options": options,
        }
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer_line = self.process.stdout.readline()
        if not answer_line:
            self.stderr.flush()
            log = (self.workdir / "harness.stderr").read_text(errors="replace")[-4000:]
            pytest.fail(f"the reader harness JVM exited:\n{log}", pytrace=False)
        answer = json.loads(answer_line)
        assert answer["ok"], answer
        output = target.read_text(encoding="utf-8")
        # newlines only: str.splitlines would also split at U+0085 inside a JSON string
        results = [json.loads(line) for line in output.split("\n")[:-1]]
        assert len(results) == len(messages)
        self.counts[(reader, label)] = (answer["read"], len(messages))
        return results

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()

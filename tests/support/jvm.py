"""The JVM options of the Spark drivers and Kafka brokers the tests start, and a class-data
archive (AppCDS) for the drivers.

Each Spark driver (the session of a test worker, and every ``walcast spark`` or
``spark-submit`` process a test starts: about 70 in ``make test``) loads and verifies some
ten thousand classes of Spark's jars before its first query. With a dynamic class-data
archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after) it
maps them, already parsed and verified, instead: measured 2026-12-05 on
``tests/pipeline/test_cli.py::test_a_wrong_format_fails_and_a_right_one_summarises``
(three such JVMs), 14-17 s of CPU per JVM instead of 18-27 s.

:func:`ensure` makes the archive once per JDK and Spark installation, by running
:func:`_workload` in a driver started with ``-XX:ArchiveClassesAtExit``, and returns the
JVM options that use it (:func:`options`). ``make test-integration`` calls it (through
``WALCAST_TEST_JVM_ARCHIVE=1``, read by ``tests/conftest.py``; or ``make jvm-archive``
before it, beside the type check) and the options join
``SPARK_SUBMIT_OPTS``, which Spark's launcher gives every driver it starts.

Invariants:

* The archive is named by what it depends on (:func:`_key`: the ``java`` binary and its
  version, every jar of ``$SPARK_HOME/jars`` with its size and time): a changed
  installation gets a new one, never a stale one. The JVM checks the rest (its class path
  must begin with the one the archive was made with).
* An archive that does not match a JVM is only not used: the JVM loads its classes as
  without it, and says nothing (``-Xlog:cds=off,cds+dynamic=off``: its warning would reach
  the terminal of the command under test, whose output the tests check line by line).
  A test's result never depends on the archive; its speed does.
* Most archived classes are of the JVM's own class path (Spark, Scala, Hadoop). Those of
  ``spark.jars`` (Delta, Iceberg, Kafka's connector: another class loader) are mapped only
  in part (``-Xlog:class+load``, 2026-12-05: some of Delta's, none of Kafka's client).
* The archive is written under a temporary name and renamed: two test runs making it at
  once each write their own, and a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LIGHT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
"""The JIT's first tier and the serial collector, for the JVMs the tests start that run one
short job or mostly idle (an environment's own value of the variable wins). The code cache
keeps the size it has with both tiers: with the first tier only, the JVM shrinks it to 48 MB,
which a session that runs for minutes outgrows (``tests/test_soak.py`` run alone, whose
session gets these flags: ``VirtualMachineError: Out of space in CodeCache for adapters``
in a materialize batch, 2026-12-04):

* every Spark driver a test starts as a process (``walcast spark …``, ``spark-submit``, the
  demo), through ``SPARK_SUBMIT_OPTS``, which Spark's launcher reads: the machine's CPU for
  ``tests/pipeline/test_cli.py::test_a_wrong_format_fails_and_a_right_one_summarises``
  (three such JVMs) went from 158 s to 114 s, at the same wall time (2026-12-03). An
  in-process session's own flags come after these and win (``tests/pipeline/conftest.py``);
* each test worker's Kafka broker, through ``KAFKA_JVM_OPTS`` (``scripts/local-services``):
  idle, it uses 1.6% of a core instead of 2.5%."""

QUIET = "-Xlog:cds=off,cds+dynamic=off"
"""Silences the JVM's notice that an archive does not match (see the module's invariants)."""
ENV = "WALCAST_TEST_JVM_ARCHIVE"
"""Set to 1 (``make test-integration`` does), the test session makes or reuses the archive
before any worker starts, and every Spark driver of the run uses it."""


def _spark_jars() -> Path:
    import pyspark  # noqa: PLC0415

    return Path(pyspark.__file__).parent / "jars"


def _java() -> Path:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    if not found:
        raise RuntimeError(f"{ENV}: no java on PATH or in JAVA_HOME")
    return Path(found).resolve()


def _key() -> str:
    """A digest of everything the archive depends on (module invariants)."""
    java = _java()
    version = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, check=True, timeout=60
    ).stderr
    digest = hashlib.sha256(f"{java}\n{version}\n".encode())
    for jar in sorted(_spark_jars().glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def path() -> Path:
    """Where the archive of this JDK and Spark installation lives (made or not)."""
    from pipeline.session import cache_dir  # noqa: PLC0415

    return cache_dir() / "jvm" / f"spark-driver-{_key()}.jsa"


def options(archive: Path) -> str:
    """The JVM options that use ``archive`` (quietly when it does not match)."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def ensure(base_options: str, timeout: float = 600) -> Path:
    """The archive, made first when missing (one driver run of :func:`_workload` with
    ``base_options``: about 40 s). Raises RuntimeError naming the log when the run fails."""
    archive = path()
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="walcast-jvm-archive-") as work:
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{base_options} -XX:ArchiveClassesAtExit={partial}",
        }
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.jvm", work],
            capture_output=True, text=True, env=env, timeout=timeout, check=False,
        )  # fmt: skip
        if done.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            raise RuntimeError(
                f"{ENV}: making the class-data archive failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-1500:]}"
            )
    partial.replace(archive)
    return archive


def _workload(work: Path) -> None:
    """What most test drivers do, so that their classes are loaded (and archived): a
    session with the tests' settings, JSON parsed, a fold with a window, Parquet and Delta
    written and read back, a streaming query over files."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    from pipeline.session import SessionOptions, build_session  # noqa: PLC0415

    spark = build_session(SessionOptions(shuffle_partitions=2))
    rows = [(i, f'{{"id": {i}, "v": "x{i}", "t": "2026-12-05T00:00:0{i % 10}Z"}}')
            for i in range(50)]  # fmt: skip
    frame = spark.createDataFrame(rows, "k long, value string")
    parsed = frame.select(
        "k", F.from_json("value", "id long, v string, t timestamp").alias("j")
    ).select("k", "j.*")
    last = parsed.withColumn(
        "n", F.row_number().over(Window.partitionBy(F.col("k") % 5).orderBy(F.col("t").desc()))
    ).where("n = 1")
    last.groupBy("v").agg(F.count(F.lit(1)), F.max("t"), F.collect_set("id")).collect()
    parsed.write.mode("overwrite").parquet(str(work / "p"))
    spark.read.parquet(str(work / "p")).join(last, "k", "left").collect()
    parsed.write.format("delta").mode("overwrite").save(str(work / "d"))
    spark.read.format("delta").load(str(work / "d")).count()
    query = (
        spark.readStream.schema(parsed.schema).parquet(str(work / "p"))
        .writeStream.trigger(availableNow=True)
        .foreachBatch(lambda batch, _: batch.count())
        .option("checkpointLocation", str(work / "c"))
        .start()
    )  # fmt: skip
    query.awaitTermination()
    # Kafka's client classes (most tests' drivers read a topic): no broker answers
    with contextlib.suppress(Exception):
        spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option(
            "subscribe", "t"
        ).option("kafka.default.api.timeout.ms", "1000").option(
            "kafka.request.timeout.ms", "500"
        ).load().count()
    spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes: wait
    # for it, or the caller would look for the archive before it is written.
    from pyspark import SparkContext  # noqa: PLC0415

    process = SparkContext._gateway.proc  # type: ignore[union-attr]
    process.stdin.close()
    process.wait(timeout=300)


if __name__ == "__main__":
    # `python -m tests.support.jvm`: make the archive (or find it) and print its path;
    # with a directory: the workload, in the driver that writes the archive
    if len(sys.argv) > 1:
        _workload(Path(sys.argv[1]))
    else:
        print(ensure(LIGHT_JVM_OPTIONS))

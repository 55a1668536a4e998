"""Start PySpark's driver JVM with its stderr filtered of the JVM's own start-up notice.

Spark 4's launcher always adds ``--add-modules=jdk.incubator.vector`` to the driver's
command line, and the JVM answers with ``WARNING: Using incubator modules:
jdk.incubator.vector`` on stderr before any logging is configured: a line from a library,
not from walcast, on every job's terminal. No JVM option silences it, so walcast starts
the gateway itself (PySpark's own :func:`pyspark.java_gateway.launch_gateway`, the same
command and settings ``SparkContext`` would use) with stderr on a pipe, and copies every
other byte to its own stderr, line by line, as it comes.

The JVM's stdout goes the same way, to walcast's stderr: walcast's stdout carries data
(``walcast spark show`` prints rows there), and a library's ``println`` must not land
among them. Delta Lake's VACUUM prints its counts there (``Deleted 3 files and
directories in a total of 1 directories.``); ``walcast spark maintain`` says them in its
own line, so those lines (:data:`DROPPED_PATTERNS`) are dropped.

Invariants:

* Only lines equal to :data:`DROPPED_LINES` or matching :data:`DROPPED_PATTERNS` are
  dropped; everything else the JVM writes (log4j's lines, a crash report) reaches stderr
  unchanged and in order.
* Nothing happens when a gateway exists already: a second session in the same process,
  or a driver started by ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` set), where the JVM
  and its stderr belong to ``spark-submit``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from typing import IO

DROPPED_LINES = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})
"""Exact stderr lines (without the line end) the driver JVM prints that walcast drops."""
DROPPED_PATTERNS = (
    re.compile(rb"Deleted \d+ files( and directories)? in a total of \d+ directories\."),
    re.compile(rb"Found \d+ files( and directories)? in a total of \d+ directories that are"
               rb" safe to delete\..*"),
)  # fmt: skip
"""Lines of the JVM's stdout walcast drops (fully matched): Delta Lake VACUUM's counts."""


def launch_quiet_gateway(settings: dict[str, str]) -> None:
    """Start the driver JVM with ``settings`` (``--conf`` pairs) unless one is running."""
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:  # noqa: SLF001
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(  # type: ignore[no-untyped-call]
        conf, popen_kwargs={"stderr": subprocess.PIPE, "stdout": subprocess.PIPE}
    )
    process = gateway.proc
    for name, stream in (("jvm-stderr", process.stderr), ("jvm-stdout", process.stdout)):
        threading.Thread(
            target=copy_filtered, args=(stream, sys.stderr), name=name, daemon=True
        ).start()
    SparkContext._gateway = gateway  # noqa: SLF001
    SparkContext._jvm = gateway.jvm  # noqa: SLF001


def copy_filtered(source: IO[bytes], target: IO[str]) -> None:
    """Copy ``source`` to ``target`` line by line, leaving out the dropped lines."""
    sink = getattr(target, "buffer", None)
    for line in iter(source.readline, b""):
        bare = line.rstrip(b"\r\n")
        if bare in DROPPED_LINES or any(p.fullmatch(bare) for p in DROPPED_PATTERNS):
            continue
        try:
            if sink is not None:
                sink.write(line)
            else:
                target.write(line.decode(errors="replace"))
            target.flush()
        except (OSError, ValueError):  # our stderr is gone: keep draining, or the JVM blocks
            continue

"""Start PySpark's driver JVM with its stderr filtered of the JVM's own start-up notice.

Spark 4's launcher always adds ``--add-modules=jdk.incubator.vector`` to the driver's
command line, and the JVM answers with ``WARNING: Using incubator modules:
jdk.incubator.vector`` on stderr before any logging is configured: a line from a library,
not from walcast, on every job's terminal. No JVM option silences it, so walcast starts
the gateway itself (PySpark's own :func:`pyspark.java_gateway.launch_gateway`, the same
command and settings ``SparkContext`` would use) with stderr on a pipe, and copies every
other byte to its own stderr, line by line, as it comes.

Invariants:

* Only lines equal to :data:`DROPPED_LINES` are dropped; everything else the JVM writes
  (log4j's lines, a crash report) reaches stderr unchanged and in order.
* Nothing happens when a gateway exists already: a second session in the same process,
  or a driver started by ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` set), where the JVM
  and its stderr belong to ``spark-submit``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO

DROPPED_LINES = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})
"""Exact stderr lines (without the line end) the driver JVM prints that walcast drops."""


def launch_quiet_gateway(settings: dict[str, str]) -> None:
    """Start the driver JVM with ``settings`` (``--conf`` pairs) unless one is running."""
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:  # noqa: SLF001
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    process = gateway.proc
    threading.Thread(
        target=copy_filtered, args=(process.stderr, sys.stderr), name="jvm-stderr", daemon=True
    ).start()
    SparkContext._gateway = gateway  # noqa: SLF001
    SparkContext._jvm = gateway.jvm  # noqa: SLF001


def copy_filtered(source: IO[bytes], target: IO[str]) -> None:
    """Copy ``source`` to ``target`` line by line, leaving out :data:`DROPPED_LINES`."""
    sink = getattr(target, "buffer", None)
    for line in iter(source.readline, b""):
        if line.rstrip(b"\r\n") in DROPPED_LINES:
            continue
        try:
            if sink is not None:
                sink.write(line)
            else:
                target.write(line.decode(errors="replace"))
            target.flush()
        except (OSError, ValueError):  # our stderr is gone: keep draining, or the JVM blocks
            continue

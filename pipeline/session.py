"""The Spark session walcast's jobs run in, with the connector jars from the local cache.

Jars (Kafka source, spark-avro, Delta Lake) come from Maven Central through
``scripts/fetch-spark-jars`` and are cached under
``${WALCAST_CACHE_DIR:-$HOME/.cache/walcast}/spark-<pyspark version>/jars``; the session
loads them with ``spark.jars`` (local files), never with ``spark.jars.packages``, so a
running job downloads nothing.

Invariants:

* :func:`build_session` returns a session whose classpath holds the Kafka source and
  spark-avro; Delta Lake is configured exactly when its jar is in the cache and the
  ``delta`` Python package imports (:func:`delta_available`).
* Apache Iceberg (``iceberg-spark-runtime``, cached with the other jars) is on the
  classpath, with its SQL extension, only in a session built with
  ``SessionOptions(iceberg=True)``: any other session loads neither its jar nor its
  extension, so Delta and Parquet sessions start and plan as before. The catalogs the
  Iceberg store writes through are registered at run time (:mod:`pipeline.iceberg_store`).
* ``spark.sql.mapKeyDedupPolicy`` is ``LAST_WIN``: the parsers and materialize overlay
  row images with ``map_concat`` (a later image's value wins).
* Timestamps are rendered and parsed in UTC (``spark.sql.session.timeZone``).
* PySpark does not record the Python call site of each column expression
  (``spark.python.sql.dataFrameDebugging.enabled`` false; a user's ``--conf`` may turn
  it on again): with it, every ``F.col``, ``==`` or ``cast`` costs four more round trips
  to the JVM and a walk of the Python stack, and the jobs build their expressions column
  by column (2026-12-05: 20 CASE chains of 50 columns took 7.2 s to build with it, 1.4 s
  without). What it adds is the Python line in a Spark error's "DataFrame context",
  which walcast's one-line errors do not show.
* The driver starts quietly: log4j is configured before the JVM logs anything (no
  "Setting default log level" notice), and the JVM's incubator-module notice is filtered
  from its stderr (:mod:`pipeline._gateway`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline._gateway import launch_quiet_gateway

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parent.parent
FETCH_SCRIPT = REPO / "scripts" / "fetch-spark-jars"


class SparkSetupError(RuntimeError):
    """The Spark environment is incomplete (pyspark missing, jars not fetchable)."""


def spark_version() -> str:
    """The installed pyspark version (the jars must match it)."""
    try:
        import pyspark  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SparkSetupError("pyspark is not installed: pip install -e '.[spark]'") from exc
    return pyspark.__version__


def cache_dir() -> Path:
    """``${WALCAST_CACHE_DIR:-$HOME/.cache/walcast}``."""
    root = os.environ.get("WALCAST_CACHE_DIR") or str(Path.home() / ".cache" / "walcast")
    return Path(root)


def jars_dir(version: str | None = None) -> Path:
    """Where the jars for pyspark ``version`` (default: installed) are cached."""
    return cache_dir() / f"spark-{version or spark_version()}" / "jars"


ICEBERG_JAR_PREFIX = "iceberg-spark-runtime-"
"""The Iceberg Spark runtime's file name starts so (one shaded jar)."""

ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def ensure_jars(*, fetch: bool = True, iceberg: bool = False) -> list[Path]:
    """Return the cached connector jars, running ``scripts/fetch-spark-jars`` if needed.

    With ``iceberg``, a cache filled before walcast fetched Iceberg's runtime is filled
    again (the script resolves what its ``.complete`` marker lacks). Raises
    :class:`SparkSetupError` when the cache is incomplete and cannot be filled.
    """
    directory = jars_dir()
    complete = (directory / ".complete").exists()
    if complete and iceberg and not any(directory.glob(ICEBERG_JAR_PREFIX + "*.jar")):
        complete = False
    if not complete and fetch:
        if not FETCH_SCRIPT.exists():
            raise SparkSetupError(f"{directory} is empty and {FETCH_SCRIPT} is missing")
        done = subprocess.run(
            [str(FETCH_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800
        )
        if done.returncode != 0:
            raise SparkSetupError(
                f"scripts/fetch-spark-jars failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
            )
    if not (directory / ".complete").exists():
        raise SparkSetupError(
            f"no Spark connector jars in {directory}: run scripts/fetch-spark-jars"
        )
    jars = sorted(directory.glob("*.jar"))
    if iceberg and not any(p.name.startswith(ICEBERG_JAR_PREFIX) for p in jars):
        raise SparkSetupError(
            f"no Iceberg Spark runtime in {directory}: run scripts/fetch-spark-jars "
            "(without --iceberg-version none)"
        )
    return jars


def delta_available(jars: list[Path] | None = None) -> bool:
    """Whether Delta Lake can be used: the ``delta`` package and its jar are both present."""
    if importlib.util.find_spec("delta") is None:
        return False
    found = jars if jars is not None else sorted(jars_dir().glob("*.jar"))
    return any(p.name.startswith("delta-spark_") for p in found)


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """How to build the session; defaults suit a laptop or CI machine (``local[2]``)."""

    master: str | None = "local[2]"
    """None keeps what spark-submit configured (cluster runs)."""
    app_name: str = "walcast"
    shuffle_partitions: int = 4
    ui: bool = False
    use_delta: bool | None = None
    """None: use Delta when available."""
    iceberg: bool = False
    """Load Apache Iceberg's runtime jar and SQL extension (``--store iceberg``)."""
    extra: dict[str, str] = field(default_factory=dict)
    """More Spark settings (``--conf`` style)."""
    driver_java_options: str = ""
    """More JVM options of the driver, after walcast's own (time zone, log4j)."""


PYTHON_CALL_SITES = "spark.python.sql.dataFrameDebugging.enabled"
"""PySpark's setting that records each column expression's Python call site (off here)."""


def session_settings(opts: SessionOptions, jars: list[Path], log_level: str) -> dict[str, str]:
    """The Spark settings of a session: walcast's, then the options' ``extra`` over them.

    Invariant: JVM options given in ``extra`` (``--conf spark.driver.extraJavaOptions=…``)
    are appended to walcast's (UTC time zone, log4j configuration), never put instead.
    """
    settings = {
        "spark.jars": ",".join(str(p) for p in jars),
        "spark.sql.shuffle.partitions": str(opts.shuffle_partitions),
        "spark.ui.enabled": str(opts.ui).lower(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.sql.adaptive.enabled": "true",
        PYTHON_CALL_SITES: "false",  # module doc
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC "
        f"-Dlog4j.configurationFile={_log4j_config(log_level)} {opts.driver_java_options}".rstrip(),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }
    use_delta = delta_available(jars) if opts.use_delta is None else opts.use_delta
    if use_delta:
        settings |= {
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.databricks.delta.snapshotPartitions": str(max(opts.shuffle_partitions, 1)),
        }
    if opts.iceberg:
        extensions = [settings.get("spark.sql.extensions"), ICEBERG_EXTENSION]
        settings["spark.sql.extensions"] = ",".join(e for e in extensions if e)
    extra = dict(opts.extra)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        # A user's JVM options (--conf) come after walcast's, never instead of them: without
        # -Duser.timezone=UTC the JVM's default zone would be the machine's.
        if key in extra:
            settings[key] = f"{settings[key]} {extra.pop(key)}"
    settings |= extra
    return settings


def build_session(options: SessionOptions | None = None) -> SparkSession:
    """Create (or return the active) Spark session with the cached connector jars."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    opts = options or SessionOptions()
    jars = ensure_jars(iceberg=opts.iceberg)
    if not opts.iceberg:
        jars = [p for p in jars if not p.name.startswith(ICEBERG_JAR_PREFIX)]
    builder = SparkSession.builder.appName(opts.app_name)
    if opts.master:
        builder = builder.master(opts.master)
    if (opts.master or "").startswith("local"):
        # A local driver binds to loopback (Spark warns about the host name otherwise).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_level = os.environ.get("WALCAST_SPARK_LOG_LEVEL", "WARN")
    settings = session_settings(opts, jars, log_level)
    for key, value in settings.items():
        builder = builder.config(key, value)
    launch_quiet_gateway(
        settings
        | {"spark.app.name": opts.app_name}
        | ({"spark.master": opts.master} if opts.master else {})
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def _log4j_config(level: str) -> Path:
    """A log4j2 configuration logging at ``level`` from the start (stderr, one line each).

    Spark's default profile logs its start-up at INFO/WARN before ``setLogLevel`` runs;
    with this one the driver starts quietly. ``WALCAST_SPARK_LOG_LEVEL`` raises it.
    """
    text = (
        f"rootLogger.level = {level.lower()}\n"
        "rootLogger.appenderRef.stderr.ref = console\n"
        # PySpark's driver starts as a shell: it logs at this logger's level and prints
        # "Setting default log level to ..." when it differs from the root's; keep them equal.
        "logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer\n"
        f"logger.gateway.level = {level.lower()}\n"
        "appender.console.type = Console\n"
        "appender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
    )
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = cache_dir() / f"log4j2-{level.lower()}-{digest}.properties"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def session_uses_iceberg(spark: SparkSession) -> bool:
    """Whether ``spark`` was built with Apache Iceberg (its SQL extension)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return ICEBERG_EXTENSION in extensions


def session_uses_delta(spark: SparkSession) -> bool:
    """Whether ``spark`` was configured with the Delta Lake extension."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    return "DeltaSparkSessionExtension" in extensions

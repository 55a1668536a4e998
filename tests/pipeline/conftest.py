"""Fixtures for the Spark pipeline tests: one local Spark session for the whole run.

Every test here needs pyspark and is marked ``integration``; this module imports pyspark
only inside fixtures, so that ``pytest -m "not integration"`` runs without it.

The session is ``local[2]`` with two shuffle partitions, no UI and the connector jars
from the cache (``scripts/fetch-spark-jars`` fills it on first use; a failure to fetch
FAILS the tests, it never skips them).
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import time
from collections.abc import Iterator, Sequence

import pytest

from capture.formats import encoder_for, parse_settings
from capture.formats.layout import layout_record
from capture.synthetic import build_tables, format_options, generate, table_specs
from capture.teststream import produce


def pytest_ignore_collect(collection_path: object, config: pytest.Config) -> bool | None:
    """Without pyspark, a unit run (``-m "not integration"``) leaves these modules out.

    Any other run imports them and fails loudly on the missing pyspark (never a skip).
    """
    del collection_path
    try:
        missing = importlib.util.find_spec("pyspark") is None
    except ImportError:
        missing = True
    if missing and "not integration" in (config.option.markexpr or ""):
        return True
    return None


DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=4 -XX:+UseSerialGC -Xms1g -Xmn600m"
"""The test session's driver JVM flags (``WALCAST_TEST_SPARK_JAVA_OPTIONS`` replaces them)."""


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # pyspark is imported where a test needs Spark: `make unit` runs without it
    from pipeline.session import SessionOptions, build_session  # noqa: PLC0415

    # PySpark hands timestamps to Python in the process's local zone: make it UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()
    # Iceberg beside Delta: the Iceberg store's tests share the session (the jar and its
    # SQL extension load only when asked, as in `materialize --store iceberg`).
    session = build_session(
        SessionOptions(
            shuffle_partitions=2,
            iceberg=True,
            extra={
                "spark.sql.ansi.enabled": "false",
                "spark.default.parallelism": "2",
                "spark.driver.memory": "2g",
                # Small data, many short queries: compiling a query costs more than running
                # it. Measured on tests/pipeline/test_parsers.py (28 tests, both runs side
                # by side): the driver JVM used 416 s of CPU with Spark's defaults, 323 s
                # with no whole-stage code generation, no adaptive re-planning, the JIT's
                # first tier only and one shuffle partition; two are kept here, so that the
                # tests meet more than one partition.
                "spark.sql.codegen.wholeStage": "false",
                "spark.sql.adaptive.enabled": "false",
                # Expressions evaluated by Spark's interpreter (its fallback when code
                # generation fails), and generated classes kept (the default keeps 100,
                # which the materialize job's queries outgrow). Measured 2026-12-03 on
                # three of test_end_to_end's cases, one after another: the driver JVM used
                # 227 s of CPU before, 194 s with the larger cache, 150 s with both; Janino
                # compiling generated projections was 27% of the driver's samples. The
                # generated-code path stays covered: the tests that run `walcast spark`
                # as a process (test_cli, test_spark_submit, the demo, secured Kafka's,
                # test_history_end_to_end's CLI runs) use the jobs' own session.
                "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                "spark.sql.codegen.cache.maxEntries": "5000",
                # More settings for an experiment (a JSON object), e.g. to time a tier.
                **json.loads(os.environ.get("WALCAST_TEST_SPARK_CONF") or "{}"),
            },
            # The JIT's both tiers (these flags come after tests/conftest.py's
            # SPARK_SUBMIT_OPTS, and win): with the first only, about the same driver CPU
            # (190 s against 196 s on test_parsers.py) took 263 s instead of 234 s
            # (2026-12-03). WALCAST_TEST_SPARK_JAVA_OPTIONS replaces them, e.g. to record a
            # profile (-XX:StartFlightRecording=filename=...); `make test-integration` sets
            # it to compile with C2 later, which saves CPU when both cores are busy (the
            # Makefile says how much). A young generation of 600 MB (the collector sized it
            # near 200 MB; about 365 MB stay live): three of test_end_to_end's cases
            # collected 70 times in 2.9 s instead of 254-273 times in 5.0-5.7 s, and the
            # machine's CPU was 99-100 s instead of 105-113 s (two runs each, 2026-12-05).
            driver_java_options=os.environ.get(
                "WALCAST_TEST_SPARK_JAVA_OPTIONS", DRIVER_JAVA_OPTIONS
            ),
        )
    )
    MADE.clear()
    MADE.update(session_settings_of(session))
    yield session
    session.stop()


MADE: dict[str, str] = {}
"""The SQL settings the ``spark`` fixture made its session with (:func:`put_back`)."""


def session_settings_of(spark) -> dict[str, str]:
    """The session's SQL settings (Spark's own and Delta's), those a session may change."""
    kinds = ("spark.sql.", "spark.databricks.")
    return {k: v for k, v in spark.conf.getAll.items() if k.startswith(kinds)}


def put_back(spark, made: dict[str, str]) -> list[str]:
    """Set again each of ``made``'s settings that the session changed, and unset those it
    added (an Iceberg store's catalog is registered again when next used); returns their
    keys.

    A test that runs a ``walcast spark`` command in this process (test_jobs' CLI test)
    builds the command's session with ``getOrCreate``, which sets the command's settings
    on the running session (adaptive execution on, four shuffle partitions): every later
    test of that worker ran with them (test_maintain's Iceberg table came out in one file,
    and its compaction found nothing to do: CI rehearsal of a6ef026, 2026-12-05).
    """
    now = session_settings_of(spark)
    changed = sorted(k for k in {*made, *now} if now.get(k) != made.get(k))
    for key in changed:
        if key in made:
            spark.conf.set(key, made[key])
        else:
            spark.conf.unset(key)
    return changed


@pytest.fixture(autouse=True)
def _session_settings_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the ``spark`` fixture, its session's settings as the fixture
    made them (:func:`put_back`), and ``WALCAST_SPARK_LOG_LEVEL`` as it was."""
    level = os.environ.get("WALCAST_SPARK_LOG_LEVEL")
    yield
    if level is None:
        os.environ.pop("WALCAST_SPARK_LOG_LEVEL", None)
    else:
        os.environ["WALCAST_SPARK_LOG_LEVEL"] = level
    if "spark" in request.fixturenames and MADE:
        put_back(request.getfixturevalue("spark"), MADE)


RECORD_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
)


def encoded(fmt: str, count: int, seed: int = 7, tables: int = 8, **settings: str) -> list:
    """The messages ``walcast produce-test-stream`` writes for these arguments."""
    encoder = encoder_for(fmt, format_options(parse_settings(fmt, dict(settings))))
    out: list = []
    produce(encoder, generate(count, seed, tables), out.append)
    return out


def records(
    spark, values: Sequence[tuple[bytes | None, bytes]], topic: str = "t", partition: int = 0
):
    """A DataFrame shaped like Kafka source rows, offsets 0.. in order."""
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    when = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    rows = [(k, v, topic, partition, i, when) for i, (k, v) in enumerate(values)]
    return local_rows(spark, rows, RECORD_SCHEMA)


HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def walcast_records(spark, messages: Sequence, topic: str = "t", partition: int = 0):
    """Kafka source rows of encoded messages, with the Kafka headers walcast writes
    (``walcast.commit_lsn``, ``walcast.xid``, ``walcast.ordinal``), read as the jobs do."""
    from pipeline.kafka import with_walcast_headers  # noqa: PLC0415
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    when = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    rows = [
        (m.key, m.value, topic, partition, i, when, list(m.kafka_headers()))
        for i, m in enumerate(messages)
    ]
    return with_walcast_headers(
        local_rows(spark, rows, f"{RECORD_SCHEMA}, headers {HEADERS_TYPE}")
    ).drop("headers")


def layout_values(tables: int = 8) -> list[tuple[bytes, bytes]]:
    """Layout records (key, JSON value) of the synthetic tables, as walcast publishes them."""
    return [
        (t.qualified_name.encode(), json.dumps(layout_record(t)).encode())
        for t in build_tables(table_specs(tables))
    ]


def layouts(spark, tables: int = 8):
    from pipeline.layouts import parse_layouts  # noqa: PLC0415

    return parse_layouts(records(spark, layout_values(tables), topic="t.layouts"))

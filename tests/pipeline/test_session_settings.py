"""The Spark settings walcast's sessions start with (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.session import PYTHON_CALL_SITES, SessionOptions, session_settings

# No Spark starts here, but tests/pipeline is left out where pyspark is missing
# (tests/pipeline/conftest.py): `spark` puts these in the run that has it.
pytestmark = pytest.mark.spark

JARS = [Path("/jars/spark-sql-kafka-0-10_2.13-4.0.1.jar")]


def test_a_user_s_jvm_options_come_after_walcast_s() -> None:
    options = SessionOptions(
        extra={
            "spark.driver.extraJavaOptions": "-Xss4m",
            "spark.executor.extraJavaOptions": "-Dfoo=bar",
            "spark.driver.memory": "4g",
        },
        driver_java_options="-XX:+UseSerialGC",
    )
    settings = session_settings(options, JARS, "WARN")
    driver = settings["spark.driver.extraJavaOptions"].split()
    assert driver[0] == "-Duser.timezone=UTC"
    assert driver[1].startswith("-Dlog4j.configurationFile=")
    assert driver[2:] == ["-XX:+UseSerialGC", "-Xss4m"]
    assert settings["spark.executor.extraJavaOptions"] == "-Duser.timezone=UTC -Dfoo=bar"
    assert settings["spark.driver.memory"] == "4g"


def test_other_settings_of_the_user_replace_walcast_s() -> None:
    settings = session_settings(
        SessionOptions(extra={"spark.sql.adaptive.enabled": "false"}), JARS, "WARN"
    )
    assert settings["spark.sql.adaptive.enabled"] == "false"
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert settings["spark.jars"] == str(JARS[0])


def test_pyspark_records_no_python_call_sites_unless_the_user_asks() -> None:
    assert session_settings(SessionOptions(), JARS, "WARN")[PYTHON_CALL_SITES] == "false"
    asked = SessionOptions(extra={PYTHON_CALL_SITES: "true"})
    assert session_settings(asked, JARS, "WARN")[PYTHON_CALL_SITES] == "true"

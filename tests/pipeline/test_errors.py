"""pipeline.errors.run_job: a job's run, its summary line and its one-line failures.

No Spark: a stand-in job hands back a stand-in query (the module imports pyspark only
for type checking).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from capture.errors import WalcastError
from pipeline.errors import SparkJobError, WrongFormatError, run_job, spark_errors


@dataclass
class Query:
    fail_with: Exception | None = None
    ended: bool = False

    def awaitTermination(self) -> None:  # noqa: N802 - Spark's name
        self.ended = True
        if self.fail_with is not None:
            raise self.fail_with


@dataclass
class Job:
    query: Query
    failure: WalcastError | None = None
    lines: list[str] = field(default_factory=list)
    started: list[object] = field(default_factory=list)

    def report(self, line: str) -> None:
        self.lines.append(line)

    def start(self, spark: object) -> Query:
        self.started.append(spark)
        return self.query


def summary_of(job: Job, asked: list[float]) -> Callable[[float], str]:
    def summary(seconds: float) -> str:
        assert job.query.ended  # asked only once the query has ended
        asked.append(seconds)
        return f"done in {seconds:.1f} s"

    return summary


def test_the_summary_is_reported_once_the_query_ends() -> None:
    job, asked = Job(Query()), []
    run_job(job, "spark", "normalize", summary_of(job, asked))
    assert job.started == ["spark"]
    assert len(asked) == 1
    assert asked[0] >= 0
    assert job.lines == [f"done in {asked[0]:.1f} s"]


def test_the_jobs_own_failure_is_raised_as_it_is() -> None:
    own = WrongFormatError("3 of 4 messages do not parse as canal")
    job, asked = Job(Query(RuntimeError("wrapped by Spark")), own), []
    with pytest.raises(WrongFormatError) as raised:
        run_job(job, "spark", "normalize", summary_of(job, asked))
    assert raised.value is own
    assert asked == []
    assert job.lines == []


def test_any_other_failure_is_sparks_first_line() -> None:
    job, asked = Job(Query(RuntimeError("\n  boom: disk full\n\tat org.apache.Spark"))), []
    with pytest.raises(SparkJobError, match=r"^the materialize query failed: boom: disk full$"):
        run_job(job, "spark", "materialize", summary_of(job, asked))
    assert asked == []
    assert job.lines == []


def test_a_spark_failure_in_show_or_maintain_is_its_first_line() -> None:
    """``walcast spark show`` printed a Py4J traceback when the session could not read an
    Iceberg table; a command that runs Spark once now says Spark's first line."""
    java = RuntimeError(
        "An error occurred while calling o100.load.\n"
        ": org.apache.spark.SparkClassNotFoundException: [DATA_SOURCE_NOT_FOUND] …\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.dataSourceNotFoundError"
    )
    with pytest.raises(SparkJobError) as raised, spark_errors("show"):
        raise java
    lines = raised.value.lines()
    said = "walcast spark show failed in Spark: An error occurred while calling o100.load."
    assert lines[0].startswith(said), lines
    assert all("\tat " not in line and "Exception" not in line for line in lines), lines
    own = WalcastError("a line of walcast's own")
    with pytest.raises(WalcastError) as kept, spark_errors("maintain"):
        raise own
    assert kept.value is own

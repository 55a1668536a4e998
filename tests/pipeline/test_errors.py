"""pipeline.errors.run_job: a job's run, its summary line and its one-line failures.

No Spark: a stand-in job hands back a stand-in query (the module imports pyspark only
for type checking).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from capture.errors import WalcastError
from pipeline.errors import SparkJobError, WrongFormatError, run_job


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

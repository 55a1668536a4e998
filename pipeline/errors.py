"""The Spark jobs' errors: each is one line on the terminal (``walcast: error: …``).

They are WalcastErrors (:class:`capture.errors.WalcastError`), so ``walcast spark …`` prints them as
every other walcast command does, with the exit code of their family.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Protocol

from capture.errors import ConfigError, WalcastError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


class TopicMissingError(ConfigError):
    """A topic the job was told to read does not exist (exit 2)."""


class KafkaUnavailableError(WalcastError):
    """No broker answered within ``--kafka-timeout`` seconds (exit 4)."""

    exit_code = 4


class WrongFormatError(WalcastError):
    """More of the messages were quarantined than ``--max-quarantine-ratio`` allows (exit 5)."""

    exit_code = 5


class UnorderedChangesError(WalcastError):
    """A table's changes mix records with and without a commit LSN: no total order (exit 1)."""


class AsOfError(ConfigError):
    """An as-of read the table's history or versions cannot answer (exit 2)."""


class SparkJobError(WalcastError):
    """The streaming query failed inside Spark; the message is Spark's first line (exit 1)."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's text (Spark's are pages long)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(exc).__name__


@contextlib.contextmanager
def spark_errors(command: str) -> Iterator[None]:
    """Make any failure of Spark inside the block one :class:`SparkJobError` line.

    For the commands that run Spark once (``show``, ``maintain``): walcast's own errors
    pass as they are; anything else (a Py4J error with pages of Java stack) becomes its
    first line, exit 1, never a traceback.
    """
    try:
        yield
    except WalcastError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark's errors carry pages of Java stack
        raise SparkJobError(
            f"walcast spark {command} failed in Spark: {first_line(exc)}",
            hint="see the Spark log (WALCAST_SPARK_LOG_LEVEL=INFO) for details",
        ) from None


def await_query(
    query: StreamingQuery, job: str, own_failure: Callable[[], WalcastError | None]
) -> None:
    """Wait until ``query`` ends; a failure is one WalcastError line.

    ``own_failure()`` is asked after the query failed: the job's own error, raised inside a
    batch (Spark wraps it), is raised as it is; any other failure is Spark's first line
    (:class:`SparkJobError`, exit 1).
    """
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - Spark's errors carry pages of Java stack
        failure = own_failure()
        if failure is not None:
            raise failure from None
        raise SparkJobError(
            f"the {job} query failed: {first_line(exc)}",
            hint="see the Spark log (WALCAST_SPARK_LOG_LEVEL=INFO) for details",
        ) from None


class StreamingJob(Protocol):
    """What :func:`run_job` needs of a job (``NormalizeJob``, ``MaterializeJob``)."""

    failure: WalcastError | None
    """The job's own error, raised inside a batch (Spark wraps it)."""

    def report(self, line: str) -> None:
        """Show one line (the summary)."""

    def start(self, spark: SparkSession) -> StreamingQuery:
        """Start the job's streaming query."""


def run_job(
    job: StreamingJob, spark: SparkSession, name: str, summary: Callable[[float], str]
) -> None:
    """Start ``job``, wait until its query ends (:func:`await_query`), then report its summary.

    ``summary(seconds)`` is asked only once the query has ended without failure (so it
    sees the job's final totals); ``seconds`` runs from just before ``job.start`` to the
    query's end. A failure is raised as :func:`await_query` raises it (``job.failure`` as
    the job's own), with no summary.
    """
    started = time.monotonic()
    await_query(job.start(spark), name, lambda: job.failure)
    job.report(summary(time.monotonic() - started))

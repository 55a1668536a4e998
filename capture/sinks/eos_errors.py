"""What exactly-once mode says when Kafka's transactions fail: the errors and their lines.

Each failure of :mod:`capture.sinks.kafka_eos` becomes one error naming the cause and the
fix: an abortable failure is :class:`KafkaTransactionAbortedError` (retried: the session
starts again from what Kafka committed); being fenced, a refused producer, a refused
offsets record and a PostgreSQL transaction too long for one Kafka transaction stop the
daemon (:class:`~capture.errors.KafkaSinkError`).
"""

from __future__ import annotations

from typing import Final

from confluent_kafka import KafkaError

from capture.errors import KafkaSinkError, RetryPolicy, WalcastError
from capture.lsn import format_lsn
from capture.state.identity import SourceIdentity

FENCED_CODES: Final = frozenset(
    {
        KafkaError._FENCED,  # noqa: SLF001 - librdkafka's public error codes
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


class KafkaTransactionAbortedError(WalcastError):
    """The Kafka transaction was (or must be) aborted; the session restarts.

    It restarts from Kafka's committed position: nothing is lost, nothing is repeated at
    read_committed.
    """

    retry = RetryPolicy.TRANSIENT
    exit_code = 6


class TransactionTooLargeError(KafkaSinkError):
    """One PostgreSQL transaction did not fit in one Kafka transaction's timeout."""


def fenced(source: SourceIdentity | None, error: KafkaError) -> KafkaSinkError:
    """Another walcast took the slot over and Kafka fenced this one."""
    slot = source.slot if source is not None else "?"
    tid = source.transactional_id if source is not None else "?"
    return KafkaSinkError(
        f"another walcast took over slot {slot!r}: Kafka fenced this one "
        f"(transactional.id {tid!r}): {error.str()}",
        hint="only one walcast may stream a slot; this one stops, the newer one carries on "
        "from what Kafka committed",
    )


def init_failed(
    source: SourceIdentity | None, brokers: str, error: KafkaError, timeout_ms: int
) -> KafkaSinkError:
    """Kafka refused the transactional producer (``init_transactions``)."""
    code = error.code()
    if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        hint = (
            f"lower kafka.producer transaction.timeout.ms (now {timeout_ms}) or raise the "
            "brokers' transaction.max.timeout.ms"
        )
    elif code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        hint = "grant walcast's principal WRITE and DESCRIBE on its transactional id"
    elif code in FENCED_CODES:
        return fenced(source, error)
    else:
        hint = "check the brokers (transactions need transaction.state.log topics)"
    return KafkaSinkError(
        f"Kafka at {brokers} refused walcast's transactional producer: {error.str()}",
        hint=hint,
    )


def record_refused(topic: str, error: KafkaError) -> KafkaSinkError:
    """Kafka refused the offsets record."""
    return KafkaSinkError(
        f"Kafka refused walcast's offsets record on topic {topic!r}: {error.str()}",
        hint="let walcast write (and read) kafka.offsets_topic, a compacted topic",
    )


def too_large(commit_lsn: int, brokers: str, timeout_s: float, *, kafka_away: bool) -> WalcastError:
    """A PostgreSQL transaction outlived its Kafka transaction's timeout."""
    if kafka_away:
        return KafkaTransactionAbortedError(
            f"Kafka at {brokers} was unreachable for longer than the transaction timeout "
            f"({timeout_s:g} s) while the transaction committed at {format_lsn(commit_lsn)} "
            "was written",
            hint="walcast aborts it and resumes from what Kafka committed",
        )
    return TransactionTooLargeError(
        f"the PostgreSQL transaction committed at {format_lsn(commit_lsn)} took longer than "
        f"transaction.timeout.ms ({int(timeout_s * 1000)}) to write into one Kafka "
        "transaction; exactly-once mode cannot split it",
        hint="raise kafka.producer transaction.timeout.ms (and the brokers' "
        "transaction.max.timeout.ms), or stream this backlog without --exactly-once",
    )

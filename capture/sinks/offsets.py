"""The offsets topic: what exactly-once ``walcast run`` committed to Kafka, per source.

In exactly-once mode (:mod:`capture.sinks.kafka_eos`) every Kafka transaction ends with one
record in a compacted topic (``kafka.offsets_topic``, default ``walcast.offsets``), written
inside that same transaction. It says which unit of the stream (a PostgreSQL transaction, a
load chunk, a logical message) was the last one the transaction holds, so a read_committed
reader of the topic knows exactly what Kafka has: every unit up to it, nothing after it.

Key: :meth:`SourceIdentity.key`, ``<system identifier>/<database>/<slot>``. A slot name alone
is not unique (two clusters may both have a slot ``walcast`` and share one Kafka); the
system identifier (``pg_control_system()``) is, and it survives a restart and a physical
failover (a standby shares it). The producer's ``transactional.id`` is derived from the same
identity (:meth:`SourceIdentity.transactional_id`).

Value: JSON (:class:`OffsetRecord`). ``commit_lsn`` is what the skip rule uses
(:mod:`capture.skip_committed`): units of the stream have strictly increasing commit LSNs in
stream order (commit order; a load chunk sits at its watermark), so "the unit committed at
``commit_lsn`` and every unit before it are in Kafka" is one number. ``end_lsn`` is where
that unit ends (the slot may be confirmed up to there); the rest is for operators.

Invariants:

* :func:`read_offset` reads with ``isolation.level=read_committed``, from the start of the
  topic up to the end of what is committed (the partition end that a read_committed reader
  sees), and returns the newest record of the key. Called only after the producer's
  ``init_transactions`` (which completes or aborts the previous instance's transaction), it
  returns exactly what Kafka holds for this source.
* A record is never written outside a Kafka transaction of this source's producer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final

import orjson
import psycopg

from capture import dsn as dsn_util
from capture.errors import ConnectionLostError, RetryPolicy, WalcastError
from capture.lsn import format_lsn
from capture.replication.setup import connect
from capture.sinks.compacted import TopicUnreadableError, read_compacted

DEFAULT_OFFSETS_TOPIC: Final = "walcast.offsets"
READ_TIMEOUT: Final = 30.0
"""Seconds to read the offsets topic to its end before giving up (the start is retried)."""
_CLIENT_PREFIXES: Final = ("bootstrap.", "security.", "sasl.", "ssl.", "client.")


class OffsetsUnavailableError(WalcastError):
    """The offsets topic could not be read; retried (a guess could lose or repeat changes)."""

    retry = RetryPolicy.TRANSIENT
    exit_code = 6


@dataclass(frozen=True, slots=True)
class SourceIdentity:
    """Which replication source a producer and an offsets record belong to."""

    system_identifier: str
    database: str
    slot: str

    @property
    def key(self) -> str:
        """The offsets topic key."""
        return f"{self.system_identifier}/{self.database}/{self.slot}"

    @property
    def transactional_id(self) -> str:
        """The producer's ``transactional.id``: one per source, so a restart fences its zombie."""
        return f"walcast-{self.system_identifier}-{self.database}-{self.slot}"


def source_identity(dsn: str, slot: str) -> SourceIdentity:
    """The identity of ``slot`` on the server ``dsn`` points at (a short plain connection).

    Raises :class:`~capture.errors.ConnectionLostError` (retried) when the server cannot be
    reached.
    """
    try:
        with connect(dsn) as conn:
            row = conn.execute(
                "SELECT system_identifier::text, current_database() FROM pg_control_system()"
            ).fetchone()
    except psycopg.Error as exc:
        text = dsn_util.scrub(str(exc).strip(), dsn).splitlines()
        raise ConnectionLostError(
            f"cannot read the system identifier of {dsn_util.describe(dsn)}: "
            f"{text[-1] if text else type(exc).__name__}",
            hint="walcast retries",
        ) from None
    except WalcastError as exc:
        if exc.retry is RetryPolicy.TRANSIENT:
            raise
        raise ConnectionLostError(exc.message, hint=exc.hint) from None
    assert row is not None
    return SourceIdentity(str(row[0]), str(row[1]), slot)


def slot_holder(dsn: str, slot: str) -> int | None:
    """The pid of the process streaming ``slot`` now (None: nobody, or no such slot)."""
    with connect(dsn) as conn:
        row = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return int(str(row[0])) if row is not None and row[0] is not None else None


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """One committed Kafka transaction's position (see the module docstring)."""

    source: str
    """:attr:`SourceIdentity.key`."""
    commit_lsn: int
    """Commit LSN of the last unit the transaction holds."""
    end_lsn: int
    """Where that unit ends: the slot may be confirmed up to here."""
    units: int = 0
    """Units (transactions, chunks, messages) the Kafka transaction held."""
    transactional_id: str = ""
    written_at: float = 0.0
    """Unix time the record was produced."""

    def to_json(self) -> bytes:
        """The record's value (LSNs also in PostgreSQL's ``X/Y`` text, for people)."""
        data: dict[str, Any] = asdict(self)
        data["commit_lsn_text"] = format_lsn(self.commit_lsn)
        data["end_lsn_text"] = format_lsn(self.end_lsn)
        return orjson.dumps(data)

    @classmethod
    def from_json(cls, value: bytes) -> OffsetRecord:
        """A record read back; unknown fields (a newer walcast) are ignored."""
        data = orjson.loads(value)
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in fields})


def client_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The connection settings of ``settings`` (bootstrap, security), for other clients."""
    return {k: v for k, v in settings.items() if k.startswith(_CLIENT_PREFIXES)}


def read_offset(
    settings: dict[str, Any], topic: str, key: str, *, timeout: float = READ_TIMEOUT
) -> OffsetRecord | None:
    """The newest committed record of ``key`` in ``topic`` (None: the source has none).

    Raises :class:`OffsetsUnavailableError` when Kafka does not answer within ``timeout``.
    """
    try:
        records = read_compacted(
            client_settings(settings),
            topic,
            key.encode().__eq__,
            timeout=timeout,
            group="walcast-offsets",
        )
    except TopicUnreadableError as exc:
        raise _unavailable(topic, str(exc)) from None
    value = records.get(key.encode())
    return OffsetRecord.from_json(value) if value is not None else None


def _unavailable(topic: str, detail: str) -> OffsetsUnavailableError:
    return OffsetsUnavailableError(
        f"cannot read the exactly-once offsets from topic {topic!r}: {detail}",
        hint="check that Kafka runs and that walcast may read the topic "
        "(kafka.offsets_topic); walcast retries",
    )

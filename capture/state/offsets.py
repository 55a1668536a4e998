"""The offsets topic: what exactly-once ``walcast run`` committed to Kafka, per source.

In exactly-once mode (:mod:`capture.sinks.kafka_eos`) every Kafka transaction ends with one
record in a compacted topic (``kafka.offsets_topic``, default ``walcast.offsets``), written
inside that same transaction. It says which unit of the stream (a PostgreSQL transaction, a
load chunk, a logical message) was the last one the transaction holds, so a read_committed
reader of the topic knows exactly what Kafka has: every unit up to it, nothing after it.

Key: :attr:`~capture.state.identity.SourceIdentity.key`, ``<system identifier>/<database>/<slot>``
(see :mod:`capture.state.identity`: a slot name alone is not unique; the system identifier
survives a restart and a physical failover). The producer's ``transactional.id`` is derived
from the same identity. The record carries the slot's **generation**: a record written for
an earlier life of the slot (dropped, then created again by walcast) is not read back
(:func:`read_offset`), so a new slot never skips changes because of its predecessor's
position (after a restore of the server, a new slot's LSNs may lie below it).

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

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson
import structlog

from capture.errors import RetryPolicy, WalcastError
from capture.lsn import format_lsn
from capture.state.compacted import TopicUnreadableError, read_compacted

if TYPE_CHECKING:
    from capture.position import Unit
    from capture.state.identity import SourceIdentity

log = structlog.get_logger("walcast.offsets")

DEFAULT_OFFSETS_TOPIC: Final = "walcast.offsets"
READ_TIMEOUT: Final = 30.0
"""Seconds to read the offsets topic to its end before giving up (the start is retried)."""
_CLIENT_PREFIXES: Final = ("bootstrap.", "security.", "sasl.", "ssl.", "client.")


class OffsetsUnavailableError(WalcastError):
    """The offsets topic could not be read; retried (a guess could lose or repeat changes)."""

    retry = RetryPolicy.TRANSIENT
    exit_code = 6


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
    generation: str | None = None
    """The slot's generation it was written under (:mod:`capture.state.identity`)."""
    timeline: int | None = None
    """The timeline of the server that streamed the unit (None: an older walcast). After a
    failover, a ``commit_lsn`` past where that timeline ended on the new server is not in
    its history (:meth:`capture.daemon.runner.Daemon._skip_bound`)."""

    @classmethod
    def closing(
        cls,
        source: SourceIdentity,
        units: Sequence[Unit],
        *,
        generation: str | None,
        timeline: int | None,
    ) -> OffsetRecord:
        """The record that ends a Kafka transaction holding ``units`` (the last is the mark)."""
        last = units[-1]
        return cls(
            source=source.key,
            commit_lsn=last.commit_lsn,
            end_lsn=last.end_lsn,
            units=len(units),
            transactional_id=source.transactional_id,
            written_at=time.time(),
            generation=generation,
            timeline=timeline,
        )

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
    settings: dict[str, Any],
    topic: str,
    key: str,
    *,
    generation: str | None = None,
    timeout: float = READ_TIMEOUT,
    tick: Callable[[], None] = lambda: None,
    unreachable: Callable[[str], None] | None = None,
) -> OffsetRecord | None:
    """The newest committed record of ``key`` in ``topic`` of the slot's ``generation``.

    None: the source has none, or only one of another generation (an earlier life of the
    slot: ignored, with an ``offsets_of_earlier_slot_ignored`` warning). Raises
    :class:`OffsetsUnavailableError` when Kafka does not answer within ``timeout``; with
    ``unreachable``, an unreachable Kafka is waited for instead, each unanswered request
    handed to it (:func:`capture.state.compacted.read_compacted`).
    """
    try:
        records = read_compacted(
            client_settings(settings),
            topic,
            key.encode().__eq__,
            timeout=timeout,
            group="walcast-offsets",
            tick=tick,
            unreachable=unreachable,
        )
    except TopicUnreadableError as exc:
        raise _unavailable(topic, str(exc)) from None
    value = records.get(key.encode())
    if value is None:
        return None
    record = OffsetRecord.from_json(value)
    if record.generation != generation:
        log.warning(
            "offsets_of_earlier_slot_ignored",
            source=key,
            topic=topic,
            committed_lsn=format_lsn(record.commit_lsn),
            detail="the offsets record was written for an earlier life of this slot (it was "
            "dropped and created again); the new slot starts from its own position",
        )
        return None
    return record


def _unavailable(topic: str, detail: str) -> OffsetsUnavailableError:
    return OffsetsUnavailableError(
        f"cannot read the exactly-once offsets from topic {topic!r}: {detail}",
        hint="check that Kafka runs and that walcast may read the topic "
        "(kafka.offsets_topic); walcast retries",
    )

"""Where a load's progress is kept, so that a restarted daemon goes on where Kafka confirmed.

One record per (slot, table), the newest wins: the table's state (``pending``, ``loading``,
``done``, ``dropped``), the load request it belongs to, and the upper key bound of the last
chunk that Kafka confirmed together with every chunk before it. A record is written only
after the chunks it counts were delivered, so a restart re-reads at most the chunks that
were in flight (their rows arrive again, at a new position: idempotent for keyed tables).

:class:`KafkaProgress` keeps the records in a compacted topic (``daemon.snapshot_topic``,
key ``<slot>/<schema>.<table>``), readable by a daemon restarted on another machine.
:class:`MemoryProgress` keeps them in memory (``walcast tail``: a load is not resumed).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, Protocol

import orjson

from capture.errors import RetryPolicy, WalcastError

State = Literal["pending", "loading", "done", "dropped"]
READ_TIMEOUT: Final = 30.0
READ_STEP: Final = 1.0
"""How often a read of an unreachable Kafka checks for a stop request."""


class ProgressUnavailableError(WalcastError):
    """The progress topic could not be read; retried, since a guess could lose rows."""

    retry = RetryPolicy.TRANSIENT


@dataclass(slots=True)
class TableProgress:
    """How far the load of one table got (see the module docstring)."""

    table: str
    """``schema.table``."""
    relation_id: int
    request: str
    state: State
    after: list[str] | None = None
    """Chunk-key values (text) up to which every row was delivered; None: from the start."""
    chunks: int = 0
    """Chunks delivered (contiguously, in key order)."""
    rows: int = 0

    def to_json(self, slot: str) -> bytes:
        """The record's value."""
        return orjson.dumps({"slot": slot, **asdict(self)})

    @classmethod
    def from_json(cls, value: bytes) -> TableProgress:
        """A record read back."""
        data = orjson.loads(value)
        data.pop("slot", None)
        return cls(**data)


class ProgressStore(Protocol):
    """Keeps :class:`TableProgress` records."""

    def load(self) -> list[TableProgress]:
        """Every table's newest record."""

    def save(self, progress: TableProgress) -> None:
        """Keep ``progress`` (it replaces the table's previous record)."""


class MemoryProgress:
    """Progress that lives as long as the process."""

    def __init__(self) -> None:
        self.records: dict[str, TableProgress] = {}

    def load(self) -> list[TableProgress]:
        """Every table's newest record."""
        return list(self.records.values())

    def save(self, progress: TableProgress) -> None:
        """Keep a copy of ``progress``."""
        self.records[progress.table] = TableProgress(**asdict(progress))


class KafkaProgress:
    """Progress in a compacted Kafka topic, written through the sink's producer."""

    def __init__(
        self,
        client_settings: dict[str, Any],
        topic: str,
        slot: str,
        publish: Callable[[str, bytes, bytes], None],
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self._settings = client_settings
        self.topic = topic
        self.slot = slot
        self._publish = publish
        self._stop = stop
        """A stop request ends a wait for an unreachable Kafka within :data:`READ_STEP`."""

    def _key(self, table: str) -> bytes:
        return f"{self.slot}/{table}".encode()

    def save(self, progress: TableProgress) -> None:
        """Produce ``progress`` (delivered with the sink's other messages)."""
        self._publish(self.topic, self._key(progress.table), progress.to_json(self.slot))

    def load(self) -> list[TableProgress]:
        """Read the topic from its start (read_committed); newest record per key wins."""
        from confluent_kafka import (  # noqa: PLC0415 - Kafka only where a daemon runs
            OFFSET_BEGINNING,
            Consumer,
            KafkaError,
            KafkaException,
            TopicPartition,
        )

        from capture.sinks.kafka import client_logger  # noqa: PLC0415

        consumer = Consumer(
            {
                **self._settings,
                "group.id": f"walcast-progress-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # the end of a partition is reported, not inferred from the high watermark
                # (which a transaction's control record puts past the last message)
                "enable.partition.eof": True,
                "logger": client_logger(),
            }
        )
        prefix = f"{self.slot}/".encode()
        found: dict[bytes, TableProgress] = {}
        try:
            deadline = time.monotonic() + READ_TIMEOUT
            while True:
                try:
                    metadata = consumer.list_topics(self.topic, timeout=READ_STEP)
                    break
                except KafkaException as exc:
                    if self._stop() or time.monotonic() >= deadline:
                        raise self._unavailable(str(exc)) from None
            topic = metadata.topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                return []
            ends: dict[int, int] = {}
            for partition in topic.partitions:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=READ_TIMEOUT
                )
                if high > 0:
                    ends[partition] = high
            if not ends:
                return []
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in ends])
            deadline = time.monotonic() + READ_TIMEOUT
            while ends:
                if time.monotonic() > deadline:
                    raise self._unavailable("timed out reading it")
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001 - its public name
                        ends.pop(message.partition() or 0, None)
                    continue
                key, value = message.key(), message.value()
                if key and key.startswith(prefix) and value:
                    found[key] = TableProgress.from_json(value)
                partition, offset = message.partition(), message.offset()
                if (
                    partition is not None
                    and offset is not None
                    and offset + 1 >= ends.get(partition, 0)
                ):
                    ends.pop(partition, None)
        finally:
            consumer.close()
        return list(found.values())

    def _unavailable(self, detail: str) -> ProgressUnavailableError:
        brokers = self._settings.get("bootstrap.servers", "?")
        return ProgressUnavailableError(
            f"Kafka at {brokers} did not answer: cannot read the load progress from topic "
            f"{self.topic!r} ({detail})",
            hint="walcast waits and retries; check kafka.bootstrap_servers and that the "
            "brokers run",
        )

"""Read topics back from the real Kafka broker."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]

    @property
    def position(self) -> tuple[str, int]:
        """(commit LSN, ordinal) from walcast's headers."""
        return self.headers.get("walcast.commit_lsn", ""), int(
            self.headers.get("walcast.ordinal", 0)
        )


def topics(bootstrap: str, prefix: str) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix))


def read_all(bootstrap: str, names: list[str], *, timeout: float = 60) -> list[Record]:
    """Every message of ``names`` from the beginning up to the current end offsets."""
    if not names:
        return []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"walcast-test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(timeout=10)
        partitions = [TopicPartition(t, p) for t in names for p in metadata.topics[t].partitions]
        ends = {}
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high > low:
                ends[(tp.topic, tp.partition)] = high
        if not ends:
            return []
        consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
        records: list[Record] = []
        done: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            where = (message.topic(), message.partition())
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:  # noqa: SLF001
                    if message.offset() >= ends[where]:
                        done.add(where)
                    continue
                raise RuntimeError(message.error().str())
            records.append(
                Record(
                    message.topic(), message.partition(), message.offset(), message.key(),
                    message.value(),
                    {k: v.decode() for k, v in (message.headers() or []) if v is not None},
                )
            )  # fmt: skip
            if message.offset() + 1 >= ends[where]:
                done.add(where)
        assert len(done) == len(ends), f"timed out reading {sorted(set(ends) - done)}"
        return records
    finally:
        consumer.close()

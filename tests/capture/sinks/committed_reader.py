"""Read topics back at a chosen isolation level (read_committed is what EOS promises)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from bench.kit.kafka import Record


def messages(
    bootstrap: str, topics: list[str], *, committed: bool = True, timeout: float = 60
) -> Iterator[Message]:
    """Every message of ``topics`` a reader at that isolation level sees, up to the end, as
    the client gives it (timestamps included).

    The end is where such a reader stops: the high watermark for read_uncommitted, the last
    stable offset (before the first open transaction) for read_committed. A topic that does
    not exist has no messages.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"walcast-eos-test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        metadata = consumer.list_topics(timeout=10)
        partitions = [
            TopicPartition(t, p, 0)
            for t in topics
            if t in metadata.topics
            for p in metadata.topics[t].partitions
        ]
        if not partitions:
            return
        consumer.assign(partitions)
        pending = {(tp.topic, tp.partition) for tp in partitions}
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {sorted(pending)}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard((message.topic(), message.partition()))
                    continue
                raise RuntimeError(error.str())
            yield message
    finally:
        consumer.close()


def read(
    bootstrap: str, topics: list[str], *, committed: bool = True, timeout: float = 60
) -> list[Record]:
    """Every message of ``topics`` a reader at that isolation level sees (:func:`messages`)."""
    return [
        Record(
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.value(),
            {k: v.decode() for k, v in (message.headers() or []) if v is not None},
        )
        for message in messages(bootstrap, topics, committed=committed, timeout=timeout)
    ]

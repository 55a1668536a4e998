"""Reading one of walcast's compacted topics whole: the newest record of each key.

walcast keeps two kinds of state in compacted Kafka topics, read once when a session
starts: the exactly-once offsets (:mod:`capture.state.offsets`) and the load progress
(:mod:`capture.state.progress`). Both are read here the same way:

* from the beginning of every partition, ``read_committed`` (a record of an aborted or open
  transaction is never seen), with a fresh consumer group and no commits;
* to the end of every partition as the broker reports it (``enable.partition.eof``): the
  high watermark cannot serve, since a transaction's control record lies past the last
  message. The broker answers a fetch at a partition's end after ``fetch.wait.max.ms``
  (:data:`END_WAIT_MS`, not librdkafka's 500 ms): every session start reads these topics,
  and each read waited half a second for its end (issue 37);
* the newest non-empty value of each wanted key wins (an empty value is ignored, not a
  deletion: walcast never writes one);
* a topic that does not exist yet holds nothing (an empty result), and Kafka not
  answering within ``timeout`` seconds, or a read error, is :class:`TopicUnreadableError`
  (the caller turns it into its own transient error). A ``stop`` request ends the wait for
  an unreachable Kafka within :data:`STEP` seconds, as the same error;
* with ``unreachable`` (the daemon passes its sink's ``note_unreachable``), no broker
  answering is not a timeout but a wait: each unanswered request is handed to
  ``unreachable`` (which reports the outage, once it lasted ``kafka.connect_timeout``, and
  raises for a refused client), and the same consumer keeps asking until Kafka answers or
  ``stop``. No client is made again and no session is restarted for an outage (issue 25.8:
  every restart was a new consumer with its own librdkafka lines). ``timeout`` then bounds
  only a read that makes no progress while brokers answer;
* ``tick`` runs between the waits (at least every :data:`STEP` seconds): a caller that
  holds a replication stream keeps it answering its server while Kafka is slow.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Final

STEP: Final = 1.0
"""How often a wait for an unreachable Kafka checks ``stop``."""


END_WAIT_MS: Final = 10
"""``fetch.wait.max.ms`` of the reading consumer: how long the broker holds a fetch at a
partition's end before it answers (and the end is known)."""


class TopicUnreadableError(Exception):
    """Kafka did not let the topic be read to its end (the message says why)."""


def read_compacted(
    settings: dict[str, Any],
    topic: str,
    wanted: Callable[[bytes], bool],
    *,
    timeout: float,
    group: str,
    stop: Callable[[], bool] = lambda: False,
    tick: Callable[[], None] = lambda: None,
    unreachable: Callable[[str], None] | None = None,
) -> dict[bytes, bytes]:
    """The newest non-empty value of every key of ``topic`` that ``wanted`` accepts.

    ``settings`` are the client's connection settings (bootstrap, security); ``group``
    names the throwaway consumer group (a random suffix is added); ``unreachable`` makes an
    outage a wait (see the module docstring).
    """
    from confluent_kafka import (  # noqa: PLC0415 - Kafka only where a daemon runs
        OFFSET_BEGINNING,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    from capture.kafka.client import client_logger  # noqa: PLC0415
    from capture.kafka.security import missing_acl  # noqa: PLC0415

    consumer = Consumer(
        {
            **settings,
            "group.id": f"{group}-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": END_WAIT_MS,
            "isolation.level": "read_committed",
            "logger": client_logger(),
        }
    )
    found: dict[bytes, bytes] = {}
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                metadata = consumer.list_topics(topic, timeout=min(STEP, timeout))
                break
            except KafkaException as exc:
                detail = str(exc.args[0].str())
                if stop() or (unreachable is None and time.monotonic() >= deadline):
                    raise TopicUnreadableError(detail) from None
                if unreachable is not None:
                    unreachable(detail)
                tick()
        described = metadata.topics.get(topic)
        error = described.error if described is not None else None
        if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise missing_acl("Describe", "Topic", topic, settings)
        if described is None or described.error is not None or not described.partitions:
            return found  # the topic does not exist yet: nothing was ever written
        pending = set(described.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout
        while pending:
            if stop():
                raise TopicUnreadableError("stopped while reading it")
            if time.monotonic() > deadline:
                if unreachable is None or _answers(consumer, topic):
                    raise TopicUnreadableError(f"timed out after {timeout:g} s reading it")
                unreachable("no broker answers while the topic is read")
                deadline = time.monotonic() + timeout
            message = consumer.poll(0.5)
            tick()
            if message is None:
                continue
            deadline = time.monotonic() + timeout  # progress: a record or an end
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001 - public code
                    pending.discard(message.partition())
                elif error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    raise missing_acl("Read", "Group", f"{group}-", settings, prefixed=True)
                elif error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise missing_acl("Read", "Topic", topic, settings)
                elif error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise TopicUnreadableError(error.str())
                continue
            key, value = message.key(), message.value()
            if key is not None and value and wanted(key):
                found[key] = value
    finally:
        consumer.close()
    return found


def _answers(consumer: Any, topic: str) -> bool:
    """Whether a broker answers ``consumer``'s metadata request within :data:`STEP`."""
    from confluent_kafka import KafkaException  # noqa: PLC0415

    try:
        consumer.list_topics(topic, timeout=STEP)
    except KafkaException:
        return False
    return True

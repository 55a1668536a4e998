"""Checks made before a job starts its query, so that a mistake is one line, not a stack.

Spark's Kafka source reports a missing topic as a Java stack trace, and waits for a dead
broker without end. :func:`check_topics` asks the brokers' metadata first (with
confluent-kafka, whose log lines are kept off the terminal): no answer within
``timeout`` seconds is :class:`~pipeline.errors.KafkaUnavailableError`; a named topic
that does not exist, or a pattern that matches none, is
:class:`~pipeline.errors.TopicMissingError`. Nothing is ever created: a reader that asks
for a missing topic must not make an empty one appear (brokers with
``auto.create.topics.enable``).

Both errors' hints give the ``walcast consume --list-topics`` command line that lists the
cluster's topics (:func:`list_topics_command`), which a user can paste as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.errors import KafkaUnavailableError, TopicMissingError

_CLIENT_KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms")
"""Kafka source options (without ``kafka.``) that librdkafka shares with the Java client."""


def admin_settings(bootstrap: str, kafka_options: Mapping[str, str]) -> dict[str, Any]:
    """The AdminClient settings for ``bootstrap`` and the job's ``kafka.*`` source options."""
    from capture.sinks.kafka_client import client_logger  # noqa: PLC0415

    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": client_logger()}
    for key, value in kafka_options.items():
        name = key.removeprefix("kafka.")
        if name in _CLIENT_KEYS:
            settings[name] = value
    return settings


def existing_topics(bootstrap: str, kafka_options: Mapping[str, str], timeout: float) -> set[str]:
    """The names of the cluster's topics; KafkaUnavailableError when no broker answers."""
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient(admin_settings(bootstrap, kafka_options))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"Kafka at {bootstrap} did not answer within {timeout:g} s ({exc.args[0].str()})",
            hint="check --bootstrap-servers and that the brokers run (--kafka-timeout "
            "sets the wait)",
        ) from None
    return {name for name, topic in metadata.topics.items() if topic.error is None}


def list_topics_command(bootstrap: str, prefix: str | None = "walcast.") -> str:
    """The ``walcast consume --list-topics`` command line that lists the topics on ``bootstrap``.

    With ``prefix``, only the topics whose names start with it (a ``^regex`` --topic).
    """
    command = f"walcast consume --bootstrap-servers {bootstrap} --list-topics"
    if prefix:
        command += f" --topic '^{re.escape(prefix)}'"
    return command


def check_topics(
    bootstrap: str,
    topics: Sequence[str],
    pattern: str | None,
    kafka_options: Mapping[str, str],
    timeout: float,
) -> set[str]:
    """Every topic the job will read exists; returns the cluster's topic names."""
    names = existing_topics(bootstrap, kafka_options, timeout)
    missing = [t for t in topics if t not in names]
    if missing:
        raise TopicMissingError(
            f"topic {missing[0]!r} does not exist on {bootstrap}"
            + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint="check --topic (walcast run names topics walcast.<format>.<schema>.<table> "
            f"by default); {list_topics_command(bootstrap)} lists the topics there",
        )
    if pattern is not None:
        regex = re.compile(pattern)
        if not any(regex.fullmatch(name) for name in names):
            raise TopicMissingError(
                f"--topic-pattern {pattern!r} matches no topic on {bootstrap}",
                hint="the pattern must match whole topic names (Java regex, as Spark's "
                f"subscribePattern); {list_topics_command(bootstrap, None)} lists the topics",
            )
    return names

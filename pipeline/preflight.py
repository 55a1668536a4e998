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
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.errors import KafkaUnavailableError, TopicMissingError

_CLIENT_KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms")
"""Kafka source options (without ``kafka.``) that librdkafka shares with the Java client."""


def admin_settings(bootstrap: str, kafka_options: Mapping[str, str]) -> dict[str, Any]:
    """The AdminClient settings for ``bootstrap`` and the job's ``kafka.*`` source options.

    The security settings come from ``WALCAST__KAFKA__*`` (as for ``walcast run``,
    :func:`capture.kafka.security.client_settings`), then the job's ``kafka.*`` options.
    """
    from capture.kafka.client import client_logger  # noqa: PLC0415
    from capture.kafka.security import client_settings  # noqa: PLC0415

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": client_logger(),
        **client_settings(),
    }
    for key, value in kafka_options.items():
        name = key.removeprefix("kafka.")
        if name in _CLIENT_KEYS:
            settings[name] = value
    return settings


def existing_topics(bootstrap: str, kafka_options: Mapping[str, str], timeout: float) -> set[str]:
    """The names of the cluster's topics; KafkaUnavailableError when no broker answers."""
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from capture.kafka.client import ClientLog, ProtocolWatch  # noqa: PLC0415

    settings = admin_settings(bootstrap, kafka_options)
    watch = ProtocolWatch(settings.get("security.protocol"), settings)
    conf: dict[str, Any] = {
        **settings,
        "logger": ClientLog(watch),
        "error_cb": lambda error: watch.note(error.str()),
    }
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while True:  # in steps: a refused client (credentials, certificates) is seen at once
        try:
            metadata = admin.list_topics(timeout=min(1.0, timeout))
            break
        except KafkaException as exc:
            admin.poll(0)  # the error callback says why (credentials, certificates, protocol)
            if watch.found is not None:
                raise watch.found from None
            if time.monotonic() < deadline:
                continue
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
        denied(bootstrap, missing, kafka_options, timeout)
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


def denied(
    bootstrap: str, topics: Sequence[str], kafka_options: Mapping[str, str], timeout: float
) -> None:
    """A missing ACL for one of ``topics`` that the metadata did not list, as one line.

    A broker lists only the topics the principal may DESCRIBE
    (:func:`capture.kafka.security.hidden_topics`).
    """
    from capture.kafka.security import hidden_topics  # noqa: PLC0415

    settings = admin_settings(bootstrap, kafka_options)
    logger = settings.pop("logger")
    hidden_topics(settings, list(topics), timeout, logger)

"""A format's own topic naming (``debezium``) and tombstones through the Kafka sink."""

from __future__ import annotations

import uuid

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kit import kafka as k
from capture.events import ChangeEvent, Op
from capture.formats import encoder_for, parse_settings
from capture.formats.base import FormatOptions
from capture.sinks.topics import (
    DEFAULT_TOPIC,
    DEFAULT_TRANSACTION_TOPIC,
    TopicNamer,
    format_templates,
)
from capture.synthetic import generate
from tests.support.scenario import walcast


def _debezium_defaults(prefix: str) -> dict[str, str | None]:
    encoder = encoder_for(
        "debezium",
        FormatOptions(settings=parse_settings("debezium", {"debezium.topic_prefix": prefix})),
    )
    return {
        "default_topic": encoder.default_topic,
        "default_transaction_topic": encoder.default_transaction_topic,
        "heartbeat_topic": encoder.heartbeat_topic,
    }


def test_the_format_s_naming_replaces_walcast_s_defaults() -> None:
    got = format_templates(DEFAULT_TOPIC, DEFAULT_TRANSACTION_TOPIC, **_debezium_defaults("inv"))
    assert got == ("inv.{schema}.{table}", "inv.transaction", "__debezium-heartbeat.inv")
    namer = TopicNamer("debezium", "shop", got[0], got[1], heartbeat_topic=got[2])
    assert namer.message_topic("change", "public", "orders") == "inv.public.orders"
    assert namer.message_topic("begin", None, None) == "inv.transaction"
    assert namer.message_topic("heartbeat", None, None) == "__debezium-heartbeat.inv"


def test_templates_the_user_set_are_kept() -> None:
    defaults = _debezium_defaults("inv")
    assert format_templates("cdc.{schema}.{table}", "cdc.tx", **defaults) == (
        "cdc.{schema}.{table}",
        "cdc.tx",
        None,
    )
    # only the table template set: the transaction topic still follows the format
    assert format_templates("cdc.{table}", DEFAULT_TRANSACTION_TOPIC, **defaults) == (
        "cdc.{table}",
        "inv.transaction",
        "__debezium-heartbeat.inv",
    )


def test_a_format_without_its_own_naming_keeps_walcast_s() -> None:
    canal = encoder_for("canal")
    assert canal.default_topic is None
    got = format_templates(
        DEFAULT_TOPIC,
        DEFAULT_TRANSACTION_TOPIC,
        default_topic=canal.default_topic,
        default_transaction_topic=canal.default_transaction_topic,
        heartbeat_topic=canal.heartbeat_topic,
    )
    assert got == (DEFAULT_TOPIC, DEFAULT_TRANSACTION_TOPIC, None)
    namer = TopicNamer("canal", "shop", got[0], got[1], heartbeat_topic=got[2])
    assert namer.message_topic("heartbeat", None, None) == "walcast.canal"


@pytest.mark.integration
def test_debezium_topics_and_tombstones_reach_kafka(kafka_bootstrap: str) -> None:
    """On 3-partition topics: a null key's records (a keyless table's) all in partition 0.

    Kafka's partitioner would spread them at random, and a replay after a crash would then
    land in another partition than its first copy, where no consumer finds it.
    """
    prefix = f"dbzt_{uuid.uuid4().hex[:8]}"
    changes = [i for i in generate(600, 7, 8) if isinstance(i, ChangeEvent)]
    tables = {f"{prefix}.{c.table.schema}.{c.table.name}" for c in changes}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in sorted(tables)]).values():
        future.result(30)
    done = walcast(
        "produce-test-stream", "--format", "debezium", "--count", "600", "--seed", "7",
        "--tables", "8",
        "--kafka", kafka_bootstrap, "--topic", DEFAULT_TOPIC,
        "--format-option", f"debezium.topic_prefix={prefix}",
        "--format-option", "debezium.provide_transaction_metadata=true",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = k.read_all(kafka_bootstrap, k.topics(kafka_bootstrap, prefix + "."))
    deletes = [c for c in changes if c.op is Op.DELETE]
    assert {r.topic for r in records} == tables | {f"{prefix}.transaction"}
    keyless = [r for r in records if r.key is None and r.topic in tables]
    assert keyless, "the stream has a table without a primary key"
    assert {r.partition for r in keyless} == {0}
    assert len({r.partition for r in records if r.key is not None and r.topic in tables}) > 1
    tombstones = [r for r in records if r.value is None]
    assert deletes
    assert len(tombstones) == len(deletes)
    by_partition: dict[tuple[str, int], list[k.Record]] = {}
    for record in records:
        by_partition.setdefault((record.topic, record.partition), []).append(record)
    for (topic, _), in_order in by_partition.items():
        in_order.sort(key=lambda r: r.offset)
        for i, record in enumerate(in_order):
            if record.value is not None:
                continue
            # the tombstone follows its delete, with the delete's key
            delete = in_order[i - 1]
            assert delete.value is not None
            assert orjson.loads(delete.value)["op"] == "d", topic
            assert record.key == delete.key
    statuses = [
        orjson.loads(r.value)["status"] for r in records if r.topic == f"{prefix}.transaction"
    ]
    assert statuses.count("BEGIN") == statuses.count("END") > 0

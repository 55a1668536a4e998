"""The streaming jobs against a real Kafka broker: normalize, restart, materialize, CLI."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.cli import add_parser
from pipeline.materialize import MaterializeJob, read_table
from pipeline.normalize import NormalizeJob
from tests.pipeline import expected
from tests.pipeline.conftest import MADE, encoded, layout_values, put_back, session_settings_of

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, values, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in values:
        producer.produce(topic, value=value, key=key)
        producer.poll(0)
    assert producer.flush(30) == 0


def table_rows(spark, root: str, schema: str, table: str) -> list[tuple]:
    rows = read_table(spark, root, schema, table).collect()
    return sorted(
        tuple(sorted((k, v) for k, v in r.asDict().items() if not k.startswith("_walcast")))
        for r in rows
    )


def test_normalize_restart_and_materialize(spark, kafka_bootstrap: str, tmp_path: Path) -> None:
    """canal with walcast keys, 3 partitions: poison, replays, a restart, then both stores."""
    topic = f"walcast-test-canal-{uuid.uuid4().hex[:8]}"
    messages = [
        (m.key, m.value) for m in encoded("canal", 200, seed=21, **{"canal.walcast_keys": "true"})
    ]
    produce(kafka_bootstrap, f"{topic}.layouts", layout_values())
    produce(kafka_bootstrap, topic, [*messages[:120], (b"bad", b'{"data": [')], partitions=3)
    out = str(tmp_path / "changes")
    job = NormalizeJob(
        bootstrap=kafka_bootstrap,
        topics=[topic],
        format="canal",
        output=out,
        checkpoint=str(tmp_path / "ckpt"),
        available_now=True,
    )
    job.run(spark)
    assert spark.read.parquet(out).count() == 120
    # the daemon restarts: the last 10 messages come again, then the rest
    produce(kafka_bootstrap, topic, messages[110:120] + messages[120:])
    job.run(spark)
    changes = spark.read.parquet(out)
    assert changes.count() == 200
    assert changes.select("commit_lsn_num", "ordinal").distinct().count() == 200
    quarantine = spark.read.parquet(out + "_quarantine")
    reasons = {r["reason"]: r["count"] for r in quarantine.groupBy("reason").count().collect()}
    assert reasons == {"malformed": 1, "replay": 10}
    bad = quarantine.where("reason = 'malformed'").first()
    assert (bad["kafka_topic"], bad["kafka_value"]) == (topic, b'{"data": [')

    state = expected.final_state(200, seed=21)
    for use_delta in (False, True):
        root = str(tmp_path / f"state-{use_delta}")
        MaterializeJob(
            normalized=out,
            state=root,
            checkpoint=str(tmp_path / f"mckpt-{use_delta}"),
            use_delta=use_delta,
            typed=False,
            available_now=True,
        ).run(spark)
        for (schema, table), rows in state.items():
            assert table_rows(spark, root, schema, table) == expected.as_rows(rows), (
                use_delta,
                table,
            )


def test_ibm_via_kafka_with_layout_topic_and_typed_state(
    spark, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"walcast-test-ibm-{uuid.uuid4().hex[:8]}"
    messages = [
        (m.key, m.value) for m in encoded("ibm", 150, seed=4, **{"ibm.max_message_size": "3000"})
    ]
    produce(kafka_bootstrap, f"{topic}.layouts", layout_values())
    produce(kafka_bootstrap, topic, messages)
    out = str(tmp_path / "changes")
    NormalizeJob(
        bootstrap=kafka_bootstrap,
        topics=[topic],
        format="ibm",
        output=out,
        checkpoint=str(tmp_path / "ckpt"),
        layout_topic=f"{topic}.layouts",  # the default is walcast run's walcast.schemas
        available_now=True,
        max_offsets_per_trigger=7,
    ).run(spark)
    got = {(r["commit_lsn_num"], r["ordinal"]) for r in spark.read.parquet(out).collect()}
    assert got == {(e.commit_lsn, e.ordinal) for e in expected.changes(150, seed=4)}
    root = str(tmp_path / "state")
    MaterializeJob(
        normalized=out,
        state=root,
        checkpoint=str(tmp_path / "mckpt"),
        bootstrap=kafka_bootstrap,
        layout_topic=f"{topic}.layouts",
        use_delta=False,
        typed=True,
        available_now=True,
    ).run(spark)
    customers = read_table(spark, root, "shop", "customers")
    types = dict(customers.dtypes)
    assert types["id"] == "bigint"
    assert types["balance"] == "decimal(12,2)"
    assert types["created_at"] == "timestamp"
    assert types["is_active"] == "boolean"
    want = expected.final_state(150, seed=4)[("shop", "customers")]
    assert customers.count() == len(want)


def test_cli_registers_spark_jobs(spark, kafka_bootstrap: str, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="walcast")
    add_parser(parser.add_subparsers(dest="command"))
    topic = f"walcast-test-qlik-{uuid.uuid4().hex[:8]}"
    produce(kafka_bootstrap, topic, [(m.key, m.value) for m in encoded("qlik", 20, seed=2)])
    args = parser.parse_args(
        [
            "spark",
            "normalize",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--format",
            "qlik",
            "--output",
            str(tmp_path / "n"),
            "--checkpoint",
            str(tmp_path / "c"),
            "--available-now",
            "--layout-topic",
            "",
        ]
    )
    assert args.func(args) == 0
    assert spark.read.parquet(str(tmp_path / "n")).count() == 20
    args = parser.parse_args(
        [
            "spark",
            "materialize",
            "--input",
            str(tmp_path / "n"),
            "--output",
            str(tmp_path / "s"),
            "--checkpoint",
            str(tmp_path / "mc"),
            "--parquet",
            "--available-now",
        ]
    )
    assert args.func(args) == 0
    assert read_table(spark, str(tmp_path / "s"), "shop", "orders").count() >= 0
    # the commands' session is this one (getOrCreate), with their settings now: the tests'
    # fixture puts its own back after each test (conftest.put_back)
    assert "spark.sql.adaptive.enabled" in put_back(spark, MADE)


def test_put_back_sets_the_fixture_s_settings_again(spark) -> None:
    made = session_settings_of(spark)
    assert made == MADE
    adaptive = made["spark.sql.adaptive.enabled"]
    spark.conf.set("spark.sql.adaptive.enabled", "true" if adaptive == "false" else "false")
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    assert put_back(spark, made) == ["spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions"]
    assert session_settings_of(spark) == made
    assert put_back(spark, made) == []

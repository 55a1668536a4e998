"""capture.state.progress: what a KafkaProgress shows of itself."""

from __future__ import annotations

from capture.state.identity import SourceIdentity
from capture.state.progress import KafkaProgress


def test_the_repr_never_shows_the_kafka_credentials() -> None:
    progress = KafkaProgress(
        {"bootstrap.servers": "b:9092", "sasl.password": "s3cr3t-pw"},
        "walcast.snapshots",
        SourceIdentity("7301", "app", "walcast"),
        lambda _topic, _key, _value: None,
    )
    text = repr(progress)
    assert "s3cr3t-pw" not in text
    assert "sasl" not in text
    assert "walcast.snapshots" in text  # the rest is shown

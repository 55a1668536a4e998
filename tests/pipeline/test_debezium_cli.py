"""``walcast spark normalize --format debezium`` as a user meets it with the wrong form.

A topic written with ``schemas.enable=true`` is read as it is by default (``schemas=auto``);
insisting on ``--parser-option schemas=false`` fails the job with one line, nothing
written, and the quarantine detail names the option.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.pipeline.conftest import encoded
from tests.pipeline.test_cli import assert_one_line_error, normalize
from tests.pipeline.test_jobs import produce

pytestmark = pytest.mark.integration


def test_a_schema_topic_read_as_plain_is_one_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"cli.debezium.{uuid.uuid4().hex[:8]}"
    messages = encoded("debezium", 40, seed=3, **{"debezium.schemas": "true"})
    produce(kafka_bootstrap, topic, [(m.key, m.value) for m in messages])
    wrong = normalize(
        tmp_path / "wrong", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--format", "debezium", "--parser-option", "schemas=false", "--layout-topic", "",
    )  # fmt: skip
    assert wrong.returncode == 5
    assert_one_line_error(wrong, "do not parse as debezium", "--parser-option")
    assert not list((tmp_path / "wrong" / "out").glob("**/*.parquet"))

    right = normalize(
        tmp_path / "right", "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--format", "debezium", "--layout-topic", "",
    )  # fmt: skip
    assert right.returncode == 0, right.stderr[-3000:]
    (batch,) = [line for line in right.stderr.splitlines() if ": batch 0: " in line]
    changes = sum(
        1 for m in messages if m.value is not None and json.loads(m.value)["payload"].get("op")
    )
    assert f": batch 0: {changes} changes written, quarantined none, " in batch, batch

"""``walcast spark normalize --format debezium`` as a user meets it with the wrong form.

Insisting on ``--parser-option schemas=false`` for a topic written with
``schemas.enable=true`` fails the job with one line, nothing written, and the quarantine
detail names the option. (That the default, ``schemas=auto``, reads such a topic is
tests/pipeline/formats/test_debezium.py's, in process.)
"""

from __future__ import annotations

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

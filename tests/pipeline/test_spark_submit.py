"""``spark-submit --master local[2]`` of the normalize job module, from the built wheel.

What a cluster user does (``pipeline/README.md``): ``pip install 'walcast[spark]'`` on
the machines, then ``spark-submit …/pipeline/jobs/normalize.py …``. Here the wheel is
built from the checkout and installed with its ``spark`` extra in a fresh venv; that
venv's own ``spark-submit`` runs the installed job module from a directory outside the
repository (the connector jars passed with ``--jars``, as ``--packages`` would fetch them
on a cluster). The job must read a canal topic and write every change.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.pipeline.conftest import encoded, layout_values, layouts, records

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COUNT = 300


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]


def test_spark_submit_runs_the_wheels_normalize_job(
    spark, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.normalize import normalize_frame  # noqa: PLC0415
    from pipeline.session import ensure_jars  # noqa: PLC0415

    topic = f"submit-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    messages = encoded("canal", COUNT, **{"canal.walcast_keys": "true"})
    for message in messages:
        producer.produce(topic, key=message.key, value=message.value)
    for key, value in layout_values():
        producer.produce(f"{topic}.layouts", key=key, value=value)
    assert producer.flush(60) == 0
    # what the checkout's own normalize makes of the same messages
    expected = normalize_frame(
        records(spark, [(m.key, m.value) for m in messages], topic=topic),
        parser_for("canal", {}),
        layouts(spark),
    ).changes.count()
    assert expected >= COUNT

    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    done = _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
         str(wheels), str(REPO)],
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("walcast-*.whl")
    done = _run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
         f"{wheel}[spark]"],
        timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (module,) = venv.glob("lib/python*/site-packages/pipeline/jobs/normalize.py")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WALCAST", "PYTHON"))}
    env |= {"PYSPARK_PYTHON": str(venv / "bin" / "python"), "TZ": "UTC"}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    output = tmp_path / "changes"
    done = _run(
        [str(venv / "bin" / "spark-submit"), "--master", "local[2]",
         "--conf", "spark.ui.enabled=false",
         "--jars", ",".join(str(j) for j in ensure_jars()),
         str(module), "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
         "--format", "canal", "--layout-topic", f"{topic}.layouts",
         "--output", str(output), "--checkpoint", str(tmp_path / "ckpt"), "--available-now"],
        timeout=600, cwd=outside, env=env,
    )  # fmt: skip
    # spark-submit's Python runner sends the driver's stderr to its stdout
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-5000:]
    assert f"batch 0: {expected:,} changes written, quarantined none" in said, said[-5000:]
    written = spark.read.parquet(str(output))
    assert written.count() == expected
    assert written.where("commit_lsn_num IS NULL OR ordinal IS NULL").count() == 0

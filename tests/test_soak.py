"""The differential soak (bench/soak.py), short: a seeded random workload with faults.

Two databases (same tables, other rows) are streamed by two ``walcast run`` daemons in every
format into the same topics, with inserts, updates, deletes, key changes (TOASTed rows
too), TRUNCATE, ADD/DROP COLUMN, rolled-back transactions, ``kill -9``, a slot dropped and
re-created and on-demand reloads at random times. Then the json topics folded as a
consumer does, and one vendor format through the Spark jobs (rotating with the seed: six
runs cover all six; ``bench/soak.py`` checks them all), must equal ``SELECT *`` of each
database.

The seed is random and printed; ``WALCAST_SOAK_SEED=N`` reruns one (the same workload and
faults; only their interleaving depends on timing), ``WALCAST_SOAK_FORMAT=ibm`` picks the
vendor format. Known walcast bugs (``bench.soak.KNOWN_BUGS``) are printed and do not fail
the test unless ``WALCAST_SOAK_STRICT=1``; any other difference fails it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.soak import VENDOR_FORMATS, Options, build_spark, run_soak

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

WORKLOAD_MINUTES = 1.0


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """The session's Spark (tests/pipeline's, when it runs first), else one of our own."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - `make unit` runs without pyspark

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    session = build_spark()
    yield session
    session.stop()


def test_soak_short(pg_dsn: str, kafka_bootstrap: str, spark, tmp_path: Path) -> None:
    seed = int(os.environ.get("WALCAST_SOAK_SEED") or random.SystemRandom().randrange(2**31))
    vendor = os.environ.get("WALCAST_SOAK_FORMAT") or VENDOR_FORMATS[seed % len(VENDOR_FORMATS)]
    print(f"walcast soak seed {seed} (rerun: WALCAST_SOAK_SEED={seed}), checks json and {vendor}")
    options = Options(
        dsn=pg_dsn,
        bootstrap=kafka_bootstrap,
        seed=seed,
        minutes=WORKLOAD_MINUTES,
        rate=15,
        scale=0.3,
        fault_every=10,
        check_formats=("json", vendor),
        strict=os.environ.get("WALCAST_SOAK_STRICT") == "1",
        workdir=tmp_path / "soak",
    )
    report = run_soak(options, spark)
    print(report.text())
    faults = report.faults
    assert report.exit_code == 0, (
        f"soak seed {seed} failed (rerun: WALCAST_SOAK_SEED={seed} "
        f"WALCAST_SOAK_FORMAT={vendor} pytest tests/test_soak.py):\n{report.text()}"
    )
    # the short run still exercises every fault and the whole check
    assert faults.kills > 0, report.text()
    assert faults.recreations > 0, report.text()
    assert faults.reloads > 0, report.text()
    assert set(report.formats) == {"json", vendor}
    assert all(r.rows > 0 for r in report.formats.values()), report.text()

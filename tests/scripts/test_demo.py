"""``make demo``'s script runs to its verdict on the local services (the README's first command).

The demo is what a new user runs first, and it compares Spark's tables with PostgreSQL's; a
feature that changes what a materialized table holds must keep it passing. (The state
tables' lineage columns broke it once, unseen: no test ran it.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).resolve().parent.parent.parent


def test_the_demo_ends_with_its_verdict_that_spark_matches_postgres() -> None:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "demo")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("demo passed: Spark's tables match PostgreSQL's"), lines[-5:]
    for table in ("customers", "orders"):
        assert f"equal to PostgreSQL's demo.{table}: yes" in done.stdout, done.stdout[-4000:]

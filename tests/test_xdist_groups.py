"""pytest-xdist's ``--dist loadgroup`` keeps an ``xdist_group`` on one worker.

``make test`` depends on it: the Spark lanes, the capture scenario's fixed tables and the
files sharing a module fixture are groups (tests/conftest.py). With pytest 9.2 and
pytest-xdist 3.8 it silently did not (pytest-xdist issue 1386): each test went to any
worker. This runs a throwaway suite on two workers and reads which worker ran each test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    pass
"""

MARKED_BY_HOOK = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if "test_b" in item.nodeid:
            item.add_marker(pytest.mark.xdist_group("by-hook"))
"""


def _workers_per_file(tmp_path: Path) -> dict[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2",
         "--dist", "loadgroup", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seen: dict[str, set[str]] = {}
    for worker, test_file in re.findall(r"\[(gw\d+)\].*PASSED (test_\w+)\.py::", done.stdout):
        seen.setdefault(test_file, set()).add(worker)
    return seen


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(MARKED_BY_HOOK)
    (tmp_path / "test_a.py").write_text(GROUPED)
    (tmp_path / "test_b.py").write_text(GROUPED.replace("pytestmark = ", "unused = "))
    seen = _workers_per_file(tmp_path)
    assert set(seen) == {"test_a", "test_b"}, seen
    # a module's pytestmark and a mark added in a collection hook alike
    assert len(seen["test_a"]) == 1, seen
    assert len(seen["test_b"]) == 1, seen

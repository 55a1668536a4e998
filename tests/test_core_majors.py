"""``WALCAST_TEST_CORE_PG_VERSIONS``: the capture core on more majors, in the same session.

``make test`` runs the ``core`` tests on the default server and on every other supported
major in its integration tier (tests/conftest.py ``_core_majors``). Collected here in a
pytest of its own (no server is started by a collection): a core test gets one id per
major, any other test keeps its one, and a major walcast cannot start is one line.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.scenario import REPO

CORE_FILE = "tests/capture/integration/test_versions.py"
OTHER_FILE = "tests/capture/test_status.py"  # integration tests on pg_dsn, not marked core


def _collect(*files: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"WALCAST_TEST_PG_VERSIONS", "WALCAST_TEST_CORE_PG_VERSIONS"}
        and not k.startswith("PYTEST_")
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "no:randomly", *files],
        cwd=REPO, env={**clean, **env}, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def _ids(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_core_tests_run_on_the_default_server_and_each_listed_major() -> None:
    ids = _ids(_collect(CORE_FILE, OTHER_FILE, WALCAST_TEST_CORE_PG_VERSIONS="13, 17"))
    core = [i for i in ids if i.startswith(CORE_FILE)]
    other = [i for i in ids if i.startswith(OTHER_FILE)]
    name = f"{CORE_FILE}::test_the_highest_protocol_is_negotiated"
    assert {f"{name}[pg-default]", f"{name}[pg13]", f"{name}[pg17]"} <= set(core), core
    # every core test once per server: the default one and the two listed
    plain = _ids(_collect(CORE_FILE))
    assert len(core) == 3 * len(plain), (len(core), len(plain))
    assert other == _ids(_collect(OTHER_FILE)), other  # not core: unchanged
    assert not any("[pg" in i for i in other), other


def test_the_versions_tier_variable_replaces_the_default_server() -> None:
    ids = _ids(
        _collect(CORE_FILE, WALCAST_TEST_PG_VERSIONS="14", WALCAST_TEST_CORE_PG_VERSIONS="13 17")
    )
    assert ids, "nothing collected"
    assert all("[pg14" in i for i in ids), ids[:5]


def test_a_major_walcast_cannot_start_is_one_line() -> None:
    done = _collect(OTHER_FILE, WALCAST_TEST_CORE_PG_VERSIONS="13 12")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors == ["ERROR: WALCAST_TEST_CORE_PG_VERSIONS: 12 not among 13, 14, 15, 16, 17, 18"]

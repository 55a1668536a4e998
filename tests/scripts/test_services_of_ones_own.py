"""scripts/local-services: each checkout's own services, and a cluster that wants passwords.

Issue 38.1: the default state dir belongs to the checkout and the OS user, so two checkouts
on one machine start, reuse and stop only their own servers. A "checkout" here is a copy
of the script in a directory of its own (the script derives its default state dir from
where it lies), so the test never touches this checkout's services.

Issue 38.5: ``WALCAST_PG_AUTH=scram-sha-256`` starts a cluster of its own that requires the
password, so the wrong-password path is tried as users meet it: ``walcast tail`` with a
wrong ``$PGPASSWORD`` prints one line and exits 3, with the right one it streams.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent.parent
SERVICES = REPO / "scripts" / "local-services"
PINNED = {"WALCAST_SERVICES_DIR", "WALCAST_PG_PORT", "WALCAST_KAFKA_PORT", "WALCAST_PG_VERSION"}


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that pins a state dir or a port."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED and k != "PGPASSWORD"}
    env.pop("WALCAST_PG_WAL_LEVEL", None)
    env.pop("WALCAST_PG_AUTH", None)
    return {**env, **extra}


def services(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def walcast(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """The CLI with exactly ``env`` (no $PGPASSWORD of the test run's own)."""
    return subprocess.run(
        [sys.executable, "-m", "capture", *args], capture_output=True, text=True, env=env,
        cwd=REPO, timeout=timeout, check=False,
    )  # fmt: skip


def exports(stdout: str) -> dict[str, str]:
    found = {}
    for line in stdout.splitlines():
        assert line.startswith("export "), line  # the contract: export lines only
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = shlex.split(value)[0]
    return found


@pytest.fixture
def two_checkouts() -> Iterator[tuple[Path, Path]]:
    """Two copies of the script, as in two checkouts; their state dirs are removed after."""
    root = Path(tempfile.mkdtemp(prefix="wc-checkouts-"))
    scripts = []
    for name in ("one", "two"):
        (root / name / "scripts").mkdir(parents=True)
        script = root / name / "scripts" / "local-services"
        shutil.copy2(SERVICES, script)
        scripts.append(script)
    yield scripts[0], scripts[1]
    for script in scripts:
        state = services(script, "dir", env=clean_env()).stdout.strip()
        services(script, "stop", "pg", env=clean_env())
        if state.startswith("/tmp/walcast-services-"):
            shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def test_two_checkouts_start_and_stop_only_their_own(two_checkouts: tuple[Path, Path]) -> None:
    one, two = two_checkouts
    env = clean_env()
    dirs = [services(s, "dir", env=env).stdout.strip() for s in (one, two)]
    assert dirs[0] != dirs[1]
    assert all(d.startswith("/tmp/walcast-services-") for d in dirs), dirs
    assert dirs[0] == services(one, "dir", env=env).stdout.strip()  # stable
    assert str(SERVICES.parent.parent) not in dirs  # and not this checkout's
    assert services(SERVICES, "dir", env=env).stdout.strip() not in dirs

    started = [services(s, "start", "pg", env=env) for s in (one, two)]
    assert all(done.returncode == 0 for done in started), [d.stderr for d in started]
    dsns = [exports(done.stdout)["WALCAST_TEST_DSN"] for done in started]
    assert dsns[0] != dsns[1]  # two servers, on two ports
    assert all(f"data={d}/pg/data" in services(s, "status", "pg", env=env).stdout
               for s, d in zip((one, two), dirs, strict=True))  # fmt: skip

    stopped = services(one, "stop", "pg", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert "pg:    stopped" in services(one, "status", "pg", env=env).stdout
    assert "pg:    running" in services(two, "status", "pg", env=env).stdout  # untouched
    again = services(two, "env", "pg", env=env)
    assert again.returncode == 0
    assert exports(again.stdout)["WALCAST_TEST_DSN"] == dsns[1]


def test_a_default_state_dir_of_another_user_is_refused(two_checkouts: tuple[Path, Path]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a dir owned by another user")  # reported by -ra
    one, _ = two_checkouts
    state = Path(services(one, "dir", env=clean_env()).stdout.strip())
    state.mkdir(mode=0o755)
    os.chown(state, 65534, 65534)  # nobody
    done = services(one, "start", "pg", env=clean_env())
    assert done.returncode == 1
    assert f"{state} belongs to another user; set WALCAST_SERVICES_DIR" in done.stderr
    assert not (state / "pg").exists()


@pytest.fixture(scope="module")
def scram_server() -> Iterator[dict[str, str]]:
    """A server of its own started with WALCAST_PG_AUTH=scram-sha-256 (stopped after)."""
    state = tempfile.mkdtemp(prefix="wc-scram-", dir="/tmp")
    Path(state).chmod(0o755)
    env = clean_env(WALCAST_SERVICES_DIR=state, WALCAST_PG_AUTH="scram-sha-256")
    started = services(SERVICES, "start", "pg", env=env)
    assert started.returncode == 0, started.stderr
    try:
        yield exports(started.stdout)
    finally:
        services(SERVICES, "stop", "pg", env=env)
        shutil.rmtree(state, ignore_errors=True)


def test_the_scram_cluster_prints_its_password_and_requires_it(
    scram_server: dict[str, str],
) -> None:
    assert scram_server["PGPASSWORD"] == "walcast"
    dsn = scram_server["WALCAST_TEST_DSN"]
    assert "password" not in dsn
    psql = Path(scram_server["WALCAST_TEST_PG_BIN"]) / "psql"
    base = clean_env()
    right = subprocess.run(
        [str(psql), dsn, "-XAtc", "SELECT 1"], capture_output=True, text=True,
        env={**base, "PGPASSWORD": "walcast"}, timeout=60, check=False,
    )  # fmt: skip
    assert right.stdout.strip() == "1", right.stderr
    wrong = subprocess.run(
        [str(psql), dsn, "-XAtc", "SELECT 1"], capture_output=True, text=True,
        env={**base, "PGPASSWORD": "not-it"}, timeout=60, check=False,
    )  # fmt: skip
    assert wrong.returncode != 0
    assert "password authentication failed" in wrong.stderr


@pytest.mark.parametrize(
    ("password", "expected", "code"),
    [
        ("not-it", "walcast: error: the server refused the password of role 'walcast'", 3),
        (None, "walcast: error: the server wants a password for role 'walcast' and none was", 3),
    ],
    ids=["wrong", "missing"],
)
def test_walcast_tail_with_a_wrong_password_prints_one_line(
    scram_server: dict[str, str], password: str | None, expected: str, code: int
) -> None:
    env = clean_env(**({"PGPASSWORD": password} if password else {}))
    env["PGPASSFILE"] = "/nonexistent"  # no ~/.pgpass of the machine's user
    done = walcast(
        "tail", "--dsn", scram_server["WALCAST_TEST_DSN"], "--slot", "s", "--publication", "p",
        env=env, timeout=60,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(expected), lines[0]
    assert "hint:" in lines[0]
    assert done.returncode == code
    assert done.stdout == ""


def test_walcast_tail_with_the_right_password_streams(scram_server: dict[str, str]) -> None:
    env = clean_env(PGPASSWORD=scram_server["PGPASSWORD"])
    dsn = scram_server["WALCAST_TEST_DSN"]
    psql = Path(scram_server["WALCAST_TEST_PG_BIN"]) / "psql"
    sql = "CREATE TABLE IF NOT EXISTS pw (id int PRIMARY KEY); INSERT INTO pw VALUES (1), (2)"
    subprocess.run(
        [str(psql), dsn, "-Xq", "-v", "ON_ERROR_STOP=1", "-c", sql + " ON CONFLICT DO NOTHING"],
        env=env, check=True, timeout=60,
    )  # fmt: skip
    done = walcast(
        "tail", "--dsn", dsn, "--slot", "pw", "--publication", "pw", "--create-slot",
        "--create-publication", "--publish-tables", "public.pw", "--max-events", "2",
        env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2

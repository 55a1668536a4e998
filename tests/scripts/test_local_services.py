"""scripts/local-services starts servers that inherit none of the caller's descriptors.

A server started with a descriptor of its caller keeps it open as long as it runs: a
caller under ``flock LOCK scripts/local-services start`` would keep LOCK held until the
services stop (issue 25.3). Each test starts a server of its own, in a state directory of
its own on ports chosen by the script (never the shared services of the test session),
under ``flock``, and with one more open file passed down, then checks that the lock is
free once the script has returned and that no descriptor of the server's processes names
either file. The server is stopped and its state directory removed after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent.parent
SERVICES = REPO / "scripts" / "local-services"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state dir under /tmp that the PostgreSQL OS user can enter (pytest's are 0700)."""
    state = Path(tempfile.mkdtemp(prefix="wc-fds-", dir="/tmp"))
    state.chmod(0o755)
    yield state
    shutil.rmtree(state, ignore_errors=True)


def services_env(state: Path) -> dict[str, str]:
    """The caller's environment with this test's state dir and nothing that pins a port."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"WALCAST_PG_PORT", "WALCAST_KAFKA_PORT", "WALCAST_PG_VERSION"}
    }
    env["WALCAST_SERVICES_DIR"] = str(state)
    env.pop("WALCAST_PG_WAL_LEVEL", None)
    return env


def start_under_flock(service: str, state: Path) -> tuple[Path, Path]:
    """``flock LOCK local-services start SERVICE``, with one more file open and inherited.

    Returns the lock file and the extra file.
    """
    lock, extra = state / "caller.lock", state / "caller.extra"
    with extra.open("w") as held:
        done = subprocess.run(
            ["flock", str(lock), str(SERVICES), "start", service],
            env=services_env(state), pass_fds=(held.fileno(),), capture_output=True,
            text=True, timeout=600, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "export " in done.stdout
    return lock, extra


def stop(service: str, state: Path) -> None:
    subprocess.run(
        [str(SERVICES), "stop", service],
        env=services_env(state), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def lock_is_free(lock: Path) -> bool:
    probe = subprocess.run(["flock", "--nonblock", str(lock), "true"], check=False, timeout=30)
    return probe.returncode == 0


def open_files(pids: list[int]) -> dict[int, set[str]]:
    """The targets of every descriptor of each process (those we may read)."""
    found: dict[int, set[str]] = {}
    for pid in pids:
        targets = set()
        for entry in Path(f"/proc/{pid}/fd").iterdir():
            try:
                targets.add(str(entry.readlink()))
            except OSError:  # closed meanwhile
                continue
        found[pid] = targets
    return found


def tree(root: int) -> list[int]:
    """``root`` and its descendants (PostgreSQL's children: checkpointer, walwriter, ...)."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        children = Path(f"/proc/{pid}/task/{pid}/children")
        if children.exists():
            todo.extend(int(c) for c in children.read_text().split())
    return pids


def assert_inherits_nothing(server: int, lock: Path, extra: Path) -> None:
    assert lock_is_free(lock), f"the caller's flock on {lock} is still held after the start"
    state = lock.parent
    own_locks = {str(state / f"{name}.lock") for name in ("pg", "kafka", "kafka_secure")}
    for pid, targets in open_files(tree(server)).items():
        leaked = ({str(lock), str(extra)} | own_locks) & targets
        assert not leaked, f"pid {pid} holds {sorted(leaked)}"


def test_postgresql_inherits_none_of_the_callers_descriptors(state_dir: Path) -> None:
    try:
        lock, extra = start_under_flock("pg", state_dir)
        pid_file = state_dir / "pg" / "data" / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        assert_inherits_nothing(postmaster, lock, extra)
    finally:
        stop("pg", state_dir)


def test_kafka_inherits_none_of_the_callers_descriptors(state_dir: Path) -> None:
    try:
        lock, extra = start_under_flock("kafka", state_dir)
        broker = int((state_dir / "kafka" / "kafka.pid").read_text())
        assert_inherits_nothing(broker, lock, extra)
        # The JVM's parent is not a shell of the script left waiting with the descriptors.
        parent = int(Path(f"/proc/{broker}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert parent == 1 or "local-services" not in Path(f"/proc/{parent}/cmdline").read_text()
    finally:
        stop("kafka", state_dir)


def test_the_secured_kafka_starts_from_nothing_and_inherits_nothing(state_dir: Path) -> None:
    """``start kafka-secure`` in an empty state dir: certificates, users and storage are made,
    the listeners answer, and the broker holds none of the caller's descriptors (issue 34)."""
    try:
        lock, extra = start_under_flock("kafka-secure", state_dir)
        broker = int((state_dir / "kafka-secure" / "kafka.pid").read_text())
        assert_inherits_nothing(broker, lock, extra)
        exports = subprocess.run(
            [str(SERVICES), "env", "kafka-secure"],
            env=services_env(state_dir), capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        for name in ("SASL_PLAINTEXT", "SASL_SSL", "SSL", "CA", "CLIENT_KEY", "WALCAST_PASSWORD"):
            assert f"export WALCAST_TEST_KAFKA_{name}=" in exports, exports
        key = state_dir / "kafka-secure" / "tls" / "walcast.key"
        assert key.stat().st_mode & 0o077 == 0, "the client key is readable by others"
    finally:
        stop("kafka-secure", state_dir)

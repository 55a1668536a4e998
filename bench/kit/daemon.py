"""Run ``walcast run`` as a subprocess, and wait for it to catch up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent.parent


class RunningDaemon:
    def __init__(self, *args: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "capture", "run", *args],
            stdout=self._log, stderr=self._log, cwd=REPO, env={**os.environ, **(env or {})},
        )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 180) -> int:
        """SIGTERM, and the exit code (a graceful stop exits 0)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self._log.close()
        return code

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        self._log.close()

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._log.close()
        return code


def current_lsn(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        return int(conn.execute("SELECT pg_current_wal_flush_lsn() - '0/0'").fetchone()[0])


def confirmed_lsn(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def wait_caught_up(
    dsn: str, slot: str, target: int, daemon: RunningDaemon, timeout: float = 300
) -> None:
    """Wait until the slot is acknowledged up to ``target`` (the daemon delivered it all)."""
    deadline = time.monotonic() + timeout
    while confirmed_lsn(dsn, slot) < target:
        if daemon.process.poll() is not None:
            raise AssertionError(
                f"walcast run exited {daemon.process.returncode}:\n{daemon.log()[-4000:]}"
            )
        if time.monotonic() > deadline:
            stuck = confirmed_lsn(dsn, slot)
            raise AssertionError(
                f"slot {slot} stuck at {stuck:X} < {target:X}\n{daemon.log()[-4000:]}"
            )
        time.sleep(0.5)

"""Two commits (or checkouts) of `walcast run`, alternating: the stream's ratio to pg_recvlogical.

Wall-clock throughput on a shared machine moves with the machine's load; a ratio taken in
one ``bench/run_e2e.py`` run (walcast and ``pg_recvlogical`` draining the same WAL) moves
far less, and alternating the two builds (A, B, A, B, …) spreads what is left over both.
For each run this prints the ratio of ``walcast run`` (at-least-once) to
``pg_recvlogical`` and the load average; at the end each build's median, the difference
B - A and B / A.

Usage::

    eval "$(scripts/local-services start all)"
    flock /tmp/walcast-heavy.lock .venv/bin/python bench/compare_commits.py cb5d93c HEAD \\
        [--runs 2] [--rows 400000] [--rows-per-txn 1000] [--format json] [--keep]

A side is a commit (anything ``git rev-parse`` takes: a checkout of it is made with
``git worktree add`` under a temporary directory and removed at the end unless
``--keep``) or a directory holding a checkout (``.`` for the working tree, uncommitted
changes included). Both sides run with this interpreter and this checkout's
``bench/run_e2e.py`` (``--checkout``), so an old commit needs no bench of its own.

For a load-independent figure of a hot-path change, count instructions instead:
``bench/cpu_per_change.py --callgrind A B``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kit.figures import Recorder, add_json_option, commit

REPO = Path(__file__).resolve().parent.parent
RATIO = re.compile(r"^ratio at-least-once/pg_recvlogical: ([0-9.]+)$", re.MULTILINE)
RATE = re.compile(r"^walcast run at-least-once:\s+([0-9.]+) s\s+([0-9,]+) rows/s", re.MULTILINE)


@dataclass
class Side:
    """One build: what the user named, the directory it runs from, and its ratios."""

    name: str
    path: Path
    worktree: bool = False
    """Made by this script (removed at the end)."""
    ratios: list[float] = field(default_factory=list)


def resolve(name: str, scratch: Path) -> Side:
    """A directory as it is; anything else as a commit, checked out in ``scratch``."""
    as_dir = Path(name)
    if as_dir.is_dir() and (as_dir / "capture").is_dir():
        return Side(name, as_dir.resolve())
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{name}^{{commit}}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = scratch / f"wt-{sha[:12]}"
    if not path.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), sha],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    label = name if sha.startswith(name) else f"{name} ({sha[:7]})"
    return Side(label, path, worktree=True)


def run_once(side: Side, args: argparse.Namespace) -> str:
    """One ``run_e2e.py`` run of ``side``'s daemon; its output."""
    command = [
        sys.executable, str(REPO / "bench" / "run_e2e.py"), "--checkout", str(side.path),
        "--modes", "at-least-once", "--no-latency", "--rows", str(args.rows),
        "--rows-per-txn", str(args.rows_per_txn), "--format", args.format,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"run_e2e.py failed for {side.name}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the baseline: a commit or a checkout directory")
    parser.add_argument("b", help="the build to compare with it")
    parser.add_argument("--runs", type=int, default=2, help="runs of each side (alternating)")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rows-per-txn", type=int, default=1000)
    parser.add_argument("--format", default="json")
    parser.add_argument("--keep", action="store_true", help="keep the worktrees made")
    add_json_option(parser)
    args = parser.parse_args()
    recorder = Recorder("compare_commits", args)
    for variable in ("WALCAST_TEST_DSN", "WALCAST_TEST_KAFKA"):
        if variable not in os.environ:
            sys.exit(f'{variable} is not set: eval "$(scripts/local-services start all)"')
    scratch = Path(tempfile.mkdtemp(prefix="walcast-compare-"))
    sides = [resolve(args.a, scratch), resolve(args.b, scratch)]
    commits = {subject.name: commit(subject.path) for subject in sides}
    try:
        for subject in sides:  # byte-compile first: the first run must not pay for it
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(subject.path / "capture")],
                check=True,
            )
        for run in range(args.runs):
            for subject in sides:
                output = run_once(subject, args)
                ratio = RATIO.search(output)
                rate = RATE.search(output)
                load = re.search(r"^load average: .*$", output, re.MULTILINE)
                if ratio is None or rate is None:
                    sys.exit(f"no ratio in run_e2e.py's output for {subject.name}:\n{output}")
                subject.ratios.append(float(ratio.group(1)))
                print(
                    f"run {run + 1} {subject.name}: ratio {float(ratio.group(1)):.3f}, "
                    f"{rate.group(2)} rows/s ({load.group(0) if load else 'load unknown'})",
                    flush=True,
                )
    finally:
        if not args.keep:
            for subject in sides:
                if subject.worktree:
                    subprocess.run(
                        ["git", "worktree", "remove", "--force", str(subject.path)],
                        cwd=REPO,
                        check=False,
                        capture_output=True,
                    )
            shutil.rmtree(scratch, ignore_errors=True)
    a, b = (statistics.median(s.ratios) for s in sides)
    print(f"format {args.format}, {args.rows} rows ({args.rows_per_txn} per transaction)")
    for subject in sides:
        listed = ", ".join(f"{r:.3f}" for r in subject.ratios)
        print(f"{subject.name}: median ratio {statistics.median(subject.ratios):.3f} ({listed})")
    print(f"difference B - A: {b - a:+.3f} ({b / a:.2f}x)")
    recorder.write({
        "sides": [
            {
                "name": subject.name, "commit": commits[subject.name],
                "ratios": subject.ratios, "median_ratio": statistics.median(subject.ratios),
            }
            for subject in sides
        ],
        "difference": b - a,
        "b_over_a": b / a,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

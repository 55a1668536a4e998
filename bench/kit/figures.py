"""A bench's figures as one JSON document, with the commit, the machine and the date.

Every bench takes ``--json PATH`` (:func:`add_json_option`) and, at its end, hands its
figures to :meth:`Recorder.write`, which writes (nothing without ``--json``)::

    {"bench": "tail_vs_recvlogical", "schema": 1,
     "started": "2026-11-29T06:40:12+00:00", "finished": "…", "seconds": 81.2,
     "commit": {"sha": "8b6e929…", "dirty": true, "repo": "/work/main"},
     "machine": {"cores": 2, "memory_bytes": …, "memory_available_bytes": …,
                 "load_average_start": [1.2, 3.4, 5.6], "load_average_end": […],
                 "python": "3.11.2", "platform": "Linux-…"},
     "options": {"rows": 1000000, …}, "figures": {…}}

so two runs can be compared (``python -m bench.kit.figures OLD.json NEW.json`` prints each
numeric figure of both, and both machines' loads: on a shared machine the load decides
whether a difference means anything, bench/README.md).

Decisions: ``commit`` is the checkout the bench measured (a bench measuring another
checkout passes its directory); ``dirty`` counts tracked files only (an untracked scratch
file changes no figure); without git, or outside a repository, ``sha`` is null and
``dirty`` null (the figures are still written). The document is written to a temporary
file beside ``PATH`` and renamed, so an interrupted run never leaves half a document.
Options are those parsed (taken when the recorder is made, so what a bench adds to its
namespace later is not written), without ``--json`` itself and without any whose name says
it may hold a secret (``dsn``, ``password``, ``secret``, ``token``): the figures are meant
to be kept and shared. Paths and other objects are written as text.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[2]
SCHEMA = 1
"""The document's layout version (a new key is not a new version; a changed one is)."""


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json PATH``: where :meth:`Recorder.write` puts the run's figures."""
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the figures, the commit and the machine as JSON to PATH",
    )


def commit(repo: Path = REPO) -> dict[str, Any]:
    """The checkout's HEAD and whether a tracked file differs from it."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(repo), *args],
                capture_output=True, text=True, check=False, timeout=30,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {
        "sha": sha.strip() if sha else None,
        "dirty": bool(status.strip()) if status is not None else None,
        "repo": str(repo),
    }


def _meminfo() -> dict[str, int]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """Cores, memory, load average now, Python and the platform."""
    info = _meminfo()
    total = info.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cores": os.cpu_count(),
        "memory_bytes": total,
        "memory_available_bytes": info.get("MemAvailable"),
        "load_average": load_average(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _secret(name: str) -> bool:
    """An option that may hold a password (a DSN, a token): never written."""
    return any(word in name.lower() for word in ("dsn", "password", "secret", "token"))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Recorder:
    """One run of a bench: made after the arguments are parsed, written at the end."""

    def __init__(self, bench: str, options: argparse.Namespace, *, repo: Path = REPO) -> None:
        self.bench = bench
        self.options = {k: v for k, v in vars(options).items() if k != "json" and not _secret(k)}
        self.repo = repo
        self.path: Path | None = getattr(options, "json", None)
        self.started = _now()
        self._started = time.monotonic()
        self.load_at_start = load_average()

    def document(self, figures: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON document of this run with ``figures``."""
        box = machine()
        box["load_average_start"] = self.load_at_start
        box["load_average_end"] = box.pop("load_average")
        return {
            "bench": self.bench,
            "schema": SCHEMA,
            "started": self.started,
            "finished": _now(),
            "seconds": round(time.monotonic() - self._started, 3),
            "commit": commit(self.repo),
            "machine": box,
            "options": self.options,
            "figures": dict(figures),
        }

    def write(self, figures: Mapping[str, Any]) -> Path | None:
        """Write the document to ``--json`` (nothing without it); the path written."""
        if self.path is None:
            return None
        data = orjson.dumps(
            self.document(figures),
            option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
            default=str,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        partial.write_bytes(data + b"\n")
        partial.replace(self.path)
        print(f"figures written to {self.path}", file=sys.stderr)
        return self.path


def numbers(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number in ``value`` by its dotted path (``formats.json.rows_per_s``)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)}
    out: dict[str, float] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(numbers(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.update(numbers(item, f"{prefix}[{index}]"))
    return out


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Lines comparing two documents: who and where, then each numeric figure."""

    def who(doc: Mapping[str, Any]) -> str:
        sha = (doc.get("commit") or {}).get("sha") or "?"
        dirty = " (dirty)" if (doc.get("commit") or {}).get("dirty") else ""
        box = doc.get("machine") or {}
        return (
            f"{sha[:10]}{dirty} {doc.get('started')}, {box.get('cores')} cores, load "
            f"{box.get('load_average_start')} → {box.get('load_average_end')}"
        )

    lines = [f"old: {who(old)}", f"new: {who(new)}"]
    if old.get("bench") != new.get("bench"):
        lines.append(f"different benches: {old.get('bench')} vs {new.get('bench')}")
    before, after = numbers(old.get("figures")), numbers(new.get("figures"))
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        ratio = f"  x{b / a:.3f}" if a not in (None, 0) and b is not None else ""
        lines.append(f"{name}: {_num(a)} → {_num(b)}{ratio}")
    return lines


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value == int(value) and abs(value) >= 1000 else f"{value:,.4g}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.kit.figures OLD.json NEW.json``: compare two runs."""
    parser = argparse.ArgumentParser(description="compare two runs' figures (--json files)")
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    try:
        old, new = (orjson.loads(p.read_bytes()) for p in (args.old, args.new))
    except (OSError, orjson.JSONDecodeError) as exc:
        print(f"figures: cannot read {exc}", file=sys.stderr)
        return 2
    print("\n".join(compare(old, new)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

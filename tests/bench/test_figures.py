"""bench/kit/figures.py: a bench's figures as JSON with the commit and the machine; one
bench's ``--json`` handling end to end (bench/fuzz_pipeline.py: no services needed)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
from pathlib import Path

import orjson
import pytest

from bench import fuzz_pipeline
from bench.kit import figures

REPO = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--dsn", default="host=x password=hunter2")
    figures.add_json_option(parser)
    return parser.parse_args(argv)


def test_without_json_nothing_is_written(tmp_path: Path) -> None:
    recorder = figures.Recorder("demo", parse())
    assert recorder.write({"rows_per_s": 1.0}) is None
    assert list(tmp_path.iterdir()) == []


def test_the_document_names_the_commit_the_machine_and_the_date(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "demo.json"
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    recorder = figures.Recorder("demo", parse("--rows", "5", "--json", str(path)))
    assert recorder.write({"walcast": {"rows_per_s": 1234.5}, "ratio": 0.25}) == path
    doc = orjson.loads(path.read_bytes())
    assert doc["bench"] == "demo"
    assert doc["schema"] == figures.SCHEMA
    assert doc["figures"] == {"walcast": {"rows_per_s": 1234.5}, "ratio": 0.25}
    assert doc["options"] == {"rows": 5}  # no --json, and the DSN (a password) never
    assert "hunter2" not in path.read_text()
    assert doc["commit"]["sha"] == git(REPO, "rev-parse", "HEAD")
    assert isinstance(doc["commit"]["dirty"], bool)
    machine = doc["machine"]
    assert machine["cores"] == os.cpu_count()
    assert machine["memory_bytes"] > 2**20
    assert len(machine["load_average_start"]) == len(machine["load_average_end"]) == 3
    assert dt.datetime.fromisoformat(doc["started"]) >= before
    assert dt.datetime.fromisoformat(doc["finished"]) >= dt.datetime.fromisoformat(doc["started"])
    assert [p.name for p in path.parent.iterdir()] == ["demo.json"]  # no partial file left


def test_dirty_counts_tracked_files_only(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    clean = figures.commit(repo)
    assert clean == {"sha": git(repo, "rev-parse", "HEAD"), "dirty": False, "repo": str(repo)}
    (repo / "scratch.txt").write_text("untracked\n")
    assert figures.commit(repo)["dirty"] is False
    (repo / "a.txt").write_text("two\n")
    assert figures.commit(repo)["dirty"] is True
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    assert figures.commit(outside) == {"sha": None, "dirty": None, "repo": str(outside)}


def test_two_runs_compare_figure_by_figure(tmp_path: Path) -> None:
    old = {
        "bench": "b",
        "commit": {"sha": "a" * 40, "dirty": False},
        "machine": {"cores": 2},
        "figures": {"tail": {"rows_per_s": 1000.0}, "ok": True, "runs": [{"s": 2.0}]},
    }
    new = {
        "bench": "b",
        "commit": {"sha": "b" * 40, "dirty": True},
        "machine": {"cores": 2},
        "figures": {"tail": {"rows_per_s": 1500.0}, "runs": [{"s": 1.0}], "extra": 3},
    }
    lines = figures.compare(old, new)
    assert lines[0].startswith("old: aaaaaaaaaa ")
    assert lines[1].startswith("new: bbbbbbbbbb (dirty) ")
    assert "tail.rows_per_s: 1,000 → 1,500  x1.500" in lines
    assert "runs[0].s: 2 → 1  x0.500" in lines
    assert "extra: - → 3" in lines
    assert not any(line.startswith("ok") for line in lines)  # a flag is not a figure
    (tmp_path / "old.json").write_bytes(orjson.dumps(old))
    (tmp_path / "new.json").write_bytes(orjson.dumps(new))
    assert figures.main([str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    assert figures.main([str(tmp_path / "old.json"), str(tmp_path / "missing.json")]) == 2


def test_a_bench_writes_its_figures_with_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "fuzz.json"
    code = fuzz_pipeline.main(["--messages", "40", "--seed", "3", "--json", str(path)])
    doc = orjson.loads(path.read_bytes())
    assert doc["bench"] == "fuzz_pipeline"
    assert doc["options"] == {"messages": 40, "seed": 3}
    assert code == (1 if doc["figures"]["findings"] else 0)
    assert doc["figures"]["seed"] == 3
    assert doc["figures"]["mutated_messages"] >= 40
    assert f"seed 3: {doc['figures']['episodes']:,} episodes" in capsys.readouterr().out


def test_a_bench_without_json_writes_none_and_rejects_a_bare_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert fuzz_pipeline.main(["--messages", "5", "--seed", "3"]) in (0, 1)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as exited:
        fuzz_pipeline.main(["--json"])
    assert exited.value.code == 2

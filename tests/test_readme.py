"""What README.md states about set-up, flags and exit codes is what the code does (issue 25).

The README is the newcomer's only guide, so its facts are checked against their source:

* the set-up line installs every package ``make`` checks for (the Makefile's
  ``command:package`` pairs and its JDK package), and a JDK, not a JRE;
* the command that puts walcast on PATH (``. .venv/bin/activate``) comes before the first
  ``walcast …`` example;
* the "Exit codes" table lists exactly the codes walcast's errors exit with (every
  ``exit_code`` of a :class:`~capture.errors.WalcastError` subclass), plus 0 and 130, and
  130 is what an interrupted command returns;
* every flag a ``walcast …`` command line of the README names (in code blocks and inline
  code) is accepted by that command's parser, and every flag of the settings table by
  ``walcast run``;
* quoted output that needs no server is what the code prints: ``make``'s line for a
  machine without a JDK and Maven, and the mistyped-settings lines of Troubleshooting;
* every ``](#anchor)`` link names a heading, and the compose minimum version is stated
  when compose.yaml uses inline configs.

Decision: quoted lines are compared exactly, but for the ``Makefile:NN:`` line number
make prefixes (it moves with any edit above the check and tells a user nothing).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml

from capture.cli import build_parser
from capture.errors import WalcastError

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def section(title: str) -> str:
    """The README's text under the heading ``title`` (any level), up to the next heading
    of the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", README, re.MULTILINE)
    assert match, f"README.md has no heading {title!r}"
    level = len(match.group(1))
    rest = README[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def code_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def shell_lines(block: str) -> list[str]:
    """The block's command lines, continuations joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


# -- set-up -----------------------------------------------------------------------------------


def apt_packages() -> set[str]:
    """The packages of the README's ``apt-get install`` line."""
    start = section("Start here")
    for block in code_blocks(start):
        for line in shell_lines(block):
            if "apt-get install" in line:
                words = line.split("apt-get install", 1)[1].split()
                return {w for w in words if not w.startswith("-")}
    raise AssertionError("Start here has no apt-get install line")


def makefile_packages() -> set[str]:
    """Every package the Makefile's prerequisite checks name."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    variables = dict(re.findall(r"^([A-Z_]+) :?= (.+)$", makefile, re.MULTILINE))
    packages: set[str] = set()
    code = "\n".join(line for line in makefile.splitlines() if not line.startswith("#"))
    for pairs in re.findall(r"\$\(call missing_commands,((?:[^()]|\$\([A-Z_]+\))*)\)", code):
        for pair in pairs.split():
            package = pair.split(":", 1)[1]
            ref = re.fullmatch(r"\$\(([A-Z_]+)\)", package)
            packages.add(variables[ref.group(1)] if ref else package)
    packages |= set(re.findall(r"install (python3 python3-venv)", makefile)[0].split())
    return packages


def test_the_setup_line_installs_every_package_make_checks_for() -> None:
    wanted = makefile_packages()
    assert {"openjdk-17-jdk-headless", "maven", "unzip", "xz-utils", "python3-venv"} <= wanted
    missing = wanted - apt_packages()
    assert not missing, f"README's apt-get line lacks {sorted(missing)}"


def test_the_setup_line_installs_a_jdk_and_postgresql() -> None:
    packages = apt_packages()
    assert "openjdk-17-jdk-headless" in packages  # javac: make setup compiles the readers
    assert not any(p.endswith("-jre-headless") for p in packages)
    assert {"make", "postgresql"} <= packages
    assert "apt-get update" in section("Start here")  # a fresh machine has no package lists


def test_walcast_is_put_on_path_before_the_first_example() -> None:
    activate = README.index(". .venv/bin/activate")
    first_example = min(
        block.start(1) + line.start()
        for block in FENCE.finditer(README)
        for line in re.finditer(r"^walcast ", block.group(1), re.MULTILINE)
    )
    assert activate < first_example
    assert activate < README.index("## `walcast tail`")


def fake_path(tmp_path: Path, commands: tuple[str, ...]) -> str:
    """A PATH directory holding only ``commands`` (links to the real ones)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in commands:
        real = shutil.which(command)
        assert real, f"{command} is needed by this test"
        (bin_dir / command).symlink_to(os.path.realpath(real))
    return str(bin_dir)


def test_make_names_the_missing_jdk_and_maven_as_the_readme_shows(tmp_path: Path) -> None:
    # A venv that "exists" (make checks only that its python is there): no interpreter check.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    make = shutil.which("make")
    assert make, "make is needed by this test"
    result = subprocess.run(
        [make, "--no-print-directory", "-C", str(REPO), "prerequisites", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": fake_path(tmp_path, ("sed",)), "HOME": str(tmp_path)},
    )
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    quoted = [
        line
        for block in code_blocks(README)
        for line in block.splitlines()
        if line.startswith("Makefile:")
    ]
    assert quoted, "README quotes no make line"
    for readme_line in quoted:
        assert re.sub(r"^Makefile:\d+:", "Makefile:N:", readme_line) == re.sub(
            r"^Makefile:\d+:", "Makefile:N:", line
        )


# -- exit codes -------------------------------------------------------------------------------


def readme_exit_codes() -> set[int]:
    table = section("Exit codes")
    return {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}


def error_classes(
    packages: tuple[str, ...] = ("capture", "pipeline"),
) -> Iterator[type[WalcastError]]:
    """Every WalcastError subclass of ``packages`` (every module imported: pipeline's need
    pyspark)."""
    for package in packages:
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if module.name.endswith("__main__") or ".jobs." in module.name:
                continue  # entry points: they run on import
            importlib.import_module(module.name)
    pending: list[type[WalcastError]] = [WalcastError]
    while pending:
        cls = pending.pop()
        yield cls
        pending.extend(cls.__subclasses__())


@pytest.mark.spark  # imports every pipeline module
def test_the_exit_code_table_lists_every_code_walcast_exits_with() -> None:
    codes = {cls.exit_code for cls in error_classes()}
    assert readme_exit_codes() == codes | {0, 130}


def test_the_exit_code_table_lists_every_code_capture_exits_with() -> None:
    """The same for capture alone: what a run without the Spark extra can check."""
    codes = {cls.exit_code for cls in error_classes(("capture",))}
    assert codes
    assert codes | {0, 130} <= readme_exit_codes()


def test_an_interrupted_command_exits_130() -> None:
    command = [sys.executable, "-m", "capture", "produce-test-stream", "--format", "json",
               "--count", "100000000", "--output", "-"]  # fmt: skip
    # A process started in the background may inherit SIGINT ignored, as a terminal's
    # foreground command never does: the wrapper restores it, then becomes walcast.
    restore = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", restore, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline()  # it runs the command: past start-up and parsing
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert "Traceback" not in stderr


# -- flags ------------------------------------------------------------------------------------


@cache
def parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        found[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def accepted(path: tuple[str, ...]) -> set[str]:
    """The options of the command at ``path`` and of the commands above it."""
    return {
        option
        for end in range(len(path) + 1)
        for action in parsers()[path[:end]]._actions
        for option in action.option_strings
    }


def command_lines() -> Iterator[str]:
    """Every ``walcast …`` command line of the README: in code blocks and inline code."""
    for block in code_blocks(README):
        for line in shell_lines(block):
            # each "walcast …" of the line up to the next one (a hint may name another)
            yield from re.findall(r"(?:^|(?<= ))(walcast .*?)(?= walcast |$)", line)
    prose = FENCE.sub("", README)
    yield from re.findall(r"`(walcast [^`]+)`", prose)


def command_path(words: list[str]) -> tuple[str, ...]:
    path: tuple[str, ...] = ()
    for word in words[1:]:
        if (*path, word) not in parsers():
            break
        path = (*path, word)
    return path


def test_every_flag_of_a_readme_command_line_is_accepted() -> None:
    checked = 0
    unknown: list[str] = []
    for line in command_lines():
        path = command_path(line.split())
        if not path:
            continue  # prose such as `walcast run`'s, no command line
        options = accepted(path)
        for flag in FLAG.findall(line):
            checked += 1
            if flag not in options:
                unknown.append(f"walcast {' '.join(path)} {flag}  (in: {line})")
    assert checked > 50
    assert not unknown, "\n".join(unknown)


def test_every_flag_of_the_settings_table_is_a_flag_of_run() -> None:
    table = section("Configuration")
    rows = re.findall(r"^\| `[a-z_]+\.[a-z_]+` \| ([^|]*) \|", table, re.MULTILINE)
    flags = [flag for row in rows for flag in FLAG.findall(row)]
    assert flags
    assert set(flags) <= accepted(("run",))


# -- quoted output ----------------------------------------------------------------------------

MISTYPED = """\
[source]
dsn = "host=db dbname=app user=cdc"
slot = "walcast"
publications = ["walcast"]
snapshot_worker = 4
[kafka]
bootstrap_server = "broker:9092"
[[outputs]]
format = "canal"
"""


def quoted_block_after(marker: str) -> list[str]:
    text = section("Troubleshooting")
    at = text.index(marker)
    return code_blocks(text[at:])[0].splitlines()


def test_the_mistyped_settings_lines_are_what_walcast_prints(tmp_path: Path) -> None:
    (tmp_path / "walcast.toml").write_text(MISTYPED, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "capture", "run", "--config", "walcast.toml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("WALCAST")},
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == quoted_block_after("**Mistyped settings**")


# -- links and compose ------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_readme_anchor_names_a_heading() -> None:
    headings = {slug(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", README), re.MULTILINE)}
    anchors = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert {"exit-codes", "troubleshooting", "start-here"} <= anchors
    assert anchors <= headings, sorted(anchors - headings)


def test_the_compose_minimum_version_is_stated() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))
    inline = any("content" in config for config in (compose.get("configs") or {}).values())
    containers = " ".join(section("Containers").split())
    if inline:  # configs.content came with Docker Compose 2.23.1
        assert "Docker Compose v2.23.1 or newer" in containers


# -- "Your own table", run as written (issue 38.2) ----------------------------------------------

OWN_TABLE_TOPIC = "walcast.canal.mine.accounts"


def own_table_clean(dsn: str, kafka: str) -> None:
    """What the section makes, gone: its slots, publication, schema and topic."""
    import psycopg  # noqa: PLC0415 - integration only
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name IN ('mine', 'mine_kafka') AND NOT active"
        )
        conn.execute("DROP PUBLICATION IF EXISTS mine")
        conn.execute("DROP SCHEMA IF EXISTS mine CASCADE")
    admin = AdminClient({"bootstrap.servers": kafka})
    if OWN_TABLE_TOPIC in admin.list_topics(timeout=30).topics:
        for future in admin.delete_topics([OWN_TABLE_TOPIC], operation_timeout=30).values():
            future.result(timeout=60)
    (REPO / "mine-run.log").unlink(missing_ok=True)


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.exclusive  # the README's fixed names (mine.accounts, mine_kafka): alone, last
def test_your_own_table_runs_as_written(tmp_path: Path) -> None:
    """Every command of the section, in order, in one bash (``set -euo pipefail``), from
    the repository and a cold home (only the download cache is the machine's)."""
    script = "".join(code_blocks(section("Your own table")))
    assert "scripts/local-services start all" in script
    started = subprocess.run(
        [str(REPO / "scripts" / "local-services"), "start", "all"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    found = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines())
    dsn, kafka = (found[k].strip("'") for k in ("WALCAST_TEST_DSN", "WALCAST_TEST_KAFKA"))
    own_table_clean(dsn, kafka)
    home = tmp_path / "home"
    home.mkdir()
    cache = os.environ.get("WALCAST_CACHE_DIR") or str(Path.home() / ".cache" / "walcast")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "WALCAST_CACHE_DIR": cache}
    for name in ("WALCAST_SERVICES_DIR", "LANG", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    try:
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + script], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
    finally:
        own_table_clean(dsn, kafka)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-6000:]
    assert "Traceback" not in said
    lines = done.stdout.splitlines()
    assert sum('"op":"snapshot"' in line for line in lines) == 2, said[-6000:]
    assert sum('"op":"update"' in line for line in lines) == 1, said[-6000:]
    assert "walcast: consumed 3 messages" in done.stderr
    assert "walcast spark normalize: done: 1 batch, 3 changes written" in done.stderr
    assert "walcast spark materialize: done: 1 batch, 3 changes into 1 table" in done.stderr
    shown = [line for line in lines if line.startswith("|")]
    # the table's columns, then the lineage of each row (the change that last wrote it)
    header = [cell.strip() for cell in shown[0].strip("|").split("|")]
    assert header[:3] == ["id", "owner", "balance"], header
    assert {"_walcast_commit_lsn", "_walcast_commit_time", "_walcast_op"} <= set(header), header
    assert sorted("|" + "|".join(row.strip("|").split("|")[:3]) + "|" for row in shown[1:]) == [
        "|  1|  ada| 100.00|",
        "|  2| alan|  75.00|",
        "|  3|grace|  20.00|",
    ], said[-3000:]
    assert "walcast: dropped slot mine " in done.stdout + done.stderr
    assert not (home / "walcast-mine").exists()  # the section's own clean-up ran

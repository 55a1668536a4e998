"""Every ``--help`` of the walcast CLI is written for a user (issue 25.4).

The whole command tree is walked (``walcast``, every subcommand and sub-subcommand, ``run``,
``tail`` and ``spark …`` included), and each help text, as ``--help`` prints it, must:

* hold no docstring markup (double backticks, ``:mod:``/``:class:``/``:func:``/… roles, any
  backtick at all) and no internal name: no dotted module path of walcast, no class of
  walcast's code, no module-level constant (an environment variable, ``$NAME``, is fine),
  no mention of docstrings;
* say what the command does (a description) and give at least one example command line
  that runs it;
* say what every option does, show the valid values of every option that has a fixed set
  (argparse's choices), and the default of every option that has one;
* keep the lines it prints as written (descriptions and examples of the commands that
  lay them out themselves) within 80 columns.

``--log-level`` takes a fixed set of levels: a wrong one is one line and exit 2.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
from collections.abc import Iterator
from functools import cache

import pytest

from capture import logging as walcast_logging
from capture.cli import build_parser
from capture.formats import FORMAT_NAMES
from tests.support.scenario import REPO, walcast

Command = tuple[str, ...]


def walk(
    parser: argparse.ArgumentParser, path: Command = ()
) -> Iterator[tuple[Command, argparse.ArgumentParser]]:
    """``parser`` and every subcommand's parser below it, with the words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's own options (not --help, not the subcommand list)."""
    return [
        a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction | argparse._VersionAction)
    ]


PARSERS = dict(walk(build_parser()))
COMMANDS = sorted(PARSERS)


def label(command: Command) -> str:
    """``walcast slot drop``: the command as a user types it."""
    return " ".join(("walcast", *command))


IDS = [label(c) for c in COMMANDS]


def help_text(command: Command) -> str:
    """What ``walcast <command> --help`` prints, at 80 columns."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        return PARSERS[command].format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


MARKUP = re.compile(r"``|:(?:py:)?(?:mod|class|func|data|meth|attr|obj|exc|ref|doc|const):|`")
"""reStructuredText/Sphinx markup, and any backtick (a terminal shows them as they are)."""

MODULE_PATH = re.compile(r"\b(?:capture|pipeline|tests)\.[a-z_]\w*")
"""A dotted path into walcast's packages (``capture.errors``, ``pipeline.jobs``)."""


@cache
def code_names() -> tuple[frozenset[str], frozenset[str]]:
    """Class names (two or more capitals) and module-level constants of walcast's code."""
    classes: set[str] = set()
    constants: set[str] = set()
    for package in ("capture", "pipeline"):
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and len(re.findall("[A-Z]", node.name)) >= 2:
                    classes.add(node.name)
            for node in tree.body:
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
                for target in targets:
                    if isinstance(target, ast.Name) and re.fullmatch(
                        r"_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", target.id
                    ):
                        constants.add(target.id)
    return frozenset(classes), frozenset(constants)


def internal_names(text: str) -> list[str]:
    """The internal names ``text`` shows (see the module docstring)."""
    classes, constants = code_names()
    found = MODULE_PATH.findall(text)
    found += [w for w in re.findall(r"\b[A-Za-z_]\w*\b", text) if w in classes]
    found += [
        m.group(1)
        for m in re.finditer(r"(?<![$\w])([A-Z_][A-Z0-9_]+)\b", text)
        if m.group(1) in constants
    ]
    found += re.findall(r"docstring|__doc__", text, flags=re.IGNORECASE)
    return found


def test_the_walk_reaches_every_command() -> None:
    """The checks below see every command (so none can be missed silently)."""
    names = {" ".join(c) for c in COMMANDS}
    for expected in (
        "tail",
        "run",
        "status",
        "slot",
        "slot drop",
        "snapshot",
        "consume",
        "produce-test-stream",
        "spark",
        "spark normalize",
        "spark materialize",
    ):
        assert expected in names


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_no_docstring_markup(command: Command) -> None:
    text = help_text(command)
    found = [m.group(0) for m in MARKUP.finditer(text)]
    assert not found, f"markup {found} in:\n{text}"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_no_internal_names(command: Command) -> None:
    text = help_text(command)
    found = internal_names(text)
    assert not found, f"internal names {found} in:\n{text}"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_description_and_an_example(command: Command) -> None:
    parser = PARSERS[command]
    assert (parser.description or "").strip(), f"{label(command)}: no description"
    epilog = parser.epilog or ""
    assert "examples:" in epilog, f"{label(command)}: no examples"
    called = label(command)
    examples = epilog.split("examples:", 1)[1].splitlines()
    assert any(
        re.match(rf"\s+(?:\w+=\S+\s+)*{re.escape(called)}(?:\s|$)", line) for line in examples
    ), f"no example runs {called}:\n{epilog}"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_options_show_their_values_and_defaults(command: Command) -> None:
    text = help_text(command)
    problems = []
    for action in options(PARSERS[command]):
        flag = action.option_strings[-1]
        if action.help == argparse.SUPPRESS:
            continue
        if action.choices is not None:
            missing = [str(c) for c in action.choices if str(c) not in text]
            if missing:
                problems.append(f"{flag}: values {missing} not shown")
        default = action.default
        stated = "default" in (action.help or "")
        meaningful = default not in (None, False, "", [], argparse.SUPPRESS)
        if meaningful and not stated and not isinstance(action, argparse._StoreTrueAction):
            problems.append(f"{flag}: default {default!r} not stated")
    assert not problems, f"{label(command)}: " + "; ".join(problems)


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_every_option_says_what_it_does(command: Command) -> None:
    silent = [a.option_strings[-1] for a in options(PARSERS[command]) if not (a.help or "").strip()]
    assert not silent, f"{label(command)}: no help for {silent}"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_format_options_list_the_formats(command: Command) -> None:
    """A ``--format`` without argparse choices names every format in its help."""
    for action in options(PARSERS[command]):
        if "--format" in action.option_strings and action.choices is None:
            missing = [f for f in FORMAT_NAMES if f not in (action.help or "")]
            assert not missing, f"{label(command)} --format: {missing} not named"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_laid_out_text_fits_80_columns(command: Command) -> None:
    parser = PARSERS[command]
    if parser.formatter_class is not argparse.RawDescriptionHelpFormatter:
        return  # argparse wraps the description and epilog itself
    for block in (parser.description or "", parser.epilog or ""):
        wide = [line for line in block.splitlines() if len(line) > 80]
        assert not wide, f"{label(command)}: lines over 80 columns: {wide}"


def test_the_checks_catch_what_they_look_for() -> None:
    """The detectors are not blind: each finds what a module docstring used to show."""
    assert MARKUP.search("``walcast status``")
    assert MARKUP.search("see :mod:`capture.errors`")
    assert MARKUP.search(":data:`KAFKA_CONNECT_TIMEOUT`")
    assert internal_names("raised as capture.errors.ConfigError") == [
        "capture.errors",
        "ConfigError",
    ]
    assert internal_names("within KAFKA_CONNECT_TIMEOUT seconds") == ["KAFKA_CONNECT_TIMEOUT"]
    assert internal_names("default: $WALCAST_DSN, or the SyntheticSource") == ["SyntheticSource"]
    assert not internal_names("PostgreSQL's max_slot_wal_keep_size; Delta Lake MERGE")


def test_the_printed_help_is_the_one_checked() -> None:
    """What a user sees (a subprocess, as typed) is what the checks above read."""
    done = walcast("slot", "drop", "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == help_text(("slot", "drop"))


# -- --log-level ---------------------------------------------------------------------------


def test_log_level_lists_its_values() -> None:
    text = help_text(())
    for level in walcast_logging.LEVELS:
        assert level in text


def test_a_wrong_log_level_is_one_line_and_exit_2() -> None:
    done = walcast("--log-level", "verbose", "produce-test-stream", "--format", "json")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("walcast: error: argument --log-level: 'verbose' is not a log level")
    assert "debug, info, warning, error, critical" in line


def test_a_wrong_log_level_in_the_environment_is_one_line_naming_it() -> None:
    done = walcast(
        "produce-test-stream", "--format", "json", "--count", "1",
        env={"WALCAST_LOG_LEVEL": "chatty"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "'chatty' (from $WALCAST_LOG_LEVEL) is not a log level" in line


def test_log_levels_in_any_case_and_their_aliases_still_work() -> None:
    for given in ("INFO", "warn", "Debug"):
        done = walcast(
            "--log-level", given, "produce-test-stream", "--format", "json", "--count", "1"
        )
        assert done.returncode == 0, (given, done.stderr)


@pytest.mark.parametrize(
    ("given", "parsed"),
    [("info", "info"), ("WARNING", "warning"), ("warn", "warning"), ("fatal", "critical")],
)
def test_the_log_level_argument(given: str, parsed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(walcast_logging.LEVEL_ENV, raising=False)
    parser = argparse.ArgumentParser(prog="walcast", exit_on_error=False)
    walcast_logging.add_log_level_argument(parser)
    assert parser.parse_args(["--log-level", given]).log_level == parsed
    assert parser.parse_args([]).log_level is None
    with pytest.raises(argparse.ArgumentError, match="'verbose' is not a log level"):
        parser.parse_args(["--log-level", "verbose"])


def test_the_log_level_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(walcast_logging.LEVEL_ENV, "ERROR")
    parser = argparse.ArgumentParser(prog="walcast")
    walcast_logging.add_log_level_argument(parser)
    assert parser.parse_args([]).log_level == "error"


def test_no_description_is_a_module_docstring() -> None:
    """No command's description is its module's docstring (where the markup came from)."""
    import sys  # noqa: PLC0415

    docs = {
        (module.__doc__ or "").strip()
        for name, module in list(sys.modules.items())
        if name.split(".")[0] in ("capture", "pipeline") and module.__doc__
    }
    for command in COMMANDS:
        description = (PARSERS[command].description or "").strip()
        assert description not in docs, f"{label(command)} prints a module docstring"

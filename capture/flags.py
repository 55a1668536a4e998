"""Command-line pieces shared by several commands: subcommands, integers, format settings.

``add_command`` and ``int_at_least`` give every subcommand the same help layout and the same
one-line errors for integer flags.

Help is written for the terminal, not taken from docstrings: a subcommand's ``--help`` prints
its description as written (line breaks kept, lines under 80 columns), each flag with its
default and valid values, then an ``examples:`` block of command lines. Module docstrings
are for the people who read the code; nothing of them reaches ``--help``
(tests/capture/test_help.py walks every subcommand and fails on docstring markup or a
module or class name).

``--format-option KEY=VALUE`` keys name their format: ``ibm.column_delimiter=;`` (the prefix
is the format name, or the name with ``-`` as ``_``: ``dts_avro.…``). A key that names no
format, or a format that is not an output of the command, is an error naming the key; it is
never ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Final

from capture.errors import ConfigError
from capture.formats import FORMAT_NAMES, FormatSettings, parse_settings

DSN_HELP: Final = (
    "libpq connection string or URI of the source database (default: $WALCAST_DSN); keep "
    "the password in $PGPASSWORD or ~/.pgpass: a command line is visible to every user"
)
"""The help of ``--dsn`` for the commands that connect to the source database."""


def add_command(
    subparsers: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    help_text: str,
    description: str,
    examples: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """Add subcommand ``name``: ``--help`` prints ``description`` as written, then examples.

    ``help_text`` is the one line the parent command's ``--help`` lists; ``examples`` are
    whole command lines, printed one per line under ``examples:``.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=description,
        epilog=examples_epilog(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def examples_epilog(examples: Sequence[str]) -> str | None:
    """The ``examples:`` block of a ``--help`` (None when there are none).

    Each example is indented by two spaces, every line of it (a long example may go on
    over several lines, each but the last ending in a backslash, as a shell reads it).
    """
    if not examples:
        return None
    lines = [line for example in examples for line in example.splitlines()]
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``minimum``, else argparse's one line.

    The message says "must be positive" for a minimum of 1, "must not be negative" for 0.
    """
    bound = {1: "must be positive", 0: "must not be negative"}.get(
        minimum, f"must be at least {minimum}"
    )

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} {bound}")
        return value

    return parse


def key_values(pairs: Sequence[str], flag: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` as a dict; a pair without ``=`` is an error naming ``flag``."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: {pair!r} is not KEY=VALUE")
        values[key.strip()] = value
    return values


def format_of(key: str) -> str | None:
    """The format a setting key names by its prefix, or None."""
    prefix = key.split(".", 1)[0] if "." in key else ""
    for name in FORMAT_NAMES:
        if prefix in (name, name.replace("-", "_")):
            return name
    return None


def settings_by_format(
    pairs: Sequence[str], formats: Sequence[str], flag: str = "--format-option"
) -> dict[str, dict[str, str]]:
    """Split ``KEY=VALUE`` format settings by the output format each key names (as text).

    A key that names no format, or a format that is not an output, is a ConfigError; the
    values are parsed where the settings are used (:func:`format_settings`, or the daemon's
    config, which merges them with the file's first).
    """
    by_format: dict[str, dict[str, str]] = {f: {} for f in formats}
    for key, value in key_values(pairs, flag).items():
        fmt = format_of(key)
        if fmt is None:
            raise ConfigError(
                f"{flag}: {key!r} names no format; prefix the key with its format, e.g. "
                f"{formats[0] if formats else 'ibm'}.{key}",
            )
        if fmt not in by_format:
            raise ConfigError(
                f"{flag}: {key!r} is a setting of format {fmt}, which is not an output here "
                f"(outputs: {', '.join(formats)})"
            )
        by_format[fmt][key] = value
    return by_format


def format_settings(
    pairs: Sequence[str], fmt: str, flag: str = "--format-option"
) -> FormatSettings:
    """The parsed settings of the one output format ``fmt`` (``tail``, ``produce-test-stream``).

    Parsed once, here, before any connection: a bad value is a ConfigError naming its key.
    """
    return parse_settings(fmt, settings_by_format(pairs, [fmt], flag)[fmt])

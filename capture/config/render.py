"""Settings written out: ``walcast run --print-config`` and ``walcast.example.toml``.

Both are rendered from the one table of :mod:`capture.config.settings`: every scalar
setting with its help line, then the tables, then ``[[outputs]]``. ``--print-config`` shows
the effective values (file, environment, flags) with secrets redacted; the example file
shows every default. A test keeps the committed example equal to :func:`example_toml`
(``python -m capture.config.render`` prints it).

Settings with problems (:func:`render_parsed`): ``--print-config`` still prints every valid
value; a missing or invalid setting is a comment line, ``# key =   (missing: give --slot,
…)`` or ``# key =   (invalid: 'x' is not a number)``, so the output stays TOML that loads
(and fails on the same missing settings); the error lines follow on stderr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from capture import dsn as dsn_util
from capture.config.settings import (
    BY_SECTION,
    OUTPUT_SETTINGS,
    REDACTED,
    SECRET_PRODUCER_KEY,
    SECTIONS,
    SETTINGS,
    Kind,
    Setting,
)
from capture.formats.settings import settings_text

if TYPE_CHECKING:
    from capture.config.model import DaemonConfig
    from capture.config.parsed import Parsed


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return orjson.dumps(str(value)).decode()  # a JSON string is a TOML basic string


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def _comment(text: str) -> str:
    return f"# {text}"


def _setting_lines(
    setting: Setting, value: Any, *, example: bool, note: str | None = None
) -> list[str]:
    """The help comment and ``key = value`` line(s) of one scalar/list setting.

    ``note``: the setting is missing or invalid; it shows as a comment saying so.
    """
    lines = [_comment(_help(setting))]
    if note is not None:
        problem = note if note.startswith("missing") else f"invalid: {note}"
        lines.append(f"# {setting.key} =   ({problem})")
    elif value is None:
        shown = setting.example if example else None
        if shown is None:
            lines.append(f"# {setting.key} =   (not set)")
        else:
            lines.append(f"# {setting.key} = {_toml_value(shown)}")
    else:
        lines.append(f"{setting.key} = {_toml_value(value)}")
    return lines


def _help(setting: Setting) -> str:
    """The help comment of ``setting``: its help, whether it is required, its flag."""
    marks = [m for m in ("required" if setting.required else "", _flag(setting)) if m]
    return setting.help + (f" ({', '.join(marks)})" if marks else "")


def _flag(setting: Setting) -> str:
    return f"flag {setting.flag}" if setting.flag else ""


def _table_lines(
    header: str,
    setting: Setting,
    table: Mapping[str, str],
    example: bool,
    note: str | None = None,
) -> list[str]:
    lines = [_comment(_help(setting))]
    if note is not None:
        lines.append(_comment(f"(invalid: {note})"))
    lines.append(header)
    if table:
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    elif example and setting.example:
        lines += [f"# {_toml_key(k)} = {_toml_value(v)}" for k, v in setting.example.items()]
    return lines


def _document(
    values: Mapping[str, Any],
    outputs: Sequence[Mapping[str, Any]],
    head: list[str],
    example: bool,
    notes: Mapping[str, str] | None = None,
) -> str:
    """The TOML text; ``values`` by config field, ``notes`` by ``section.key`` (problems)."""
    notes = notes or {}
    lines = list(head)
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        tables = []
        for setting in BY_SECTION[section].values():
            if setting.kind is Kind.TABLE:
                tables.append(setting)
                continue
            lines += _setting_lines(
                setting, values.get(setting.field), example=example, note=notes.get(setting.name)
            )
        for setting in tables:
            lines.append("")
            lines += _table_lines(
                f"[{section}.{setting.key}]",
                setting,
                values.get(setting.field) or {},
                example,
                notes.get(setting.name),
            )
    if "outputs" in notes:
        lines += ["", f"# [[outputs]]   ({notes['outputs']})"]
    for i, output in enumerate(outputs):
        lines += ["", "[[outputs]]"]
        for setting in OUTPUT_SETTINGS:
            if setting.kind is not Kind.TABLE:
                note = notes.get(f"outputs[{i}].{setting.key}")
                lines += _setting_lines(
                    setting, output.get(setting.key), example=example, note=note
                )
        settings = OUTPUT_SETTINGS[-1]
        lines += _table_lines(
            "[outputs.settings]",
            settings,
            output.get("settings") or {},
            example,
            notes.get(f"outputs[{i}].settings"),
        )
    return "\n".join(lines) + "\n"


def example_toml() -> str:
    """The text of ``walcast.example.toml``: every setting with its default and help."""
    values = {s.field: s.example if s.required else s.default for s in SETTINGS}
    output = {s.key: s.example if s.required else s.default for s in OUTPUT_SETTINGS}
    head = [
        "# walcast.example.toml: every setting of `walcast run`, with its default.",
        "# Generated from capture/config/settings.py (SETTINGS): python -m capture.config.render",
        "# Values marked (required) are examples. Each scalar setting can also be set with",
        "# WALCAST__<SECTION>__<KEY> (lists comma-separated); flags of `walcast run` win over",
        "# both. `walcast run --print-config` shows the effective settings.",
    ]
    return _document(values, [output], head, example=True)


def render_toml(config: DaemonConfig) -> str:
    """``config`` as TOML (``--print-config``): the effective settings, secrets redacted.

    The result loads back into the same configuration (given the same password sources),
    except that a password in ``source.dsn`` (from ``--dsn`` or the environment) shows as
    ``********``, and such a file is refused: passwords never come from the file.
    """
    values = {s.field: config.value(s.field) for s in SETTINGS}
    outputs = [{s.key: getattr(o, s.key) for s in OUTPUT_SETTINGS} for o in config.outputs]
    head = [
        "# Effective settings of `walcast run` (file, then environment, then flags); secrets",
        "# redacted. Producer settings apply over walcast's durable defaults.",
    ]
    return _document(*_shown(values, outputs), head, example=False)


def render_parsed(parsed: Parsed) -> str:
    """Settings with problems as TOML (``--print-config``).

    Every valid value, secrets redacted, and a comment on each missing or invalid setting
    (see the module docstring).
    """
    values = {s.field: parsed.values.get(s.field) for s in SETTINGS}
    head = [
        "# Settings of `walcast run` (file, then environment, then flags), secrets redacted.",
        "# They are NOT valid: the settings marked (missing: ...) or (invalid: ...) must be",
        "# fixed; the errors are on stderr.",
    ]
    return _document(*_shown(values, parsed.outputs), head, example=False, notes=parsed.notes)


def _shown(
    values: dict[str, Any], outputs: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``values`` and ``outputs`` as they are shown: secrets redacted, settings as text."""
    from capture.formats import FormatSettings  # noqa: PLC0415

    for setting in SETTINGS:
        if setting.secret and values.get(setting.field) is not None:
            values[setting.field] = redact_dsn(values[setting.field])
    values["producer"] = {
        k: REDACTED if SECRET_PRODUCER_KEY.search(k) else v
        for k, v in (values.get("producer") or {}).items()
    }
    shown = []
    for output in outputs:
        entry = dict(output)
        given = entry.get("settings")
        entry["settings"] = settings_text(given) if isinstance(given, FormatSettings) else {}
        shown.append(entry)
    return values, shown


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password (and ssl password) replaced by ``********``."""
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415

    params = dsn_util.parse(dsn, setting="source.dsn")
    if not {"password", "sslpassword"} & set(params):
        return dsn
    for key in ("password", "sslpassword"):
        if key in params:
            params[key] = REDACTED
    return make_conninfo("", **params)


if __name__ == "__main__":
    import sys

    sys.stdout.write(example_toml())

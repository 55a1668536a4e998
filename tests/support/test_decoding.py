"""Parse PostgreSQL's ``test_decoding`` output into tail-like change records.

``test_decoding`` (contrib) is the reference: for the same WAL, ``walcast tail`` must
report the same changes. Its lines look like::

    BEGIN 745
    table walcast_it.t: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 v[text]:'x'
    table walcast_it.a, walcast_it.b: TRUNCATE: cascade
    COMMIT 745 (at 2026-11-22 01:02:03.123456+00)

Values are the type output, quoted (``'`` doubled) except for numbers; booleans print as
true/false; unchanged TOAST as ``unchanged-toast-datum``; nulls as ``null``. Old images
skip null columns, so comparisons drop nulls from ``before``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_TABLE_RE = re.compile(
    r"^table (?P<tables>.+?): (?P<op>INSERT|UPDATE|DELETE|TRUNCATE):(?P<rest>.*)$", re.DOTALL
)
_COMMIT_RE = re.compile(r"^COMMIT (?P<xid>\d+)(?: \(at (?P<at>.+)\))?$")
_BEGIN_RE = re.compile(r"^BEGIN (?P<xid>\d+)$")
UNCHANGED = object()


@dataclass
class Change:
    op: str
    schema: str
    table: str
    xid: int
    commit_time: str = ""
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    unchanged_toast: list[str] = field(default_factory=list)


def _parse_columns(text: str) -> dict[str, Any]:
    """Parse ``name[type]:value`` items separated by single spaces."""
    out: dict[str, Any] = {}
    pos = 0
    n = len(text)
    while pos < n:
        while pos < n and text[pos] == " ":
            pos += 1
        if pos >= n:
            break
        if text[pos] == '"':
            end = pos + 1
            while True:
                end = text.index('"', end)
                if end + 1 < n and text[end + 1] == '"':
                    end += 2
                    continue
                break
            name = text[pos + 1 : end].replace('""', '"')
            pos = end + 1
        else:
            end = text.index("[", pos)
            name = text[pos:end]
            pos = end
        assert text[pos] == "[", text[pos:]
        type_end = text.index("]:", pos)
        type_name = text[pos + 1 : type_end]
        pos = type_end + 2
        if text.startswith("'", pos):
            chars = []
            pos += 1
            while True:
                quote = text.index("'", pos)
                chars.append(text[pos:quote])
                if quote + 1 < n and text[quote + 1] == "'":
                    chars.append("'")
                    pos = quote + 2
                    continue
                pos = quote + 1
                break
            value: Any = "".join(chars)
        elif text.startswith("B'", pos):
            quote = text.index("'", pos + 2)
            value = text[pos + 2 : quote]
            pos = quote + 1
        else:
            end = text.find(" ", pos)
            end = n if end < 0 else end
            raw = text[pos:end]
            pos = end
            if raw == "null":
                value = None
            elif raw == "unchanged-toast-datum":
                value = UNCHANGED
            elif type_name == "boolean":
                value = {"true": "t", "false": "f"}[raw]
            else:
                value = raw
        out[name] = value
    return out


def _split(qualified: str) -> tuple[str, str]:
    schema, _, table = qualified.partition(".")
    return schema.strip('"'), table.strip('"')


def parse(lines: list[str], *, schema: str) -> list[Change]:
    """Changes of tables in ``schema``, with xid and commit time filled in."""
    changes: list[Change] = []
    current: list[Change] = []
    xid = 0
    for line in lines:
        if match := _BEGIN_RE.match(line):
            xid = int(match["xid"])
            current = []
            continue
        if match := _COMMIT_RE.match(line):
            for change in current:
                change.commit_time = match["at"] or ""
            changes.extend(current)
            current = []
            continue
        if line.startswith("message: "):
            continue  # pg_logical_emit_message records (e.g. walcast's heartbeats)
        match = _TABLE_RE.match(line)
        assert match is not None, line
        op = match["op"].lower()
        rest = match["rest"].strip()
        if op == "truncate":
            for qualified in match["tables"].split(", "):
                s, t = _split(qualified)
                if s == schema:
                    current.append(Change(op, s, t, xid))
            continue
        s, t = _split(match["tables"])
        if s != schema:
            continue
        change = Change(op, s, t, xid)
        if op == "insert":
            change.after = _parse_columns(rest)
        elif op == "update":
            if rest.startswith("old-key:"):
                old, _, new = rest.removeprefix("old-key:").partition(" new-tuple:")
                change.before = _parse_columns(old)
                rest = new
            change.after = _parse_columns(rest)
        elif rest != "(no-tuple-data)":
            change.before = _parse_columns(rest)
        if change.after is not None:
            change.unchanged_toast = [k for k, v in change.after.items() if v is UNCHANGED]
            change.after = {k: v for k, v in change.after.items() if v is not UNCHANGED}
        if change.before is not None:
            change.before = {k: v for k, v in change.before.items() if v is not None}
        current.append(change)
    return changes

r"""Rows of ``COPY … TO STDOUT`` (text format) as pgoutput-like text values.

COPY's text format writes each value with the type's output function, the same text a
text-mode pgoutput tuple carries, then escapes it: ``\\`` for a backslash, ``\b \f \n \r
\t \v`` for those control characters, ``\N`` for NULL; rows end with a newline and values
are separated by tabs. (COPY TO never writes octal or hex escapes, but they are decoded too,
as COPY FROM would.) So a raw newline always ends a row and a raw tab always ends a value.

:func:`split_rows` turns the byte blocks psycopg's ``Copy`` yields into complete lines,
keeping a partial last line for the next block; :func:`row_values` turns one line into the
values of a :class:`~capture.pgoutput.messages.TupleData`. The common case, a line without a
backslash, costs one ``split``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

NULL: Final = b"\\N"
_ESCAPE: Final = re.compile(rb"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE: Final = {
    b"b": b"\b",
    b"f": b"\f",
    b"n": b"\n",
    b"r": b"\r",
    b"t": b"\t",
    b"v": b"\v",
}


def _unescape_one(match: re.Match[bytes]) -> bytes:
    code = match.group(1)
    simple = _SIMPLE.get(code)
    if simple is not None:
        return simple
    if code[:1] == b"x" and len(code) > 1:
        return bytes([int(code[1:], 16)])
    if code[:1].isdigit():
        return bytes([int(code, 8) & 0xFF])
    return code


def unescape(value: bytes) -> bytes:
    """One COPY text value without its escapes."""
    return _ESCAPE.sub(_unescape_one, value)


def row_values(line: bytes) -> tuple[bytes | None, ...]:
    """The values of one COPY text line (None for NULL)."""
    fields = line.split(b"\t")
    if b"\\" not in line:
        return tuple(fields)
    return tuple(None if f == NULL else unescape(f) if b"\\" in f else f for f in fields)


def split_rows(blocks: Iterable[bytes | bytearray | memoryview]) -> Iterator[bytes]:
    """Complete lines (without their newline) from COPY output ``blocks``."""
    pending = b""
    for block in blocks:
        data = pending + bytes(block)
        lines = data.split(b"\n")
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending

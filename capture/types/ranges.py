r"""Range and multirange types (binary send form), of any subtype walcast decodes exactly.

Python value: ``str``, the text range_out / multirange_out print, in both wire formats
(``from_text`` keeps the text; the decoders here render the send bytes to it).

range_send (rangetypes.c): one flags byte, then the lower bound if the range has one,
then the upper bound, each as Int32 length + the subtype's send bytes. A bound is present
unless the range is empty or that bound is infinite (or NULL, which range_send never
writes). Flags: ``0x01`` empty, ``0x02``/``0x04`` lower/upper inclusive, ``0x08``/``0x10``
lower/upper infinite, ``0x20``/``0x40`` lower/upper NULL, ``0x80`` contains-empty (an
index-only bit, ignored by range_out).

range_out: ``empty``, or ``[``/``(``, the lower bound's text, ``,``, the upper bound's
text, ``]``/``)``; an infinite bound prints nothing. A bound's text (the subtype's output)
is written as range_bound_escape does: double-quoted when it is empty or contains ``"``,
``\``, ``(``, ``)``, ``[``, ``]``, ``,`` or a space character (C ``isspace``: space, tab,
newline, vertical tab, form feed, carriage return), with ``"`` and ``\`` doubled inside
the quotes (``"a""b"``, not backslash-escaped).

multirange_send (multirangetypes.c): Int32 range count, then per range Int32 length and
its range_send bytes; multirange_out: ``{`` + the ranges' range_out texts joined by
``,`` + ``}``.

Decision: the subtype is rendered by its own codec (``render``: send bytes to output
text), so a range over any exactly decoded subtype is exact too. isspace is taken as the
six ASCII space characters: exact for a UTF-8 (or SQL_ASCII) database, whose locales
never class a byte >= 0x80 as a space; the built-in range subtypes only print ASCII.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Final

Render = Callable[[bytes], str]
"""Send bytes of one subtype value -> that value's output text."""

EMPTY: Final = 0x01
LB_INC: Final = 0x02
UB_INC: Final = 0x04
LB_INF: Final = 0x08
UB_INF: Final = 0x10
LB_NULL: Final = 0x20
UB_NULL: Final = 0x40

_LEN: Final = struct.Struct(">i")
_NEEDS_QUOTES: Final = re.compile(r'["\\()\[\], \t\n\r\v\f]')


def bound_text(text: str) -> str:
    """Quote one bound's output text as range_bound_escape does."""
    if text and _NEEDS_QUOTES.search(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'


def _bound(data: bytes, offset: int, render: Render) -> tuple[str, int]:
    (length,) = _LEN.unpack_from(data, offset)
    offset += 4
    if length < 0 or offset + length > len(data):
        raise ValueError(f"range send data: bound length {length} at offset {offset - 4}")
    return bound_text(render(data[offset : offset + length])), offset + length


def _range_text(data: bytes, render: Render) -> str:
    if not data:
        raise ValueError("range send data is empty")
    flags = data[0]
    if flags & EMPTY:
        if len(data) != 1:
            raise ValueError("range send data: an empty range has bound bytes")
        return "empty"
    offset = 1
    lower = upper = ""
    if not flags & (LB_INF | LB_NULL):
        lower, offset = _bound(data, offset, render)
    if not flags & (UB_INF | UB_NULL):
        upper, offset = _bound(data, offset, render)
    if offset != len(data):
        raise ValueError(f"range send data has {len(data) - offset} trailing bytes")
    return ("[" if flags & LB_INC else "(") + lower + "," + upper + ("]" if flags & UB_INC else ")")


def range_decoder(render: Render) -> Callable[[bytes], str]:
    """Build the range_send decoder of a range whose subtype values ``render`` renders."""

    def from_binary(data: bytes) -> str:
        return _range_text(data, render)

    return from_binary


def multirange_decoder(range_text: Render) -> Callable[[bytes], str]:
    """Build the multirange_send decoder; ``range_text`` is the range type's decoder."""

    def from_binary(data: bytes) -> str:
        (count,) = _LEN.unpack_from(data)
        if count < 0:
            raise ValueError(f"multirange send data: range count {count}")
        offset = 4
        parts: list[str] = []
        for _ in range(count):
            (length,) = _LEN.unpack_from(data, offset)
            offset += 4
            if length < 0 or offset + length > len(data):
                raise ValueError(f"multirange send data: range length {length}")
            parts.append(range_text(data[offset : offset + length]))
            offset += length
        if offset != len(data):
            raise ValueError(f"multirange send data has {len(data) - offset} trailing bytes")
        return "{" + ",".join(parts) + "}"

    return from_binary

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

import functools
import re
from collections.abc import Callable
from enum import IntEnum
from typing import Final

from capture.types._wire import quoted_if, read_count, read_length

Render = Callable[[bytes], str]
"""Send bytes of one subtype value -> that value's output text."""


class RangeFlag(IntEnum):
    """A bit of range_send's flags byte (``RANGE_EMPTY`` ... in rangetypes.h)."""

    EMPTY = 0x01
    """The range is empty: no bound follows."""
    LB_INC = 0x02
    """The lower bound is inclusive (``[``)."""
    UB_INC = 0x04
    """The upper bound is inclusive (``]``)."""
    LB_INF = 0x08
    """The lower bound is infinite: not sent, printed as nothing."""
    UB_INF = 0x10
    """The upper bound is infinite: not sent, printed as nothing."""
    LB_NULL = 0x20
    """The lower bound is NULL (never written by range_send): not sent."""
    UB_NULL = 0x40
    """The upper bound is NULL (never written by range_send): not sent."""


# Plain ints for the decoder: looking an enum member up costs several int tests.
_EMPTY, _LB_INC, _UB_INC = int(RangeFlag.EMPTY), int(RangeFlag.LB_INC), int(RangeFlag.UB_INC)
_NO_LOWER: Final = int(RangeFlag.LB_INF | RangeFlag.LB_NULL)
_NO_UPPER: Final = int(RangeFlag.UB_INF | RangeFlag.UB_NULL)

_NEEDS_QUOTES: Final = re.compile(r'["\\()\[\], \t\n\r\v\f]')


bound_text: Final = functools.partial(quoted_if, _NEEDS_QUOTES)
"""``bound_text(text)``: one bound's output text quoted as range_bound_escape does."""


def _bound(data: bytes, offset: int, render: Render) -> tuple[str, int]:
    length, offset = read_length(data, offset, "range", "bound", show_offset=True)
    return bound_text(render(data[offset : offset + length])), offset + length


def _range_text(data: bytes, render: Render) -> str:
    if not data:
        raise ValueError("range send data is empty")
    flags = data[0]
    if flags & _EMPTY:
        if len(data) != 1:
            raise ValueError("range send data: an empty range has bound bytes")
        return "empty"
    offset = 1
    lower = upper = ""
    if not flags & _NO_LOWER:
        lower, offset = _bound(data, offset, render)
    if not flags & _NO_UPPER:
        upper, offset = _bound(data, offset, render)
    if offset != len(data):
        raise ValueError(f"range send data has {len(data) - offset} trailing bytes")
    return (
        ("[" if flags & _LB_INC else "(") + lower + "," + upper + ("]" if flags & _UB_INC else ")")
    )


def range_decoder(render: Render) -> Callable[[bytes], str]:
    """Build the range_send decoder of a range whose subtype values ``render`` renders."""

    def from_binary(data: bytes) -> str:
        return _range_text(data, render)

    return from_binary


def multirange_decoder(range_text: Render) -> Callable[[bytes], str]:
    """Build the multirange_send decoder; ``range_text`` is the range type's decoder."""

    def from_binary(data: bytes) -> str:
        offset = 4
        parts: list[str] = []
        for _ in range(read_count(data, "multirange", "range")):
            length, offset = read_length(data, offset, "multirange", "range")
            parts.append(range_text(data[offset : offset + length]))
            offset += length
        if offset != len(data):
            raise ValueError(f"multirange send data has {len(data) - offset} trailing bytes")
        return "{" + ",".join(parts) + "}"

    return from_binary

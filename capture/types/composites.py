r"""Composite types (row types), binary send form, nested and in arrays.

Python value: ``str``, the text record_out prints (``(1,"a b",)``), in both wire formats
(``from_text`` keeps the text; the decoder here renders the send bytes to it).

record_send (rowtypes.c): Int32 count of the live (not dropped) attributes, then per
attribute its type OID (UInt32: ``pg_attribute.atttypid``, a domain's own OID for a domain
column), Int32 length (-1 for NULL) and that attribute type's send bytes.

record_out: ``(``, the attributes' output texts joined by ``,``, ``)``. A NULL prints
nothing (``(1,)``); a value is double-quoted when it is empty or contains ``"``, ``\``,
``(``, ``)``, ``,`` or a space character (C ``isspace``), with ``"`` and ``\`` doubled
inside the quotes (``"a""b"``). Brackets and braces are not special here (unlike in
range_out and array_out).

Decisions:

* Each attribute is rendered by the codec of the OID the bytes carry (``render_for``),
  looked up at decode time, so nested composites, arrays of composites and composites of
  arrays, ranges or domains all work; ``render_for`` raises
  :class:`~capture.types.values.UnrenderableBinaryError` for an OID without an exact
  decoder, so an attribute is never printed from a guess.
* isspace is taken as the six ASCII space characters (see :mod:`capture.types.ranges`).
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable
from typing import Final

from capture.types._wire import NULL_LENGTH, quoted_if, read_count

Render = Callable[[bytes], str]
"""Send bytes of one value -> its output text."""

_ATTRIBUTE: Final = struct.Struct(">Ii")
_NEEDS_QUOTES: Final = re.compile(r'["\\(), \t\n\r\v\f]')


field_text: Final = functools.partial(quoted_if, _NEEDS_QUOTES)
"""``field_text(text)``: one attribute's output text quoted as record_out does."""


def record_decoder(render_for: Callable[[int], Render]) -> Callable[[bytes], str]:
    """Build the record_send decoder; ``render_for(oid)`` renders values of type ``oid``."""

    def from_binary(data: bytes) -> str:
        offset = 4
        parts: list[str] = []
        for _ in range(read_count(data, "record", "attribute")):
            oid, length = _ATTRIBUTE.unpack_from(data, offset)
            offset += _ATTRIBUTE.size
            if length == NULL_LENGTH:
                parts.append("")
                continue
            if length < 0 or offset + length > len(data):
                raise ValueError(f"record send data: attribute length {length}")
            parts.append(field_text(render_for(oid)(data[offset : offset + length])))
            offset += length
        if offset != len(data):
            raise ValueError(f"record send data has {len(data) - offset} trailing bytes")
        return "(" + ",".join(parts) + ")"

    return from_binary

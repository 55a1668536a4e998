"""Shared by the binary send-format decoders: big-endian Structs, count and length reads, quoting.

Invariants:

* Every Struct here is big-endian (network order, as every ``*send`` function writes) and
  built once, at import.
* The readers take the whole send ``data`` and read an Int32 at a given offset with
  ``unpack_from``: too few bytes left for the Int32 itself raise :class:`struct.error`,
  exactly as the decoders' own inline reads did. Nothing is copied or decoded here.
* A count is valid when >= 0; a length when >= 0 and its bytes fit in ``data`` (or when
  it is -1, NULL, and the caller allows NULL). Anything else is a ValueError whose text
  is ``"<kind> send data: <item> count <n>"`` or ``"<kind> send data: <item> length
  <n>"``: callers' error texts are part of their behaviour and must not change.
"""

from __future__ import annotations

import re
import struct
from typing import Final

INT2: Final = struct.Struct(">h")
UINT2: Final = struct.Struct(">H")
INT4: Final = struct.Struct(">i")
UINT4: Final = struct.Struct(">I")
INT8: Final = struct.Struct(">q")
UINT8: Final = struct.Struct(">Q")
FLOAT4: Final = struct.Struct(">f")
FLOAT8: Final = struct.Struct(">d")

NULL_LENGTH: Final = -1
"""The length a send function writes for a NULL (no bytes follow)."""

_unpack_int4 = INT4.unpack_from


def read_count(data: bytes, kind: str, item: str) -> int:
    """The Int32 count of ``item``s that starts ``data`` (they follow at offset 4).

    Raises ValueError ``"<kind> send data: <item> count <n>"`` when it is negative.
    """
    count: int = _unpack_int4(data)[0]
    if count < 0:
        raise ValueError(f"{kind} send data: {item} count {count}")
    return count


def read_length(
    data: bytes,
    offset: int,
    kind: str,
    item: str,
    *,
    nullable: bool = False,
    show_offset: bool = False,
) -> tuple[int, int]:
    """The Int32 length at ``offset`` and the offset of the bytes it announces.

    With ``nullable``, -1 (NULL) is returned as is. Any other negative length, or one
    running past the end of ``data``, raises ValueError ``"<kind> send data: <item>
    length <n>"``, followed by ``" at offset <offset>"`` with ``show_offset``.
    """
    length: int = _unpack_int4(data, offset)[0]
    start = offset + 4
    if length < 0 or start + length > len(data):
        if nullable and length == NULL_LENGTH:
            return length, start
        where = f" at offset {offset}" if show_offset else ""
        raise ValueError(f"{kind} send data: {item} length {length}{where}")
    return length, start


def quoted_if(needs_quotes: re.Pattern[str], text: str) -> str:
    r"""``text`` double-quoted, ``"`` and ``\`` doubled, if empty or ``needs_quotes`` matches.

    The quoting of record_out's attributes and range_out's bounds, which differ only in
    the characters that force quotes.
    """
    if text and needs_quotes.search(text) is None:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'

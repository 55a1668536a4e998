r"""Contrib extension types: hstore, ltree (and lquery, ltxtquery), cube (binary send form).

Python value: ``str``, the text the type's output function prints, in both wire formats.

Extension types have no fixed OID, and a name proves nothing (any schema can hold a type
called ``hstore``). :data:`EXTENSION_DECODERS` is therefore keyed by what the catalog says
about the type (see :class:`~capture.types.facts.TypeFacts`): the extension that owns
it (``pg_depend`` deptype ``e``) AND the identities of its output and send functions (C
symbol and library, ``hstore:hstore_send``). Only a type for which all three match is
decoded; anything else is refused in binary mode. A type with the same extension name,
library and symbols but another binary format (a fork shipping as ``hstore``) would be
trusted: that is the limit of what the catalog can tell.

Formats (contrib sources):

* hstore_send: Int32 pair count, then per pair Int32 key length + key text, Int32 value
  length (-1 for NULL) + value text (client encoding). hstore_out: ``"key"=>"value"``
  pairs joined by ``, ``, a NULL value as bare ``NULL``, ``"`` and ``\`` backslash-escaped
  in keys and values; the empty hstore prints as the empty string.
* ltree_send, lquery_send, ltxtq_send: a version byte (1), then the output text itself.
* cube_send (cube 1.5+): UInt32 header (high bit: point; low 31 bits: dimensions), then the
  float8 coordinates: ``dim`` of them for a point, else ``2 * dim`` (lower-left corner,
  then upper-right). cube_out: ``(x1, x2, ...)``, then ``,(y1, ...)`` unless the cube is a
  point (point bit set, or every lower-left coordinate == its upper-right one, compared
  as C doubles), coordinates printed with float8out_internal (see
  :mod:`capture.types.geometric`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from capture.types._wire import NULL_LENGTH, UINT4, read_count, read_length
from capture.types.numeric import float8_to_text

_HEADER: Final = UINT4
_POINT_BIT: Final = 0x80000000


def _escaped(raw: bytes) -> str:
    return raw.decode().replace("\\", "\\\\").replace('"', '\\"')


def hstore_from_binary(data: bytes) -> str:
    """Decode hstore_send into hstore_out's ``"k"=>"v", "n"=>NULL``."""
    offset = 4
    parts: list[str] = []
    for _ in range(read_count(data, "hstore", "pair")):
        key_length, offset = read_length(data, offset, "hstore", "key")
        key = _escaped(data[offset : offset + key_length])
        offset += key_length
        value_length, offset = read_length(data, offset, "hstore", "value", nullable=True)
        if value_length == NULL_LENGTH:
            parts.append(f'"{key}"=>NULL')
            continue
        parts.append(f'"{key}"=>"{_escaped(data[offset : offset + value_length])}"')
        offset += value_length
    if offset != len(data):
        raise ValueError(f"hstore send data has {len(data) - offset} trailing bytes")
    return ", ".join(parts)


def versioned_text_from_binary(data: bytes) -> str:
    """Decode ltree_send / lquery_send / ltxtq_send: version byte 1, then the text."""
    if data[:1] != b"\x01":
        raise ValueError(f"unsupported ltree binary version {data[:1]!r}")
    return data[1:].decode()


def cube_from_binary(data: bytes) -> str:
    """Decode cube_send into cube_out's ``(1, 2),(3, 4)`` / ``(1, 2)``."""
    (header,) = _HEADER.unpack_from(data)
    dim = header & ~_POINT_BIT
    flagged_point = bool(header & _POINT_BIT)
    count = dim if flagged_point else 2 * dim
    if len(data) != _HEADER.size + 8 * count:
        raise ValueError(f"cube send data: {count} coordinates do not fill {len(data)} bytes")
    coordinates = struct.unpack_from(f">{count}d", data, _HEADER.size)
    lower = coordinates[:dim]
    text = "(" + ", ".join(map(float8_to_text, lower)) + ")"
    if flagged_point:
        return text
    upper = coordinates[dim:]
    if all(low == high for low, high in zip(lower, upper, strict=True)):
        return text
    return text + ",(" + ", ".join(map(float8_to_text, upper)) + ")"


EXTENSION_DECODERS: Final[dict[tuple[str, str, str], Callable[[bytes], str]]] = {
    ("hstore", "hstore:hstore_out", "hstore:hstore_send"): hstore_from_binary,
    ("ltree", "ltree:ltree_out", "ltree:ltree_send"): versioned_text_from_binary,
    ("ltree", "ltree:lquery_out", "ltree:lquery_send"): versioned_text_from_binary,
    ("ltree", "ltree:ltxtq_out", "ltree:ltxtq_send"): versioned_text_from_binary,
    ("cube", "cube:cube_out", "cube:cube_send"): cube_from_binary,
}
"""(owning extension, output function, send function) -> exact binary decoder."""

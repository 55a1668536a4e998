"""Avro binary encoding (the wire form of the Avro 1.x specification), by hand and fast.

Only the primitives a schema-specific writer needs: ``int``/``long`` (zig-zag varints),
``bytes``/``string`` (length + data), ``double``, ``map<string>``, arrays and union branch
numbers. Writers build a datum by concatenating these pieces in schema field order; no
schema is interpreted at run time, which is several times faster than a generic writer
(:mod:`capture.formats.dts_avro.encode` is checked byte for byte against ``fastavro``).

Invariants: every function returns exactly the bytes ``fastavro.schemaless_writer`` writes
for the same value; a ``long`` is any Python int in ``[-2**63, 2**63)``. The lookup tables
(:data:`SMALL`, :data:`UV`, :data:`LOW14`) are public so that hot paths can inline them.
"""

from __future__ import annotations

import struct
from typing import Final

_DOUBLE: Final = struct.Struct("<d")


def _uvarint_slow(z: int) -> bytes:
    """Base-128 varint of an unsigned ``z``."""
    out = []
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_U14: Final = 1 << 14
UV: Final = tuple(_uvarint_slow(z) for z in range(_U14))
"""Varints of the unsigned values below 2**14 (one or two bytes)."""
LOW14: Final = tuple(bytes((z & 0x7F | 0x80, z >> 7 | 0x80)) for z in range(_U14))
"""The first two bytes of a longer varint whose low 14 bits are the index."""


def varint(n: int) -> bytes:
    """Zig-zag varint of ``n`` by table lookups, 14 bits at a time (no loop below 2**56)."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x4000:
        return UV[z]
    low = LOW14
    if z < 0x10000000:
        return low[z & 0x3FFF] + UV[z >> 14]
    if z < 0x40000000000:
        return low[z & 0x3FFF] + low[z >> 14 & 0x3FFF] + UV[z >> 28]
    if z < 0x100000000000000:
        return low[z & 0x3FFF] + low[z >> 14 & 0x3FFF] + low[z >> 28 & 0x3FFF] + UV[z >> 42]
    return _uvarint_slow(z)


SMALL_LIMIT: Final = 16384
SMALL: Final = tuple(varint(i) for i in range(SMALL_LIMIT))
"""``long`` encodings of 0 .. 16383 (lengths, counts, small numbers)."""


def zigzag(n: int) -> bytes:
    """Avro ``int``/``long`` encoding of ``n`` (zig-zag, then base-128 varint)."""
    if 0 <= n < SMALL_LIMIT:
        return SMALL[n]
    return varint(n)


def avro_bytes(data: bytes) -> bytes:
    """Avro ``bytes`` (and ``string``) encoding: length, then the bytes."""
    n = len(data)
    return (SMALL[n] if n < SMALL_LIMIT else varint(n)) + data


def avro_string(text: str) -> bytes:
    """Avro ``string`` encoding of ``text`` (UTF-8)."""
    return avro_bytes(text.encode())


def avro_double(value: float) -> bytes:
    """Avro ``double``: 8 bytes, little-endian IEEE 754."""
    return _DOUBLE.pack(value)


def avro_map(pairs: list[tuple[str, str]]) -> bytes:
    """Avro ``map<string>`` of ``pairs``, in one block (the empty map is one 0 byte)."""
    if not pairs:
        return b"\x00"
    return (
        zigzag(len(pairs)) + b"".join(avro_string(k) + avro_string(v) for k, v in pairs) + b"\x00"
    )


def avro_array(items: list[bytes]) -> bytes:
    """Avro array of already encoded ``items``, in one block."""
    if not items:
        return b"\x00"
    n = len(items)
    return (SMALL[n] if n < SMALL_LIMIT else varint(n)) + b"".join(items) + b"\x00"


NULL_BRANCH: Final = b"\x00"
"""Branch 0 of a union (``null`` in ``["null", …]``)."""
SECOND_BRANCH: Final = b"\x02"
"""Branch 1 of a union (the value in ``["null", T]``)."""


def optional_long(value: int | None) -> bytes:
    """A ``["null", "int"|"long"]`` union holding ``value``."""
    return NULL_BRANCH if value is None else SECOND_BRANCH + zigzag(value)


def optional_string(text: str | None) -> bytes:
    """A ``["null", "string"]`` union holding ``text``."""
    return NULL_BRANCH if text is None else SECOND_BRANCH + avro_string(text)


__all__ = [
    "LOW14",
    "NULL_BRANCH",
    "SECOND_BRANCH",
    "SMALL",
    "SMALL_LIMIT",
    "UV",
    "avro_array",
    "avro_bytes",
    "avro_double",
    "avro_map",
    "avro_string",
    "optional_long",
    "optional_string",
    "varint",
    "zigzag",
]

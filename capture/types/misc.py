"""uuid, json, jsonb, jsonpath, bit/varbit, pg_lsn, tid, int2vector/oidvector.

Python values:

* uuid: ``uuid.UUID``.
* json: ``str``, the document exactly as stored (json_send sends the text itself).
* jsonb: ``str`` as PostgreSQL prints it (jsonb_send is a version byte 1 and that text);
  jsonpath likewise. They are not parsed: the capture path only forwards documents.
* bit, varbit: ``str`` of ``0``/``1`` characters, as bit_out prints them.
* pg_lsn: ``str`` as pg_lsn_out prints it (``16/B374D848``).
* tid: ``str`` as tidout prints it (``(0,1)``).
* int2vector, oidvector: ``str`` as their output functions print them (``1 2 3``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Final

_UUID_NEW = uuid.UUID.__new__
_SET = object.__setattr__
_SAFE_UNKNOWN: Final = uuid.SafeUUID.unknown
_I4: Final = struct.Struct(">i")
_U8: Final = struct.Struct(">Q")
_TID: Final = struct.Struct(">IH")


def _make_uuid(value: int) -> uuid.UUID:
    # UUID.__init__ parses and validates its arguments; the wire value is already a
    # 128-bit integer, so build the (immutable, slotted) object directly, as psycopg does.
    made = _UUID_NEW(uuid.UUID)
    _SET(made, "int", value)
    _SET(made, "is_safe", _SAFE_UNKNOWN)
    return made


def uuid_from_text(data: bytes) -> uuid.UUID:
    """Decode uuid_out: ``a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11``."""
    if len(data) != 36:
        return uuid.UUID(data.decode("ascii"))
    return _make_uuid(int(data.replace(b"-", b""), 16))


def uuid_from_binary(data: bytes) -> uuid.UUID:
    """Decode uuid_send: 16 raw bytes."""
    if len(data) != 16:
        raise ValueError(f"uuid send data must be 16 bytes, got {len(data)}")
    return _make_uuid(int.from_bytes(data, "big"))


def uuid_to_text(value: uuid.UUID) -> str:
    """Render like uuid_out (lower-case, hyphenated)."""
    return str(value)


def versioned_text_from_binary(data: bytes) -> str:
    """Decode jsonb_send / jsonpath_send: version byte 1, then the text form."""
    if data[:1] != b"\x01":
        raise ValueError(f"unsupported jsonb/jsonpath binary version {data[:1]!r}")
    return data[1:].decode()


def bits_from_binary(data: bytes) -> str:
    """Decode bit_send / varbit_send: Int32 bit length, then the bits, MSB first."""
    nbits = _I4.unpack_from(data)[0]
    if not nbits:
        return ""
    raw = data[4:]
    text = format(int.from_bytes(raw, "big"), "b").zfill(len(raw) * 8)
    return text[:nbits]


def pg_lsn_from_binary(data: bytes) -> str:
    """Decode pg_lsn_send (UInt64) into pg_lsn_out's ``%X/%X``."""
    lsn = _U8.unpack(data)[0]
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def tid_from_binary(data: bytes) -> str:
    """Decode tidsend (UInt32 block, UInt16 offset) into tidout's ``(block,offset)``."""
    block, offset = _TID.unpack(data)
    return f"({block},{offset})"


_VECTOR_HEAD: Final = struct.Struct(">iiI")
_VECTOR_DIM: Final = struct.Struct(">ii")


def _vector_from_binary(element_oid: int, element: struct.Struct) -> Callable[[bytes], str]:
    """int2vector / oidvector: array_send of a one-dimensional, NULL-free array.

    int2vectorout / oidvectorout print the elements separated by single spaces (``1 2 3``;
    the empty vector as the empty string).
    """
    size = element.size

    def from_binary(data: bytes) -> str:
        ndim, flags, oid = _VECTOR_HEAD.unpack_from(data)
        if ndim == 0 and len(data) == _VECTOR_HEAD.size:
            return ""
        if ndim != 1 or flags or oid != element_oid:
            raise ValueError(f"vector send data: ndim {ndim}, flags {flags}, element {oid}")
        count, _lower = _VECTOR_DIM.unpack_from(data, _VECTOR_HEAD.size)
        offset = _VECTOR_HEAD.size + _VECTOR_DIM.size
        values: list[str] = []
        for _ in range(count):
            if _I4.unpack_from(data, offset)[0] != size:
                raise ValueError("vector send data: an element has the wrong length")
            values.append(str(element.unpack_from(data, offset + 4)[0]))
            offset += 4 + size
        if offset != len(data) or count < 0:
            raise ValueError("vector send data does not match its element count")
        return " ".join(values)

    return from_binary


int2vector_from_binary: Final = _vector_from_binary(21, struct.Struct(">h"))
"""Decode int2vectorsend (array_send of int2) into int2vectorout's ``1 2 3``."""
oidvector_from_binary: Final = _vector_from_binary(26, struct.Struct(">I"))
"""Decode oidvectorsend (array_send of oid) into oidvectorout's ``1 2 3``."""

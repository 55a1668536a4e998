r"""Character types and bytea: text, varchar, bpchar, name, "char", xml, bytea.

Python values: ``str`` (``bytes`` for bytea). The server encoding is UTF-8, and the text
and binary forms of these types are the same bytes, so both decoders are a plain UTF-8
decode. bpchar keeps its padding spaces (``'ab'::char(5)`` is ``'ab   '``), as sent.

``"char"`` (OID 18) is a single byte. Its text output spells a byte >= 0x80 as a
backslash and three octal digits (``\351``) and byte 0 as the empty string; the binary
decoder produces the same spelling, so both forms decode to the same ``str``.

bytea text is PostgreSQL's hex format (``\x0a0b``, ``bytea_output = hex``); the legacy
escape format (``a\000\\b``) is accepted too. Output is always hex.
"""

from __future__ import annotations

import binascii
import re
from typing import Final

# text/varchar/bpchar/name/xml: from_text and from_binary are both ``bytes.decode``
# (UTF-8, strict) and to_text is the identity. xml_send re-encodes the document to the
# client encoding, which the walsender keeps as UTF-8, so the bytes equal xml_out's.


def str_identity(value: str) -> str:
    """to_text of every str-valued type: the value is already PostgreSQL's text."""
    return value


# --------------------------------------------------------------------------- "char"


def char_from_binary(data: bytes) -> str:
    """Decode charsend (one raw byte) into charout's spelling."""
    byte = data[0]
    if byte < 0x80:
        return chr(byte) if byte else ""
    return f"\\{byte:03o}"


# --------------------------------------------------------------------------- bytea

_ESCAPE: Final = re.compile(rb"\\(\\|[0-3][0-7]{2})")


def _unescape_octet(match: re.Match[bytes]) -> bytes:
    token = match.group(1)
    return b"\\" if token == b"\\" else bytes((int(token, 8),))


def bytea_from_text(data: bytes) -> bytes:
    r"""Decode byteaout: hex (``\x...``) or the legacy escape format."""
    if data[:2] == b"\\x":
        return binascii.unhexlify(data[2:])
    if b"\\" not in data:
        return bytes(data)
    return _ESCAPE.sub(_unescape_octet, data)


def bytea_to_text(value: bytes) -> str:
    """Render like byteaout with ``bytea_output = hex``."""
    return "\\x" + value.hex()

"""Geometric types: point, line, lseg, box, path, polygon, circle (binary send form).

Python value: ``str``, the text the type's output function prints, in both wire formats
(``from_text`` keeps the text as it is; the decoders here render the send bytes to that
same text). Nothing in walcast computes with geometry, so no structured value is built.

Every send function writes float8 coordinates (``pq_sendfloat8``: IEEE 754 binary64,
big-endian), so the bytes carry each coordinate exactly. Every output function prints a
coordinate with ``float8out_internal``, which under ``extra_float_digits > 0`` (walcast
sets 1) is float8out's shortest exact form, ``NaN``, ``Infinity``, ``-Infinity`` and
``-0`` included: :func:`~capture.types.numeric.float8_to_text` reproduces it. Layouts
(geo_ops.c):

========  ====================================  =====================================
type      send                                  output
========  ====================================  =====================================
point     x, y                                  ``(x,y)``
line      A, B, C                               ``{A,B,C}``
lseg      x1, y1, x2, y2                        ``[(x1,y1),(x2,y2)]``
box       high x, high y, low x, low y          ``(hx,hy),(lx,ly)``
path      UInt8 closed, Int32 n, n points       ``((..),..)`` closed, ``[(..),..]`` open
polygon   Int32 n, n points                     ``((x,y),...)``
circle    center x, center y, radius            ``<(x,y),r>``
========  ====================================  =====================================

Invariant: a decoder accepts exactly the send layout (wrong lengths, trailing bytes or a
negative count raise ``ValueError``/``struct.error``), so a value it cannot read is never
rendered as something else.
"""

from __future__ import annotations

import struct
from typing import Final

from capture.types.numeric import float8_to_text

_POINT: Final = struct.Struct(">dd")
_THREE: Final = struct.Struct(">ddd")
_FOUR: Final = struct.Struct(">dddd")
_PATH_HEAD: Final = struct.Struct(">Bi")
_COUNT: Final = struct.Struct(">i")


def _pair(x: float, y: float) -> str:
    return f"({float8_to_text(x)},{float8_to_text(y)})"


def _points(data: bytes, offset: int, count: int) -> str:
    """``(x,y),(x,y)...`` of ``count`` points starting at ``offset``, which must end ``data``."""
    if count < 0 or len(data) - offset != count * _POINT.size:
        raise ValueError(f"geometric send data: {count} points do not fill {len(data)} bytes")
    return ",".join(_pair(x, y) for x, y in _POINT.iter_unpack(data[offset:]))


def point_from_binary(data: bytes) -> str:
    """Decode point_send into point_out's ``(x,y)``."""
    return _pair(*_POINT.unpack(data))


def line_from_binary(data: bytes) -> str:
    """Decode line_send into line_out's ``{A,B,C}``."""
    a, b, c = _THREE.unpack(data)
    return f"{{{float8_to_text(a)},{float8_to_text(b)},{float8_to_text(c)}}}"


def lseg_from_binary(data: bytes) -> str:
    """Decode lseg_send into lseg_out's ``[(x1,y1),(x2,y2)]``."""
    x1, y1, x2, y2 = _FOUR.unpack(data)
    return f"[{_pair(x1, y1)},{_pair(x2, y2)}]"


def box_from_binary(data: bytes) -> str:
    """Decode box_send (high corner first) into box_out's ``(hx,hy),(lx,ly)``."""
    x1, y1, x2, y2 = _FOUR.unpack(data)
    return f"{_pair(x1, y1)},{_pair(x2, y2)}"


def path_from_binary(data: bytes) -> str:
    """Decode path_send into path_out: ``((..),..)`` when closed, ``[(..),..]`` when open."""
    closed, count = _PATH_HEAD.unpack_from(data)
    if closed > 1:
        raise ValueError(f"path send data: closed flag {closed} is not 0 or 1")
    points = _points(data, _PATH_HEAD.size, count)
    return f"({points})" if closed else f"[{points}]"


def polygon_from_binary(data: bytes) -> str:
    """Decode poly_send into poly_out's ``((x,y),...)``."""
    (count,) = _COUNT.unpack_from(data)
    return f"({_points(data, _COUNT.size, count)})"


def circle_from_binary(data: bytes) -> str:
    """Decode circle_send into circle_out's ``<(x,y),r>``."""
    x, y, radius = _THREE.unpack(data)
    return f"<{_pair(x, y)},{float8_to_text(radius)}>"

"""pg_snapshot and txid_snapshot (binary send form).

Python value: ``str``, the text pg_snapshot_out prints (``xmin:xmax:xip,...``, e.g.
``10:20:10,14,15``; ``10:10:`` without in-progress transactions), in both wire formats.

pg_snapshot_send (xid8funcs.c): Int32 nxip, UInt64 xmin, UInt64 xmax, then nxip UInt64
in-progress transaction ids. Since PostgreSQL 13 txid_snapshot is the same type under its
old name (same I/O functions); before 13 txid_snapshot_send wrote the same layout.
"""

from __future__ import annotations

import struct
from typing import Final

_HEAD: Final = struct.Struct(">iQQ")
_XID: Final = struct.Struct(">Q")


def snapshot_from_binary(data: bytes) -> str:
    """Decode pg_snapshot_send / txid_snapshot_send into their output text."""
    nxip, xmin, xmax = _HEAD.unpack_from(data)
    if nxip < 0 or len(data) != _HEAD.size + nxip * _XID.size:
        raise ValueError(f"snapshot send data: {nxip} xids do not fill {len(data)} bytes")
    xips = ",".join(str(xid) for (xid,) in _XID.iter_unpack(data[_HEAD.size :]))
    return f"{xmin}:{xmax}:{xips}"

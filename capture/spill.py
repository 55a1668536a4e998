"""An append-only buffer of raw pgoutput messages that spills to disk past a memory limit.

Streamed and prepared transactions must be held until they commit; a 10M-row transaction
must not be held in RAM. Records are ``(xid, wal_start, payload)``; they are kept in
memory until ``memory_limit`` bytes, then everything moves to an unnamed temporary file
and later records are appended there. Reading back yields the records in append order.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from typing import IO, Final

_HEADER: Final = struct.Struct(">IQI")
DEFAULT_MEMORY_LIMIT: Final = 64 * 1024 * 1024
RECORD_OVERHEAD: Final = 176
"""Bytes a record costs in memory besides its payload (tuple, bytes header, two ints, list
slot; measured with tracemalloc), so that ``memory_limit`` bounds the real footprint."""


class SpillBuffer:
    """Records of one in-progress transaction, in memory or in a temporary file."""

    def __init__(
        self, memory_limit: int = DEFAULT_MEMORY_LIMIT, directory: str | None = None
    ) -> None:
        self._memory: list[tuple[int, int, bytes]] | None = []
        self._memory_bytes = 0
        self._limit = memory_limit
        self._directory = directory
        self._file: IO[bytes] | None = None
        self.count = 0

    @property
    def spilled(self) -> bool:
        """Whether the records now live in a temporary file."""
        return self._file is not None

    def append(self, xid: int, wal_start: int, payload: bytes) -> None:
        """Add one record."""
        self.count += 1
        if self._memory is not None:
            self._memory.append((xid, wal_start, payload))
            self._memory_bytes += len(payload) + RECORD_OVERHEAD
            if self._memory_bytes > self._limit:
                self._spill()
            return
        assert self._file is not None
        self._file.write(_HEADER.pack(xid, wal_start, len(payload)))
        self._file.write(payload)

    def _spill(self) -> None:
        assert self._memory is not None
        self._file = tempfile.TemporaryFile(prefix="walcast-txn-", dir=self._directory)  # noqa: SIM115
        for xid, wal_start, payload in self._memory:
            self._file.write(_HEADER.pack(xid, wal_start, len(payload)))
            self._file.write(payload)
        self._memory = None

    def __iter__(self) -> Iterator[tuple[int, int, bytes]]:
        if self._memory is not None:
            yield from self._memory
            return
        assert self._file is not None
        self._file.flush()
        self._file.seek(0)
        read = self._file.read
        while header := read(_HEADER.size):
            xid, wal_start, size = _HEADER.unpack(header)
            yield xid, wal_start, read(size)
        self._file.seek(0, 2)

    def close(self) -> None:
        """Drop the records and remove the temporary file."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._memory = []
        self._memory_bytes = 0
        self.count = 0

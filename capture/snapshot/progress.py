"""Where a load's progress is kept, so that a restarted daemon goes on where Kafka confirmed.

One record per (slot, table), the newest wins: the table's state (``pending``, ``loading``,
``done``, ``dropped``), the load request it belongs to, and the upper key bound of the last
chunk that Kafka confirmed together with every chunk before it. A record is written only
after the chunks it counts were delivered, so a restart re-reads at most the chunks that
were in flight (their rows arrive again, at a new position: idempotent for keyed tables).
The ``done`` record of a table without a key also keeps its chunk's
:class:`KeylessWindow`, so that a restarted daemon drops the replayed changes the chunk
already holds, as the daemon that read it did.

:class:`KafkaProgress` keeps the records in a compacted topic (``daemon.snapshot_topic``,
key ``<slot>/<schema>.<table>``), readable by a daemon restarted on another machine.
:class:`MemoryProgress` keeps them in memory (``walcast tail``: a load is not resumed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, Protocol

import orjson

from capture.errors import RetryPolicy, WalcastError
from capture.sinks.compacted import TopicUnreadableError, read_compacted

State = Literal["pending", "loading", "done", "dropped"]
READ_TIMEOUT: Final = 30.0


class ProgressUnavailableError(WalcastError):
    """The progress topic could not be read; retried, since a guess could lose rows."""

    retry = RetryPolicy.TRANSIENT


@dataclass(frozen=True, slots=True)
class KeylessWindow:
    """The stream positions whose changes a keyless table's loaded chunk already holds.

    A transaction that commits at or after the chunk's watermark (``low_lsn``) and before
    the read's WAL horizon (``horizon_lsn``), and that the read's snapshot (``snapshot``,
    ``xmin:xmax:xip,…``) sees, is in the chunk; streaming it too would duplicate its rows,
    so its changes of the table are dropped. Kept with the ``done`` record because the slot
    may replay such a transaction after a restart, when the daemon that read the chunk and
    dropped it the first time is gone.
    """

    low_lsn: int
    horizon_lsn: int
    snapshot: str


@dataclass(slots=True)
class TableProgress:
    """How far the load of one table got (see the module docstring)."""

    table: str
    """``schema.table``."""
    relation_id: int
    request: str
    state: State
    after: list[str] | None = None
    """Chunk-key values (text) up to which every row was delivered; None: from the start."""
    chunks: int = 0
    """Chunks delivered (contiguously, in key order)."""
    rows: int = 0
    keyless_window: KeylessWindow | None = None
    """For a table without a key: where its one chunk was read (see :class:`KeylessWindow`)."""

    def to_json(self, slot: str) -> bytes:
        """The record's value."""
        return orjson.dumps({"slot": slot, **asdict(self)})

    @classmethod
    def from_json(cls, value: bytes) -> TableProgress:
        """A record read back."""
        data = orjson.loads(value)
        data.pop("slot", None)
        window = data.pop("keyless_window", None)
        return cls(**data, keyless_window=KeylessWindow(**window) if window else None)


class ProgressStore(Protocol):
    """Keeps :class:`TableProgress` records."""

    def load(self) -> list[TableProgress]:
        """Every table's newest record."""

    def save(self, progress: TableProgress) -> None:
        """Keep ``progress`` (it replaces the table's previous record)."""


class MemoryProgress:
    """Progress that lives as long as the process."""

    def __init__(self) -> None:
        self.records: dict[str, TableProgress] = {}

    def load(self) -> list[TableProgress]:
        """Every table's newest record."""
        return list(self.records.values())

    def save(self, progress: TableProgress) -> None:
        """Keep a copy of ``progress``."""
        self.records[progress.table] = TableProgress.from_json(progress.to_json(""))


class KafkaProgress:
    """Progress in a compacted Kafka topic, written through the sink's producer."""

    def __init__(
        self,
        client_settings: dict[str, Any],
        topic: str,
        slot: str,
        publish: Callable[[str, bytes, bytes], None],
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self._settings = client_settings
        self.topic = topic
        self.slot = slot
        self._publish = publish
        self._stop = stop
        """A stop request ends a wait for an unreachable Kafka (:mod:`capture.sinks.compacted`)."""

    def _key(self, table: str) -> bytes:
        return f"{self.slot}/{table}".encode()

    def save(self, progress: TableProgress) -> None:
        """Produce ``progress`` (delivered with the sink's other messages)."""
        self._publish(self.topic, self._key(progress.table), progress.to_json(self.slot))

    def load(self) -> list[TableProgress]:
        """Read the topic from its start (read_committed); newest record per key wins."""
        prefix = f"{self.slot}/".encode()
        try:
            records = read_compacted(
                self._settings,
                self.topic,
                lambda key: key.startswith(prefix),
                timeout=READ_TIMEOUT,
                group="walcast-progress",
                stop=self._stop,
            )
        except TopicUnreadableError as exc:
            raise self._unavailable(str(exc)) from None
        return [TableProgress.from_json(value) for value in records.values()]

    def _unavailable(self, detail: str) -> ProgressUnavailableError:
        brokers = self._settings.get("bootstrap.servers", "?")
        return ProgressUnavailableError(
            f"Kafka at {brokers} did not answer: cannot read the load progress from topic "
            f"{self.topic!r} ({detail})",
            hint="walcast waits and retries; check kafka.bootstrap_servers and that the "
            "brokers run",
        )

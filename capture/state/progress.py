"""Where a load's progress is kept, so that a restarted daemon goes on where Kafka confirmed.

One record per (source, table), the newest wins: the table's state (``pending``, ``loading``,
``done``, ``dropped``), the load request it belongs to, and the upper key bound of the last
chunk that Kafka confirmed together with every chunk before it. A record is written only
after the chunks it counts were delivered, so a restart re-reads at most the chunks that
were in flight (their rows arrive again, at a new position: idempotent for keyed tables).
The ``done`` record of a table without a key also keeps its chunk's
:class:`KeylessWindow`, so that a restarted daemon drops the replayed changes the chunk
already holds, as the daemon that read it did.

:class:`KafkaProgress` keeps the records in a compacted topic (``daemon.snapshot_topic``,
key ``<source>/<schema>.<table>``, the source being ``<system identifier>/<database>/<slot>``,
:mod:`capture.state.identity`), readable by a daemon restarted on another machine.
:class:`MemoryProgress` keeps them in memory (``walcast tail``: a load is not resumed).

**Generations: a re-created slot starts over.** The same topic holds, under the key
``<source>`` alone, the slot's :class:`Generation` record. Decisions:

* When walcast **creates the slot itself** (``--create-slot`` and the slot is missing), it
  first writes a new generation (a random id), waits until Kafka confirmed it, and only
  then creates the slot (:meth:`KafkaProgress.start_generation`). Every table record (and
  every exactly-once offsets record, :mod:`capture.state.offsets`) carries the generation
  it was written under, and only records of the current generation are read back. So a
  slot dropped and created again by walcast finds none of its predecessor's records: with
  ``--snapshot initial`` (or ``auto``) it loads every table again, and its exactly-once
  position starts from its own stream. A crash between the generation record and the
  slot's creation leaves a generation that no slot used; the next start creates the slot
  under a newer one. A crash after the creation leaves the slot and its generation (with
  the pending initial load recorded under it): the restart finds both and loads.
* A slot that exists when walcast starts keeps the newest generation of its source. If
  there is none (the slot was created outside walcast, or by walcast 0.1), the generation is
  ``None`` and records written under ``None`` are read back; ``--snapshot initial`` then
  loads once under it.
* **A slot re-created outside walcast** (``pg_drop_replication_slot`` then
  ``pg_create_logical_replication_slot`` under the same name) cannot be told from the old
  one: PostgreSQL gives a slot no identity but its name, and a new slot's position is just
  a later LSN. It keeps the old generation, so a finished initial load is not repeated.
  Re-create slots with walcast (``walcast slot drop --yes``, then ``walcast run
  --create-slot``), or ask for the rows with ``walcast snapshot --table …``; the README
  says so.
* Records of walcast 0.1 (key ``<slot>/<schema>.<table>``) name no source: they are never
  read back, and one ``legacy_progress_ignored`` warning says so.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal, Protocol

import orjson
import structlog

from capture.errors import RetryPolicy, WalcastError
from capture.state.compacted import TopicUnreadableError, read_compacted
from capture.state.identity import SourceIdentity

log = structlog.get_logger("walcast.snapshot")

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

    generation: str | None = None
    """The slot's generation the record was written under (see the module docstring)."""

    def to_json(self, source: str = "") -> bytes:
        """The record's value (``source``: the source's key, for people reading the topic)."""
        return orjson.dumps({"source": source, **asdict(self)})

    @classmethod
    def from_json(cls, value: bytes) -> TableProgress:
        """A record read back (fields of other walcast versions are ignored)."""
        data = orjson.loads(value)
        window = data.pop("keyless_window", None)
        fields = set(cls.__dataclass_fields__) - {"keyless_window"}
        return cls(
            **{k: v for k, v in data.items() if k in fields},
            keyless_window=KeylessWindow(**window) if window else None,
        )


@dataclass(frozen=True, slots=True)
class Generation:
    """One life of a slot that walcast created (see the module docstring)."""

    id: str
    source: str
    """:attr:`~capture.state.identity.SourceIdentity.key`."""
    written_at: float
    """Unix time the record was written."""

    def to_json(self) -> bytes:
        """The record's value."""
        return orjson.dumps({"kind": "generation", **asdict(self)})

    @classmethod
    def from_json(cls, value: bytes) -> Generation | None:
        """A generation record read back; None for any other value."""
        data = orjson.loads(value)
        if not isinstance(data, dict) or data.get("kind") != "generation":
            return None
        return cls(str(data["id"]), str(data.get("source", "")), float(data.get("written_at", 0)))


class ProgressStore(Protocol):
    """Keeps :class:`TableProgress` records."""

    def load(self) -> list[TableProgress]:
        """Every table's newest record."""

    def save(self, progress: TableProgress) -> None:
        """Keep ``progress`` (it replaces the table's previous record)."""


class MemoryProgress:
    """Progress that lives as long as the process (a fresh generation each time)."""

    def __init__(self) -> None:
        self.records: dict[str, TableProgress] = {}
        self.generation: str | None = None

    def load(self) -> list[TableProgress]:
        """Every table's newest record."""
        return list(self.records.values())

    def save(self, progress: TableProgress) -> None:
        """Keep a copy of ``progress``."""
        self.records[progress.table] = TableProgress.from_json(progress.to_json(""))


@dataclass(eq=False)
class KafkaProgress:
    """Progress and the slot's generation in a compacted Kafka topic, written through the sink.

    ``publish`` produces a record (delivered with the sink's other messages);
    ``publish_confirmed`` produces one and waits up to a timeout for Kafka to confirm it
    (returns whether it did; :meth:`start_generation` needs it). :attr:`generation` is the
    current generation: read by :meth:`read_generation`, or set by :meth:`start_generation`.
    ``unreachable`` (the sink's outage report) makes reads wait for an unreachable Kafka
    with one consumer instead of failing after :data:`READ_TIMEOUT`
    (:mod:`capture.state.compacted`); ``stop`` (a stop request) ends that wait.
    """

    client_settings: dict[str, Any] = field(repr=False)
    """librdkafka settings for reading the topic back (SASL credentials among them: kept
    out of the repr)."""
    topic: str
    source: SourceIdentity
    publish: Callable[[str, bytes, bytes], None]
    stop: Callable[[], bool] = lambda: False
    publish_confirmed: Callable[[str, bytes, bytes, float], bool] | None = None
    unreachable: Callable[[str], None] | None = None
    generation: str | None = field(default=None, init=False)
    _legacy_warned: bool = field(default=False, init=False)

    @property
    def slot(self) -> str:
        """The slot whose progress this is."""
        return self.source.slot

    def save(self, progress: TableProgress) -> None:
        """Produce ``progress`` under the current generation."""
        progress.generation = self.generation
        key = self.source.record_key(progress.table).encode()
        self.publish(self.topic, key, progress.to_json(self.source.key))

    def read_generation(self) -> str | None:
        """Read the source's newest generation (None: walcast never created its slot)."""
        records = self._read()
        value = records.get(self.source.key.encode())
        found = Generation.from_json(value) if value is not None else None
        self.generation = found.id if found is not None else None
        return self.generation

    def start_generation(self, timeout: float) -> bool:
        """Write a new generation (walcast is about to create the slot); True once confirmed.

        False when Kafka did not confirm it within ``timeout`` seconds: the slot must not
        be created then (the caller retries).
        """
        assert self.publish_confirmed is not None, "a generation needs confirmed writes"
        generation = Generation(uuid.uuid4().hex, self.source.key, time.time())
        confirmed = self.publish_confirmed(
            self.topic, self.source.key.encode(), generation.to_json(), timeout
        )
        if confirmed:
            self.generation = generation.id
            log.info(
                "slot_generation_started",
                source=self.source.key,
                generation=generation.id,
                detail="walcast creates the slot: nothing kept for an earlier slot of this "
                "name is read back",
            )
        return confirmed

    def load(self) -> list[TableProgress]:
        """Every table's newest record of the current generation (read_committed)."""
        prefix = (self.source.key + "/").encode()
        records = self._read()
        found = []
        for key, value in records.items():
            if not key.startswith(prefix):
                continue
            record = TableProgress.from_json(value)
            if record.generation == self.generation:
                found.append(record)
        return found

    def _read(self) -> dict[bytes, bytes]:
        """The source's records (and word of walcast 0.1's, warned about once)."""
        own = self.source.key.encode()
        prefix = own + b"/"
        legacy = f"{self.slot}/".encode()

        def mine(key: bytes) -> bool:
            return key == own or key.startswith(prefix)

        try:
            records = read_compacted(
                self.client_settings,
                self.topic,
                lambda key: mine(key) or key.startswith(legacy),
                timeout=READ_TIMEOUT,
                group="walcast-progress",
                stop=self.stop,
                unreachable=self.unreachable,
            )
        except TopicUnreadableError as exc:
            raise self._unavailable(str(exc)) from None
        old = [k for k in records if not mine(k)]
        if old and not self._legacy_warned:
            self._legacy_warned = True
            log.warning(
                "legacy_progress_ignored",
                topic=self.topic,
                records=len(old),
                slot=self.slot,
                detail="load progress written by walcast 0.1 (keyed by slot name alone) does "
                "not say which server or database it belongs to; it is not used",
            )
        return {k: v for k, v in records.items() if mine(k)}

    def _unavailable(self, detail: str) -> ProgressUnavailableError:
        brokers = self.client_settings.get("bootstrap.servers", "?")
        return ProgressUnavailableError(
            f"Kafka at {brokers} did not answer: cannot read the load progress from topic "
            f"{self.topic!r} ({detail})",
            hint="walcast waits and retries; check kafka.bootstrap_servers and that the "
            "brokers run",
        )

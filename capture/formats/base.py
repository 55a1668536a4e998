"""The one interface every output format implements, and the options they share.

An :class:`Encoder` turns the stream of committed transactions
(``TransactionBegin, ChangeEvent*, TransactionCommit``) into :class:`EncodedMessage`
objects: each is one Kafka message value (and key), or one unit printed by
``walcast tail``. Encoders are stateful (sequence counters, per-table metadata already
announced, the open IBM message) and see the items of one stream in order.

Invariants every encoder keeps:

* Memory is bounded whatever the transaction size: an encoder may keep at most one
  pending message (e.g. an IBM segment below its size limit), never a whole transaction.
  Formats that must state a transaction's size up front set ``needs_transaction_size``;
  the source then holds transactions (spilling to disk) so that
  ``TransactionBegin.change_count`` is known.
* Every change message carries the commit LSN and the ordinal within the transaction,
  in the format's own fields where it has them, so consumers can drop replays.
* Values survive encoding exactly (the format's string form where it has no exact type).
"""

from __future__ import annotations

import base64
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from capture.events import (
    ChangeEvent,
    LogicalMessageEvent,
    StreamItem,
    TransactionBegin,
    TransactionCommit,
)
from capture.formats.settings import FormatSettings, own_settings
from capture.lsn import format_lsn


@dataclass(slots=True)
class EncodedMessage:
    """One output message."""

    value: bytes | None
    """The message value; None is a Kafka tombstone (a null value, ``debezium`` deletes)."""
    key: bytes | None
    kind: str
    """"change", "begin", "commit", "heartbeat", "metadata" or "transaction"."""
    schema: str | None = None
    """Source schema of a per-table message (for topic templates); None otherwise."""
    table: str | None = None
    commit_lsn: int | None = None
    xid: int | None = None
    ordinal: int | None = None
    """Ordinal of the (first) change the message carries."""
    headers: tuple[tuple[str, bytes], ...] = ()
    """The format's own Kafka headers (Debezium's key-change marks), after walcast's."""
    change_lsn: int | None = None
    """The WAL position of the (first) change the message carries (``ChangeEvent.lsn``; a
    load row's: its chunk's watermark, the commit LSN); None for other messages."""
    layout: bytes | None = None
    """The layout version of the change's table (:attr:`capture.events.Table.layout_version`,
    the ``walcast.layout`` header); None for messages of no single change."""

    @classmethod
    def for_change(
        cls, event: ChangeEvent, value: bytes | None, key: bytes | None
    ) -> EncodedMessage:
        """The message carrying ``event`` (kind "change", its table, position and ordinal)."""
        table = event.table
        return cls(
            value,
            key,
            "change",
            table.schema,
            table.name,
            event.commit_lsn,
            event.xid,
            event.ordinal,
            change_lsn=event.lsn or event.commit_lsn,
            layout=table.layout_version.encode(),
        )

    def kafka_headers(
        self, source: tuple[str, bytes] | None = None
    ) -> list[tuple[str, str | bytes | None]]:
        """Kafka headers naming the commit LSN, xid, ordinal, change LSN and layout version.

        (Replays, order, and the layout a reader types the change with.) ``source`` (the
        sink's ``walcast.source`` header, when it is bound to a source) comes after them,
        the format's own :attr:`headers` last: the order is always commit LSN, xid,
        ordinal, change LSN, layout, source, the format's; a header whose value is unknown
        (None) is left out. Called once per produced message: a change message takes one
        list display, no appends (other messages and those with headers of their format
        take :meth:`_with_own_headers`).
        """
        shared = _transaction_headers(self.commit_lsn, self.xid)
        ordinal = self.ordinal
        change_lsn = self.change_lsn
        layout = self.layout
        if self.headers or ordinal is None or change_lsn is None or layout is None:
            return self._with_own_headers(shared, source)
        numbered = ("walcast.ordinal", str(ordinal).encode())
        # bytes %-formatting: a third of an f-string's cost, on every change message
        at = ("walcast.change_lsn", b"%X/%X" % (change_lsn >> 32, change_lsn & 0xFFFFFFFF))
        named = ("walcast.layout", layout)
        if source is None:
            return [*shared, numbered, at, named]
        return [*shared, numbered, at, named, source]

    def _with_own_headers(
        self,
        shared: tuple[tuple[str, str | bytes | None], ...],
        source: tuple[str, bytes] | None,
    ) -> list[tuple[str, str | bytes | None]]:
        """:meth:`kafka_headers` of any message (the format's :attr:`headers` last)."""
        out: list[tuple[str, str | bytes | None]] = [*shared]
        if self.ordinal is not None:
            out.append(("walcast.ordinal", str(self.ordinal).encode()))
        if self.change_lsn is not None:
            out.append(("walcast.change_lsn", format_lsn(self.change_lsn).encode()))
        if self.layout is not None:
            out.append(("walcast.layout", self.layout))
        if source is not None:
            out.append(source)
        out.extend(self.headers)
        return out


@functools.lru_cache(maxsize=64)
def _transaction_headers(
    commit_lsn: int | None, xid: int | None
) -> tuple[tuple[str, str | bytes | None], ...]:
    """The headers every message of one transaction shares (cached: built once per txn)."""
    headers: list[tuple[str, str | bytes | None]] = []
    if commit_lsn is not None:
        headers.append(("walcast.commit_lsn", format_lsn(commit_lsn).encode()))
    if xid is not None:
        headers.append(("walcast.xid", str(xid).encode()))
    return tuple(headers)


@dataclass(frozen=True, slots=True)
class FormatOptions:
    """Options shared by all formats, plus each format's own (``settings``)."""

    source_name: str = "walcast"
    """The producing program's name, where a format carries one."""
    source_version: str = "PostgreSQL"
    """The source database's version text, e.g. "15.18"."""
    database: str = "postgres"
    """The source database name."""
    server: str = "localhost"
    """The source server's name, where a format carries one (Qlik lineage)."""
    settings: FormatSettings | None = None
    """The format's own settings, parsed once where they were given
    (:func:`capture.formats.parse_settings`); None: the format's defaults."""
    clock: Callable[[], float] = time.time
    """Wall clock (Unix seconds) for the fields that say when a message was built; test
    streams inject a fixed one so that their bytes are deterministic."""
    max_message_bytes: int | None = None
    """The largest message value the sink accepts (Kafka: the producer's effective
    ``message.max.bytes`` minus the envelope), or None when unbounded (stdout)."""


class Encoder(ABC):
    """Base of every output format."""

    name: ClassVar[str]
    """Registry name, as given to ``--format``."""
    binary_output: ClassVar[bool] = False
    """Values are binary (Avro); ``tail`` prints them base64-encoded, one per line."""
    needs_transaction_size: ClassVar[bool] = False
    """The format states a transaction's size before its changes (see module docstring)."""
    settings_class: ClassVar[type[FormatSettings]]
    """The format's ``Settings`` dataclass (see :mod:`capture.formats.settings`)."""
    settings: FormatSettings
    """The parsed settings (subclasses narrow the type to their ``Settings``)."""
    default_topic: str | None = None
    """The topic template of row changes when the user sets none (the format's own naming,
    e.g. Debezium's ``<prefix>.{schema}.{table}``); None: walcast's default."""
    default_transaction_topic: str | None = None
    """Likewise for messages of no table (transaction records); None: walcast's default."""
    heartbeat_topic: str | None = None
    """The topic of heartbeat messages when the user sets no transaction topic template;
    None: the transaction topic."""

    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        settings: type[FormatSettings] | None = None,
        binary_output: bool | None = None,
        needs_transaction_size: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Take a format's registry facts from its class statement.

        ``class QlikEncoder(Encoder, name="qlik", settings=Settings,
        needs_transaction_size=True)`` sets the class variables above; a fact not given is
        inherited.
        """
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name
        if settings is not None:
            cls.settings_class = settings
        if binary_output is not None:
            cls.binary_output = binary_output
        if needs_transaction_size is not None:
            cls.needs_transaction_size = needs_transaction_size

    def __init__(self, options: FormatOptions | None = None) -> None:
        self.options = options if options is not None else FormatOptions()
        self.settings = own_settings(self.settings_class, self.name, self.options.settings)
        self._clock = self.options.clock
        """The wall clock of the fields that say when a message was built."""

    def encode(self, item: StreamItem) -> list[EncodedMessage]:
        """Dispatch one stream item to the matching method."""
        if isinstance(item, ChangeEvent):
            return self.change(item)
        if isinstance(item, TransactionBegin):
            return self.begin(item)
        if isinstance(item, TransactionCommit):
            return self.commit(item)
        return self.logical_message(item)

    def begin(self, begin: TransactionBegin) -> list[EncodedMessage]:  # noqa: ARG002
        """Messages at the start of a transaction (none by default)."""
        return []

    @abstractmethod
    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """Messages for one row change."""

    def commit(self, commit: TransactionCommit) -> list[EncodedMessage]:  # noqa: ARG002
        """Messages at the end of a transaction (none by default)."""
        return []

    def logical_message(self, message: LogicalMessageEvent) -> list[EncodedMessage]:  # noqa: ARG002
        """Messages for a ``pg_logical_emit_message`` record (none by default)."""
        return []

    def heartbeat(self, lsn: int, now_us: int) -> list[EncodedMessage]:  # noqa: ARG002
        """A heartbeat record, where the format defines one; ``now_us`` is Unix µs."""
        return []

    def flush(self) -> list[EncodedMessage]:
        """Anything still pending (called at shutdown); none by default."""
        return []

    def tail_lines(self, event: ChangeEvent) -> bytes:
        """Everything ``walcast tail`` prints for one change.

        Formats may override this with a faster path that builds no EncodedMessage.
        """
        return b"".join(self.frame_for_tail(m) for m in self.change(event))

    def frame_for_tail(self, message: EncodedMessage) -> bytes:
        """How ``walcast tail`` prints one message: a line, base64 for binary formats."""
        value = message.value
        assert value is not None, "a format that writes tombstones frames them itself"
        if self.binary_output:
            return base64.b64encode(value) + b"\n"
        return value + b"\n"

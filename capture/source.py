"""The replication source: preflight, the replication stream, decoding and reassembly.

:class:`ReplicationSource` is the :class:`~capture.pump.Source` of ``tail`` and ``run``. It
yields :data:`~capture.events.StreamItem` objects of committed transactions in commit order,
lazily (a replayed held transaction is decoded one message at a time), and
:class:`~capture.position.Checkpoint` items for positions that are safe once everything
before them is delivered:

* a keepalive's WAL end while nothing is open, streaming or prepared;
* a non-transactional logical message (walcast's heartbeat) outside any transaction.

It never decides what to acknowledge: the pump's :class:`~capture.position.PositionLedger`
does, and calls :meth:`ReplicationSource.acknowledge`. :meth:`ReplicationSource.ack_limit` caps
that position below pending prepared transactions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import structlog

from capture import dsn as dsn_util
from capture.errors import ConfigError, DecodeError
from capture.events import LogicalMessageEvent, StreamItem
from capture.formats.base import FormatOptions
from capture.formats.settings import FormatSettings
from capture.lsn import format_lsn
from capture.pgoutput.decoder import PgOutputDecoder
from capture.position import Checkpoint
from capture.relcache import ColumnResolver, KeyResolver, RelationCache
from capture.replication.binary_check import binary_type_resolver, check_binary_columns
from capture.replication.client import ReplicationStream, StreamOptions
from capture.replication.protocol import Keepalive
from capture.replication.setup import (
    Preflight,
    element_resolver,
    highest_proto_version,
    resolve_failover,
)
from capture.replication.side import SideConnection
from capture.transactions import TransactionAssembler

log = structlog.get_logger("walcast.source")

RECEIVE_TIMEOUT_MARGIN: Final = 10.0
"""The default receive timeout is the server's ``wal_sender_timeout`` plus this: a live
walsender sends a keepalive within half its timeout, and answers walcast's reply requests
(:mod:`capture.replication.client`) at once."""
DISABLED_SENDER_RECEIVE_TIMEOUT: Final = 70.0
"""The default receive timeout when the server's ``wal_sender_timeout`` is 0 (disabled):
walcast's reply requests every status interval still make a live walsender answer."""


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Where to read from and how. ``None`` options mean "the best the server supports"."""

    dsn: str
    slot: str
    publications: list[str]
    create_slot: bool = False
    create_publication: bool = False
    publish_tables: list[str] = field(default_factory=list)
    proto_version: int | None = None
    binary: bool = False
    streaming: str | None = None
    """"on", "off", "parallel" or None (on where the protocol version allows)."""
    messages: bool | None = None
    two_phase: bool = False
    start_lsn: int = 0
    status_interval: float = 10.0
    failover_slot: bool | None = None
    """Create the slot as a failover slot (None: where the server supports it, 17+, as a
    primary; see :func:`~capture.replication.setup.resolve_failover`)."""
    receive_timeout: float | None = None
    """Seconds without any message from the server before the stream counts as lost (None:
    :data:`RECEIVE_TIMEOUT_MARGIN` above the server's ``wal_sender_timeout``)."""
    spill_dir: str | None = None
    memory_limit: int = 64 * 1024 * 1024
    hold_transactions: bool = False
    """Hold each transaction until it commits, so its size is known up front."""

    def validate(self) -> None:
        """Raise a ConfigError naming the first bad setting."""
        dsn_util.parse(self.dsn)
        if not self.slot:
            raise ConfigError("--slot: a replication slot name is required")
        if not self.publications or not all(self.publications):
            raise ConfigError("--publication: at least one publication name is required")
        if self.streaming not in (None, "on", "off", "parallel"):
            raise ConfigError(f"--streaming: {self.streaming!r} is not one of on, off, parallel")
        if self.status_interval <= 0:
            raise ConfigError("--status-interval: must be a positive number of seconds")


class ReplicationSource:
    """Committed changes from one replication slot."""

    def __init__(
        self,
        config: SourceConfig,
        *,
        key_resolver: KeyResolver | None = None,
        column_resolver: ColumnResolver | None = None,
    ) -> None:
        config.validate()
        self.config = config
        with Preflight(config.dsn) as preflight:
            server = preflight.server()
            proto = config.proto_version or highest_proto_version(server.version_num)
            preflight.check_proto_version(server, proto)
            if config.two_phase and proto < 3:
                raise ConfigError("--two-phase: needs protocol version 3 (PostgreSQL 15+)")
            version = server.version_num
            if config.binary and version < 140000:
                raise ConfigError(
                    f"--binary: binary values need PostgreSQL 14 or newer; the server is "
                    f"{version // 10000}",
                    hint="run without --binary",
                )
            if config.messages and version < 140000:
                raise ConfigError(
                    f"--messages: logical messages need PostgreSQL 14 or newer; the server is "
                    f"{version // 10000}"
                )
            streaming = config.streaming
            if streaming is None:
                streaming = "on" if proto >= 2 else "off"
            if streaming == "parallel" and proto < 4:
                raise ConfigError("--streaming parallel: needs protocol version 4 (PostgreSQL 16+)")
            if streaming != "off" and proto < 2:
                raise ConfigError(
                    f"--streaming {streaming}: needs protocol version 2 (PostgreSQL 14+)"
                )
            failover = resolve_failover(config.failover_slot, server)
            for publication in config.publications:
                preflight.ensure_publication(
                    publication, create=config.create_publication, tables=config.publish_tables
                )
            if config.binary:  # refuse, before the slot exists, what binary cannot render
                check_binary_columns(preflight.conn, config.publications)
            slot = preflight.ensure_slot(
                config.slot,
                server,
                create=config.create_slot,
                two_phase=config.two_phase,
                failover=failover,
            )
            unprotected = (
                preflight.unprotected_standby_slots()
                if slot.failover and not server.in_recovery
                else []
            )
            if unprotected:
                log.warning(
                    "failover_unprotected",
                    slot=config.slot,
                    standby_slots=unprotected,
                    detail="synchronized_standby_slots does not name these physical slots: the "
                    "walsender sends changes their standbys may not have received yet; after a "
                    "failover to such a standby those changes are not in the new primary's "
                    "history, yet they reached Kafka (a retried write then comes again under "
                    "another position, and the new primary reuses their positions for other "
                    f"changes); ALTER SYSTEM SET synchronized_standby_slots = "
                    f"'{','.join(unprotected)}' and reload",
                )
            receive_timeout = config.receive_timeout
            if receive_timeout is None:
                sender_timeout = preflight.wal_sender_timeout()
                receive_timeout = (
                    sender_timeout + RECEIVE_TIMEOUT_MARGIN
                    if sender_timeout > 0
                    else DISABLED_SENDER_RECEIVE_TIMEOUT
                )
        messages = config.messages if config.messages is not None else server.version_num >= 140000
        self.options = StreamOptions(
            publications=tuple(config.publications),
            proto_version=proto,
            binary=config.binary,
            streaming=None if streaming == "off" else streaming,
            messages=messages,
            two_phase=config.two_phase,
        )
        self.decoder = PgOutputDecoder(proto, streaming_parallel=streaming == "parallel")
        self._catalog = SideConnection(config.dsn)  # opened only if an array needs it
        self.relations = RelationCache(
            key_resolver=key_resolver,
            column_resolver=column_resolver,
            element_resolver=element_resolver(self._catalog, config.dsn),
            binary=config.binary,
            type_resolver=binary_type_resolver(self._catalog, config.dsn)
            if config.binary
            else None,
        )
        self.assembler = TransactionAssembler(
            self.relations,
            proto_version=proto,
            streaming_parallel=streaming == "parallel",
            memory_limit=config.memory_limit,
            spill_dir=config.spill_dir,
            hold_transactions=config.hold_transactions,
        )
        self.stream = ReplicationStream(
            config.dsn,
            config.slot,
            self.options,
            start_lsn=config.start_lsn,
            status_interval=config.status_interval,
            receive_timeout=receive_timeout,
        )
        self.server = server
        log.info(
            "stream_started",
            target=dsn_util.describe(config.dsn),
            server=self.stream.server,
            slot=config.slot,
            publications=config.publications,
            proto_version=proto,
            binary=config.binary,
            streaming=streaming,
            messages=messages,
            two_phase=config.two_phase,
        )

    def format_options(
        self, settings: FormatSettings | None = None, **extra: object
    ) -> FormatOptions:
        """Options for output formats, describing this source (``extra``: more fields)."""
        version = self.server.version_num
        host = dsn_util.parse(self.config.dsn).get("host", "localhost")
        return FormatOptions(
            source_version=f"{version // 10000}.{version % 10000}",
            database=self.server.database,
            server=host.split(",")[0] or "localhost",
            settings=settings,
            **extra,  # type: ignore[arg-type]
        )

    @property
    def finished(self) -> bool:
        """A slot never runs dry."""
        return False

    @property
    def received_lsn(self) -> int:
        """Highest WAL position the server has sent."""
        return self.stream.received_lsn

    def poll(self, timeout: float = 1.0) -> Iterator[StreamItem | Checkpoint]:
        """Yield the items completed by the replication messages already received.

        Waits up to ``timeout`` seconds for the first message; may yield nothing.
        """
        decode = self.decoder.decode
        feed = self.assembler.feed
        assembler = self.assembler
        for message in self.stream.read_batch(timeout):
            if isinstance(message, Keepalive):
                if assembler.idle:
                    yield Checkpoint(message.wal_end)
                continue
            payload = message.payload
            try:
                decoded = decode(payload)
            except DecodeError as exc:
                raise exc.at_lsn(message.wal_start) from None
            last = None
            for item in feed(decoded, payload, message.wal_start):
                last = item
                yield item
            if type(last) is LogicalMessageEvent and not last.transactional and assembler.idle:
                # A non-transactional message (e.g. walcast's heartbeat) outside any
                # transaction: every commit before it was sent, so its WAL end is safe.
                yield Checkpoint(message.wal_end)

    def acknowledge(self, lsn: int) -> None:
        """Everything before ``lsn`` was delivered; it is confirmed at the next status update."""
        self.stream.acknowledge(lsn)

    def ack_limit(self, lsn: int) -> int:
        """The highest position at most ``lsn`` that is safe to confirm (pending prepares)."""
        return self.assembler.ack_limit(lsn)

    def keep_alive(self) -> None:
        """Send a status update if one is due (called while the consumer waits)."""
        self.stream.maybe_send_status()

    def close(self) -> None:
        """Send the final acknowledgement and disconnect."""
        self.assembler.close()
        self.stream.close()
        self._catalog.close()
        log.info("stream_closed", slot=self.config.slot, acked=format_lsn(self.stream.acked_lsn))

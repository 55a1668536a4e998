"""The one place where a front door's settings become a running pump.

``walcast tail``, ``walcast run`` and ``walcast produce-test-stream`` parse their arguments
and make what outlives one pump: the sink (stdout, a file, Kafka), for loads a progress
store, and for a replication source the side connection and the
:class:`~capture.position.PositionLedger` (``walcast run`` keeps both across sessions: its
health and heartbeats use the side connection between them, and it makes a new ledger only
after a session's open units were aborted). Everything else is put together here: the
replication source (or the synthetic one, with its own ledger), the load wrapped around it,
the outputs' encoders and topic names, and the :class:`~capture.pump.Pump`
(supabase/etl's ``Pipeline::new``). No front door imports another, nor builds these parts
itself.

Decisions taken here, once for every front door:

* the source holds whole transactions (spilling to disk) when any output states a
  transaction's size up front (:func:`~capture.pump.needs_transaction_sizes`);
* a load asks for logical messages (its watermarks and requests travel as such);
* an output's encoder describes the source (:meth:`ReplicationSource.format_options`) and
  takes the sink's largest message (``max_message_bytes``);
* REPLICA IDENTITY FULL tables get their primary key from the catalog
  (:func:`primary_key_resolver`), once per Relation message;
* what :class:`Pipeline.close` closes, and in which order, when the front door is done or
  a step failed half way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from capture.formats import Encoder, format_class
from capture.formats.settings import FormatSettings
from capture.interfaces import Output, Sink, Source
from capture.position import PositionLedger
from capture.pump import Pump, needs_transaction_sizes
from capture.replication import catalog
from capture.replication.side import SideConnection
from capture.sinks.topics import TopicNamer, format_templates
from capture.snapshot import LoadingSource, LoadProgress, LoadSettings
from capture.source import ReplicationSource, SourceConfig
from capture.state.progress import ProgressStore, TableProgress
from capture.synthetic import SyntheticSource


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """One output: its format, its parsed settings, and (for Kafka) its topic templates."""

    format: str
    settings: FormatSettings | None = None
    topic: str | None = None
    """Topic template (``{format}``, ``{database}``, ``{schema}``, ``{table}``); None: a
    stream sink (stdout, a file) that names no topic."""
    transaction_topic: str | None = None


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """A load around the replication source: how, where its progress is kept, who hears it."""

    settings: LoadSettings
    progress: ProgressStore
    records: list[TableProgress] | None = None
    """The store's records, read before the stream starts (None: read them then)."""
    observer: Callable[[LoadProgress], None] | None = None


@dataclass(slots=True)
class Pipeline:
    """A pump ready to run, and the parts a front door may still need to reach."""

    pump: Pump
    replication: ReplicationSource | None = None
    loading: LoadingSource | None = None

    @property
    def source(self) -> Source:
        """The outermost source the pump reads."""
        return self.pump.source

    @property
    def outputs(self) -> list[Output]:
        """The outputs, in the order given."""
        return self.pump.outputs

    def close(self) -> None:
        """Close the sources (readers, the stream with its last acknowledgement)."""
        self.pump.source.close()


def primary_key_resolver(side: SideConnection) -> Callable[[int, str, str], tuple[str, ...] | None]:
    """The catalog lookup of a REPLICA IDENTITY FULL table's primary key, on ``side``."""

    def resolve(relation_id: int, _schema: str, _table: str) -> tuple[str, ...] | None:
        return side.run(lambda conn: catalog.primary_key(conn, relation_id))

    return resolve


def column_resolver(
    side: SideConnection,
) -> Callable[[int], dict[str, catalog.CatalogColumn] | None]:
    """The catalog lookup of a table's columns (numbers, DEFAULT values), on ``side``."""

    def resolve(relation_id: int) -> dict[str, catalog.CatalogColumn] | None:
        return side.run(lambda conn: catalog.catalog_columns(conn, relation_id))

    return resolve


def connect_source(
    config: SourceConfig, formats: Sequence[str], side: SideConnection, *, load: bool
) -> ReplicationSource:
    """The replication source for ``formats`` (see the module docstring's decisions)."""
    config = dataclasses.replace(config, hold_transactions=needs_transaction_sizes(formats))
    if load:
        config = dataclasses.replace(config, messages=True)
    return ReplicationSource(
        config,
        key_resolver=primary_key_resolver(side),
        column_resolver=column_resolver(side),
    )


def replication_pipeline(
    replication: ReplicationSource,
    outputs: Sequence[OutputPlan],
    sink: Sink,
    ledger: PositionLedger,
    *,
    load: LoadPlan | None = None,
    stop: Callable[[], bool] = lambda: False,
    max_message_bytes: int | None = None,
    claimed: dict[str, tuple[str, str, str | None, str | None]] | None = None,
    feed: Callable[[Source], Source] | None = None,
    split_key_updates: bool = False,
) -> Pipeline:
    """A pump from ``replication`` (with ``load`` around it) through ``outputs`` to ``sink``.

    ``claimed`` is kept across sessions by the daemon: topic names already taken, so that
    two tables never share one. ``feed`` wraps the outermost source last (exactly-once's
    replay skipping). When a step fails, what was opened is closed before the error goes on.
    """
    source: Source = replication
    loading: LoadingSource | None = None
    try:
        if load is not None:
            config = replication.config
            loading = LoadingSource(
                replication,
                dsn=config.dsn,
                slot=config.slot,
                publications=config.publications,
                settings=load.settings,
                progress=load.progress,
                delivered_lsn=lambda: ledger.delivered_lsn,
                count_rows=config.hold_transactions,
                observer=load.observer,
                records=load.records,
            )
            loading.stop = stop
            source = loading
        shared = claimed if claimed is not None else {}
        encoders = []
        for plan in outputs:
            options = replication.format_options(plan.settings, max_message_bytes=max_message_bytes)
            encoder = format_class(plan.format)(options)
            namer = _namer(plan, encoder, replication.server.database, shared)
            encoders.append(Output(plan.format, encoder, namer))
        if feed is not None:
            source = feed(source)
        pump = Pump(source, sink, encoders, ledger, split_key_updates=split_key_updates)
    except BaseException:
        (loading or replication).close()
        raise
    return Pipeline(pump, replication, loading)


def synthetic_pipeline(
    source: SyntheticSource,
    output: OutputPlan,
    sink: Sink,
    *,
    database: str,
    max_message_bytes: int | None = None,
) -> Pipeline:
    """A pump from the synthetic shop through one output to ``sink`` (no server)."""
    options = source.options(output.settings, max_message_bytes=max_message_bytes)
    encoder = format_class(output.format)(options)
    namer = _namer(output, encoder, database, {})
    return Pipeline(Pump(source, sink, [Output(output.format, encoder, namer)], PositionLedger()))


def _namer(
    plan: OutputPlan,
    encoder: Encoder,
    database: str,
    claimed: dict[str, tuple[str, str, str | None, str | None]],
) -> TopicNamer | None:
    """The output's topics: the plan's templates, or the format's own naming.

    The format's naming replaces walcast's defaults only
    (:func:`capture.sinks.topics.format_templates`).
    """
    if plan.topic is None:
        return None
    assert plan.transaction_topic is not None, "a Kafka output names its transaction topic"
    topic, transaction, heartbeat = format_templates(
        plan.topic,
        plan.transaction_topic,
        default_topic=encoder.default_topic,
        default_transaction_topic=encoder.default_transaction_topic,
        heartbeat_topic=encoder.heartbeat_topic,
    )
    return TopicNamer(
        plan.format, database, topic, transaction, claimed=claimed, heartbeat_topic=heartbeat
    )

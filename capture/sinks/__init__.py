"""Where encoded messages go: the sinks.

Stdout or a file (:mod:`capture.sinks.stream`), Kafka (:mod:`capture.sinks.kafka`,
exactly-once in :mod:`capture.sinks.kafka_eos`), and the topics and records they keep
(:mod:`capture.sinks.topics`, :mod:`capture.state.offsets`, :mod:`capture.state.compacted`).
Their interface, and the invariants every sink keeps, are in :mod:`capture.interfaces`
(:class:`~capture.interfaces.Sink`).
"""

from __future__ import annotations

from capture.interfaces import Sink, StopRequested

__all__ = ["Sink", "StopRequested"]

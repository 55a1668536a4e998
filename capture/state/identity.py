"""Whose state is it: the identity of a replication source, the key of everything walcast keeps.

Every record walcast persists or reads back (load progress, table layouts, exactly-once
offsets) and every message it produces names the source it describes, so that two sources
sharing one Kafka never see each other's state:

* :class:`SourceIdentity` is ``(system identifier, database, slot)``, written
  ``<system identifier>/<database>/<slot>`` (:attr:`SourceIdentity.key`). A slot name alone
  is not unique (every walcast defaults to slot ``walcast``; two clusters, or two databases
  of one cluster, each have their own); a database name alone neither. The system
  identifier (``IDENTIFY_SYSTEM``, from ``pg_control``) is unique per cluster and shared by
  its physical standbys, so the identity survives a restart and a failover to a standby.
* Messages carry it in the Kafka header :data:`SOURCE_HEADER`; layout records, load progress
  and offsets are keyed by it (``<key>/<schema>.<table>`` or ``<key>``).
* A slot has lives: dropped and created again under the same name it starts from nothing,
  and what walcast kept about the old one (a finished load, an exactly-once position) must
  not be applied to it. That is the **generation** (:mod:`capture.state.progress` keeps
  it): a random id that walcast writes, confirmed, each time it creates the slot itself,
  before creating it; records carry the generation they were written under, and only those
  of the current generation are read back. See that module for slots created outside
  walcast.

:data:`SYNTHETIC_SYSTEM` names the synthetic shop of ``walcast produce-test-stream``, which
has no server: its identity is ``synthetic/<database>/seed-<seed>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

SOURCE_HEADER: Final = "walcast.source"
"""The Kafka header naming a message's source (:attr:`SourceIdentity.key`)."""
SYNTHETIC_SYSTEM: Final = "synthetic"
"""The system identifier of the synthetic test stream (a real one is a decimal number)."""


@dataclass(frozen=True, slots=True)
class SourceIdentity:
    """Which replication source a message or a record belongs to (see the module docstring)."""

    system_identifier: str
    database: str
    slot: str

    @property
    def key(self) -> str:
        """``<system identifier>/<database>/<slot>``: the header value and the key prefix."""
        return f"{self.system_identifier}/{self.database}/{self.slot}"

    @property
    def transactional_id(self) -> str:
        """The exactly-once producer's ``transactional.id``: one per source."""
        return f"walcast-{self.system_identifier}-{self.database}-{self.slot}"

    def record_key(self, table: str) -> str:
        """The key of a record about ``table`` (``schema.table``) of this source."""
        return f"{self.key}/{table}"

    def describe(self) -> str:
        """For messages: ``slot 's' of database 'd' (system 123…)``."""
        return (
            f"slot {self.slot!r} of database {self.database!r} "
            f"(system identifier {self.system_identifier})"
        )

    @classmethod
    def parse(cls, key: str) -> SourceIdentity | None:
        """The identity written as ``key``; None when it is not one.

        The database name may hold ``/``; the system identifier and the slot name cannot.
        """
        system, sep, rest = key.partition("/")
        database, sep2, slot = rest.rpartition("/")
        if not (sep and sep2 and system and database and slot):
            return None
        return cls(system, database, slot)

"""A scratch database for tests that need extensions, publications or slots of their own.

Contrib extensions (hstore, ltree, cube ...) and FOR ALL TABLES publications would leak
into other tests' databases; each user gets ``walcast_bin_<random>`` and drops it (with
its replication slots) at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import make_conninfo


@contextmanager
def scratch_database(dsn: str, prefix: str = "walcast_bin") -> Iterator[str]:
    """Create a fresh database; yield its DSN; drop it and any slot in it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active",
                (name,),
            )
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

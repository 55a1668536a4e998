"""Catalog queries against a real PostgreSQL: keys, identities, publications, slot status."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from capture.replication import catalog, slots
from capture.replication.connect import connect

pytestmark = pytest.mark.integration


@dataclass
class Names:
    schema: str
    pub: str
    slot: str


@pytest.fixture
def names(pg_dsn: str) -> Iterator[Names]:
    tag = uuid.uuid4().hex[:8]
    made = Names(f"cat_{tag}", f"cat_pub_{tag}", f"cat_slot_{tag}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {made.schema}")
        conn.execute(
            f'CREATE TABLE {made.schema}.keyed (b int, "A b" text, c int, PRIMARY KEY (c, b))'
        )
        conn.execute(f"CREATE TABLE {made.schema}.full_ident (id int PRIMARY KEY, v text)")
        conn.execute(f"ALTER TABLE {made.schema}.full_ident REPLICA IDENTITY FULL")
        conn.execute(f"CREATE TABLE {made.schema}.keyless (v text)")
        conn.execute(f"CREATE TABLE {made.schema}.by_index (u int NOT NULL, v text)")
        conn.execute(f"CREATE UNIQUE INDEX ON {made.schema}.by_index (u)")
        conn.execute(
            f"ALTER TABLE {made.schema}.by_index REPLICA IDENTITY USING INDEX by_index_u_idx"
        )
        conn.execute(f"CREATE TABLE {made.schema}.nothing (id int PRIMARY KEY)")
        conn.execute(f"ALTER TABLE {made.schema}.nothing REPLICA IDENTITY NOTHING")
        conn.execute(f"CREATE TABLE {made.schema}.unpublished (id int PRIMARY KEY)")
        tables = ", ".join(
            f"{made.schema}.{t}" for t in ("keyed", "full_ident", "keyless", "by_index", "nothing")
        )
        conn.execute(
            f"CREATE PUBLICATION {made.pub} FOR TABLE {tables} WITH (publish = 'insert, update')"
        )
    try:
        yield made
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (made.slot,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {made.pub}")
            conn.execute(f"DROP SCHEMA {made.schema} CASCADE")


def test_primary_key_in_key_order(pg_dsn: str, names: Names) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        oid = catalog.resolve_table(conn, f"{names.schema}.keyed")
        assert oid is not None
        assert catalog.primary_key(conn, oid) == ("c", "b")
        keyless = catalog.resolve_table(conn, f"{names.schema}.keyless")
        assert keyless is not None
        assert catalog.primary_key(conn, keyless) is None
        assert catalog.resolve_table(conn, f"{names.schema}.missing") is None


def test_publication_tables_with_identity_and_key(pg_dsn: str, names: Names) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = catalog.publication_tables(conn, [names.pub])
        pubs = catalog.publications(conn, [names.pub, "no_such_publication"])
        everything = catalog.publications(conn)
    found = {t.name: (t.replica_identity, t.primary_key) for t in tables}
    assert found == {
        "by_index": ("index", ()),
        "full_ident": ("full", ("id",)),
        "keyed": ("default", ("c", "b")),
        "keyless": ("default", ()),
        "nothing": ("nothing", ("id",)),
    }
    assert all(t.schema == names.schema for t in tables)
    assert [p.name for p in pubs] == [names.pub]
    assert pubs[0].operations == ("insert", "update")
    assert not pubs[0].all_tables
    assert names.pub in {p.name for p in everything}


def _current_lsn(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT (pg_current_wal_lsn() - '0/0')::int8").fetchone()
    assert row is not None
    return int(row[0])


def test_status_of_an_idle_slot_tracks_lag_and_retained_wal(pg_dsn: str, names: Names) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert slots.slot_status(conn, names.slot) == []
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (names.slot,))
        (before,) = slots.slot_status(conn, names.slot)
        # The test server runs with synchronous_commit=off: this session's commit waits
        # for its WAL to be written, so the server's current WAL position includes it.
        conn.execute("SET synchronous_commit = on")
        conn.execute(
            f"INSERT INTO {names.schema}.keyless "
            "SELECT repeat('x', 1000) FROM generate_series(1, 2000)"
        )
        (after,) = slots.slot_status(conn, names.slot)
        current = _current_lsn(conn)
        all_here = slots.slot_status(conn)
        keep = catalog.max_slot_wal_keep_size(conn)
        setting = conn.execute(
            "SELECT pg_size_bytes(current_setting('max_slot_wal_keep_size'))"
        ).fetchone()
        assert names.slot in slots.slot_names(conn)
        retained = slots.wal_retained(conn, names.slot)
    assert (before.plugin, before.slot_type, before.active_pid) == ("pgoutput", "logical", None)
    assert not before.active
    assert before.confirmed_flush_lsn is not None
    assert before.restart_lsn is not None
    assert after.confirmed_flush_lsn == before.confirmed_flush_lsn
    assert after.lag_bytes is not None
    assert after.lag_bytes > 2_000_000  # the rows' WAL is behind the confirmed position
    assert after.current_lsn <= current
    assert after.wal_retained is not None
    assert after.wal_retained >= after.lag_bytes
    assert retained is not None
    assert retained >= after.wal_retained
    assert after.wal_status in ("reserved", "extended")
    assert (after.write_lag, after.flush_lag, after.replay_lag, after.reply_time) == (None,) * 4
    assert names.slot in {s.name for s in all_here}
    assert all(s.slot_type == "logical" for s in all_here)
    assert setting is not None
    assert keep == (None if int(setting[0]) < 0 else int(setting[0]))


def test_status_of_an_active_slot_names_the_walsender(pg_dsn: str, names: Names) -> None:
    recvlogical = Path(os.environ.get("WALCAST_TEST_PG_BIN", "")) / "pg_recvlogical"
    assert recvlogical.exists(), f"{recvlogical} is missing (set WALCAST_TEST_PG_BIN)"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (names.slot,))
    consumer = subprocess.Popen(
        [
            str(recvlogical), "--dbname", pg_dsn, "--slot", names.slot, "--start",
            "--file", os.devnull, "--status-interval", "1", "--fsync-interval", "1",
            "--option", "proto_version=1", "--option", f"publication_names={names.pub}",
        ],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            while True:
                (status,) = slots.slot_status(conn, names.slot)
                if status.active and status.reply_time is not None:
                    break
                assert consumer.poll() is None, consumer.stderr.read() if consumer.stderr else ""
                assert time.monotonic() < deadline, status
                time.sleep(0.2)
            row = conn.execute(
                "SELECT pid FROM pg_stat_replication WHERE application_name = 'pg_recvlogical'"
                " AND pid = %s",
                (status.active_pid,),
            ).fetchone()
    finally:
        consumer.terminate()
        consumer.wait(timeout=30)
    assert row is not None
    assert status.active_pid == row[0]


def test_catalog_columns_as_a_restricted_role_with_a_dba_s_session_defaults(
    pg_dsn: str, names: Names
) -> None:
    """``ADD COLUMN … DEFAULT``: the values rows stored before read, in walcast's session
    (ISO dates, UTC) whatever the role's defaults, for a role that is not superuser; a
    volatile DEFAULT (the table rewritten with a value per row) has none (None). Each
    column's number stays through a RENAME COLUMN; a column added again under a dropped
    one's name gets a new one."""
    role = f"cat_role_{uuid.uuid4().hex[:8]}"
    table = f"{names.schema}.growing"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        conn.execute(
            f"ALTER TABLE {table} ADD COLUMN region text DEFAULT 'e\"u''s, {{x}}', "
            "ADD COLUMN at timestamptz DEFAULT '2024-05-02 18:17:29.5+02', "
            "ADD COLUMN tags int[] DEFAULT '{1,2}', ADD COLUMN plain int"
        )
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        conn.execute(
            f"ALTER ROLE {role} SET TimeZone = 'America/New_York'; "
            f"ALTER ROLE {role} SET DateStyle = 'SQL, DMY'"
        )
    try:
        with connect(psycopg.conninfo.make_conninfo(pg_dsn, user=role)) as conn:
            oid = catalog.resolve_table(conn, table)
            assert oid is not None
            found = catalog.catalog_columns(conn, oid)
            assert {n: c.missing for n, c in found.items() if c.has_default} == {
                "region": "e\"u's, {x}",
                "at": "2024-05-02 16:17:29.5+00",
                "tags": "{1,2}",
            }
            assert {n: (c.number, c.type_oid) for n, c in found.items()} == {
                "id": (1, 23), "region": (2, 25), "at": (3, 1184), "tags": (4, 1007),
                "plain": (5, 23),
            }  # fmt: skip
            assert found["plain"].missing is None
            assert not found["plain"].has_default
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # an identity column numbers every row as it is added; a domain's DEFAULT fills
            # them: neither reads NULL there (missing_null would be wrong data)
            conn.execute(f"CREATE DOMAIN {names.schema}.level AS int DEFAULT 3")
            conn.execute(f"ALTER TABLE {table} ADD COLUMN serial int GENERATED ALWAYS AS "
                         f"IDENTITY, ADD COLUMN lvl {names.schema}.level")  # fmt: skip
            found = catalog.catalog_columns(conn, oid)
            assert found["serial"].has_default
            assert found["lvl"].has_default
            conn.execute(f"ALTER TABLE {table} DROP COLUMN serial, DROP COLUMN lvl")
            conn.execute(f"ALTER TABLE {table} ADD COLUMN stamped timestamptz "
                         "DEFAULT clock_timestamp()")  # fmt: skip
            # the rewrite gave every row its own value; the other columns' are in the rows now
            found = catalog.catalog_columns(conn, oid)
            assert {n: c.missing for n, c in found.items() if c.has_default} == {
                "region": None, "at": None, "tags": None, "stamped": None
            }  # fmt: skip
            conn.execute(f"ALTER TABLE {table} RENAME COLUMN plain TO amount")
            conn.execute(f"ALTER TABLE {table} DROP COLUMN region")
            conn.execute(f"ALTER TABLE {table} ADD COLUMN region text")
            found = catalog.catalog_columns(conn, oid)
            assert found["amount"].number == 5
            assert "plain" not in found
            assert found["region"].number == 9  # 6 and 7: serial and lvl, dropped
            # the dropped columns keep their numbers, under a name no column can have
            dropped = {c.number: c for c in found.values() if c.dropped}
            assert sorted(dropped) == [2, 6, 7]
            assert all(c.type_oid == 0 for c in dropped.values())
            assert not set(found) & {"serial", "lvl"}
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_a_relation_decoded_after_later_ddl_gets_the_numbers_the_catalog_can_tell(
    pg_dsn: str, names: Names
) -> None:
    """A Relation message sent before a RENAME COLUMN and decoded after it (walcast behind
    the WAL) gets the renamed column's number where the catalog of now says it must be
    that column, and none where it could be another (:mod:`capture.catalog_numbers`)."""
    from capture.pgoutput.messages import Relation, RelationColumn, ReplicaIdentity  # noqa: PLC0415
    from capture.relcache import RelationCache  # noqa: PLC0415

    table = f"{names.schema}.moving"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, a text, b bool, c text)")
        oid = catalog.resolve_table(conn, table)
        assert oid is not None
        sent = Relation(None, oid, names.schema, "moving", ReplicaIdentity.DEFAULT, (
            RelationColumn(1, "id", 23, -1), RelationColumn(0, "a", 25, -1),
            RelationColumn(0, "b", 16, -1), RelationColumn(0, "c", 25, -1),
        ))  # fmt: skip

        def decoded() -> dict[str, int]:
            cache = RelationCache(column_resolver=lambda o: catalog.catalog_columns(conn, o))
            return dict(cache.apply_relation(sent).column_numbers)

        conn.execute(f"ALTER TABLE {table} RENAME COLUMN b TO flag")
        assert decoded() == {"id": 1, "a": 2, "b": 3, "c": 4}
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN c TO d")
        assert decoded() == {"id": 1, "a": 2, "b": 3, "c": 4}
        # b and c, the last two: flag, d or e (c dropped and e added since, say)
        conn.execute(f"ALTER TABLE {table} ADD COLUMN e text")
        assert decoded() == {"id": 1, "a": 2}
        conn.execute(f"ALTER TABLE {table} DROP COLUMN a")  # flag may be a or b
        assert decoded() == {"id": 1}

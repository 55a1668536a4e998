"""Binary mode's start-up check against a real catalog (a scratch database per module).

``check_binary_columns`` must refuse exactly the published columns the running stream
would refuse (the same registry decides both), in one line naming each of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from capture.errors import BinaryTypeError, ConfigError
from capture.pgoutput.messages import Relation, RelationColumn, ReplicaIdentity
from capture.relcache import RelationCache
from capture.replication.binary_check import (
    check_binary_columns,
    describe_types,
    undecodable_columns,
)
from tests.capture.types._scratch import scratch_database

pytestmark = pytest.mark.integration

SCHEMA_SQL = """
CREATE EXTENSION hstore;
CREATE EXTENSION isn;
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE TYPE pair AS (a int4, b text);
CREATE TYPE with_money AS (a int4, m money);
CREATE DOMAIN cash AS money;
CREATE TABLE good (
    id int PRIMARY KEY, p point, r int4range, mr int4multirange, v tsvector, q tsquery,
    s pg_snapshot, h hstore, e mood, es mood[], c pair, cs pair[], i isbn, b box[],
    gone money
);
ALTER TABLE good DROP COLUMN gone;
CREATE TABLE bad_money (id int PRIMARY KEY, price money, note text);
CREATE TABLE bad_reg (id int PRIMARY KEY, rel regclass, typ regtype[]);
CREATE TABLE bad_nested (id int PRIMARY KEY, w with_money[], d cash);
CREATE TABLE generated (
    id int PRIMARY KEY, shown regclass GENERATED ALWAYS AS (id::oid::regclass) STORED
);
CREATE TABLE isbns (id int PRIMARY KEY, many isbn[]);
CREATE PUBLICATION p_good FOR TABLE good;
CREATE PUBLICATION p_money FOR TABLE bad_money;
CREATE PUBLICATION p_bad FOR TABLE bad_money, bad_reg, bad_nested;
CREATE PUBLICATION p_generated FOR TABLE generated;
CREATE PUBLICATION p_isbns FOR TABLE isbns;
CREATE PUBLICATION p_all FOR ALL TABLES;
"""


@pytest.fixture(scope="module")
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with scratch_database(pg_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(SCHEMA_SQL)
        if connection.info.server_version >= 150000:
            connection.execute("CREATE PUBLICATION p_list FOR TABLE bad_money (id, note)")
        yield connection


def test_decodable_columns_pass(conn: psycopg.Connection[Any]) -> None:
    assert undecodable_columns(conn, ["p_good"]) == []
    check_binary_columns(conn, ["p_good"])
    check_binary_columns(conn, ["p_generated"])  # generated columns are not sent
    check_binary_columns(conn, [])  # nothing published, nothing to refuse


def test_one_money_column(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(BinaryTypeError) as caught:
        check_binary_columns(conn, ["p_money", "p_good"])
    error = caught.value
    assert isinstance(error, ConfigError)
    assert error.exit_code == 2
    assert (error.relation, error.column, error.type_name) == ("public.bad_money", "price", "money")
    line = error.one_line()
    assert "\n" not in line
    assert line.startswith(
        "--binary: 1 published column cannot be decoded from pgoutput's binary format: "
        "public.bad_money column price has type money (money's text depends on"
    )
    assert "run without --binary" in line
    assert "leave public.bad_money out of publication p_money, p_good" in line


def test_every_undecodable_column_is_named_in_one_line(conn: psycopg.Connection[Any]) -> None:
    found = undecodable_columns(conn, ["p_bad"])
    assert [(c.relation, c.column, c.type_name) for c in found] == [
        ("public.bad_money", "price", "money"),
        ("public.bad_nested", "w", "with_money[]"),
        ("public.bad_nested", "d", "cash"),
        ("public.bad_reg", "rel", "regclass"),
        ("public.bad_reg", "typ", "regtype[]"),
    ]
    with pytest.raises(BinaryTypeError) as caught:
        check_binary_columns(conn, ["p_bad"])
    line = caught.value.one_line()
    assert "\n" not in line
    assert "5 published columns cannot be decoded" in line
    for column in found:
        assert f"{column.relation} column {column.column} has type {column.type_name}" in line


def test_an_array_of_a_type_without_send_function_is_refused(
    conn: psycopg.Connection[Any],
) -> None:
    found = undecodable_columns(conn, ["p_isbns"])
    assert [(c.column, c.type_name) for c in found] == [("many", "isbn[]")]
    assert "no send function" in found[0].reason


def test_all_tables_publication(conn: psycopg.Connection[Any]) -> None:
    found = {(c.table, c.column) for c in undecodable_columns(conn, ["p_all"])}
    assert ("bad_money", "price") in found
    assert ("isbns", "many") in found
    assert not any(table in {"good", "generated"} for table, _ in found)


def test_a_column_list_leaves_the_money_column_out(conn: psycopg.Connection[Any]) -> None:
    if conn.info.server_version < 150000:
        pytest.skip("column lists need PostgreSQL 15")
    check_binary_columns(conn, ["p_list"])


def test_start_up_and_stream_decide_alike(conn: psycopg.Connection[Any]) -> None:
    """For every column of every table: refused at start-up <=> refused by the relation cache."""
    refused = {(c.table, c.column) for c in undecodable_columns(conn, ["p_all"])}
    rows = conn.execute(
        "SELECT c.relname::text, a.attname::text, a.atttypid::int8 FROM pg_class c "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' "
        "AND a.attgenerated = ''"
    ).fetchall()
    assert len(rows) > 25
    for table, column, type_oid in rows:
        cache = RelationCache(binary=True, type_resolver=lambda oids: describe_types(conn, oids))
        message = Relation(
            None, 1, "public", table, ReplicaIdentity.DEFAULT,
            (RelationColumn(0, column, int(type_oid), -1),),
        )  # fmt: skip
        try:
            cache.apply_relation(message)
            stream_refuses = False
        except BinaryTypeError:
            stream_refuses = True
        assert stream_refuses == ((table, column) in refused), (table, column)

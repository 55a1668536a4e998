"""The real proof: PostgreSQL's own text output and binary send bytes of the same value.

For each sample expression, the server is asked for the value once in text result format
(the type's output function) and once in binary result format (its send function), in a
session with the walsender's settings. Then, for every sample:

* ``from_text(text)`` and ``from_binary(binary)`` give the same Python value (strictly:
  same type, Decimal scale, UTC offset, NaN ...);
* ``to_text(from_binary(binary)) == text`` byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from capture.replication.binary_check import describe_types
from capture.types import RawBinary, TypeRegistry
from capture.types.values import UnrenderableBinaryError
from tests.capture.types._helpers import same

pytestmark = [pytest.mark.integration, pytest.mark.core]

SESSION = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, MDY'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET client_encoding = 'UTF8'",
)

# (type, SQL expression); the value is SELECTed as (expression)::type.
SAMPLES: list[tuple[str, str]] = [
    # bool
    *[("bool", v) for v in ("true", "false")],
    # integers
    *[("int2", v) for v in ("0", "-32768", "32767", "-1")],
    *[("int4", v) for v in ("0", "1", "-1", "-2147483648", "2147483647")],
    *[("int8", v) for v in ("0", "-9223372036854775808", "9223372036854775807", "42")],
    *[("oid", v) for v in ("0", "4294967295", "1259")],
    *[("xid", v) for v in ("'0'", "'12345'", "'4294967295'")],
    ("cid", "'7'"),
    *[("xid8", v) for v in ("'0'", "'18446744073709551615'")],
    # numeric
    *[
        ("numeric", v)
        for v in (
            "0",
            "'0.000'",
            "'1.500'",
            "'-1.500'",
            "'123456789.123456789'",
            "'-0.0000001'",
            "'0.0001'",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "'1e20'",
            "'1e-20'",
            "'-12.34e5'",
            "10000",
            "99990000",
            "'12345678901234567890.12345678901234567890'",
            "'9999999999999999999999999999.9999999999'::numeric(38,10)",
            "'-9999999999999999999999999999.9999999999'::numeric(38,10)",
            "'0.0000000001'::numeric(38,10)",
            "1.23::numeric(10,5)",
            "repeat('9', 1000)",
            "repeat('9', 131072)",  # 32,768 base-10000 digits: ndigits above Int16's range
            "repeat('1234', 32767)",
            "'-' || repeat('9', 131072) || '.' || repeat('9', 16383)",  # the largest numeric
            "'1' || repeat('0', 999)",
            "'0.' || repeat('0', 500) || '1'",
            "'-' || repeat('1234567890', 40) || '.' || repeat('9876543210', 30)",
            "'-0.00'",
            "'5.0000'",
            "'100.1'",
        )
    ],
    # float4
    *[
        ("float4", v)
        for v in (
            "0",
            "'-0'",
            "0.1",
            "1",
            "'3.4028235e+38'",
            "'-3.4028235e+38'",
            "'1.4e-45'",
            "'1e6'",
            "123456",
            "1234567",
            "'1e-5'",
            "0.0001",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "3.14159",
            "16777217",
            "'1.17549435e-38'",
            "'7e-45'",
            "33554432",
            "0.3",
            "'1e-10'",
            "-2.5",
            "'9.999999e5'",
        )
    ],
    # float8
    *[
        ("float8", v)
        for v in (
            "0",
            "'-0'",
            "0.1",
            "'1e15'",
            "'1e16'",
            "'1e14'",
            "'123456789012345680000'",
            "'1e-5'",
            "0.0001",
            "'0.00012345'",
            "'1.5e300'",
            "'5e-324'",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
            "'1.7976931348623157e308'",
            "'2.2250738585072014e-308'",
            "'123456789012345.6'",
            "'999999999999999.9'",
            "-1.5",
            "100",
            "'0.30000000000000004'",
            "1.0 / 3",
            "'-1e-300'",
            "'4.35'",
            "'9007199254740993'",
        )
    ],
    # character types
    *[
        ("text", v)
        for v in (
            "''",
            "'hello'",
            "'ünïcødé ✓ 😀'",
            r"E'tab\there\nnewline\r'",
            r"'quote\"back\\slash'",
            "'NULL'",
            "repeat('x', 10000)",
        )
    ],
    ("varchar(10)", "'abc'"),
    ("varchar", "'  spaced  '"),
    ("char(5)", "'ab'"),
    ("char(3)", "''"),
    ("char(2)", "'é'"),
    ("name", "'pg_class'"),
    *[('"char"', v) for v in ("'a'", "''", r"'\351'", r"'\001'", "'~'")],
    *[("bytea", v) for v in (r"'\x'", r"'\x00ff10'", "'abc'", "decode(repeat('ab', 1000), 'hex')")],
    # dates and times
    *[
        ("date", v)
        for v in (
            "'2024-02-29'",
            "'0001-01-01'",
            "'9999-12-31'",
            "'0044-03-15 BC'",
            "'4713-01-01 BC'",
            "'0001-12-31 BC'",
            "'0001-01-01 BC'",
            "'10000-01-01'",
            "'294276-12-31'",
            "'5874897-12-31'",
            "'infinity'",
            "'-infinity'",
            "'1970-01-01'",
            "'2000-01-01'",
            "'1999-12-31'",
        )
    ],
    *[
        ("time", v)
        for v in (
            "'00:00:00'",
            "'13:45:01.123456'",
            "'13:45:01.5'",
            "'23:59:59.999999'",
            "'24:00:00'",
            "'12:00:00.000001'",
        )
    ],
    *[
        ("timetz", v)
        for v in (
            "'13:45:01.5+05:30'",
            "'10:00:00-03:30:15'",
            "'00:00:00+00'",
            "'24:00:00+05'",
            "'24:00:00-00:30'",
            "'23:59:59.999999-15:59'",
            "'12:00:00+15:59:59'",
            "'08:15:00.25-08'",
        )
    ],
    *[
        ("timestamp", v)
        for v in (
            "'2024-02-29 13:45:01.123456'",
            "'2024-02-29 13:45:01'",
            "'0001-01-01 00:00:00'",
            "'9999-12-31 23:59:59.999999'",
            "'0001-01-01 00:00:00 BC'",
            "'0001-12-31 23:59:59.999999 BC'",
            "'4713-11-24 00:00:00 BC'",
            "'0044-03-15 12:30:00.5 BC'",
            "'10000-01-01 00:00:00'",
            "'294276-12-31 23:59:59.999999'",
            "'infinity'",
            "'-infinity'",
            "'1999-12-31 23:59:59.5'",
            "'2000-01-01 00:00:00'",
            "'1900-01-01 00:00:00.000001'",
            "'1969-07-20 20:17:40'",
        )
    ],
    *[
        ("timestamptz", v)
        for v in (
            "'2024-02-29 13:45:01.123456+00'",
            "'2024-02-29 13:45:01+00'",
            "'2024-02-29 13:45:01.5+05:30'",
            "'0001-01-01 00:00:00+00'",
            "'0001-01-01 00:00:00+05'",
            "'9999-12-31 23:59:59.999999+00'",
            "'9999-12-31 23:00:00-05'",
            "'0001-01-01 00:00:00+00 BC'",
            "'0044-03-15 00:00:00+00 BC'",
            "'294276-12-31 23:59:59.999999+00'",
            "'4713-11-24 00:00:00+00 BC'",
            "'infinity'",
            "'-infinity'",
            "'10000-01-01 00:00:00+00'",
            "'1900-01-01 00:00:00+00'",
            "'2000-01-01 00:00:00.000001+00'",
        )
    ],
    *[
        ("interval", v)
        for v in (
            "'1 year 2 mons 3 days 04:05:06.789'",
            "'-1 days +02:03:00'",
            "'0'",
            "'-1 sec'",
            "'1 mon -1 days'",
            "'178000000 years'",
            "'-178000000 years'",
            "'1 day -1 sec'",
            "'-2 years -3 mons +4 days -05:06:07'",
            "'1 year'",
            "'-1 year'",
            "'1 mon'",
            "'2 mons'",
            "'1 day'",
            "'2 days'",
            "'0.000001 sec'",
            "'-0.000001 sec'",
            "'2562047788:00:54.775807'",
            "'-2562047788:00:54.775807'::interval - '0.000001 sec'",
            "'2562047788 hours'::interval + '1 year'",
            "'1 mon'::interval - '1 hour'",
            "'-178956970 years -8 mons'",
            "'178956970 years 7 mons'",
            "'1 year -1 mons'",
            "'-1 year +1 mons'",
            "'1 day 25:00:00'",
            "'100 hours'",
            "'-1 mon +1 day -1 sec'",
            "'3 days 0.5 sec'",
            "'1 year 1 sec'",
            "'-1 day -1 sec'",
            "'12 mons'",
            "'-12 mons'",
            "'1 day 00:00:00.1'",
        )
    ],
    # uuid, json
    *[
        ("uuid", v)
        for v in (
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            "'00000000-0000-0000-0000-000000000000'",
            "'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'",
        )
    ],
    *[
        ("json", v)
        for v in (
            '\'{"a" : 1,  "b":[1,2]}\'',
            "'\"str\"'",
            "'null'",
            "'[]'",
            '\'{"ü": "\\u00fc"}\'',
        )
    ],
    *[
        ("jsonb", v)
        for v in (
            '\'{"b": 1, "a": [1, 2.50, "x"]}\'',
            "'\"str\"'",
            "'null'",
            '\'{"nested": {"k": [true, false, null]}}\'',
            '\'{"ü": "\\u00fc\\n"}\'',
            "'1e100'",
            "'[]'",
        )
    ],
    ("jsonpath", "'$.a[*] ? (@ > 1)'"),
    *[("xml", v) for v in ("'<a>x</a>'", '\'<?xml version="1.0" standalone="yes"?><a/>\'')],
    # network
    *[
        ("inet", v)
        for v in (
            "'192.168.0.1'",
            "'10.1.2.3/8'",
            "'0.0.0.0/0'",
            "'255.255.255.255'",
            "'::1'",
            "'::'",
            "'::ffff:1.2.3.4'",
            "'::1.2.3.4'",
            "'::2'",
            "'::ffff:0.0.0.1'",
            "'1:0:0:2:0:0:0:3'",
            "'1:0:0:2:0:0:3:4'",
            "'2001:db8::1/64'",
            "'fe80::1:2:3:4/10'",
            "'1:2:3:4:5:6:7:8'",
            "'1::'",
            "'::ffff:1.2.3.4/120'",
            "'0:0:0:0:0:1:0:0'",
            "'0:0:0:0:1:ffff:0:1'",
            "'0:0:0:0:0:ffff:0:0'",
            "'ABCD:EF01::'",
        )
    ],
    *[
        ("cidr", v)
        for v in (
            "'10.0.0.0/8'",
            "'10.0.0.0/32'",
            "'0.0.0.0/0'",
            "'::/0'",
            "'2001:db8::/32'",
            "'::1.2.3.0/120'",
            "'::ffff:1.2.3.0/120'",
            "'192.168.1.0/24'",
            "'::1/128'",
        )
    ],
    *[("macaddr", v) for v in ("'08:00:2b:01:02:03'", "'FF-FF-FF-FF-FF-FF'")],
    *[("macaddr8", v) for v in ("'08:00:2b:01:02:03:04:05'", "'08002b0102030405'")],
    # bit strings and oddities
    *[("bit", v) for v in ("B'1'",)],
    ("bit(3)", "B'101'"),
    ("bit(10)", "B'0000000001'"),
    *[("varbit", v) for v in ("B''", "B'101101111'", "repeat('10', 50)::varbit")],
    *[("pg_lsn", v) for v in ("'16/B374D848'", "'0/0'", "'FFFFFFFF/FFFFFFFF'")],
    *[("tid", v) for v in ("'(0,1)'", "'(4294967295,65535)'")],
    ("refcursor", "'my_cursor'"),
    # arrays
    *[
        ("int4[]", v)
        for v in (
            "'{}'",
            "'{1,2,3}'",
            "'{1,NULL,3}'",
            "'{{1,2},{3,4}}'",
            "'[0:2]={1,2,3}'",
            "'[1:2][0:1]={{1,2},{3,4}}'",
            "'{{{1,2}},{{3,NULL}}}'",
            "'{NULL}'",
            "'[-5:-4]={7,8}'",
            "'{-2147483648,2147483647}'",
        )
    ],
    (
        "text[]",
        r"""ARRAY['', 'NULL', 'null', 'Null', 'a b', E'a\tb', E'a\vb', E'a\fb', E'a\nb',
             E'x"y', E'x\\y', '{', '}', ',', ';', NULL, 'plain', 'ünï', ' lead', 'trail ',
             'nul', 'NULLS', '=', '[1:2]']""",
    ),
    ("text[]", r"""'{{"a b",NULL},{c,"d\"e"}}'"""),
    ("text[]", "'{}'"),
    ("varchar[]", "ARRAY['a', 'b c']::varchar[]"),
    ("char(4)[]", "ARRAY['ab', NULL]::char(4)[]"),
    ("name[]", "ARRAY['pg_class', 'with space']::name[]"),
    ("bool[]", "'{t,f,NULL}'"),
    ("bytea[]", r"ARRAY['\x00ff'::bytea, '\x'::bytea, NULL]"),
    ('"char"[]', r"""ARRAY['a'::"char", '\351'::"char", ''::"char", '"'::"char"]"""),
    ("int2[]", "'{1,-32768}'"),
    ("int8[]", "'{{1},{-9223372036854775808}}'"),
    ("oid[]", "'{1,4294967295}'"),
    ("float4[]", "'{0.1,NaN,-Infinity,-0,1e+06}'"),
    ("float8[]", "'{1e+15,5e-324,NaN,0.1,-0}'"),
    ("numeric[]", "'{1.500,NaN,Infinity,-0.001,NULL,-Infinity}'"),
    ("date[]", "'{2024-01-01,infinity,\"0044-03-15 BC\",-infinity,NULL}'"),
    ("time[]", "'{00:00:00,24:00:00,13:45:01.5}'"),
    ("timetz[]", "'{13:45:01.5+05:30,10:00:00-03:30:15}'"),
    ("timestamp[]", '\'{"2024-01-01 00:00:00",infinity,"0001-01-01 00:00:00 BC"}\''),
    ("timestamptz[]", "'{\"2024-01-01 00:00:00.5+00\",-infinity}'"),
    ("interval[]", '\'{"1 year","-00:00:01","1 mon -1 days"}\''),
    ("uuid[]", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'"),
    ("json[]", """ARRAY['{"a": 1}'::json, '[1, "x"]'::json, 'null'::json]"""),
    ("jsonb[]", """ARRAY['{"a": 1}'::jsonb, '"NULL"'::jsonb]"""),
    ("inet[]", "'{192.168.0.1/24,::ffff:1.2.3.4,NULL}'"),
    ("cidr[]", "'{10.0.0.0/8,2001:db8::/32}'"),
    ("macaddr[]", "'{08:00:2b:01:02:03}'"),
    ("macaddr8[]", "'{08:00:2b:01:02:03:04:05}'"),
    ("bit(3)[]", "'{101,010}'"),
    ("varbit[]", "'{\"\",1}'"),
    ("xid[]", "'{1,2}'"),
    ("tid[]", '\'{"(0,1)","(2,3)"}\''),
    ("pg_lsn[]", "'{0/0,16/B374D848}'"),
    ("xml[]", "ARRAY['<a>x y</a>'::xml]"),
    ("jsonpath[]", "ARRAY['$.a'::jsonpath]"),
    ("int4[]", "array_fill(7, ARRAY[2, 3, 2], ARRAY[0, 1, -1])"),
    ("text[]", "array_fill('x'::text, ARRAY[2, 2])"),
]

# Built-in types refused in binary mode (their text needs server state): text must stay
# lossless; binary is kept raw and never rendered. The decoded ones (point, ranges,
# tsvector ...) are proven in test_binary_types_pg.py.
FALLBACK_SAMPLES: list[tuple[str, str]] = [
    ("money", "12.34"),
    ("money", "-0.01"),
    ("regclass", "'pg_class'"),
    ("regtype", "'integer'"),
    ("regproc", "'now'"),
    ("regnamespace", "'pg_catalog'"),
    ("regconfig", "'english'"),
    ("regrole", "current_user::regrole::text"),
]


@pytest.fixture(scope="module")
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as connection:
        for statement in SESSION:
            connection.execute(statement)
        yield connection


def fetch(conn: psycopg.Connection[Any], sql: str) -> tuple[bytes | None, bytes | None, int]:
    """(text output, binary send bytes, type OID) of the single value ``sql`` returns."""
    query = sql.encode()
    text_result = conn.pgconn.exec_params(query, None, result_format=0)
    binary_result = conn.pgconn.exec_params(query, None, result_format=1)
    for result in (text_result, binary_result):
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            raise AssertionError(f"{sql}: {result.error_message.decode()}")
    return text_result.get_value(0, 0), binary_result.get_value(0, 0), text_result.ftype(0)


def test_sample_count() -> None:
    assert len(SAMPLES) >= 150


def _needs_major(type_sql: str, expression: str) -> int:
    """The first major that accepts the sample: numeric infinities came in PostgreSQL 14,
    the widest intervals (near 2^63 microseconds of hours) in 15."""
    if "Infinity" in expression and type_sql.startswith("numeric"):
        return 14
    if type_sql == "interval" and "2562047788" in expression:
        return 15
    return 13


@pytest.mark.parametrize(("type_sql", "expression"), SAMPLES)
def test_text_and_binary_agree(
    conn: psycopg.Connection[Any], type_sql: str, expression: str, pg_major: int
) -> None:
    if pg_major < _needs_major(type_sql, expression):
        pytest.skip(f"PostgreSQL {pg_major} rejects this value")
    text, binary, oid = fetch(conn, f"SELECT ({expression})::{type_sql}")
    assert text is not None
    assert binary is not None
    registry = TypeRegistry()
    assert registry.is_known(oid), f"{type_sql} (oid {oid}) has no builtin codec"
    codec = registry.codec(oid)
    from_text = codec.from_text(text)
    from_binary = codec.from_binary(binary)
    assert not isinstance(from_binary, RawBinary), f"{type_sql} decoded to RawBinary"
    assert same(from_text, from_binary), f"{type_sql}: {from_text!r} != {from_binary!r}"
    assert codec.to_text(from_binary) == text.decode()
    assert codec.to_text(from_text) == text.decode()


@pytest.mark.parametrize(("type_sql", "expression"), FALLBACK_SAMPLES)
def test_fallback_is_lossless(
    conn: psycopg.Connection[Any], type_sql: str, expression: str
) -> None:
    text, binary, oid = fetch(conn, f"SELECT ({expression})::{type_sql}")
    assert text is not None
    assert binary is not None
    codec = TypeRegistry().codec(oid)
    assert codec.name == type_sql
    assert codec.from_text(text) == text.decode()
    assert codec.to_text(codec.from_text(text)) == text.decode()
    assert codec.binary_refusal is not None
    assert codec.from_binary(binary) == RawBinary(oid, binary)
    with pytest.raises(UnrenderableBinaryError):  # never as hex: that is not its text
        codec.to_text(codec.from_binary(binary))


def test_box_array_uses_semicolons(conn: psycopg.Connection[Any]) -> None:
    text, binary, oid = fetch(conn, "SELECT ARRAY['(1,1),(0,0)'::box, '(3,3),(2,2)']")
    assert text is not None
    assert binary is not None
    codec = TypeRegistry().codec(oid)
    assert codec.name == "_box"
    value = codec.from_text(text)
    assert value == ["(1,1),(0,0)", "(3,3),(2,2)"]
    assert codec.to_text(value) == text.decode()
    assert codec.from_binary(binary) == value


def test_catalog_matches_registry(conn: psycopg.Connection[Any], pg_major: int) -> None:
    """Names, categories and array OIDs of every preloaded type match pg_type."""
    # "char" and pg_node_tree moved from category S (string) to Z (internal) in 15
    old = {18: ("char", "S"), 194: ("pg_node_tree", "S")} if pg_major < 15 else {}
    rows = conn.execute(
        "SELECT oid::int, typname::text, typcategory::text, typarray::int FROM pg_type "
        "WHERE typnamespace = 'pg_catalog'::regnamespace"
    ).fetchall()
    catalog = {oid: (name, category, array) for oid, name, category, array in rows}
    registry = TypeRegistry()
    checked = 0
    for oid, (name, category, array_oid) in catalog.items():
        if not registry.is_known(oid):
            continue
        codec = registry.codec(oid)
        assert old.get(oid, (codec.name, codec.category)) == (name, category), oid
        if array_oid:
            assert registry.is_known(array_oid), f"array of {name} ({array_oid}) missing"
            assert registry.name_of(array_oid) == catalog[array_oid][0]
        checked += 1
    assert checked >= (150 if pg_major >= 14 else 140)  # 13 lacks multiranges and more


@pytest.fixture(scope="module")
def user_types(conn: psycopg.Connection[Any]) -> Iterator[str]:
    schema = "walcast_types_test"
    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE TYPE {schema}.mood AS ENUM ('sad', 'ok', 'happy ☺', 'with \"quote')")
    conn.execute(f"CREATE DOMAIN {schema}.posint AS int4 CHECK (VALUE > 0)")
    conn.execute(f"CREATE DOMAIN {schema}.money2 AS numeric(10,2)")
    conn.execute(f"CREATE DOMAIN {schema}.ints AS int4[]")
    conn.execute(f"CREATE DOMAIN {schema}.stamp AS timestamptz")
    conn.execute(f"CREATE TYPE {schema}.pair AS (a int4, b text)")
    yield schema
    conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _register_like_pgoutput(
    conn: psycopg.Connection[Any], registry: TypeRegistry, type_sql: str
) -> int:
    """Register a type as pgoutput's Type message would and return its OID.

    logicalrep_write_typ sends the type's own OID with the namespace and name of its
    base type (getBaseType: domains resolved), and "" for pg_catalog.
    """
    oid_row = conn.execute("SELECT %s::regtype::oid::int", (type_sql,)).fetchone()
    assert oid_row is not None
    oid = base = oid_row[0]
    while True:
        row = conn.execute(
            "SELECT t.typtype::text, t.typbasetype::int, n.nspname::text, t.typname::text "
            "FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s",
            (base,),
        ).fetchone()
        assert row is not None
        typtype, basetype, namespace, name = row
        if typtype != "d":
            break
        base = basetype
    registry.register_type(oid, "" if namespace == "pg_catalog" else namespace, name)
    return int(oid)


@pytest.mark.parametrize(
    ("type_sql", "expression", "expected"),
    [
        ("mood", "'ok'", "ok"),
        ("mood", "'happy ☺'", "happy ☺"),
        ("mood", "'with \"quote'", 'with "quote'),
        (
            "mood[]",
            '\'{sad,"happy ☺",NULL,"with \\"quote"}\'',
            ["sad", "happy ☺", None, 'with "quote'],
        ),
        ("posint", "5", 5),
        ("money2", "'12.5'", None),
        ("ints", "'{1,2}'", [1, 2]),
        ("stamp", "'2024-01-01 00:00:00+00'", None),
    ],
)
def test_user_types(
    conn: psycopg.Connection[Any], user_types: str, type_sql: str, expression: str, expected: Any
) -> None:
    text, binary, _ = fetch(conn, f"SELECT ({expression})::{user_types}.{type_sql}")
    assert text is not None
    assert binary is not None
    registry = TypeRegistry()
    oid = _register_like_pgoutput(conn, registry, f"{user_types}.{type_sql}")
    assert registry.is_known(oid)
    if registry.needs_facts(oid):  # as the relation cache does in binary mode
        assert type_sql.startswith("mood")  # domains over built-ins need no catalog
        registry.describe(describe_types(conn, [oid]))
    assert registry.binary_refusal(oid) is None
    codec = registry.codec(oid)
    from_text = codec.from_text(text)
    from_binary = codec.from_binary(binary)
    assert same(from_text, from_binary), f"{from_text!r} != {from_binary!r}"
    if expected is not None:
        assert same(from_text, expected)
    assert codec.to_text(from_binary) == text.decode()


def test_composite_needs_the_catalog_in_binary(
    conn: psycopg.Connection[Any], user_types: str
) -> None:
    text, binary, oid = fetch(conn, f"SELECT ROW(1, 'x y')::{user_types}.pair")
    assert text is not None
    assert binary is not None
    registry = TypeRegistry()
    assert not registry.is_known(oid)
    assert oid == _register_like_pgoutput(conn, registry, f"{user_types}.pair")
    codec = registry.codec(oid)
    assert registry.name_of(oid) == "pair"
    assert codec.from_text(text) == '(1,"x y")'
    assert codec.to_text(codec.from_text(text)) == '(1,"x y")'
    # From the Type message alone: kept raw, refused, never rendered.
    assert codec.from_binary(binary) == RawBinary(oid, binary)
    assert codec.binary_refusal is not None
    with pytest.raises(UnrenderableBinaryError):
        codec.to_text(codec.from_binary(binary))
    # Described from the catalog: decoded exactly (more in test_binary_types_pg.py).
    registry.describe(describe_types(conn, [oid]))
    codec = registry.codec(oid)
    assert (codec.name, codec.binary_refusal) == ("pair", None)
    assert codec.to_text(codec.from_binary(binary)) == '(1,"x y")'


# Server-generated random values: thousands more text/binary pairs per type.
_CHARS = "ab \"\\{},;NUL\tü😀'x"
_CHARS_SQL = _CHARS.replace("'", "''")
FUZZ: dict[str, str] = {
    "float8": "(random() - 0.5) * 10 ^ (random() * 600 - 300)",
    "float4": (
        "(CASE WHEN random() < 0.5 THEN -1 ELSE 1 END * (0.1 + random()) "
        "* 10 ^ (random() * 78 - 40))::float4"
    ),
    "float4_tiny": "(random() * 1e-38)::float4",
    "float8_big": "(random() * 2 ^ (random() * 1020))::float8",
    "float8_int": "(random() * 2 ^ 63)::bigint::float8",
    "float4_int": "(random() * 2e9)::int::float4",
    "numeric": (
        "round(((random() - 0.5) * 10 ^ (random() * 40)::int)::numeric, (random() * 25)::int)"
    ),
    "date": "'4713-01-01 BC'::date + (random() * 2147000000)::int",
    "timestamp": (
        "'4713-01-01 BC'::timestamp + (random() * 109000000)::int * '1 day'::interval"
        " + random() * '1 day'::interval"
    ),
    "timestamptz": (
        "'1900-01-01 00:00:00+00'::timestamptz + random() * '300 years'::interval"
        " + random() * '1 day'::interval"
    ),
    "time": "'00:00'::time + random() * '24 hours'::interval",
    "timetz": (
        "format('%s%s%s', ('00:00'::time + random() * '23:59:59.999999'::interval)::text, "
        "CASE WHEN random() < 0.5 THEN '+' ELSE '-' END, "
        "make_interval(secs => floor(random() * 57599)))::timetz"
    ),
    "interval": (
        "make_interval(0, (random() * 4000 - 2000)::int, 0, (random() * 2000 - 1000)::int, "
        "0, 0, (random() * 1e7 - 5e6)::numeric(20,6)::float8)"
    ),
    "inet": (
        "(SELECT string_agg(CASE WHEN random() < 0.6 THEN '0' "
        "ELSE to_hex((random() * 65535)::int) END, ':') FROM generate_series(1, 8) "
        "WHERE g > 0) || '/' || (random() * 128)::int"
    ),
    "inet4": "'::ffff:' || (random() * 255)::int || '.1.2.' || (random() * 255)::int",
    "text[]": (
        "(SELECT array_agg(CASE WHEN random() < 0.1 THEN NULL ELSE (SELECT string_agg("
        f"substr('{_CHARS_SQL}', (random() * {len(_CHARS)} + 0.5)::int, 1)"
        ", '') FROM generate_series(0, (random() * 5)::int) WHERE j > 0) END) "
        "FROM generate_series(1, 4) AS j WHERE g > 0)"
    ),
    "uuid": "md5(random()::text)::uuid",
    "bytea": "decode(md5(random()::text), 'hex')",
    "jsonb": "jsonb_build_object('k', random(), 'a', ARRAY[random()::numeric(10,4)])",
}
_FUZZ_CAST = {
    "float4_int": "float4",
    "float4_tiny": "float4",
    "float8_big": "float8",
    "float8_int": "float8",
    "inet4": "inet",
}


@pytest.mark.parametrize("kind", sorted(FUZZ))
def test_random_values(conn: psycopg.Connection[Any], kind: str) -> None:
    rows = 2000
    type_sql = _FUZZ_CAST.get(kind, kind)
    conn.execute("SELECT setseed(0.3125)")
    conn.execute("DROP TABLE IF EXISTS walcast_fuzz")
    conn.execute(
        f"CREATE TEMP TABLE walcast_fuzz AS SELECT g, ({FUZZ[kind]})::{type_sql} AS v "
        f"FROM generate_series(1, {rows}) AS g"
    )
    query = b"SELECT v FROM walcast_fuzz ORDER BY g"
    texts = conn.pgconn.exec_params(query, None, result_format=0)
    binaries = conn.pgconn.exec_params(query, None, result_format=1)
    assert texts.ntuples == binaries.ntuples == rows
    codec = TypeRegistry().codec(texts.ftype(0))
    for row in range(rows):
        text, binary = texts.get_value(row, 0), binaries.get_value(row, 0)
        if text is None:
            assert binary is None
            continue
        assert binary is not None
        from_text, from_binary = codec.from_text(text), codec.from_binary(binary)
        assert same(from_text, from_binary), f"{text!r}: {from_text!r} != {from_binary!r}"
        assert codec.to_text(from_binary) == text.decode(), (text, binary)

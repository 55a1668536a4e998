"""The real proof for the types binary mode decodes beyond the scalars: the server's text
output and send bytes of the same value, compared byte for byte.

For each sample the server is asked for the value in text and in binary result format,
in a session with the walsender's settings; then ``to_text(from_binary(binary)) == text``
and ``from_text(text) == from_binary(binary)``. Built-in types (geometric, ranges and
multiranges, tsvector, tsquery, snapshots ...) use the registry as it is; the others
(composites, enums, user ranges, hstore, ltree, cube, citext ...) are first described
from the catalog (``describe_types``), as the relation cache does in binary mode. They
live in a scratch database created and dropped here (contrib extensions need one).

The refusals are proven the same way: types binary mode must refuse (money, a composite
holding a regclass, an array of a type without a send function ...) come out refused,
and a type merely NAMED like an extension type is not taken for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from capture.replication.binary_check import describe_types
from capture.types import TypeRegistry
from tests.capture.types._helpers import same
from tests.capture.types._scratch import scratch_database

pytestmark = pytest.mark.integration

SESSION = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, MDY'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET client_encoding = 'UTF8'",
)

# (type, SQL expression); the value is SELECTed as (expression)::type.
BUILTIN: list[tuple[str, str]] = [
    *[
        ("point", v)
        for v in (
            "'(1.5,2)'", "'(-0,0)'", "'(0,-0)'", "point('NaN', 1)",
            "point('Infinity', '-Infinity')", "'(1e300,5e-324)'",
            "'(0.1,0.30000000000000004)'", "'(1e15,1e16)'",
            "'(123456789012345680000,-1e-300)'", "point(1.0/3, 2.0/3)",
        )
    ],
    *[("line", v) for v in ("'{1,2,3}'", "'{1,-1,0}'", "'{0.1,0,-0}'", "'[(0,0),(1,1)]'",
                            "'{1,0,-Infinity}'", "'{1e300,1e-300,NaN}'")],
    *[("lseg", v) for v in ("'[(1,2),(3,4)]'", "'[(-0,NaN),(Infinity,0.1)]'")],
    *[("box", v) for v in ("'(1,2),(3,4)'", "'(3,4),(1,2)'", "'(0,0),(0,0)'",
                           "'(-1e300,0.1),(5e-324,-0)'")],
    *[("path", v) for v in ("'[(1,2),(3,4),(5,6)]'", "'((1,2),(3,4))'", "'((0,0))'", "'[(0,0)]'",
                            "'((0.1,-0),(NaN,Infinity),(1e20,2))'")],
    *[("polygon", v) for v in ("'((0,0),(1,1),(1,0))'", "'((0,0))'", "'((1e300,-0.5),(3,4))'")],
    *[("circle", v) for v in ("'<(1,2),3>'", "'<(-0,0),0>'", "'<(0.1,1e20),Infinity>'",
                              "'<(NaN,1),2>'")],
    ("point[]", "ARRAY['(1,2)'::point, NULL, '(NaN,-0)']"),
    ("box[]", "ARRAY['(1,1),(0,0)'::box, '(3,3),(2,2)']"),
    ("circle[]", "ARRAY['<(1,2),3>'::circle]"),
    ("path[]", "ARRAY['[(1,2),(3,4)]'::path, '((0,0),(1,1))']"),
    ("polygon[]", "ARRAY['((0,0),(1,1))'::polygon]"),
    ("lseg[]", "ARRAY['[(0,0),(1,1)]'::lseg]"),
    ("line[]", "ARRAY['{1,2,3}'::line]"),
    # ranges and multiranges of every built-in subtype
    *[("int4range", v) for v in ("'[1,10)'", "'empty'", "'(,5]'", "'[3,)'", "'(,)'", "'[1,1]'",
                                 "'[-2147483648,2147483647)'")],
    *[("int8range", v) for v in ("'[-9223372036854775808,9223372036854775807)'", "'(0,1)'",
                                 "'(,0]'")],
    *[("numrange", v) for v in ("'[1.5,2.500)'", "'(,1e20]'", "'[0.000,0]'", "'[-1,NaN]'",
                                "'(-Infinity,Infinity)'", "'empty'", "'[1.1,1.1]'")],
    *[("tsrange", v) for v in ("'[2024-01-01,2024-02-01 12:00:00.5)'", "'[-infinity,infinity]'",
                               "'(0044-03-15 12:00:00 BC,)'", "'[2024-01-01,2024-01-01]'")],
    *[("tstzrange", v) for v in ("'[2024-01-01,2024-02-01)'", "'(,infinity)'",
                                 "'[1999-12-31 23:59:59.999999+05,2000-01-01 00:00:00+00]'")],
    *[("daterange", v) for v in ("'[2024-01-01,2024-02-01)'", "'[2024-01-01,infinity)'",
                                 "'(4713-01-01 BC,)'", "'[2024-02-29,2024-02-29]'", "'empty'")],
    *[("int4multirange", v) for v in ("'{[1,3),[5,7)}'", "'{}'", "'{(,)}'", "'{[1,2),(2,3]}'")],
    ("int8multirange", "'{[1,2),[10,)}'"),
    ("nummultirange", "'{[1.5,2.5],(3,)}'"),
    ("tsmultirange", "'{[2024-01-01,2024-02-01), (2025-01-01,)}'"),
    ("tstzmultirange", "'{[2024-01-01,2024-02-01)}'"),
    ("datemultirange", "'{[2024-01-01,2024-02-01),[2024-03-01,infinity)}'"),
    ("int4range[]", "ARRAY['[1,2)'::int4range, 'empty', NULL, '(,)']"),
    ("tstzrange[]", "ARRAY['[2024-01-01,2024-02-01)'::tstzrange]"),
    ("daterange[]", "'{\"[2024-01-01,2024-02-01)\",empty}'"),
    ("int4multirange[]", "ARRAY['{[1,3),[5,7)}'::int4multirange, '{}']"),
    # text search
    *[
        ("tsvector", v)
        for v in (
            "'a fat cat sat on a mat and ate a fat rat'", "''", "$$'a':1A,2B,3C,4 b:16383$$",
            r"$$'it''s' 'back\\slash' 'a b' ':' 'x:y'$$", "'ünïcødé 😀 ✓'",
            "to_tsvector('english', 'The quick brown foxes jumped over the lazy dogs')",
            "setweight(to_tsvector('simple', 'one two three two'), 'B')",
            "array_to_tsvector(ARRAY['a''b', E'c\\\\d', 'e f', ' ', 'NULL'])",
            "'a:1,1,2,3' ::tsvector", "'x:3D,2C,1A'",
        )
    ],
    *[
        ("tsquery", v)
        for v in (
            "'fat & (rat | !cat)'", "'fat:ab & rat:*'", "'a <-> (b <-> c)'", "'(a <-> b) <-> c'",
            "'a <3> b & !(c | d)'", "'!(a & b)'", "'!!a'", r"$$'it''s' & 'back\\slash':*D$$",
            "'(a | b) & c'", "'a | b & c'", "'(a & b) <-> (c | d)'", "''", "'a:*ABCD'",
            "'a <-> !b'", "'!a <-> b'", "'(a | b) <-> c'", "'a <0> b'", "'a <16384> b'",
            "'!(a <-> b) & c'", "'a & b & c & d | e'", "'a & (b & (c & d))'",
            "'((a | b) | (c | d)) & !(e <2> f)'", "'ünï & 😀'", "$$'a b' & 'c:d'$$",
            "to_tsquery('english', 'fat & rats:* | !cats')",
            "phraseto_tsquery('english', 'the fat rats ate the cat')",
            "websearch_to_tsquery('english', '\"sad cat\" or \"fat rat\" -mouse')",
            "tsquery_phrase('a'::tsquery, 'b | c'::tsquery, 3)",
        )
    ],
    *[
        ("tsquery", v)
        for v in (
            "'a & !b'", "'!a | b'", "'a | !(b <-> c)'", "'(a <2> b) <3> (c <-> d)'",
            "'a <-> b <-> c <-> d'", "'a <-> (b | c) <-> d'", "'!(!a)'", "'x:*B & y:C'",
        )
    ],
    *[
        ("tsvector", v)
        for v in ("'a:1 b:2 c:3'", "'ab:1,2,3,4,5,6,7,8,9,10'", "'z:16383A'", "$$'\\\\'$$",
                  "$$''''$$")
    ],
    *[("int4range", v) for v in ("'(1,2)'", "'(0,0]'", "'[10,20]'")],
    *[("numrange", v) for v in ("'[1e-20,1e20)'", "'(-0.5,0.5)'")],
    ("tsvector[]", "ARRAY['a b'::tsvector, '']"),
    ("tsquery[]", "ARRAY['a & b'::tsquery]"),
    # snapshots, vectors, node trees
    *[("pg_snapshot", v) for v in ("'10:20:10,14,15'", "'10:10:'", "pg_current_snapshot()",
                                   "'1:18446744073709551615:'")],
    *[("txid_snapshot", v) for v in ("'10:20:10,14,15'", "txid_current_snapshot()")],
    ("pg_snapshot[]", "ARRAY['10:20:10,14'::pg_snapshot]"),
    *[("int2vector", v) for v in ("'1 2 3'", "''", "'-32768 32767'")],
    *[("oidvector", v) for v in ("'1 4294967295'", "''")],
    ("pg_node_tree", "(SELECT ev_action FROM pg_rewrite WHERE ev_class = 'pg_roles'::regclass)"),
]  # fmt: skip


@pytest.fixture(scope="module")
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as connection:
        for statement in SESSION:
            connection.execute(statement)
        yield connection


def fetch(conn: psycopg.Connection[Any], sql: str) -> tuple[bytes, bytes, int]:
    """(text output, binary send bytes, type OID) of the single value ``sql`` returns."""
    query = sql.encode()
    text_result = conn.pgconn.exec_params(query, None, result_format=0)
    binary_result = conn.pgconn.exec_params(query, None, result_format=1)
    for result in (text_result, binary_result):
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            raise AssertionError(f"{sql}: {result.error_message.decode()}")
    text, binary = text_result.get_value(0, 0), binary_result.get_value(0, 0)
    assert text is not None, sql
    assert binary is not None, sql
    return text, binary, text_result.ftype(0)


def check(registry: TypeRegistry, oid: int, text: bytes, binary: bytes) -> None:
    codec = registry.codec(oid)
    assert codec.binary_refusal is None, codec.binary_refusal
    from_text, from_binary = codec.from_text(text), codec.from_binary(binary)
    assert same(from_text, from_binary), f"{from_text!r} != {from_binary!r}"
    assert codec.to_text(from_binary) == text.decode()
    assert codec.to_text(from_text) == text.decode()


def test_builtin_sample_count() -> None:
    assert len(BUILTIN) >= 150


@pytest.mark.parametrize(("type_sql", "expression"), BUILTIN)
def test_builtin_types(conn: psycopg.Connection[Any], type_sql: str, expression: str) -> None:
    if "multirange" in type_sql and conn.info.server_version < 140000:
        pytest.skip("multiranges need PostgreSQL 14")
    text, binary, oid = fetch(conn, f"SELECT ({expression})::{type_sql}")
    registry = TypeRegistry()
    assert registry.is_known(oid)
    check(registry, oid, text, binary)


# --------------------------------------------------------------------------- scratch db

SCHEMA_SQL = """
CREATE EXTENSION hstore;
CREATE EXTENSION ltree;
CREATE EXTENSION cube;
CREATE EXTENSION citext;
CREATE EXTENSION isn;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy ☺', 'with "quote', 'a,b (c)');
CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
CREATE DOMAIN tags AS hstore;
CREATE TYPE pair AS (a int4, b text);
CREATE TYPE textrange AS RANGE (subtype = text, collation = "C");
CREATE TYPE moodrange AS RANGE (subtype = mood);
CREATE TYPE everything AS (
    p pair, ints int4[], r int4range, d posint, e mood, h hstore, pt point, ts timestamptz,
    t text, pairs pair[], l ltree, c cube, ci citext, tr textrange, n numeric, b bytea
);
ALTER TYPE everything DROP ATTRIBUTE n;  -- a dropped attribute is not sent
CREATE TYPE nested AS (inner_pair pair, outer_text text);
CREATE TYPE with_money AS (a int4, m money);
CREATE TYPE with_regclass AS (r regclass);
CREATE TYPE moneyrange AS RANGE (subtype = money);
CREATE DOMAIN cash AS money;
CREATE SCHEMA fake;
CREATE TYPE fake.hstore AS (k text, v text);
CREATE TYPE myint;
CREATE FUNCTION myint_in(cstring) RETURNS myint LANGUAGE internal STRICT AS 'int4in';
CREATE FUNCTION myint_out(myint) RETURNS cstring LANGUAGE internal STRICT AS 'int4out';
CREATE FUNCTION myint_recv(internal) RETURNS myint LANGUAGE internal STRICT AS 'int4recv';
CREATE FUNCTION myint_send(myint) RETURNS bytea LANGUAGE internal STRICT AS 'int4send';
CREATE TYPE myint (INPUT = myint_in, OUTPUT = myint_out, RECEIVE = myint_recv,
                   SEND = myint_send, LIKE = int4);
"""

# (type, SQL expression) in the scratch database; described from the catalog first.
DESCRIBED: list[tuple[str, str]] = [
    *[("mood", v) for v in ("'ok'", "'happy ☺'", "'with \"quote'", "'a,b (c)'")],
    ("mood[]", "'{sad,\"happy ☺\",NULL,\"with \\\"quote\",\"a,b (c)\"}'"),
    ("posint[]", "'{1,2}'"),
    *[("pair", v) for v in ("ROW(1, 'x')", "ROW(NULL, NULL)", "ROW(-1, '')", "ROW(2, 'a b')",
                            "ROW(3, 'q\"uo\\te')", "ROW(4, '(x,y)')", "ROW(5, 'NULL')",
                            "ROW(6, E'tab\\there')", "ROW(7, '{x}[y]')", "ROW(8, 'ünï 😀')",
                            "ROW(9, U&'a\\00A0b\\2003c')")],
    ("pair[]", "ARRAY[ROW(1, 'x')::pair, NULL, ROW(NULL, 'a b'), ROW(2, '')]"),
    ("pair[]", "'{}'"),
    ("nested", "ROW(ROW(1, 'a \"b\"'), 'c\\d')"),
    ("nested", "ROW(NULL, NULL)"),
    ("nested[]", "ARRAY[ROW(ROW(1, 'x y'), ',')::nested]"),
    (
        "everything",
        (
            "ROW(ROW(1, 'a'), '{1,NULL,3}', '[1,5)', 7, 'happy ☺', 'k=>v, \"n\"=>NULL', "
            "'(1.5,-0)', '2024-01-01 12:00:00+00', 'x\"y', ARRAY[ROW(1,'p q')::pair], 'a.b.c', "
            "'(1,2),(3,4)', 'MiXeD', '[a,\"b c\")', '\\x00ff')"
        ),
    ),
    ("everything", "ROW(" + ", ".join(["NULL"] * 15) + ")"),
    *[("textrange", v) for v in ("'[a,b)'", "'[\"\",z]'", "'(\"a b\",\"c,d\")'",
                                 "'[\"back\\\\slash\",\"q\\\"\"]'", "'empty'", "'(,\"(x)\"]'",
                                 "'[ü,😀)'", "'[\"{x}\",)'")],
    ("moodrange", "'[sad,\"happy ☺\")'"),
    ("textmultirange", "'{[a,b),[\"c d\",e]}'"),
    *[("hstore", v) for v in ("'a=>1, b=>2'", "''", "'\"a b\"=>\"c d\", \"n\"=>NULL'",
                              "'\"q\\\"k\"=>\"back\\\\slash\"'", "'\"\"=>\"\"'", "'ü=>😀'",
                              "'NULL=>\"NULL\"'", "hstore(ARRAY['x','y'], ARRAY[NULL,'z'])")],
    ("hstore[]", "ARRAY['a=>1'::hstore, NULL, '']"),
    ("tags", "'a=>b'"),
    *[("ltree", v) for v in ("'Top.Science.Astronomy'", "''", "'a'")],
    ("ltree[]", "ARRAY['a.b'::ltree, 'c']"),
    *[("lquery", v) for v in ("'*.Astronomy.*'", "'Top.*{1,2}.Science|Art'", "'!a.b@*'")],
    *[("ltxtquery", v) for v in ("'Europe & Russia*@ & !Transportation'", "'a | b'")],
    *[("citext", v) for v in ("'MiXeD Case'", "''", "'ünï'")],
    ("citext[]", "ARRAY['A'::citext, 'b c']"),
]  # fmt: skip

CUBES = ("'(1,2),(3,4)'", "'(1,2)'", "'(1.5)'", "cube(ARRAY[1,2], ARRAY[1,2])",
         "'(0.1,-0,1e300),(5e-324,Infinity,NaN)'", "cube(ARRAY[1], ARRAY[2])",
         "'(1,2,3,4,5,6,7,8,9,10)'")  # fmt: skip

# Types binary mode must refuse: (type, SQL expression, words the refusal must contain).
REFUSED: list[tuple[str, str, str]] = [
    ("with_money", "ROW(1, 12.34)", "lc_monetary"),
    ("with_regclass", "ROW('pg_class')", "search_path"),
    ("moneyrange", "'[1,2)'", "lc_monetary"),
    ("cash", "12.34", "lc_monetary"),
    ("cash[]", "ARRAY[1::cash]", "lc_monetary"),
    ("myint", "'5'", "send function int4send"),
]


@pytest.fixture(scope="module")
def scratch(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with (
        scratch_database(pg_dsn) as dsn,
        psycopg.connect(dsn, autocommit=True) as connection,
    ):
        connection.execute(SCHEMA_SQL)
        for statement in SESSION:
            connection.execute(statement)
        yield connection


def described(conn: psycopg.Connection[Any], oid: int) -> TypeRegistry:
    registry = TypeRegistry()
    registry.describe(describe_types(conn, [oid]))
    return registry


@pytest.mark.parametrize(("type_sql", "expression"), DESCRIBED)
def test_described_types(scratch: psycopg.Connection[Any], type_sql: str, expression: str) -> None:
    text, binary, oid = fetch(scratch, f"SELECT ({expression})::{type_sql}")
    registry = TypeRegistry()
    assert registry.binary_refusal(oid) is not None  # unknown before the catalog is asked
    check(described(scratch, oid), oid, text, binary)


@pytest.mark.parametrize("expression", CUBES)
def test_cube(scratch: psycopg.Connection[Any], expression: str) -> None:
    if not scratch.execute(
        "SELECT typsend <> 0 FROM pg_type WHERE oid = 'cube'::regtype"
    ).fetchone()[0]:  # type: ignore[index]
        pytest.skip("cube has a send function from cube 1.5 (PostgreSQL 15) on")
    text, binary, oid = fetch(scratch, f"SELECT ({expression})::cube")
    check(described(scratch, oid), oid, text, binary)


@pytest.mark.parametrize(("type_sql", "expression", "words"), REFUSED)
def test_refused_types(
    scratch: psycopg.Connection[Any], type_sql: str, expression: str, words: str
) -> None:
    oid = fetch(scratch, f"SELECT ({expression})::{type_sql}")[2]
    registry = described(scratch, oid)
    refusal = registry.binary_refusal(oid)
    assert refusal is not None
    assert words in refusal


def test_a_type_without_send_function(scratch: psycopg.Connection[Any]) -> None:
    """isbn has no send function: pgoutput sends it as text even in binary mode (accepted);
    an array of it cannot be sent in binary at all (refused), as the server shows."""
    isbn, isbns = (
        scratch.execute(f"SELECT '{name}'::regtype::oid::int8").fetchone()[0]  # type: ignore[index]
        for name in ("isbn", "isbn[]")
    )
    text = fetch(scratch, "SELECT '978-0-393-04002-9'::isbn::text")[0]
    registry = described(scratch, isbns)
    codec = registry.codec(isbn)
    assert codec.binary_refusal is None
    assert codec.to_text(codec.from_text(text)) == text.decode() == "0-393-04002-X"
    with pytest.raises(ValueError, match="no send function"):
        codec.from_binary(b"x")
    assert "no send function" in (registry.binary_refusal(isbns) or "")
    with pytest.raises(AssertionError, match="no binary output function"):
        fetch(scratch, "SELECT ARRAY['978-0-393-04002-9'::isbn]")


def test_a_type_named_hstore_is_not_taken_for_hstore(scratch: psycopg.Connection[Any]) -> None:
    text, binary, oid = fetch(scratch, "SELECT ROW('a', 'b')::fake.hstore")
    registry = described(scratch, oid)
    codec = registry.codec(oid)
    assert codec.name == "hstore"  # as its Type message would name it ...
    check(registry, oid, text, binary)  # ... but it is decoded as the composite it is
    assert codec.to_text(codec.from_binary(binary)) == "(a,b)"


def test_an_extension_type_is_trusted_only_with_its_functions(
    scratch: psycopg.Connection[Any],
) -> None:
    oid = scratch.execute("SELECT 'hstore'::regtype::oid::int8").fetchone()[0]  # type: ignore[index]
    facts = describe_types(scratch, [oid])
    assert (facts[oid].extension, facts[oid].send) == ("hstore", "hstore:hstore_send")
    for changed in ({"extension": ""}, {"extension": "other"}, {"send": "evil:hstore_send"}):
        forged = {**facts, oid: type(facts[oid])(**{**_fields(facts[oid]), **changed})}
        registry = TypeRegistry()
        registry.describe(forged)
        assert registry.binary_refusal(oid) is not None, changed


def _fields(facts: Any) -> dict[str, Any]:
    return {name: getattr(facts, name) for name in facts.__slots__}


# Server-generated random values: many more text/binary pairs per type.
_CHARS = "ab \"\\(){},;[]NUL\tü😀'x="
_CHARS_SQL = _CHARS.replace("'", "''")
_RANDOM_TEXT = (
    f"(SELECT string_agg(substr('{_CHARS_SQL}', (random() * {len(_CHARS)} + 0.5)::int, 1), '') "
    "FROM generate_series(0, (random() * 6)::int) AS j WHERE g > 0)"
)
FUZZ: dict[str, tuple[str, str]] = {
    "pair": (
        "pair",
        f"ROW((random() * 100)::int, CASE WHEN random() < 0.1 THEN NULL ELSE {_RANDOM_TEXT} END)",
    ),
    "textrange": (
        "textrange",
        f"textrange(least({_RANDOM_TEXT}, 'm'), greatest({_RANDOM_TEXT}, 'm'), '[)')",
    ),
    "hstore": (
        "hstore",
        (
            f"hstore(ARRAY[{_RANDOM_TEXT} || 'k1', {_RANDOM_TEXT} || 'k2'], ARRAY[{_RANDOM_TEXT}, "
            f"CASE WHEN random() < 0.3 THEN NULL ELSE {_RANDOM_TEXT} END])"
        ),
    ),
    "tsvector": (
        "tsvector",
        f"setweight(array_to_tsvector(ARRAY[{_RANDOM_TEXT} || 'w', {_RANDOM_TEXT} || 'v']), 'C')",
    ),
    "point": ("point", "point((random() - 0.5) * 10 ^ (random() * 600 - 300), random())"),
    "circle": ("circle", "circle(point(random(), -random()), random() * 1e10)"),
    "tstzrange": (
        "tstzrange",
        "tstzrange('2000-01-01'::timestamptz + random() * '300 years'::interval, NULL, '(]')",
    ),
    "numrange": (
        "numrange",
        "numrange(round((random() * 1e6)::numeric, (random() * 8)::int), 1e6 + 1)",
    ),
}


@pytest.mark.parametrize("kind", sorted(FUZZ))
def test_random_values(scratch: psycopg.Connection[Any], kind: str) -> None:
    rows = 1000
    type_sql, expression = FUZZ[kind]
    scratch.execute("SELECT setseed(0.4242)")
    scratch.execute("DROP TABLE IF EXISTS walcast_fuzz")
    scratch.execute(
        f"CREATE TEMP TABLE walcast_fuzz AS SELECT g, ({expression})::{type_sql} AS v "
        f"FROM generate_series(1, {rows}) AS g"
    )
    query = b"SELECT v FROM walcast_fuzz ORDER BY g"
    texts = scratch.pgconn.exec_params(query, None, result_format=0)
    binaries = scratch.pgconn.exec_params(query, None, result_format=1)
    assert texts.ntuples == binaries.ntuples == rows
    oid = texts.ftype(0)
    registry = described(scratch, oid)
    distinct = set()
    for row in range(rows):
        text, binary = texts.get_value(row, 0), binaries.get_value(row, 0)
        assert text is not None
        assert binary is not None
        distinct.add(text)
        check(registry, oid, text, binary)
    assert len(distinct) > rows // 2

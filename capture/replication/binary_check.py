"""Binary mode's start-up check, and the catalog facts it shares with the running stream.

With ``--binary`` walcast asks pgoutput for each value's binary send format and renders it
back to the type's text itself; a type whose text cannot be rebuilt exactly from those
bytes (money, regclass, an unknown extension type ...) must never be streamed that way.
:func:`check_binary_columns` lists every published column before streaming starts and
fails with one line naming each such column; :func:`binary_type_resolver` gives the
:class:`~capture.relcache.RelationCache` the same facts while streaming, for columns that
DDL brings later.

One decision, one table: both build a :class:`~capture.types.TypeRegistry` decision from
:func:`describe_types` (what ``pg_type`` says about the types) through
:meth:`~capture.types.TypeRegistry.describe`; nothing here lists decodable types.

pgoutput sends a column in binary only when its type has a send function
(``logicalrep_write_tuple``: ``binary && OidIsValid(typclass->typsend)``); a type without
one (isn, seg ...) arrives as text and is accepted, but an array, range or composite of it
is refused (the server itself cannot send those in binary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from capture import dsn as dsn_util
from capture.errors import BinaryTypeError, ConnectionLostError, SetupError
from capture.replication.side import SideConnection
from capture.types import TypeRegistry
from capture.types.facts import TypeFacts, function_identity

_REFERENCES = """
        SELECT t.typelem WHERE t.typelem <> 0
        UNION ALL SELECT t.typbasetype WHERE t.typtype = 'd'
        UNION ALL SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid
        {multirange}
        UNION ALL SELECT a.atttypid FROM pg_attribute a
            WHERE t.typtype = 'c' AND a.attrelid = t.typrelid AND a.attnum > 0
              AND NOT a.attisdropped
"""
_MULTIRANGE_REFERENCE = "UNION ALL SELECT r.rngtypid FROM pg_range r WHERE r.rngmultitypid = t.oid"
_MULTIRANGE_OF = "(SELECT r.rngtypid FROM pg_range r WHERE r.rngmultitypid = t.oid)"
_DESCRIBE = """
WITH RECURSIVE closure(oid) AS (
    SELECT unnest(%s::int8[])::oid
  UNION
    SELECT ref.oid FROM closure c JOIN pg_type t ON t.oid = c.oid
    CROSS JOIN LATERAL ({references}) AS ref(oid)
)
SELECT t.oid::int8, n.nspname::text, t.typname::text, t.typtype::text, t.typcategory::text,
       ol.lanname::text, o.probin, o.prosrc,
       sl.lanname::text, s.probin, s.prosrc,
       t.typelem::int8, coalesce(e.typdelim::text, ','), t.typbasetype::int8,
       coalesce((SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid),
                {multirange_of}, 0)::int8,
       CASE WHEN t.typtype = 'c' THEN ARRAY(
           SELECT a.atttypid::int8 FROM pg_attribute a
           WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
           ORDER BY a.attnum) END,
       (SELECT x.extname::text FROM pg_depend d JOIN pg_extension x ON x.oid = d.refobjid
        WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid
          AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' LIMIT 1)
FROM closure c
JOIN pg_type t ON t.oid = c.oid
JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN pg_proc o ON o.oid = t.typoutput
JOIN pg_language ol ON ol.oid = o.prolang
LEFT JOIN pg_proc s ON s.oid = t.typsend
LEFT JOIN pg_language sl ON sl.oid = s.prolang
LEFT JOIN pg_type e ON e.oid = t.typelem
"""


def describe_types(conn: psycopg.Connection[Any], oids: Sequence[int]) -> dict[int, TypeFacts]:
    """Catalog facts of the types ``oids`` and of every type they are built from.

    The closure follows array elements, domain base types, range subtypes, the range of a
    multirange and composite attributes, recursively; built-in types are included (the
    registry ignores their facts). OIDs the catalog does not know are simply absent.
    """
    multirange = conn.info.server_version >= 140000  # pg_range.rngmultitypid
    query = _DESCRIBE.format(
        references=_REFERENCES.format(multirange=_MULTIRANGE_REFERENCE if multirange else ""),
        multirange_of=_MULTIRANGE_OF if multirange else "NULL",
    )
    rows = conn.execute(query, ([int(o) for o in oids],)).fetchall()
    facts: dict[int, TypeFacts] = {}
    for row in rows:
        (
            oid,
            namespace,
            name,
            kind,
            category,
            out_lang,
            out_lib,
            out_src,
            send_lang,
            send_lib,
            send_src,
            element,
            delimiter,
            base,
            subtype,
            attributes,
            extension,
        ) = row
        facts[int(oid)] = TypeFacts(
            oid=int(oid),
            namespace=str(namespace),
            name=str(name),
            kind=str(kind),
            category=str(category),
            output=function_identity(str(out_lang), out_lib, str(out_src)),
            send=function_identity(str(send_lang), send_lib, str(send_src)) if send_src else "",
            element=int(element),
            delimiter=str(delimiter),
            base=int(base),
            subtype=int(subtype),
            attributes=tuple(int(a) for a in attributes or ()),
            extension=str(extension or ""),
        )
    return facts


@dataclass(frozen=True, slots=True)
class UndecodableColumn:
    """A published column whose type binary mode cannot decode, and why."""

    schema: str
    table: str
    column: str
    type_name: str
    """``format_type`` of the column's type (``money``, ``integer[]``)."""
    reason: str

    @property
    def relation(self) -> str:
        """``schema.table``."""
        return f"{self.schema}.{self.table}"


_COLUMNS = """
SELECT DISTINCT pt.schemaname::text, pt.tablename::text, a.attnum, a.attname::text,
       a.atttypid::int8, format_type(a.atttypid, a.atttypmod)
FROM pg_publication_tables pt
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE pt.pubname = ANY(%s) AND a.attgenerated = '' {column_list}
ORDER BY 1, 2, 3
"""


def undecodable_columns(
    conn: psycopg.Connection[Any], publications: Sequence[str]
) -> list[UndecodableColumn]:
    """Every column the publications send whose type binary mode cannot decode.

    A column list (PostgreSQL 15+) limits the columns; generated columns are skipped, as
    pgoutput skips them. The decision is :meth:`~capture.types.TypeRegistry.describe`'s,
    on facts from :func:`describe_types`, exactly as the running stream makes it.
    """
    column_list = (
        "AND (pt.attnames IS NULL OR a.attname = ANY(pt.attnames))"
        if conn.info.server_version >= 150000
        else ""
    )
    rows = conn.execute(_COLUMNS.format(column_list=column_list), (list(publications),)).fetchall()
    registry = TypeRegistry()
    registry.describe(describe_types(conn, sorted({int(row[4]) for row in rows})))
    found: list[UndecodableColumn] = []
    for schema, table, _attnum, column, type_oid, type_name in rows:
        reason = registry.binary_refusal(int(type_oid))
        if reason is not None:
            found.append(UndecodableColumn(schema, table, column, str(type_name), reason))
    return found


def check_binary_columns(conn: psycopg.Connection[Any], publications: Sequence[str]) -> None:
    """Raise :class:`~capture.errors.BinaryTypeError` (a ConfigError) if ``--binary`` cannot work.

    Lists the columns the publications ``publications`` send whose types cannot be
    decoded from their binary send format, and names them all in ONE line: table, column,
    type and why, with what to do. A failing catalog query is a SetupError.
    """
    try:
        found = undecodable_columns(conn, publications)
    except psycopg.Error as exc:
        text = str(exc).strip().splitlines()
        raise SetupError(
            "--binary: cannot read the types of the published columns: "
            + (text[0] if text else type(exc).__name__),
            hint="check that walcast's role may read the catalog",
        ) from None
    if not found:
        return
    first = found[0]
    listed = "; ".join(
        f"{c.relation} column {c.column} has type {c.type_name} ({c.reason})" for c in found
    )
    count = "1 published column" if len(found) == 1 else f"{len(found)} published columns"
    relations = ", ".join(dict.fromkeys(c.relation for c in found))
    raise BinaryTypeError(
        f"--binary: {count} cannot be decoded from pgoutput's binary format: {listed}",
        relation=first.relation,
        column=first.column,
        type_name=first.type_name,
        hint=f"run without --binary, leave {relations} out of publication "
        f"{', '.join(publications)}, or change the column's type",
    )


def binary_type_resolver(
    side: SideConnection, dsn: str
) -> Callable[[Sequence[int]], dict[int, TypeFacts]]:
    """:data:`capture.relcache.TypeResolver` over ``side`` (one query per new column type).

    A failed query raises ConnectionLostError (the stream restarts and asks again), so a
    type is never decoded, or refused, from a guess because the catalog was unreachable.
    """

    def resolve(oids: Sequence[int]) -> dict[int, TypeFacts]:
        found = side.run(lambda conn: (describe_types(conn, oids),))
        if found is None:
            raise ConnectionLostError(
                f"cannot look up type OIDs {', '.join(map(str, oids))} in the catalog "
                f"({dsn_util.describe(dsn)})",
                hint="walcast retries; check that the server accepts ordinary connections",
            )
        return found[0]

    return resolve

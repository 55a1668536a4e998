"""Table layouts: the record walcast publishes for every table, whatever the output format.

Several formats carry no column names or types (IBM delimited) or only coarse ones
(canal's strings, DataWorks' six types, Qlik's JSON numbers), so walcast publishes a
**layout record** per table and layout version (on each new Relation message) to a
compacted schema topic keyed by ``<source>/<schema>.<table>/<version>`` (one key per
version, so compaction keeps every version a message may name); the Spark jobs read it
(``pipeline/layouts.py``; JSON Schema ``schemas/ibm-delimited.layout.json``)::

    {"format": "ibm", "schema": "shop", "table": "orders", "relation_id": 16385,
     "version": "0efd47f9fd2cd13a", "replica_identity": "default",
     "primary_key": ["id"], "field_count": 18,
     "columns": [{"position": 1, "name": "id", "type": "int8", "declared_type": "int8",
                  "type_oid": 20, "type_modifier": -1, "key": true,
                  "primary_key": true, "rendering": "bare"}, ...]}

Decisions:

* One record shape for every format. It was first written for IBM delimited, so
  ``format`` is ``"ibm"`` (it names the record's schema, ``ibm-delimited.layout.json``,
  not the output format), ``field_count`` is the number of fields of an IBM record of the
  table (12 header fields + before and after values) and ``rendering`` says how IBM
  delimited writes the column (bare, number, bool, hex, quoted); the other formats'
  consumers ignore these. Keeping the shape keeps every reader of the topic working.
* ``declared_type`` is the type with its modifier as PostgreSQL's ``format_type`` appends
  it (``numeric(12,2)``, ``varchar(20)``, ``interval day to second(3)``), under the type's
  internal name (``bpchar(3)``, ``int4``); see :mod:`capture.types.typmod`.
* ``version`` is a fingerprint of the layout (names, types, modifiers, identity, key;
  :attr:`capture.events.Table.layout_version`, computed once per Relation message):
  equal layouts have equal versions in any process and after any restart, so publishing
  one again is idempotent, and a changed layout gets a new version. Every change
  message names the version it was encoded with (the ``walcast.layout`` header; IBM
  delimited also in ``plan_name``), so a reader types each change by the layout in
  effect when it was written, not the table's newest (a column dropped since keeps its
  type in the changes from before the DROP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from capture.events import Column, Table
from capture.formats._common import Family, family
from capture.types.typmod import modifier_text

IBM_HEADER_FIELD_COUNT: Final = 12
"""Header fields of an IBM delimited record (``capture.formats.ibm.encode.HEADER_FIELDS``)."""

RENDERINGS: Final = ("quoted", "bare", "number", "bool", "hex")
"""How IBM delimited writes a column's values (``schemas/ibm-delimited.layout.json``)."""

_RENDERING_BY_FAMILY: Final = {
    Family.SMALLINT: "bare",
    Family.INTEGER: "bare",
    Family.BIGINT: "bare",
    Family.NUMERIC: "number",
    Family.REAL: "number",
    Family.DOUBLE: "number",
    Family.BOOL: "bool",
    Family.BYTES: "hex",
}


def rendering(column: Column) -> str:
    """How IBM delimited writes ``column``'s values: one of :data:`RENDERINGS`."""
    return _RENDERING_BY_FAMILY.get(family(column), "quoted")


def declared_type(name: str, typmod: int) -> str:
    """A column's type with its modifier, as ``format_type`` appends it (``numeric(12,2)``)."""
    return name + modifier_text(name, typmod)


def _missing(values: Mapping[str, str | None], name: str) -> dict[str, Any]:
    """A layout column's ``missing`` (the value's text) or ``missing_null`` (NULL), if known."""
    if name not in values:
        return {}
    value = values[name]
    return {"missing_null": True} if value is None else {"missing": value}


def layout_record(table: Table) -> dict[str, Any]:
    """Describe ``table`` in the layout record walcast publishes per Relation message.

    ``columns`` are in column order (the order of the Relation message and of every
    format's values). A column added with a DEFAULT that rows stored before read as has
    ``missing``, that value as PostgreSQL's text (:attr:`capture.events.Table.missing_values`;
    materialize gives it to those rows, whose changes never carried the column); a column
    without a DEFAULT, which those rows read as NULL, has ``missing_null`` (true). A column
    whose catalog number is known has ``number`` (:attr:`capture.events.Table.column_numbers`:
    materialize follows a RENAME COLUMN by it, and tells a column dropped and added again).
    """
    columns = [
        {
            "position": i + 1,
            "name": c.name,
            "type": c.type_name,
            "declared_type": declared_type(c.type_name, c.type_modifier),
            "type_oid": c.type_oid,
            "type_modifier": c.type_modifier,
            "key": c.is_key,
            "primary_key": c.name in table.primary_key,
            "rendering": rendering(c),
            **_missing(table.missing_values, c.name),
            **({"number": table.column_numbers[c.name]} if c.name in table.column_numbers else {}),
        }
        for i, c in enumerate(table.columns)
    ]
    return {
        "format": "ibm",
        "schema": table.schema,
        "table": table.name,
        "relation_id": table.relation_id,
        "version": table.layout_version,
        "replica_identity": table.replica_identity.name.lower(),
        "primary_key": list(table.primary_key),
        "field_count": IBM_HEADER_FIELD_COUNT + 2 * len(table.columns),
        "columns": columns,
    }


__all__ = [
    "IBM_HEADER_FIELD_COUNT",
    "RENDERINGS",
    "declared_type",
    "layout_record",
    "rendering",
]

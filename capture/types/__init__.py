"""Decode PostgreSQL column values by type OID, and render them back as PostgreSQL text.

pgoutput sends each column in its type's text output format or, with ``binary 'true'``,
in its binary send format. :class:`TypeRegistry` maps a type OID to a :class:`TypeCodec`
whose ``from_text``/``from_binary`` produce the same Python value from either format and
whose ``to_text`` reproduces PostgreSQL's own output byte for byte.

One module per type family: :mod:`~capture.types.numeric` (ints, numeric, floats,
bool), :mod:`~capture.types.text` (character types, bytea), :mod:`~capture.types.datetimes`,
:mod:`~capture.types.network`, :mod:`~capture.types.misc` (uuid, json/jsonb, bit ...),
:mod:`~capture.types.arrays`, :mod:`~capture.types.geometric`, :mod:`~capture.types.ranges`
(ranges, multiranges), :mod:`~capture.types.textsearch` (tsvector, tsquery),
:mod:`~capture.types.snapshots`, :mod:`~capture.types.composites`,
:mod:`~capture.types.extensions` (hstore, ltree, cube); special values live in
:mod:`~capture.types.values`.

Binary mode (``binary 'true'``) never emits bytes it cannot render: every codec says in
``binary_refusal`` whether its binary values decode exactly; non-built-in types are decided
from catalog facts (:mod:`~capture.types.facts`, :mod:`~capture.types.described`), and a
value nothing can decode is never rendered (:class:`UnrenderableBinaryError`). See
:mod:`~capture.types.registry`.
"""

from capture.types.facts import TypeFacts
from capture.types.registry import TypeCodec, TypeRegistry, fallback_codec, fallback_to_text
from capture.types.values import (
    INFINITY,
    NEG_INFINITY,
    TIME_24,
    Infinity,
    Interval,
    PgArray,
    PgDate,
    PgTimestamp,
    RawBinary,
    Time24,
    UnrenderableBinaryError,
)

__all__ = [
    "INFINITY",
    "NEG_INFINITY",
    "TIME_24",
    "Infinity",
    "Interval",
    "PgArray",
    "PgDate",
    "PgTimestamp",
    "RawBinary",
    "Time24",
    "TypeCodec",
    "TypeFacts",
    "TypeRegistry",
    "UnrenderableBinaryError",
    "fallback_codec",
    "fallback_to_text",
]

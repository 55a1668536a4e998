r"""Type OID -> codec registry, preloaded with PostgreSQL's built-in types.

A :class:`TypeCodec` turns one column value, as pgoutput sent it, into a Python value:
``from_text`` for the type's text output (``'t'`` columns), ``from_binary`` for its
binary send format (``'b'`` columns, ``binary 'true'``). Both give EQUAL values for the
same datum, and ``to_text`` renders a value exactly as PostgreSQL's output function does
(for the walsender settings ``DateStyle=ISO``, ``IntervalStyle=postgres``,
``TimeZone=UTC``, ``extra_float_digits=1``, ``bytea_output=hex``, UTF-8).

Decisions:

* Built-in OIDs are fixed (``pg_type.dat``); their codecs are shared, immutable objects.
  ``category`` is the type's ``pg_type.typcategory``, so ``"char"`` is ``'Z'`` and
  bytea, uuid and json are ``'U'``, as in the catalog.
* Built-in types without a dedicated decoder (geometric types, money, reg*, ranges,
  tsvector ...) are still known by name; they use the fallback decoders (text as
  ``str``, binary as :class:`RawBinary`), and their arrays decode to lists of those.
* **Fallback** (unknown OIDs and the types above): ``from_text`` decodes the UTF-8 text
  losslessly as ``str``; ``from_binary`` keeps the bytes as ``RawBinary(oid, data)``
  (a send format cannot be interpreted without knowing the type); ``to_text`` returns a
  ``str`` unchanged and renders a ``RawBinary`` as ``"\x"`` + hex, bytea-style.
* **Domains**: pgoutput's Type message for a domain carries the domain's OID with its
  BASE type's namespace and name (``logicalrep_write_typ`` calls ``getBaseType``), and
  the wire formats are the base type's; a pg_catalog name (namespace ``""``) therefore
  maps the OID to that built-in codec.
* **Other registered types** (enums, composites, extension types): a name that is also
  a built-in's (``public.int4``) is kept qualified, so nothing takes it for the built-in;
  text decodes as
  ``str``. Binary decodes as ``str`` when the bytes are valid UTF-8 without control
  characters, ``RawBinary`` otherwise. An enum's send format is its label, so enums
  decode identically in both modes; text-like extension types (citext) too; composites
  (record_send starts with an Int32 column count, hence NUL bytes) and most other binary
  formats come out as ``RawBinary``. A registered name starting with ``_`` is an array
  of such a type: text elements decode as ``str``; binary elements through the
  registered codec of the element OID on the wire, else with the same enum rule.
* **Arrays of domains**: a domain's array (``_d``) arrives as a registered array whose
  binary elements carry the DOMAIN's OID, which no Type message names unless some
  published column has the domain type itself. :meth:`TypeRegistry.resolve_array_element`
  (called by :class:`~capture.relcache.RelationCache` with what the catalog says) turns
  such an array into the array of the domain's base type, in both wire formats.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from capture.types import datetimes, misc, network, numeric, text
from capture.types.arrays import array_encoder, binary_array_decoder, text_array_decoder
from capture.types.values import RawBinary


@dataclass(frozen=True, slots=True)
class TypeCodec:
    """How to decode and render the values of one PostgreSQL type.

    ``name`` is ``pg_type.typname`` (``int4``; ``_int4`` for its array). ``category`` is
    ``pg_type.typcategory`` (``'N'`` numeric, ``'S'`` string, ``'B'`` bool, ``'D'``
    datetime, ``'T'`` timespan, ``'U'`` user/other, ``'A'`` array, ``'I'`` network,
    ``'V'`` bit string, ``'G'`` geometric, ``'R'`` range, ``'Z'`` internal ...).
    Invariants: ``from_text(t) == from_binary(b)`` when ``t`` and ``b`` are the text and
    send forms of the same datum, and ``to_text(from_text(t)) == t``.
    """

    oid: int
    name: str
    from_text: Callable[[bytes], Any]
    from_binary: Callable[[bytes], Any]
    to_text: Callable[[Any], str]
    category: str


# --------------------------------------------------------------------------- fallback


def fallback_to_text(value: Any) -> str:
    r"""Render a fallback value: a ``str`` unchanged, binary data as ``\x`` + hex."""
    if isinstance(value, str):
        return value
    if isinstance(value, RawBinary):
        return "\\x" + value.data.hex()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    return str(value)


def _raw_binary(oid: int) -> Callable[[bytes], Any]:
    def from_binary(data: bytes) -> RawBinary:
        return RawBinary(oid, bytes(data))

    return from_binary


def fallback_codec(oid: int, name: str | None = None, category: str = "U") -> TypeCodec:
    """Build the codec of a type without a decoder: text as ``str``, binary as ``RawBinary``."""
    return TypeCodec(
        oid=oid,
        name=f"oid:{oid}" if name is None else name,
        from_text=bytes.decode,
        from_binary=_raw_binary(oid),
        to_text=fallback_to_text,
        category=category,
    )


_CONTROL: Final = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _user_binary(oid: int) -> Callable[[bytes], Any]:
    """Binary decoder of a registered non-catalog type (see the module docstring)."""

    def from_binary(data: bytes) -> Any:
        if _CONTROL.search(data) is None:
            try:
                return data.decode()
            except UnicodeDecodeError:
                pass
        return RawBinary(oid, bytes(data))

    return from_binary


# --------------------------------------------------------------------------- builtins

_decode = bytes.decode
_same = text.str_identity

# (oid, typname, typcategory, array oid, from_text, from_binary, to_text)
_FromBytes = Callable[[bytes], Any]
_Spec = tuple[int, str, str, int, _FromBytes, _FromBytes, Callable[[Any], str]]
_SCALARS: Final[tuple[_Spec, ...]] = (
    (16, "bool", "B", 1000, numeric.bool_from_text, numeric.bool_from_binary, numeric.bool_to_text),
    (17, "bytea", "U", 1001, text.bytea_from_text, bytes, text.bytea_to_text),
    (18, "char", "Z", 1002, _decode, text.char_from_binary, _same),
    (19, "name", "S", 1003, _decode, _decode, _same),
    (20, "int8", "N", 1016, numeric.int8_from_text, numeric.int8_from_binary, str),
    (21, "int2", "N", 1005, numeric.int2_from_text, numeric.int2_from_binary, str),
    (23, "int4", "N", 1007, numeric.int4_from_text, numeric.int4_from_binary, str),
    (25, "text", "S", 1009, _decode, _decode, _same),
    (26, "oid", "N", 1028, numeric.uint4_from_text, numeric.uint4_from_binary, str),
    (27, "tid", "U", 1010, _decode, misc.tid_from_binary, _same),
    (28, "xid", "U", 1011, numeric.uint4_from_text, numeric.uint4_from_binary, str),
    (29, "cid", "U", 1012, numeric.uint4_from_text, numeric.uint4_from_binary, str),
    (114, "json", "U", 199, _decode, _decode, _same),
    (142, "xml", "U", 143, _decode, _decode, _same),
    (650, "cidr", "I", 651, network.cidr_from_text, network.cidr_from_binary, network.cidr_to_text),
    (700, "float4", "N", 1021, numeric.float4_from_text, numeric.float4_from_binary,
     numeric.float4_to_text),
    (701, "float8", "N", 1022, float, numeric.float8_from_binary, numeric.float8_to_text),
    (774, "macaddr8", "U", 775, _decode, network.macaddr_from_binary, _same),
    (829, "macaddr", "U", 1040, _decode, network.macaddr_from_binary, _same),
    (869, "inet", "I", 1041, network.inet_from_text, network.inet_from_binary,
     network.inet_to_text),
    (1042, "bpchar", "S", 1014, _decode, _decode, _same),
    (1043, "varchar", "S", 1015, _decode, _decode, _same),
    (1082, "date", "D", 1182, datetimes.date_from_text, datetimes.date_from_binary,
     datetimes.date_to_text),
    (1083, "time", "D", 1183, datetimes.time_from_text, datetimes.time_from_binary,
     datetimes.time_to_text),
    (1114, "timestamp", "D", 1115, datetimes.timestamp_from_text,
     datetimes.timestamp_from_binary, datetimes.timestamp_to_text),
    (1184, "timestamptz", "D", 1185, datetimes.timestamptz_from_text,
     datetimes.timestamptz_from_binary, datetimes.timestamptz_to_text),
    (1186, "interval", "T", 1187, datetimes.interval_from_text, datetimes.interval_from_binary,
     datetimes.interval_to_text),
    (1266, "timetz", "D", 1270, datetimes.timetz_from_text, datetimes.timetz_from_binary,
     datetimes.timetz_to_text),
    (1560, "bit", "V", 1561, _decode, misc.bits_from_binary, _same),
    (1562, "varbit", "V", 1563, _decode, misc.bits_from_binary, _same),
    (1700, "numeric", "N", 1231, numeric.numeric_from_text, numeric.numeric_from_binary,
     numeric.numeric_to_text),
    (1790, "refcursor", "U", 2201, _decode, _decode, _same),
    (2950, "uuid", "U", 2951, misc.uuid_from_text, misc.uuid_from_binary, misc.uuid_to_text),
    (3220, "pg_lsn", "U", 3221, _decode, misc.pg_lsn_from_binary, _same),
    (3802, "jsonb", "U", 3807, _decode, misc.versioned_text_from_binary, _same),
    (4072, "jsonpath", "U", 4073, _decode, misc.versioned_text_from_binary, _same),
    (5069, "xid8", "U", 271, numeric.uint8_from_text, numeric.uint8_from_binary, str),
)  # fmt: skip

# Built-in types known by name only (fallback decoders): (oid, typname, typcategory,
# array oid). box is the one built-in type whose array delimiter is ';'.
_NAMED_ONLY: Final[tuple[tuple[int, str, str, int], ...]] = (
    (22, "int2vector", "A", 1006),
    (24, "regproc", "N", 1008),
    (30, "oidvector", "A", 1013),
    (194, "pg_node_tree", "Z", 0),
    (600, "point", "G", 1017),
    (601, "lseg", "G", 1018),
    (602, "path", "G", 1019),
    (603, "box", "G", 1020),
    (604, "polygon", "G", 1027),
    (628, "line", "G", 629),
    (705, "unknown", "X", 0),
    (718, "circle", "G", 719),
    (790, "money", "N", 791),
    (1033, "aclitem", "U", 1034),
    (2202, "regprocedure", "N", 2207),
    (2203, "regoper", "N", 2208),
    (2204, "regoperator", "N", 2209),
    (2205, "regclass", "N", 2210),
    (2206, "regtype", "N", 2211),
    (2970, "txid_snapshot", "U", 2949),
    (3614, "tsvector", "U", 3643),
    (3615, "tsquery", "U", 3645),
    (3642, "gtsvector", "U", 3644),
    (3734, "regconfig", "N", 3735),
    (3769, "regdictionary", "N", 3770),
    (3904, "int4range", "R", 3905),
    (3906, "numrange", "R", 3907),
    (3908, "tsrange", "R", 3909),
    (3910, "tstzrange", "R", 3911),
    (3912, "daterange", "R", 3913),
    (3926, "int8range", "R", 3927),
    (4089, "regnamespace", "N", 4090),
    (4096, "regrole", "N", 4097),
    (4191, "regcollation", "N", 4192),
    (4451, "int4multirange", "R", 6150),
    (4532, "nummultirange", "R", 6151),
    (4533, "tsmultirange", "R", 6152),
    (4534, "tstzmultirange", "R", 6153),
    (4535, "datemultirange", "R", 6155),
    (4536, "int8multirange", "R", 6157),
    (5038, "pg_snapshot", "U", 5039),
)
_DELIMITERS: Final = {603: ";"}
# struct codes that decode a fixed-width element exactly like its from_binary (fast path
# for NULL-free arrays).
_FIXED: Final = {
    20: "q", 21: "h", 23: "i", 26: "I", 28: "I", 29: "I", 700: "f", 701: "d",
    5069: "Q",
}  # fmt: skip


def _builtin_lookup(oid: int) -> Callable[[bytes], Any]:
    found = _BUILTIN_BY_OID.get(oid)
    return found.from_binary if found is not None else _raw_binary(oid)


def array_codec(
    oid: int,
    name: str,
    element: TypeCodec,
    lookup: Callable[[int], Callable[[bytes], Any]],
    delimiter: str = ",",
    fixed: str | None = None,
) -> TypeCodec:
    """Build the codec of an array type whose elements use ``element``.

    Binary element OIDs other than ``element.oid`` are resolved with ``lookup``; see
    :func:`~capture.types.arrays.binary_array_decoder` for ``fixed``.
    """
    return TypeCodec(
        oid=oid,
        name=name,
        from_text=text_array_decoder(element.from_text, delimiter.encode()),
        from_binary=binary_array_decoder(element.oid, element.from_binary, lookup, fixed),
        to_text=array_encoder(element.to_text, delimiter),
        category="A",
    )


def _build_builtins() -> dict[int, TypeCodec]:
    codecs: dict[int, TypeCodec] = {}
    elements: list[tuple[TypeCodec, int]] = []
    for oid, name, category, array_oid, from_text, from_binary, to_text in _SCALARS:
        codec = TypeCodec(oid, name, from_text, from_binary, to_text, category)
        codecs[oid] = codec
        elements.append((codec, array_oid))
    for oid, name, category, array_oid in _NAMED_ONLY:
        codec = fallback_codec(oid, name, category)
        codecs[oid] = codec
        elements.append((codec, array_oid))
    for element, array_oid in elements:
        if array_oid:
            delimiter = _DELIMITERS.get(element.oid, ",")
            codecs[array_oid] = array_codec(
                array_oid,
                "_" + element.name,
                element,
                _builtin_lookup,
                delimiter,
                _FIXED.get(element.oid),
            )
    return codecs


_BUILTIN_BY_OID: Final = _build_builtins()
_BUILTIN_BY_NAME: Final = {codec.name: codec for codec in _BUILTIN_BY_OID.values()}
_CATALOG_NAMESPACES: Final = frozenset({"", "pg_catalog"})


_BINARY_SIZES: Final = {
    16: 1, 18: 1, 20: 8, 21: 2, 23: 4, 26: 4, 27: 6, 28: 4, 29: 4, 700: 4, 701: 8, 1082: 4,
    1083: 8, 1114: 8, 1184: 8, 1186: 16, 1266: 12, 2950: 16, 3220: 8, 5069: 8,
}  # fmt: skip
"""Built-in types whose send format has a fixed length (bytes), by OID."""


def _sizes_by_decoder() -> dict[Callable[[bytes], Any], int]:
    sizes: dict[Callable[[bytes], Any], int] = {}
    for oid, size in _BINARY_SIZES.items():
        decoder = _BUILTIN_BY_OID[oid].from_binary
        assert sizes.get(decoder, size) == size, f"decoder of OID {oid} is shared by sizes"
        sizes[decoder] = size
    return sizes


FIXED_BINARY_SIZES: Final = _sizes_by_decoder()
"""Binary decoder → the exact length of the send data it accepts, for fixed-size types
(a domain's codec shares its base type's decoder). Checking a value's length against it
is the cheap part of validating binary values (see :mod:`capture.consistency`)."""


def builtin_codecs() -> dict[int, TypeCodec]:
    """Return a copy of the built-in OID -> codec table."""
    return dict(_BUILTIN_BY_OID)


class TypeRegistry:
    """Codecs by type OID: the built-ins, plus types named by pgoutput Type messages.

    One registry belongs to one replication stream (registered OIDs are per database).
    """

    __slots__ = ("_codecs", "_unknown", "_unresolved_arrays")

    def __init__(self) -> None:
        self._codecs: dict[int, TypeCodec] = dict(_BUILTIN_BY_OID)
        self._unknown: dict[int, TypeCodec] = {}
        self._unresolved_arrays: set[int] = set()
        """Registered arrays of non-catalog types whose element type is not known yet."""

    def codec(self, oid: int) -> TypeCodec:
        """Return the codec of ``oid``; never raises (unknown OIDs get the fallback codec)."""
        found = self._codecs.get(oid)
        if found is not None:
            return found
        found = self._unknown.get(oid)
        if found is None:
            found = self._unknown[oid] = fallback_codec(oid)
        return found

    def register_type(self, oid: int, namespace: str, name: str) -> TypeCodec:
        """Record a pgoutput Type message (``'Y'``) and return the codec now used for ``oid``.

        ``namespace`` is ``""`` for pg_catalog. See the module docstring for the rules.
        """
        codec: TypeCodec
        if namespace in _CATALOG_NAMESPACES:
            builtin = _BUILTIN_BY_NAME.get(name)
            codec = fallback_codec(oid, name) if builtin is None else replace(builtin, oid=oid)
        else:
            # A user type that shares a built-in's name (public.int4) must not be taken for
            # it by anything that goes by the name (the output formats do).
            shown = f"{namespace}.{name}" if name in _BUILTIN_BY_NAME else name
            if name.startswith("_") and len(name) > 1:
                element = TypeCodec(
                    oid=-1,  # unknown: the wire's element OID is resolved by _element_decoder
                    name=name[1:],
                    from_text=bytes.decode,
                    from_binary=_user_binary(-1),
                    to_text=fallback_to_text,
                    category="U",
                )
                codec = array_codec(oid, shown, element, self._element_decoder)
                self._unresolved_arrays.add(oid)
            else:
                codec = TypeCodec(
                    oid, shown, bytes.decode, _user_binary(oid), fallback_to_text, "U"
                )
        self._codecs[oid] = codec
        self._unknown.pop(oid, None)
        return codec

    def unresolved_array(self, oid: int) -> bool:
        """Whether ``oid`` is a registered array of a non-catalog type not yet resolved."""
        return oid in self._unresolved_arrays

    def resolve_array_element(
        self, array_oid: int, element_oid: int, namespace: str, name: str
    ) -> TypeCodec:
        """Tell the registry what the elements of array ``array_oid`` are; return its codec.

        ``element_oid`` is ``pg_type.typelem`` of the array (the OID its binary elements
        carry, a domain's own OID for a domain's array); ``namespace`` and ``name`` name the
        element type as a Type message would: a domain by its BASE type (``""``/``int4``
        for a domain over int4). The element OID is registered under that name unless a
        Type message already registered it, and the array is rebuilt around its codec, so
        ``{1,2}`` of a domain over int decodes to ``[1, 2]`` in text and binary form alike.
        """
        array = self._codecs.get(array_oid)
        if array is None or array_oid not in self._unresolved_arrays:
            return self.codec(array_oid)
        element = self._codecs.get(element_oid)
        if element is None:
            element = self.register_type(element_oid, namespace, name)
        base = _BUILTIN_BY_NAME.get(element.name) if namespace in _CATALOG_NAMESPACES else None
        codec = array_codec(
            array_oid,
            array.name,
            element,
            self._element_decoder,
            _DELIMITERS.get(base.oid, ",") if base is not None else ",",
            _FIXED.get(base.oid) if base is not None else None,
        )
        self._codecs[array_oid] = codec
        self._unresolved_arrays.discard(array_oid)
        return codec

    def _element_decoder(self, oid: int) -> Callable[[bytes], Any]:
        found = self._codecs.get(oid)
        return found.from_binary if found is not None else _user_binary(oid)

    def is_known(self, oid: int) -> bool:
        """Whether ``oid`` is a built-in type or was registered (not a fallback guess)."""
        return oid in self._codecs

    def name_of(self, oid: int) -> str:
        """Return ``pg_type.typname`` of ``oid`` (``int4``), the registered name, or ``oid:N``."""
        found = self._codecs.get(oid)
        return found.name if found is not None else f"oid:{oid}"

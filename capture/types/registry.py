r"""Type OID -> codec registry, preloaded with PostgreSQL's built-in types.

A :class:`TypeCodec` turns one column value, as pgoutput sent it, into a Python value:
``from_text`` for the type's text output (``'t'`` columns), ``from_binary`` for its
binary send format (``'b'`` columns, ``binary 'true'``). Both give EQUAL values for the
same datum, and ``to_text`` renders a value exactly as PostgreSQL's output function does
(for the walsender settings ``DateStyle=ISO``, ``IntervalStyle=postgres``,
``TimeZone=UTC``, ``extra_float_digits=1``, ``bytea_output=hex``, UTF-8; see
:mod:`capture.replication.session`).

**The binary-mode rule: walcast never emits bytes it cannot render.** A value written in
any format equals PostgreSQL's text output in binary mode exactly as in text mode. Every
codec therefore says in ``binary_refusal`` whether its binary values can be rendered
exactly (None) or why not; :class:`~capture.relcache.RelationCache` (running stream) and
:func:`capture.replication.binary_check.check_binary_columns` (start-up) refuse a column
whose codec has a refusal, and both read it from this registry, never from a list of
their own. As a last line of defence, the binary value of a refused type is a
:class:`RawBinary` whose ``to_text`` raises :class:`UnrenderableBinaryError` (it is never
printed as hex or anything else); a container (array, composite) holding one raises too.

Decisions:

* Built-in OIDs are fixed (``pg_type.dat``); their codecs are shared, immutable objects.
  ``category`` is the type's ``pg_type.typcategory``, so ``"char"`` is ``'Z'`` and
  bytea, uuid and json are ``'U'``, as in the catalog.
* **Decoded built-ins whose value is their text**: the geometric types
  (:mod:`~capture.types.geometric`), ranges and multiranges of the built-in subtypes
  (:mod:`~capture.types.ranges`), tsvector and tsquery (:mod:`~capture.types.textsearch`),
  pg_snapshot and txid_snapshot (:mod:`~capture.types.snapshots`), int2vector, oidvector
  and pg_node_tree. Their Python value is PostgreSQL's output text (``str``) in both
  modes: ``from_text`` keeps the text (text mode is exactly as before), ``from_binary``
  renders the send bytes to that same text. Their arrays decode to lists of those.
* **Refused built-ins** (known by name, fallback decoders: text as ``str``, binary as
  ``RawBinary``): money (its text depends on the server's ``lc_monetary``), the reg*
  types (regclass, regtype, regproc ...: their text is a catalog lookup under the
  server's search_path), ``unknown``, and any built-in OID not in the table. aclitem and
  gtsvector have no send function, so pgoutput sends them as text even in binary mode:
  they are accepted, but their arrays (which the server cannot send in binary) refused.
* **Fallback** (unknown OIDs and the refused types): ``from_text`` decodes the UTF-8 text
  losslessly as ``str``; ``from_binary`` keeps the bytes as ``RawBinary(oid, data)``;
  ``to_text`` returns a ``str`` unchanged and raises for a ``RawBinary``.
* **Domains**: pgoutput's Type message for a domain carries the domain's OID with its
  BASE type's namespace and name (``logicalrep_write_typ`` calls ``getBaseType``), and
  the wire formats are the base type's; a pg_catalog name (namespace ``""``) therefore
  maps the OID to that built-in codec (a domain over money is refused like money).
* **Other registered types** (enums, composites, extension types, their arrays): a name
  that is also a built-in's (``public.int4``) is kept qualified, so nothing takes it for
  the built-in; text decodes as ``str``. A Type message does not say how the type's
  send format looks (an enum, a composite and an hstore look alike), so a type known only
  from one is refused in binary mode (:data:`UNVERIFIED`) until :meth:`TypeRegistry.describe`
  gives it a codec from catalog facts (:mod:`capture.types.described`: enums and
  text-like types such as citext, composites, user ranges, arrays, and the contrib types
  hstore, ltree and cube, identified by their owning extension and I/O functions, never
  by name). There is no heuristic: printable bytes are not taken for text. A registered
  name starting with ``_`` is an array of such a type: text elements decode as ``str``;
  binary elements through the registered codec of the element OID on the wire.
* **Arrays of domains**: a domain's array (``_d``) arrives as a registered array whose
  binary elements carry the DOMAIN's OID, which no Type message names unless some
  published column has the domain type itself. :meth:`TypeRegistry.resolve_array_element`
  (called by :class:`~capture.relcache.RelationCache` with what the catalog says) turns
  such an array into the array of the domain's base type, in both wire formats.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from capture.types import (
    datetimes,
    geometric,
    misc,
    network,
    numeric,
    snapshots,
    text,
    textsearch,
)
from capture.types.codec import (
    NO_DECODER,
    TypeCodec,
    array_codec,
    fallback_codec,
    fallback_to_text,
    no_send_decoder,
    raw_binary,
)
from capture.types.described import Describer, Render, render_with
from capture.types.facts import TypeFacts
from capture.types.ranges import multirange_decoder, range_decoder
from capture.types.values import UnrenderableBinaryError

__all__ = [
    "FIXED_BINARY_SIZES",
    "TypeCodec",
    "TypeRegistry",
    "array_codec",
    "builtin_codecs",
    "fallback_codec",
    "fallback_to_text",
]

UNVERIFIED: Final = (
    "a non-built-in type's binary format is only known from the catalog, which was not asked"
)
"""The refusal of a type known only from a Type message (see :meth:`TypeRegistry.describe`)."""


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
    # Decoded to their output text (their from_text keeps the text as it is).
    (22, "int2vector", "A", 1006, _decode, misc.int2vector_from_binary, _same),
    (30, "oidvector", "A", 1013, _decode, misc.oidvector_from_binary, _same),
    (194, "pg_node_tree", "Z", 0, _decode, _decode, _same),
    (600, "point", "G", 1017, _decode, geometric.point_from_binary, _same),
    (601, "lseg", "G", 1018, _decode, geometric.lseg_from_binary, _same),
    (602, "path", "G", 1019, _decode, geometric.path_from_binary, _same),
    (603, "box", "G", 1020, _decode, geometric.box_from_binary, _same),
    (604, "polygon", "G", 1027, _decode, geometric.polygon_from_binary, _same),
    (628, "line", "G", 629, _decode, geometric.line_from_binary, _same),
    (718, "circle", "G", 719, _decode, geometric.circle_from_binary, _same),
    (2970, "txid_snapshot", "U", 2949, _decode, snapshots.snapshot_from_binary, _same),
    (3614, "tsvector", "U", 3643, _decode, textsearch.tsvector_from_binary, _same),
    (3615, "tsquery", "U", 3645, _decode, textsearch.tsquery_from_binary, _same),
    (5038, "pg_snapshot", "U", 5039, _decode, snapshots.snapshot_from_binary, _same),
)  # fmt: skip

_MONEY: Final = "money's text depends on the server's lc_monetary locale, which walcast cannot see"
_REG: Final = (
    "its text is an object name the server looks up in its catalog (under its search_path)"
)

# Built-in types without a binary decoder, known by name only (fallback codecs): (oid,
# typname, typcategory, array oid, why binary values are refused, None for the two types
# without a send function, which pgoutput always sends as text).
_NAMED_ONLY: Final[tuple[tuple[int, str, str, int, str | None], ...]] = (
    (24, "regproc", "N", 1008, _REG),
    (705, "unknown", "X", 0, NO_DECODER),
    (790, "money", "N", 791, _MONEY),
    (1033, "aclitem", "U", 1034, None),
    (2202, "regprocedure", "N", 2207, _REG),
    (2203, "regoper", "N", 2208, _REG),
    (2204, "regoperator", "N", 2209, _REG),
    (2205, "regclass", "N", 2210, _REG),
    (2206, "regtype", "N", 2211, _REG),
    (3642, "gtsvector", "U", 3644, None),
    (3734, "regconfig", "N", 3735, _REG),
    (3769, "regdictionary", "N", 3770, _REG),
    (4089, "regnamespace", "N", 4090, _REG),
    (4096, "regrole", "N", 4097, _REG),
    (4191, "regcollation", "N", 4192, _REG),
)
_UNSENDABLE: Final = frozenset({1033, 3642})
"""Built-in types without a send function (aclitem, gtsvector): sent as text even in binary
mode; an array of them cannot be sent in binary (the server would fail)."""

# Built-in ranges and their multiranges: (range oid, name, array oid, subtype oid,
# multirange oid, name, array oid).
_RANGES: Final = (
    (3904, "int4range", 3905, 23, 4451, "int4multirange", 6150),
    (3906, "numrange", 3907, 1700, 4532, "nummultirange", 6151),
    (3908, "tsrange", 3909, 1114, 4533, "tsmultirange", 6152),
    (3910, "tstzrange", 3911, 1184, 4534, "tstzmultirange", 6153),
    (3912, "daterange", 3913, 1082, 4535, "datemultirange", 6155),
    (3926, "int8range", 3927, 20, 4536, "int8multirange", 6157),
)
_DELIMITERS: Final = {603: ";"}
"""box is the one built-in type whose array delimiter is ';'."""
# struct codes that decode a fixed-width element exactly like its from_binary (fast path
# for NULL-free arrays).
_FIXED: Final = {
    20: "q", 21: "h", 23: "i", 26: "I", 28: "I", 29: "I", 700: "f", 701: "d",
    5069: "Q",
}  # fmt: skip


def _builtin_lookup(oid: int) -> Callable[[bytes], Any]:
    found = _BUILTIN_BY_OID.get(oid)
    return found.from_binary if found is not None else raw_binary(oid)


def _build_builtins() -> dict[int, TypeCodec]:
    codecs: dict[int, TypeCodec] = {}
    elements: list[tuple[TypeCodec, int]] = []
    for oid, name, category, array_oid, from_text, from_binary, to_text in _SCALARS:
        codec = TypeCodec(oid, name, from_text, from_binary, to_text, category)
        codecs[oid] = codec
        elements.append((codec, array_oid))
    for oid, name, category, array_oid, refusal in _NAMED_ONLY:
        codec = fallback_codec(oid, name, category, refusal)
        if oid in _UNSENDABLE:
            codec = replace(codec, from_binary=no_send_decoder(name))
        codecs[oid] = codec
        elements.append((codec, array_oid))
    for oid, name, array_oid, subtype, multi_oid, multi_name, multi_array in _RANGES:
        decoder = range_decoder(render_with(codecs[subtype]))
        codec = TypeCodec(oid, name, bytes.decode, decoder, fallback_to_text, "R")
        multirange = multirange_decoder(decoder)
        multi = TypeCodec(multi_oid, multi_name, bytes.decode, multirange, fallback_to_text, "R")
        codecs[oid] = codec
        codecs[multi_oid] = multi
        elements += [(codec, array_oid), (multi, multi_array)]
    for element, array_oid in elements:
        if array_oid:
            refusal = None
            if element.oid in _UNSENDABLE:
                refusal = (
                    f"{element.name} has no send function: the server cannot send it in binary"
                )
            codecs[array_oid] = array_codec(
                array_oid,
                "_" + element.name,
                element,
                _builtin_lookup,
                _DELIMITERS.get(element.oid, ","),
                _FIXED.get(element.oid),
                refusal,
            )
    return codecs


_BUILTIN_BY_OID: Final = _build_builtins()
_BUILTIN_BY_NAME: Final = {codec.name: codec for codec in _BUILTIN_BY_OID.values()}
_CATALOG_NAMESPACES: Final = frozenset({"", "pg_catalog"})


_BINARY_SIZES: Final = {
    16: 1, 18: 1, 20: 8, 21: 2, 23: 4, 26: 4, 27: 6, 28: 4, 29: 4, 600: 16, 601: 32, 603: 32,
    628: 24, 700: 4, 701: 8, 718: 24, 1082: 4, 1083: 8, 1114: 8, 1184: 8, 1186: 16, 1266: 12,
    2950: 16, 3220: 8, 5069: 8,
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

    __slots__ = (
        "_codecs",
        "_described",
        "_identity",
        "_renderers",
        "_unknown",
        "_unresolved_arrays",
    )

    def __init__(self) -> None:
        self._codecs: dict[int, TypeCodec] = dict(_BUILTIN_BY_OID)
        self._unknown: dict[int, TypeCodec] = {}
        self._unresolved_arrays: set[int] = set()
        """Registered arrays of non-catalog types whose element type is not known yet."""
        self._identity: dict[int, tuple[str, str]] = {}
        """OID -> (namespace, name) of its last Type message."""
        self._described: dict[int, tuple[str, str] | None] = {}
        """OIDs whose codec was built from catalog facts -> the Type-message identity they
        had then (None: none yet); a Type message with another identity undoes it."""
        self._renderers: dict[int, tuple[TypeCodec, Render]] = {}

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

        ``namespace`` is ``""`` for pg_catalog. See the module docstring for the rules. A
        Type message for a type already described from the catalog keeps that description;
        one naming ANOTHER type under a described OID (the OID was reused) drops every
        description, since types described with it may be built from it.
        """
        identity = (namespace, name)
        self._identity[oid] = identity
        if oid in self._described:
            described = self._described[oid]
            shown = self._shown(namespace, name)
            if described == identity or (described is None and self._codecs[oid].name == shown):
                self._described[oid] = identity  # the same type: keep its description
                return self._codecs[oid]
            self._forget_descriptions()
        return self._register(oid, namespace, name)

    @staticmethod
    def _shown(namespace: str, name: str) -> str:
        # A user type that shares a built-in's name (public.int4) must not be taken for it
        # by anything that goes by the name (the output formats do).
        if namespace in _CATALOG_NAMESPACES or name not in _BUILTIN_BY_NAME:
            return name
        return f"{namespace}.{name}"

    def _register(self, oid: int, namespace: str, name: str) -> TypeCodec:
        codec: TypeCodec
        shown = self._shown(namespace, name)
        if namespace in _CATALOG_NAMESPACES:
            builtin = _BUILTIN_BY_NAME.get(name)
            codec = fallback_codec(oid, name) if builtin is None else replace(builtin, oid=oid)
        elif name.startswith("_") and len(name) > 1:
            element = fallback_codec(-1, name[1:], refusal=UNVERIFIED)
            codec = array_codec(oid, shown, element, self._element_decoder)
            self._unresolved_arrays.add(oid)
        else:
            codec = fallback_codec(oid, shown, refusal=UNVERIFIED)
        self._codecs[oid] = codec
        self._unknown.pop(oid, None)
        return codec

    def _forget_descriptions(self) -> None:
        """Undo every description: back to what the Type messages alone said."""
        described, self._described = self._described, {}
        self._renderers.clear()
        for oid in described:
            identity = self._identity.get(oid)
            if identity is None:
                self._codecs.pop(oid, None)
            else:
                self._register(oid, *identity)

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

    def describe(self, facts: Mapping[int, TypeFacts]) -> None:
        """Rebuild the codecs of the non-built-in types in ``facts`` from what the catalog says.

        ``facts`` must be closed: every type a type is built from (element, base, subtype,
        attributes) is in it or built in (see
        :func:`capture.replication.binary_check.describe_types`). Afterwards each such
        OID's codec decodes binary values exactly, or says why not in ``binary_refusal``
        (see :mod:`capture.types.described`). Names and categories already registered for
        an OID are kept.
        """
        built = Describer(
            facts,
            builtins=_BUILTIN_BY_OID,
            unsendable=_UNSENDABLE,
            registered=self._codecs,
            element_lookup=self._element_decoder,
            render_for=self._render,
        ).build()
        for oid, codec in built.items():
            self._codecs[oid] = codec
            self._unknown.pop(oid, None)
            self._unresolved_arrays.discard(oid)
            self._described[oid] = self._identity.get(oid)

    def binary_refusal(self, oid: int) -> str | None:
        """Why binary values of ``oid`` cannot be rendered exactly, or None when they can."""
        return self.codec(oid).binary_refusal

    def needs_facts(self, oid: int) -> bool:
        """Whether catalog facts could change the binary decision for ``oid``.

        True for a refused type that is not built in and was not described yet (a type
        known only from a Type message, or not at all).
        """
        return (
            oid not in _BUILTIN_BY_OID
            and oid not in self._described
            and self.codec(oid).binary_refusal is not None
        )

    def _element_decoder(self, oid: int) -> Callable[[bytes], Any]:
        found = self._codecs.get(oid)
        return found.from_binary if found is not None else raw_binary(oid)

    def _render(self, oid: int) -> Render:
        """Renderer of a composite's attribute of type ``oid`` (raises if not exact)."""
        codec = self.codec(oid)
        cached = self._renderers.get(oid)
        if cached is not None and cached[0] is codec:
            return cached[1]
        if codec.binary_refusal is not None:
            raise UnrenderableBinaryError(
                f"a composite value holds a binary value of type {codec.name} (OID {oid}): "
                f"{codec.binary_refusal}"
            )
        render = render_with(codec)
        self._renderers[oid] = (codec, render)
        return render

    def is_known(self, oid: int) -> bool:
        """Whether ``oid`` is a built-in type or was registered (not a fallback guess)."""
        return oid in self._codecs

    def name_of(self, oid: int) -> str:
        """Return ``pg_type.typname`` of ``oid`` (``int4``), the registered name, or ``oid:N``."""
        found = self._codecs.get(oid)
        return found.name if found is not None else f"oid:{oid}"

"""Unit tests (no server): the registry, fallback codec, register_type, value classes."""

from __future__ import annotations

import pickle
import struct
from dataclasses import FrozenInstanceError

import pytest

from capture.types import (
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
    TypeCodec,
    TypeRegistry,
)
from capture.types.codec import NO_DECODER
from capture.types.facts import TypeFacts
from capture.types.registry import UNVERIFIED, builtin_codecs
from capture.types.values import UnrenderableBinaryError

BUILTIN_OIDS = {
    "bool": (16, 1000), "bytea": (17, 1001), "char": (18, 1002), "name": (19, 1003),
    "int8": (20, 1016), "int2": (21, 1005), "int4": (23, 1007), "text": (25, 1009),
    "oid": (26, 1028), "xid": (28, 1011), "json": (114, 199), "xml": (142, 143),
    "float4": (700, 1021), "float8": (701, 1022), "macaddr8": (774, 775),
    "money": (790, 791), "macaddr": (829, 1040), "inet": (869, 1041), "cidr": (650, 651),
    "bpchar": (1042, 1014), "varchar": (1043, 1015), "date": (1082, 1182),
    "time": (1083, 1183), "timestamp": (1114, 1115), "timestamptz": (1184, 1185),
    "interval": (1186, 1187), "timetz": (1266, 1270), "bit": (1560, 1561),
    "varbit": (1562, 1563), "numeric": (1700, 1231), "uuid": (2950, 2951),
    "jsonb": (3802, 3807),
}  # fmt: skip


@pytest.mark.parametrize(("name", "oids"), sorted(BUILTIN_OIDS.items()))
def test_builtin_oids(name: str, oids: tuple[int, int]) -> None:
    registry = TypeRegistry()
    oid, array_oid = oids
    assert registry.is_known(oid)
    assert registry.name_of(oid) == name
    assert registry.codec(oid).oid == oid
    assert registry.name_of(array_oid) == "_" + name
    assert registry.codec(array_oid).category == "A"


def test_unknown_oid_gets_fallback() -> None:
    registry = TypeRegistry()
    assert not registry.is_known(424242)
    assert registry.name_of(424242) == "oid:424242"
    codec = registry.codec(424242)
    assert codec is registry.codec(424242)  # cached
    assert not registry.is_known(424242)  # still a guess
    assert codec.from_text("(1,ü)".encode()) == "(1,ü)"
    raw = codec.from_binary(b"\x00\x01")
    assert raw == RawBinary(424242, b"\x00\x01")
    assert codec.binary_refusal == NO_DECODER
    assert registry.binary_refusal(424242) == NO_DECODER
    # Never rendered as hex (or anything else): that would not be the type's text.
    with pytest.raises(UnrenderableBinaryError, match="OID 424242"):
        codec.to_text(raw)
    with pytest.raises(UnrenderableBinaryError):
        codec.to_text(b"\xff")
    assert codec.to_text("(1,ü)") == "(1,ü)"


def test_named_builtin_without_decoder() -> None:
    registry = TypeRegistry()
    money = registry.codec(790)
    assert (money.name, money.category) == ("money", "N")
    assert money.from_text(b"$1.00") == "$1.00"
    assert money.from_binary(b"\x00" * 8) == RawBinary(790, b"\x00" * 8)
    assert money.binary_refusal is not None
    assert "lc_monetary" in money.binary_refusal
    with pytest.raises(UnrenderableBinaryError):
        money.to_text(money.from_binary(b"\x00" * 8))
    assert registry.codec(791).from_text(b"{$1.00,NULL}") == ["$1.00", None]
    assert registry.binary_refusal(791) is not None  # and so is its array
    assert "search_path" in (registry.binary_refusal(2205) or "")  # regclass


def test_decoded_builtins_keep_their_text_in_text_mode() -> None:
    registry = TypeRegistry()
    point = registry.codec(600)
    assert (point.name, point.category, point.binary_refusal) == ("point", "G", None)
    assert point.from_text(b"(1,2)") == "(1,2)"
    assert point.from_binary(struct.pack(">dd", 1, 2)) == "(1,2)"
    assert registry.codec(1017).from_text(b'{"(1,2)","(3,4)"}') == ["(1,2)", "(3,4)"]
    for oid in (3904, 4451, 3614, 3615, 5038, 2970, 718, 22, 30, 194):
        assert registry.binary_refusal(oid) is None, oid


def test_types_without_a_send_function() -> None:
    registry = TypeRegistry()
    aclitem = registry.codec(1033)
    assert aclitem.binary_refusal is None  # pgoutput sends it as text even in binary mode
    assert aclitem.from_text(b"a=r/b") == "a=r/b"
    with pytest.raises(ValueError, match="no send function"):
        aclitem.from_binary(b"x")
    # ... but an array of it cannot be sent in binary (the server would fail)
    assert "no send function" in (registry.binary_refusal(1034) or "")


def test_register_domain_over_builtin() -> None:
    registry = TypeRegistry()
    codec = registry.register_type(16390, "", "int4")
    assert registry.is_known(16390)
    assert codec.oid == 16390
    assert codec.name == "int4"
    assert codec.from_binary(b"\x00\x00\x00\x05") == 5
    assert registry.codec(16390) is codec
    assert registry.register_type(16391, "pg_catalog", "_numeric").from_text(b"{1.5}")[
        0
    ].as_tuple() == (
        0,
        (1, 5),
        -1,
    )
    # a catalog name without a dedicated decoder (or from a newer server) stays lossless
    newer = registry.register_type(16392, "", "some_future_type")
    assert newer.from_text(b"x") == "x"
    assert newer.from_binary(b"x") == RawBinary(16392, b"x")
    assert newer.binary_refusal == NO_DECODER
    assert registry.register_type(16393, "", "money").binary_refusal is not None  # domain


def _enum_facts(oid: int, name: str = "mood") -> TypeFacts:
    return TypeFacts(oid, "public", name, "e", "E", "enum_out", "enum_send")


def test_register_enum() -> None:
    registry = TypeRegistry()
    codec = registry.register_type(16400, "public", "mood")
    assert registry.name_of(16400) == "mood"
    assert codec.category == "U"
    assert codec.from_text("happy ☺".encode()) == "happy ☺"
    # A Type message does not say the send format is the label: no guessing from the
    # bytes (printable bytes are not taken for text), the type is refused until described.
    assert codec.from_binary("happy ☺".encode()) == RawBinary(16400, "happy ☺".encode())
    assert codec.binary_refusal == UNVERIFIED
    assert registry.needs_facts(16400)
    assert codec.to_text("ok") == "ok"
    registry.describe({16400: _enum_facts(16400)})
    described = registry.codec(16400)
    assert not registry.needs_facts(16400)
    assert (described.name, described.category, described.binary_refusal) == ("mood", "U", None)
    assert described.from_binary("happy ☺".encode()) == "happy ☺"
    with pytest.raises(UnicodeDecodeError):
        described.from_binary(b"\xff\xfe")
    # The next Type message for the same type keeps the description ...
    assert registry.register_type(16400, "public", "mood") is described
    # ... one naming another type (the OID was reused) undoes it.
    assert registry.register_type(16400, "public", "other").binary_refusal == UNVERIFIED


def test_register_enum_array() -> None:
    registry = TypeRegistry()
    arrays = registry.register_type(16399, "public", "_mood")
    assert arrays.category == "A"
    assert arrays.from_text(b'{sad,"happy \xe2\x98\xba",NULL}') == ["sad", "happy ☺", None]
    element_oid = 16400  # not registered: enum rule
    data = (
        b"\x00\x00\x00\x01\x00\x00\x00\x01" + element_oid.to_bytes(4, "big")
        + b"\x00\x00\x00\x02\x00\x00\x00\x01"
        + b"\x00\x00\x00\x03sad" + b"\xff\xff\xff\xff"
    )  # fmt: skip
    assert arrays.from_binary(data) == [RawBinary(element_oid, b"sad"), None]
    assert arrays.binary_refusal is not None
    with pytest.raises(UnrenderableBinaryError):
        arrays.to_text(arrays.from_binary(data))
    assert arrays.to_text(["sad", None, "a b"]) == '{sad,NULL,"a b"}'
    registry.describe(
        {
            16399: TypeFacts(16399, "public", "_mood", "b", "A", "array_out", "array_send",
                             element=element_oid),
            element_oid: _enum_facts(element_oid),
        }
    )  # fmt: skip
    described = registry.codec(16399)
    assert (described.name, described.binary_refusal) == ("_mood", None)
    assert described.from_binary(data) == ["sad", None]
    data = data.replace(element_oid.to_bytes(4, "big"), (16401).to_bytes(4, "big"), 1)
    assert described.from_binary(data) == [RawBinary(16401, b"sad"), None]  # unknown OID
    # once the element type is registered, its codec is used
    registry.register_type(element_oid, "", "int4")
    arrays = registry.register_type(16399, "public", "_mood")
    data = (
        b"\x00\x00\x00\x01\x00\x00\x00\x00" + element_oid.to_bytes(4, "big")
        + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x04\x00\x00\x00\x07"
    )  # fmt: skip
    assert arrays.from_binary(data) == [7]


def _int_array_send(element_oid: int, values: list[int | None]) -> bytes:
    nulls = any(v is None for v in values)
    head = struct.pack(">iiIii", 1, int(nulls), element_oid, len(values), 1)
    return head + b"".join(
        b"\xff\xff\xff\xff" if v is None else struct.pack(">ii", 4, v) for v in values
    )


def test_array_of_a_domain_resolves_through_the_base_type() -> None:
    registry = TypeRegistry()
    domain_oid, array_oid = 25942, 25941
    arrays = registry.register_type(array_oid, "public", "_dd")
    assert registry.unresolved_array(array_oid)
    # Before: the domain's OID on the wire is unknown, the elements stay raw bytes.
    assert arrays.from_binary(_int_array_send(domain_oid, [1, 2])) == [
        RawBinary(domain_oid, b"\x00\x00\x00\x01"),
        RawBinary(domain_oid, b"\x00\x00\x00\x02"),
    ]
    resolved = registry.resolve_array_element(array_oid, domain_oid, "", "int4")
    assert not registry.unresolved_array(array_oid)
    assert registry.codec(array_oid) is resolved
    assert (resolved.oid, resolved.name, resolved.category) == (array_oid, "_dd", "A")
    assert resolved.from_binary(_int_array_send(domain_oid, [1, 2])) == [1, 2]
    assert resolved.from_binary(_int_array_send(domain_oid, [1, None])) == [1, None]
    assert resolved.from_text(b"{1,2}") == [1, 2]
    assert resolved.to_text(resolved.from_binary(_int_array_send(domain_oid, [1, 2]))) == "{1,2}"
    assert registry.codec(domain_oid).name == "int4"
    # Resolving again changes nothing.
    assert registry.resolve_array_element(array_oid, domain_oid, "", "text") is resolved


def test_array_of_a_domain_over_an_enum() -> None:
    registry = TypeRegistry()
    registry.register_type(30001, "public", "_mood_d")
    codec = registry.resolve_array_element(30001, 30002, "public", "mood")
    data = struct.pack(">iiIii", 1, 0, 30002, 1, 1) + struct.pack(">i", 3) + b"sad"
    assert codec.from_binary(data) == [RawBinary(30002, b"sad")]
    assert codec.binary_refusal is not None
    assert codec.to_text(["sad", "a b"]) == '{sad,"a b"}'
    registry.describe(
        {
            30001: TypeFacts(30001, "public", "_mood_d", "b", "A", "array_out", "array_send",
                             element=30002),
            30002: TypeFacts(30002, "public", "mood_d", "d", "E", "enum_out", "enum_send",
                             base=30003),
            30003: _enum_facts(30003),
        }
    )  # fmt: skip
    described = registry.codec(30001)
    assert described.binary_refusal is None
    assert described.from_binary(data) == ["sad"]
    assert registry.name_of(30002) == "mood"  # as its Type message named it (the base type)


def test_registries_are_independent() -> None:
    first, second = TypeRegistry(), TypeRegistry()
    first.register_type(20000, "public", "mood")
    assert first.is_known(20000)
    assert not second.is_known(20000)


def test_builtin_table_size() -> None:
    codecs = builtin_codecs()
    assert len(codecs) > 150
    assert all(isinstance(codec, TypeCodec) for codec in codecs.values())
    assert all(oid == codec.oid for oid, codec in codecs.items())


def test_codec_is_frozen() -> None:
    codec = TypeRegistry().codec(23)
    with pytest.raises(FrozenInstanceError):
        codec.name = "x"  # type: ignore[misc]


def test_value_classes() -> None:
    assert Infinity(1) == INFINITY
    assert NEG_INFINITY < INFINITY
    assert str(INFINITY) == "infinity"
    assert str(NEG_INFINITY) == "-infinity"
    assert repr(NEG_INFINITY) == "NEG_INFINITY"
    with pytest.raises(ValueError, match="sign"):
        Infinity(0)
    assert PgDate(-1) < PgDate(0)
    assert PgTimestamp(5, tz=True) != PgTimestamp(5, tz=False)
    assert Time24() == TIME_24
    assert Time24(3600) != TIME_24
    assert Interval(1, 0, 0) != Interval(0, 30, 0)
    values = [INFINITY, PgDate(3), PgTimestamp(1, tz=True), TIME_24, Interval(1, 2, 3)]
    assert len({*values, RawBinary(1, b"x")}) == 6
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value
    with pytest.raises(TypeError):
        hash(PgArray((0,), [1]))
    with pytest.raises(FrozenInstanceError):
        PgDate(1).days = 2  # type: ignore[misc]


def test_a_user_type_named_like_a_builtin_keeps_its_schema() -> None:
    registry = TypeRegistry()
    codec = registry.register_type(40001, "public", "int4")
    assert codec.name == "public.int4"
    assert codec.from_binary(b"\x00\x00\x00\x2a") == RawBinary(40001, b"\x00\x00\x00\x2a")
    arrays = registry.register_type(40002, "public", "_int4")
    assert (arrays.name, arrays.category) == ("public._int4", "A")
    assert registry.register_type(40003, "", "int4").name == "int4"  # a domain over int4

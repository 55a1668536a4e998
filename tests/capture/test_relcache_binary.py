"""Unit tests (no server): the relation cache refuses, in binary mode, every column whose
type walcast cannot decode exactly, and describes non-built-in types from the catalog first.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest

from capture.errors import BinaryTypeError, ConfigError, WalcastError
from capture.pgoutput.messages import Relation, RelationColumn, ReplicaIdentity, Type
from capture.relcache import RelationCache
from capture.types.facts import TypeFacts

ENUM = 50001
ENUM_ARRAY = 50000
COMPOSITE = 50010
EXTENSION = 50020


def relation(*columns: tuple[str, int], name: str = "t", relation_id: int = 7) -> Relation:
    return Relation(
        None,
        relation_id,
        "public",
        name,
        ReplicaIdentity.DEFAULT,
        tuple(RelationColumn(0, col, oid, -1) for col, oid in columns),
    )


CATALOG = {
    ENUM: TypeFacts(ENUM, "public", "mood", "e", "E", "enum_out", "enum_send"),
    ENUM_ARRAY: TypeFacts(
        ENUM_ARRAY, "public", "_mood", "b", "A", "array_out", "array_send", element=ENUM
    ),
    COMPOSITE: TypeFacts(
        COMPOSITE, "public", "pair", "c", "C", "record_out", "record_send", attributes=(23, 790)
    ),
    EXTENSION: TypeFacts(EXTENSION, "public", "geometry", "b", "U", "postgis:out", "postgis:send"),
}


class Catalog:
    """A fake catalog: answers from CATALOG and counts the questions."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, ...]] = []

    def __call__(self, oids: Sequence[int]) -> dict[int, TypeFacts]:
        self.asked.append(tuple(oids))
        wanted = set(oids)
        for oid in list(wanted):
            facts = CATALOG.get(oid)
            if facts is not None:
                wanted.update((facts.element, *facts.attributes))
        return {oid: CATALOG[oid] for oid in wanted if oid in CATALOG}


def test_text_mode_accepts_every_type_and_asks_nothing() -> None:
    catalog = Catalog()
    cache = RelationCache(type_resolver=catalog)
    table = cache.apply_relation(relation(("m", 790), ("r", 2205), ("x", 424242)))
    assert [c.type_name for c in table.columns] == ["money", "regclass", "oid:424242"]
    assert catalog.asked == []


@pytest.mark.parametrize(
    ("oid", "shown", "why"),
    [
        (790, "money", "lc_monetary"),
        (791, "money[]", "lc_monetary"),
        (2205, "regclass", "search_path"),
        (2206, "regtype", "search_path"),
        (24, "regproc", "search_path"),
        (1034, "aclitem[]", "no send function"),
        (424242, "oid:424242", "no exact decoder"),
    ],
)
def test_binary_mode_refuses_an_undecodable_builtin(oid: int, shown: str, why: str) -> None:
    cache = RelationCache(binary=True)
    with pytest.raises(BinaryTypeError) as caught:
        cache.apply_relation(relation(("id", 23), ("c", oid), name="orders"), lsn=0x1_016B3748)
    error = caught.value
    assert isinstance(error, ConfigError)
    assert isinstance(error, WalcastError)
    assert (error.relation, error.column, error.type_name, error.lsn) == (
        "public.orders",
        "c",
        shown,
        0x1_016B3748,
    )
    line = error.one_line()
    assert "\n" not in line
    for part in ("public.orders", "column c", shown, why, "WAL position 1/16B3748", "--binary"):
        assert part in line, part
    assert 7 not in cache  # nothing of the table is kept: no row of it is ever decoded


def test_binary_mode_accepts_every_exact_builtin() -> None:
    cache = RelationCache(binary=True)
    oids = (16, 17, 20, 23, 25, 600, 601, 602, 603, 604, 628, 718, 1007, 1017, 1700, 3614,
            3615, 3643, 3904, 3905, 3910, 4451, 5038, 2970, 1033, 22, 30)  # fmt: skip
    table = cache.apply_relation(relation(*((f"c{i}", oid) for i, oid in enumerate(oids))))
    assert len(table.columns) == len(oids)


def test_a_type_message_alone_is_not_enough() -> None:
    cache = RelationCache(binary=True)  # no catalog to ask
    cache.apply_type(Type(None, ENUM, "public", "mood"))
    with pytest.raises(BinaryTypeError, match="catalog"):
        cache.apply_relation(relation(("m", ENUM)))
    # a domain over a built-in needs no catalog: its Type message names the base type
    cache.apply_type(Type(None, 50100, "", "int4"))
    cache.apply_relation(relation(("d", 50100)))


def test_binary_mode_describes_types_from_the_catalog_once() -> None:
    catalog = Catalog()
    cache = RelationCache(binary=True, type_resolver=catalog)
    cache.apply_type(Type(None, ENUM, "public", "mood"))
    cache.apply_type(Type(None, ENUM_ARRAY, "public", "_mood"))
    table = cache.apply_relation(relation(("id", 23), ("m", ENUM), ("ms", ENUM_ARRAY)))
    assert catalog.asked == [(ENUM_ARRAY, ENUM)]
    assert [c.type_name for c in table.columns] == ["int4", "mood", "_mood"]
    assert table.binary_decoders[1](b"ok") == "ok"
    data = struct.pack(">iiIii", 1, 0, ENUM, 1, 1) + struct.pack(">i", 3) + b"sad"
    assert table.renderers[2](table.binary_decoders[2](data)) == "{sad}"
    # The same Type messages again (after a reconnect or DDL): no new question.
    cache.apply_type(Type(None, ENUM, "public", "mood"))
    cache.apply_relation(relation(("m", ENUM)))
    assert catalog.asked == [(ENUM_ARRAY, ENUM)]


def test_binary_mode_refuses_what_the_catalog_cannot_vouch_for() -> None:
    catalog = Catalog()
    cache = RelationCache(binary=True, type_resolver=catalog)
    cache.apply_type(Type(None, COMPOSITE, "public", "pair"))
    with pytest.raises(BinaryTypeError, match=r"column p of public\.t has type pair.*money"):
        cache.apply_relation(relation(("p", COMPOSITE)), lsn=1)
    cache.apply_type(Type(None, EXTENSION, "public", "geometry"))
    with pytest.raises(BinaryTypeError, match="postgis:send"):
        cache.apply_relation(relation(("g", EXTENSION)))
    with pytest.raises(BinaryTypeError, match=r"oid:50999.*no exact decoder"):
        cache.apply_relation(relation(("u", 50999)))  # unknown even to the catalog


def test_the_catalog_is_asked_in_binary_mode_only_when_needed() -> None:
    catalog = Catalog()
    cache = RelationCache(binary=True, type_resolver=catalog)
    cache.apply_relation(relation(("a", 23), ("b", 600), ("c", 3904)))
    with pytest.raises(BinaryTypeError):
        cache.apply_relation(relation(("m", 790)))
    assert catalog.asked == []  # built-ins are decided by the registry alone


def test_a_refusal_without_a_position_still_names_the_column() -> None:
    with pytest.raises(BinaryTypeError) as caught:
        RelationCache(binary=True).apply_relation(relation(("price", 790)))
    assert "WAL position" not in str(caught.value)
    assert caught.value.column == "price"
    assert "run without --binary" in caught.value.one_line()

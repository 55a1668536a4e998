"""Unit tests (no server): inet, cidr, macaddr(8), uuid, json(b), bit strings, pg_lsn, tid."""

from __future__ import annotations

import ipaddress
import uuid

import pytest

from capture.types import TypeRegistry
from capture.types.network import ipv6_text
from tests.capture.types import _wire as wire

REG = TypeRegistry()
INET = REG.codec(869)
CIDR = REG.codec(650)
V4, V6 = 2, 3


@pytest.mark.parametrize(
    ("data", "text", "expected"),
    [
        (wire.inet(V4, 32, False, bytes([192, 168, 0, 1])), "192.168.0.1",
         ipaddress.IPv4Interface("192.168.0.1/32")),
        (wire.inet(V4, 8, False, bytes([10, 1, 2, 3])), "10.1.2.3/8",
         ipaddress.IPv4Interface("10.1.2.3/8")),
        (wire.inet(V4, 0, False, bytes(4)), "0.0.0.0/0", ipaddress.IPv4Interface("0.0.0.0/0")),
        (wire.inet(V6, 128, False, bytes(15) + b"\x01"), "::1", ipaddress.IPv6Interface("::1")),
        (wire.inet(V6, 128, False, bytes(16)), "::", ipaddress.IPv6Interface("::")),
        (wire.inet(V6, 128, False, bytes(10) + b"\xff\xff\x01\x02\x03\x04"), "::ffff:1.2.3.4",
         ipaddress.IPv6Interface("::ffff:1.2.3.4")),
        (wire.inet(V6, 120, False, bytes(10) + b"\xff\xff\x01\x02\x03\x04"),
         "::ffff:1.2.3.4/120", ipaddress.IPv6Interface("::ffff:1.2.3.4/120")),
        (wire.inet(V6, 64, False, bytes.fromhex("20010db8000000000000000000000001")),
         "2001:db8::1/64", ipaddress.IPv6Interface("2001:db8::1/64")),
    ],
)  # fmt: skip
def test_inet(data: bytes, text: str, expected: object) -> None:
    assert INET.from_binary(data) == expected
    assert INET.from_text(text.encode()) == expected
    assert INET.to_text(expected) == text


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (wire.inet(V4, 8, True, bytes([10, 0, 0, 0])), "10.0.0.0/8"),
        (wire.inet(V4, 32, True, bytes([10, 0, 0, 0])), "10.0.0.0/32"),
        (wire.inet(V6, 0, True, bytes(16)), "::/0"),
        (wire.inet(V6, 120, True, bytes(12) + b"\x01\x02\x03\x00"), "::1.2.3.0/120"),
        (wire.inet(V6, 32, True, bytes.fromhex("20010db8") + bytes(12)), "2001:db8::/32"),
    ],
)
def test_cidr(data: bytes, text: str) -> None:
    value = CIDR.from_binary(data)
    assert isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network)
    assert CIDR.from_text(text.encode()) == value
    assert CIDR.to_text(value) == text


@pytest.mark.parametrize(
    ("address", "text"),
    [
        ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
        ("::1.2.3.4", "::1.2.3.4"),
        ("::2", "::2"),  # seven zero words: no IPv4 form
        ("::ffff:0.0.0.1", "::ffff:0.0.0.1"),
        ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),  # longest run wins
        ("1:0:0:2:0:0:3:4", "1::2:0:0:3:4"),  # first run wins a tie
        ("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"),
        ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),  # single zero word is not compressed
        ("1::", "1::"),
        ("0:0:0:0:0:1:0:0", "::1:0:0"),
        ("0:0:0:0:1:ffff:0:1", "::1:ffff:0:1"),
        ("ABCD:EF01::", "abcd:ef01::"),
    ],
)
def test_ipv6_text_follows_postgres(address: str, text: str) -> None:
    assert ipv6_text(ipaddress.IPv6Address(address).packed) == text


def test_inet_accepts_plain_addresses() -> None:
    assert INET.to_text(ipaddress.IPv4Address("1.2.3.4")) == "1.2.3.4"
    assert INET.to_text(ipaddress.IPv6Address("::ffff:1.2.3.4")) == "::ffff:1.2.3.4"


def test_inet_rejects_bad_binary() -> None:
    with pytest.raises(ValueError, match="inet"):
        INET.from_binary(b"\x02\x20\x00\x10" + bytes(16))


def test_macaddr() -> None:
    mac, mac8 = REG.codec(829), REG.codec(774)
    assert mac.from_binary(bytes.fromhex("08002b010203")) == "08:00:2b:01:02:03"
    assert mac.from_text(b"08:00:2b:01:02:03") == "08:00:2b:01:02:03"
    assert mac8.from_binary(bytes.fromhex("08002b0102030405")) == "08:00:2b:01:02:03:04:05"
    assert mac8.to_text("08:00:2b:01:02:03:04:05") == "08:00:2b:01:02:03:04:05"


def test_uuid() -> None:
    codec = REG.codec(2950)
    value = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    from_binary = codec.from_binary(value.bytes)
    from_text = codec.from_text(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    assert from_binary == from_text == value
    assert hash(from_binary) == hash(value)
    assert from_binary.version == 4
    assert codec.to_text(from_binary) == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert codec.from_text(b"{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}") == value
    with pytest.raises(ValueError, match="16 bytes"):
        codec.from_binary(b"\x00" * 15)


def test_json_jsonb_jsonpath() -> None:
    doc = '{"a" : 1,  "ü":[1,2]}'
    assert REG.codec(114).from_binary(doc.encode()) == doc
    assert REG.codec(114).from_text(doc.encode()) == doc
    assert REG.codec(3802).from_binary(b"\x01" + doc.encode()) == doc
    assert REG.codec(3802).to_text(doc) == doc
    assert REG.codec(4072).from_binary(b'\x01$."a"') == '$."a"'
    with pytest.raises(ValueError, match="version"):
        REG.codec(3802).from_binary(b"\x02{}")


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"\x00\x00\x00\x00", ""),
        (b"\x00\x00\x00\x01\x80", "1"),
        (b"\x00\x00\x00\x03\xa0", "101"),
        (b"\x00\x00\x00\x0a\x00\x40", "0000000001"),
        (b"\x00\x00\x00\x10\xff\x00", "1111111100000000"),
    ],
)
def test_bit_strings(data: bytes, text: str) -> None:
    for oid in (1560, 1562):
        codec = REG.codec(oid)
        assert codec.category == "V"
        assert codec.from_binary(data) == text
        assert codec.from_text(text.encode()) == text
        assert codec.to_text(text) == text


def test_pg_lsn_and_tid() -> None:
    lsn = REG.codec(3220)
    assert lsn.from_binary(bytes.fromhex("00000016B374D848")) == "16/B374D848"
    assert lsn.from_binary(bytes(8)) == "0/0"
    tid = REG.codec(27)
    assert tid.from_binary(b"\xff\xff\xff\xff\xff\xff") == "(4294967295,65535)"
    assert tid.from_text(b"(0,1)") == "(0,1)"

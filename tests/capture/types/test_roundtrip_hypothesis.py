"""Property tests (no server): random values survive both wire formats.

For each type: value -> test-side binary encoder -> from_binary gives the value back; and
value -> to_text -> from_text gives the value back (strictly, see ``same``).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from capture.types import Interval, PgArray, PgDate, PgTimestamp, TypeRegistry
from capture.types.datetimes import date2j, j2date
from tests.capture.types import _wire as wire
from tests.capture.types._helpers import same

REG = TypeRegistry()
SETTINGS = settings(max_examples=300, deadline=None)  # per test: no global profile

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# PostgreSQL's ranges: dates from Julian day 0 (4714-11-24 BC) to 5874897-12-31;
# timestamps from 4714-11-24 BC to 294276-12-31 23:59:59.999999.
MIN_DAYS = -2451545
MAX_DAYS = date2j(5874897, 12, 31) - 2451545
MIN_US = -211813488000000000
MAX_US = 9223371331200000000 - 1


def check_text(oid: int, value: Any) -> None:
    codec = REG.codec(oid)
    text = codec.to_text(value)
    assert same(codec.from_text(text.encode()), value), (value, text)


def check_binary(oid: int, value: Any, encode: Callable[[Any], bytes]) -> None:
    assert same(REG.codec(oid).from_binary(encode(value)), value), value


@SETTINGS
@given(st.integers(-(2**15), 2**15 - 1))
def test_int2(value: int) -> None:
    check_binary(21, value, wire.int2)
    check_text(21, value)


@SETTINGS
@given(INT32)
def test_int4(value: int) -> None:
    check_binary(23, value, wire.int4)
    check_text(23, value)


@SETTINGS
@given(INT64)
def test_int8(value: int) -> None:
    check_binary(20, value, wire.int8)
    check_text(20, value)


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_oid(value: int) -> None:
    check_binary(26, value, wire.uint4)
    check_text(26, value)


def _decimal(coefficient: int, scale: int) -> Decimal:
    return Decimal(f"{coefficient}E-{scale}")


NUMERICS = st.one_of(
    st.builds(_decimal, st.integers(-(10**40), 10**40), st.integers(0, 30)),
    st.builds(_decimal, st.integers(-(10**1000), 10**1000), st.integers(0, 1000)),
    st.sampled_from([Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")]),
).filter(lambda d: not (d.is_zero() and d.is_signed()))


@SETTINGS
@given(NUMERICS)
def test_numeric(value: Decimal) -> None:
    check_binary(1700, value, wire.numeric)
    check_text(1700, value)


@SETTINGS
@given(st.floats())
def test_float8(value: float) -> None:
    check_binary(701, value, wire.float8)
    check_text(701, value)


@SETTINGS
@given(st.floats(width=32))
def test_float4(value: float) -> None:
    check_binary(700, value, wire.float4)
    check_text(700, value)


@SETTINGS
@given(st.integers(0, 2**32 - 1).map(lambda bits: struct.unpack(">f", bits.to_bytes(4))[0]))
def test_float4_any_bits(value: float) -> None:
    check_text(700, value)


@SETTINGS
@given(st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack(">d", bits.to_bytes(8))[0]))
def test_float8_any_bits(value: float) -> None:
    check_text(701, value)


TEXTS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"))


@SETTINGS
@given(TEXTS)
def test_text(value: str) -> None:
    for oid in (25, 1043, 1042, 19, 114):
        check_binary(oid, value, str.encode)
        check_text(oid, value)


@SETTINGS
@given(st.binary())
def test_bytea(value: bytes) -> None:
    check_binary(17, value, bytes)
    check_text(17, value)


@SETTINGS
@given(st.dates())
def test_date(value: date) -> None:
    check_binary(1082, value, wire.date_)
    check_text(1082, value)


@SETTINGS
@given(st.integers(MIN_DAYS, MAX_DAYS))
def test_date_full_range(days: int) -> None:
    codec = REG.codec(1082)
    value = codec.from_binary(wire.date_days(days))
    if isinstance(value, PgDate):
        assert value.days == days
        year = j2date(days + 2451545)[0]
        assert year < 1 or year > 9999
    check_text(1082, value)


@SETTINGS
@given(st.datetimes())
def test_timestamp(value: datetime) -> None:
    check_binary(1114, value, wire.timestamp)
    check_text(1114, value)


@SETTINGS
@given(st.datetimes(timezones=st.just(UTC)))
def test_timestamptz(value: datetime) -> None:
    check_binary(1184, value, wire.timestamptz)
    check_text(1184, value)


@SETTINGS
@given(st.integers(MIN_US, MAX_US), st.booleans())
def test_timestamp_full_range(us: int, tz: bool) -> None:
    oid = 1184 if tz else 1114
    value = REG.codec(oid).from_binary(wire.int8(us))
    if isinstance(value, PgTimestamp):
        assert value == PgTimestamp(us, tz=tz)
    check_text(oid, value)


@SETTINGS
@given(st.times())
def test_time(value: time) -> None:
    check_binary(1083, value, wire.time_)
    check_text(1083, value)


OFFSETS = st.integers(-57599, 57599).map(lambda s: timezone(timedelta(seconds=s)))


@SETTINGS
@given(st.times(timezones=OFFSETS))
def test_timetz(value: time) -> None:
    check_binary(1266, value, wire.timetz)
    check_text(1266, value)


INTERVALS = st.builds(Interval, INT32, INT32, INT64)


@SETTINGS
@given(INTERVALS)
def test_interval(value: Interval) -> None:
    check_binary(1186, value, wire.interval)
    check_text(1186, value)


@SETTINGS
@given(st.uuids())
def test_uuid(value: Any) -> None:
    check_binary(2950, value, wire.uuid_)
    check_text(2950, value)


@SETTINGS
@given(st.ip_addresses(), st.data())
def test_inet_and_cidr(address: Any, data: st.DataObject) -> None:
    bits = data.draw(st.integers(0, address.max_prefixlen))
    family = 2 if address.version == 4 else 3
    interface = ipaddress.ip_interface((address, bits))
    check_binary(869, interface, lambda v: wire.inet(family, bits, False, v.ip.packed))
    check_text(869, interface)
    network = interface.network
    check_binary(650, network, lambda v: wire.inet(family, bits, True, v.network_address.packed))
    check_text(650, network)


def _arrays(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """1-D to 3-D rectangular arrays, NULLs allowed, sometimes with lower bounds."""
    nullable = st.one_of(st.none(), elements)

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        dims = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
        total = 1
        for size in dims:
            total *= size
        items: list[Any] = draw(st.lists(nullable, min_size=total, max_size=total))
        for size in reversed(dims[1:]):
            items = [items[i : i + size] for i in range(0, len(items), size)]
        bounds = draw(st.lists(st.integers(-5, 5), min_size=len(dims), max_size=len(dims)))
        if draw(st.booleans()) and any(lower != 1 for lower in bounds):
            return PgArray(tuple(bounds), items)
        return items

    return st.one_of(st.just([]), build())


@SETTINGS
@given(_arrays(TEXTS))
def test_text_array(value: Any) -> None:
    check_binary(1009, value, lambda v: wire.array(25, v, str.encode))
    check_text(1009, value)


@SETTINGS
@given(_arrays(INT32))
def test_int4_array(value: Any) -> None:
    check_binary(1007, value, lambda v: wire.array(23, v, wire.int4))
    check_text(1007, value)


@SETTINGS
@given(_arrays(NUMERICS))
def test_numeric_array(value: Any) -> None:
    check_binary(1231, value, lambda v: wire.array(1700, v, wire.numeric))
    check_text(1231, value)


@SETTINGS
@given(_arrays(st.datetimes(timezones=st.just(UTC))))
def test_timestamptz_array(value: Any) -> None:
    check_binary(1185, value, lambda v: wire.array(1184, v, wire.timestamptz))
    check_text(1185, value)


@SETTINGS
@given(_arrays(INTERVALS))
def test_interval_array(value: Any) -> None:
    check_binary(1187, value, lambda v: wire.array(1186, v, wire.interval))
    check_text(1187, value)


@SETTINGS
@given(_arrays(st.binary()))
def test_bytea_array(value: Any) -> None:
    check_binary(1001, value, lambda v: wire.array(17, v, bytes))
    check_text(1001, value)


@SETTINGS
@given(_arrays(st.floats()))
def test_float8_array(value: Any) -> None:
    check_binary(1022, value, lambda v: wire.array(701, v, wire.float8))
    check_text(1022, value)


@SETTINGS
@given(_arrays(st.uuids()))
def test_uuid_array(value: Any) -> None:
    check_binary(2951, value, lambda v: wire.array(2950, v, wire.uuid_))
    check_text(2951, value)

"""Test-side encoders: Python values -> PostgreSQL binary send bytes.

Written independently of the decoders (from the send functions' layouts), so that a
round trip through them checks the decoders rather than mirroring them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from capture.types import Interval, PgArray

EPOCH_DAYS = date(2000, 1, 1).toordinal()
EPOCH = datetime(2000, 1, 1)  # noqa: DTZ001
EPOCH_UTC = datetime(2000, 1, 1, tzinfo=UTC)


def int2(value: int) -> bytes:
    return struct.pack(">h", value)


def int4(value: int) -> bytes:
    return struct.pack(">i", value)


def int8(value: int) -> bytes:
    return struct.pack(">q", value)


def uint4(value: int) -> bytes:
    return struct.pack(">I", value)


def float4(value: float) -> bytes:
    return struct.pack(">f", value)


def float8(value: float) -> bytes:
    return struct.pack(">d", value)


def numeric(value: Decimal) -> bytes:
    """numeric_send: ndigits, weight, sign, dscale, base-10000 digits."""
    if value.is_nan():
        return struct.pack(">hhHH", 0, 0, 0xC000, 0)
    if value.is_infinite():
        return struct.pack(">hhHH", 0, 0, 0xF000 if value < 0 else 0xD000, 0)
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digit_tuple)) or "0")
    dscale = max(0, -exponent)
    if exponent >= 0:
        coefficient *= 10**exponent
        frac_groups = 0
    else:
        frac_groups = (-exponent + 3) // 4
        coefficient *= 10 ** (frac_groups * 4 + exponent)
    groups: list[int] = []
    while coefficient:
        coefficient, group = divmod(coefficient, 10000)
        groups.insert(0, group)
    weight = len(groups) - 1 - frac_groups
    while groups and groups[-1] == 0:
        groups.pop()
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    if not groups:
        weight = 0
    code = 0x4000 if sign and groups else 0
    return struct.pack(f">HhHH{len(groups)}H", len(groups), weight, code, dscale, *groups)


def date_days(days: int) -> bytes:
    return int4(days)


def date_(value: date) -> bytes:
    return int4(value.toordinal() - EPOCH_DAYS)


def timestamp(value: datetime) -> bytes:
    return int8((value - EPOCH) // timedelta(microseconds=1))


def timestamptz(value: datetime) -> bytes:
    return int8((value - EPOCH_UTC) // timedelta(microseconds=1))


def time_(value: time) -> bytes:
    return int8(
        ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    )


def timetz(value: time) -> bytes:
    offset = value.utcoffset()
    assert offset is not None
    return time_(value) + int4(-(offset // timedelta(seconds=1)))


def interval(value: Interval) -> bytes:
    return struct.pack(">qii", value.microseconds, value.days, value.months)


def uuid_(value: uuid.UUID) -> bytes:
    return value.bytes


def inet(family: int, bits: int, is_cidr: bool, address: bytes) -> bytes:
    return bytes((family, bits, int(is_cidr), len(address))) + address


def array(
    element_oid: int,
    value: list[Any] | PgArray,
    encode: Callable[[Any], bytes],
) -> bytes:
    """array_send: ndim, has_nulls, element oid, (size, lower bound)*, (len, bytes)*."""
    items = value.items if isinstance(value, PgArray) else value
    dims: list[int] = []
    level: Any = items
    while isinstance(level, list) and level:
        dims.append(len(level))
        level = level[0]
    bounds = list(value.lower_bounds) if isinstance(value, PgArray) else [1] * len(dims)
    flat: list[Any] = items
    for _ in range(len(dims) - 1):
        flat = [x for sub in flat for x in sub]
    has_nulls = any(x is None for x in flat)
    out = struct.pack(">iiI", len(dims), int(has_nulls), element_oid)
    for size, lower in zip(dims, bounds, strict=True):
        out += struct.pack(">ii", size, lower)
    for item in flat:
        if item is None:
            out += int4(-1)
        else:
            data = encode(item)
            out += int4(len(data)) + data
    return out

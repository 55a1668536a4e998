"""Unit tests (no server): date, time, timetz, timestamp, timestamptz, interval."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, time, timedelta, timezone

import pytest

from capture.types import (
    INFINITY,
    NEG_INFINITY,
    TIME_24,
    Interval,
    PgDate,
    PgTimestamp,
    Time24,
    TypeRegistry,
)
from capture.types.datetimes import date2j, interval_to_timedelta, j2date
from tests.capture.types import _wire as wire
from tests.capture.types._helpers import same

REG = TypeRegistry()
DATE = REG.codec(1082)
TIME = REG.codec(1083)
TIMETZ = REG.codec(1266)
TS = REG.codec(1114)
TSTZ = REG.codec(1184)
INTERVAL = REG.codec(1186)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def test_calendar_matches_python_ordinals() -> None:
    for day in (date(1, 1, 1), date(2000, 1, 1), date(2024, 2, 29), date(9999, 12, 31)):
        jd = date2j(day.year, day.month, day.day)
        assert jd - 2451545 == day.toordinal() - date(2000, 1, 1).toordinal()
        assert j2date(jd) == (day.year, day.month, day.day)
    assert date2j(-4713, 11, 24) == 0  # Julian day 0 (4714-11-24 BC)
    assert j2date(0) == (-4713, 11, 24)


@pytest.mark.parametrize(
    ("days", "text", "expected"),
    [
        (0, "2000-01-01", date(2000, 1, 1)),
        (8825, "2024-02-29", date(2024, 2, 29)),
        (-730119, "0001-01-01", date(1, 1, 1)),
        (2921939, "9999-12-31", date(9999, 12, 31)),
        (-730120, "0001-12-31 BC", PgDate(-730120)),
        (2921940, "10000-01-01", PgDate(2921940)),
        (-2451545, "4714-11-24 BC", PgDate(-2451545)),
        (2145031948, "5874897-12-31", PgDate(2145031948)),  # PG maximum
        (2**31 - 1, "infinity", INFINITY),
        (-(2**31), "-infinity", NEG_INFINITY),
    ],
)
def test_date(days: int, text: str, expected: object) -> None:
    data = struct.pack(">i", days)
    assert same(DATE.from_binary(data), expected)
    assert same(DATE.from_text(text.encode()), expected)
    assert DATE.to_text(expected) == text


def test_date_bc_text() -> None:
    value = DATE.from_text(b"0044-03-15 BC")
    assert isinstance(value, PgDate)
    assert j2date(value.days + 2451545) == (-43, 3, 15)
    assert DATE.to_text(value) == "0044-03-15 BC"


@pytest.mark.parametrize(
    ("us", "text", "expected"),
    [
        (0, "2000-01-01 00:00:00", datetime(2000, 1, 1)),  # noqa: DTZ001
        (
            762529501123456,
            "2024-02-29 13:45:01.123456",
            datetime(2024, 2, 29, 13, 45, 1, 123456),  # noqa: DTZ001
        ),
        (-500000, "1999-12-31 23:59:59.5", datetime(1999, 12, 31, 23, 59, 59, 500000)),  # noqa: DTZ001
        (-63082281600000000, "0001-01-01 00:00:00", datetime(1, 1, 1)),  # noqa: DTZ001
        (
            -63082281600000001,
            "0001-12-31 23:59:59.999999 BC",
            PgTimestamp(-63082281600000001, tz=False),
        ),
        (
            252455616000000000 - 1,
            "9999-12-31 23:59:59.999999",
            datetime(9999, 12, 31, 23, 59, 59, 999999),  # noqa: DTZ001
        ),
        (252455616000000000, "10000-01-01 00:00:00", PgTimestamp(252455616000000000, tz=False)),
        (
            9223371331200000000 - 1,
            "294276-12-31 23:59:59.999999",
            PgTimestamp(9223371331200000000 - 1, tz=False),
        ),
        (-211813488000000000, "4714-11-24 00:00:00 BC", PgTimestamp(-211813488000000000, tz=False)),
        (INT64_MAX, "infinity", INFINITY),
        (-(2**63), "-infinity", NEG_INFINITY),
    ],
)
def test_timestamp(us: int, text: str, expected: object) -> None:
    data = struct.pack(">q", us)
    assert same(TS.from_binary(data), expected)
    assert same(TS.from_text(text.encode()), expected)
    assert TS.to_text(expected) == text


@pytest.mark.parametrize(
    ("us", "text"),
    [
        (0, "2000-01-01 00:00:00+00"),
        (762529501123456, "2024-02-29 13:45:01.123456+00"),
        (762529501000000, "2024-02-29 13:45:01+00"),
        (-63082281600000000, "0001-01-01 00:00:00+00"),
        (-63113904000000000, "0001-01-01 00:00:00+00 BC"),
        (9223371331200000000 - 1, "294276-12-31 23:59:59.999999+00"),
    ],
)
def test_timestamptz(us: int, text: str) -> None:
    from_binary = TSTZ.from_binary(struct.pack(">q", us))
    assert same(from_binary, TSTZ.from_text(text.encode()))
    assert TSTZ.to_text(from_binary) == text
    if isinstance(from_binary, datetime):
        assert from_binary.tzinfo is UTC


def test_timestamptz_text_with_offset_is_converted_to_utc() -> None:
    value = TSTZ.from_text(b"2024-02-29 13:45:01.5+05:30")
    assert same(value, datetime(2024, 2, 29, 8, 15, 1, 500000, tzinfo=UTC))
    assert TSTZ.to_text(value) == "2024-02-29 08:15:01.5+00"
    # the UTC instant may leave datetime's range
    early = TSTZ.from_text(b"0001-01-01 00:00:00+05")
    assert early == PgTimestamp(-63082281600000000 - 5 * 3600 * 1_000_000, tz=True)
    assert TSTZ.to_text(early) == "0001-12-31 19:00:00+00 BC"
    lmt = TSTZ.from_text(b"1900-01-01 00:00:00+00:53:28")
    assert TSTZ.to_text(lmt) == "1899-12-31 23:06:32+00"


def test_timestamptz_to_text_converts_other_zones() -> None:
    value = datetime(2024, 1, 1, 5, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert TSTZ.to_text(value) == "2024-01-01 00:00:00+00"
    assert TSTZ.to_text(datetime(2024, 1, 1)) == "2024-01-01 00:00:00+00"  # noqa: DTZ001
    assert TS.to_text(datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == (
        "2024-01-01 00:00:00"
    )


@pytest.mark.parametrize(
    ("us", "text", "expected"),
    [
        (0, "00:00:00", time(0)),
        (49501123456, "13:45:01.123456", time(13, 45, 1, 123456)),
        (49501500000, "13:45:01.5", time(13, 45, 1, 500000)),
        (86399999999, "23:59:59.999999", time(23, 59, 59, 999999)),
        (86400000000, "24:00:00", TIME_24),
    ],
)
def test_time(us: int, text: str, expected: object) -> None:
    assert same(TIME.from_binary(struct.pack(">q", us)), expected)
    assert same(TIME.from_text(text.encode()), expected)
    assert TIME.to_text(expected) == text


def _tz(seconds: int) -> timezone:
    return timezone(timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("us", "west", "text", "expected"),
    [
        (49501500000, -19800, "13:45:01.5+05:30", time(13, 45, 1, 500000, _tz(19800))),
        (36000000000, 12615, "10:00:00-03:30:15", time(10, tzinfo=_tz(-12615))),
        (0, 0, "00:00:00+00", time(0, tzinfo=UTC)),
        (86400000000, -18000, "24:00:00+05", Time24(18000)),
        (86399999999, 57540, "23:59:59.999999-15:59", time(23, 59, 59, 999999, _tz(-57540))),
    ],
)
def test_timetz(us: int, west: int, text: str, expected: object) -> None:
    from_binary = TIMETZ.from_binary(struct.pack(">qi", us, west))
    from_text = TIMETZ.from_text(text.encode())
    assert same(from_binary, expected)
    assert same(from_text, expected)
    assert TIMETZ.to_text(from_binary) == text


def test_timetz_without_offset_is_rejected() -> None:
    with pytest.raises(ValueError, match="offset"):
        TIMETZ.from_text(b"10:00:00")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Interval(14, 3, 14706789000), "1 year 2 mons 3 days 04:05:06.789"),
        (Interval(0, -1, 7380000000), "-1 days +02:03:00"),
        (Interval(0, 0, 0), "00:00:00"),
        (Interval(0, 0, -1000000), "-00:00:01"),
        (Interval(1, -1, 0), "1 mon -1 days"),
        (Interval(178000000 * 12, 0, 0), "178000000 years"),
        (Interval(-178000000 * 12, 0, 0), "-178000000 years"),
        (Interval(0, 1, -1000000), "1 day -00:00:01"),
        (Interval(-27, 4, -18367000000), "-2 years -3 mons +4 days -05:06:07"),
        (Interval(11, 0, 0), "11 mons"),
        (Interval(12, 0, 0), "1 year"),
        (Interval(-1, 0, 0), "-1 mons"),
        (Interval(13, 0, 1), "1 year 1 mon 00:00:00.000001"),
        (Interval(0, 2, -1), "2 days -00:00:00.000001"),
        (Interval(-(2**31), 0, 0), "-178956970 years -8 mons"),
        (Interval(2**31 - 1, 0, 0), "178956970 years 7 mons"),
        (Interval(0, 0, INT64_MAX - 1), "2562047788:00:54.775806"),
        (Interval(0, 0, -(2**63) + 1), "-2562047788:00:54.775807"),
        (Interval(0, 0, 100 * 3600 * 1_000_000), "100:00:00"),
        (Interval(INT32_MAX, INT32_MAX, INT64_MAX), "infinity"),
        (Interval(-(2**31), -(2**31), -(2**63)), "-infinity"),
    ],
)
def test_interval(value: Interval, text: str) -> None:
    assert INTERVAL.from_binary(wire.interval(value)) == value
    assert INTERVAL.to_text(value) == text
    assert INTERVAL.from_text(text.encode()) == value


def test_interval_rejects_other_styles() -> None:
    for text in (b"P1Y2M", b"@ 1 year ago", b"1 fortnight"):
        with pytest.raises(ValueError, match="IntervalStyle"):
            INTERVAL.from_text(text)


def test_interval_to_timedelta() -> None:
    assert interval_to_timedelta(Interval(1, 2, 3)) == timedelta(days=32, microseconds=3)

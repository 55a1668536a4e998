"""Dates and times: date, time, timetz, timestamp, timestamptz, interval.

Text forms are those of ``DateStyle = ISO``, ``IntervalStyle = postgres`` and
``TimeZone = UTC`` (the walsender session settings). Binary forms are PostgreSQL's
integer datetimes: microseconds (or days) since 2000-01-01.

Python values (see :mod:`capture.types.values` for the special classes):

* date: ``datetime.date``; ``INFINITY``/``NEG_INFINITY``; :class:`PgDate` outside
  years 1..9999 (BC dates, years up to 5874897).
* timestamp: naive ``datetime.datetime``; timestamptz: ``datetime.datetime`` aware in
  ``datetime.UTC`` (text with another offset is converted to UTC, as the instant is what
  the column stores). Infinities as for date; :class:`PgTimestamp` outside years
  1..9999 (up to 294276 AD, down to 4713 BC).
* time: ``datetime.time``; timetz: ``datetime.time`` whose tzinfo is a fixed-offset
  ``datetime.timezone`` (offsets may have seconds: ``-03:30:15``). ``24:00:00`` is a
  :class:`Time24`. Note that Python compares aware times by instant, so
  ``10:00+01 == 09:00+00``; the offset is still kept and printed back.
* interval: :class:`Interval` (months, days, microseconds), unnormalised.

Invariant: a value always decodes to the same Python value from text and from binary, and
``*_to_text`` reproduces PostgreSQL's output byte for byte.
"""

from __future__ import annotations

import re
import struct
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Final

from capture.types import _wire
from capture.types.values import (
    INFINITY,
    NEG_INFINITY,
    TIME_24,
    Infinity,
    Interval,
    PgDate,
    PgTimestamp,
    Time24,
)

_TIMETZ: Final = struct.Struct(">qi")
_INTERVAL: Final = struct.Struct(">qii")
_unpack_i4 = _wire.INT4.unpack
_unpack_i8 = _wire.INT8.unpack

USECS_PER_SEC: Final = 1_000_000
USECS_PER_MINUTE: Final = 60 * USECS_PER_SEC
USECS_PER_HOUR: Final = 60 * USECS_PER_MINUTE
USECS_PER_DAY: Final = 24 * USECS_PER_HOUR
POSTGRES_EPOCH_JDATE: Final = 2451545  # Julian day of 2000-01-01

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

DATEVAL_NOBEGIN: Final = INT32_MIN
DATEVAL_NOEND: Final = INT32_MAX
DT_NOBEGIN: Final = INT64_MIN
DT_NOEND: Final = INT64_MAX

_EPOCH_DATE: Final = date(2000, 1, 1)
_EPOCH_ORDINAL: Final = _EPOCH_DATE.toordinal()
_MIN_DAYS: Final = date.min.toordinal() - _EPOCH_ORDINAL
_MAX_DAYS: Final = date.max.toordinal() - _EPOCH_ORDINAL
_EPOCH: Final = datetime(2000, 1, 1)  # noqa: DTZ001 - naive on purpose: timestamp
_EPOCH_UTC: Final = datetime(2000, 1, 1, tzinfo=UTC)
_ONE_US: Final = timedelta(microseconds=1)
_MIN_US: Final = _MIN_DAYS * USECS_PER_DAY
_MAX_US: Final = (_MAX_DAYS + 1) * USECS_PER_DAY - 1


# --------------------------------------------------------------------------- calendar


def date2j(year: int, month: int, day: int) -> int:
    """Julian day number of a proleptic Gregorian date (PostgreSQL's date2j).

    ``year`` is astronomical: 1 BC is 0, 44 BC is -43.
    """
    if month > 2:
        month += 1
        year += 4800
    else:
        month += 13
        year += 4799
    century = year // 100
    julian = year * 365 - 32167
    julian += year // 4 - century + century // 4
    return julian + 7834 * month // 256 + day


def j2date(jd: int) -> tuple[int, int, int]:
    """Astronomical (year, month, day) of a Julian day number (PostgreSQL's j2date)."""
    julian = jd + 32044
    quad = julian // 146097
    extra = (julian - quad * 146097) * 4 + 3
    julian += 60 + quad * 3 + extra // 146097
    quad = julian // 1461
    julian -= quad * 1461
    y = julian * 4 // 1461
    julian = ((julian + 305) % 365 if y != 0 else (julian + 306) % 366) + 123
    y += quad * 4
    quad = julian * 2141 // 65536
    return y - 4800, (quad + 10) % 12 + 1, julian - 7834 * quad // 256


def _format_ymd(days: int) -> tuple[str, bool]:
    """``YYYY-MM-DD`` of a day count since 2000-01-01, and whether it is BC."""
    year, month, day = j2date(days + POSTGRES_EPOCH_JDATE)
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d}", True
    return f"{year:04d}-{month:02d}-{day:02d}", False


def _days_of(year: int, month: int, day: int, bc: bool) -> int:
    if bc:
        year = 1 - year
    return date2j(year, month, day) - POSTGRES_EPOCH_JDATE


def _append_fraction(text: str, fraction: int) -> str:
    """Append ``.ffffff`` without trailing zeros, as PostgreSQL's AppendSeconds does."""
    if fraction:
        return f"{text}.{fraction:06d}".rstrip("0")
    return text


def _format_offset(seconds_east: int) -> str:
    """PostgreSQL's EncodeTimezone: ``+05``, ``+05:30``, ``-03:30:15``."""
    sign = "-" if seconds_east < 0 else "+"
    minutes, seconds = divmod(abs(seconds_east), 60)
    hours, minutes = divmod(minutes, 60)
    if seconds:
        return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    if minutes:
        return f"{sign}{hours:02d}:{minutes:02d}"
    return f"{sign}{hours:02d}"


def _parse_offset(sign: bytes, hours: bytes, minutes: bytes | None, seconds: bytes | None) -> int:
    total = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    return -total if sign == b"-" else total


def _fraction_us(fraction: bytes | None) -> int:
    if not fraction:
        return 0
    return int(fraction[:6].ljust(6, b"0"))


def _special(data: bytes) -> Infinity | None:
    if data == b"infinity":
        return INFINITY
    if data == b"-infinity":
        return NEG_INFINITY
    return None


def _infinity_text(value: Infinity) -> str:
    return "infinity" if value.sign > 0 else "-infinity"


# --------------------------------------------------------------------------- date

_DATE_RE: Final = re.compile(rb"(\d{4,})-(\d\d)-(\d\d)( BC)?")


def _date_from_days(days: int) -> date | Infinity | PgDate:
    if _MIN_DAYS <= days <= _MAX_DAYS:
        return date.fromordinal(days + _EPOCH_ORDINAL)
    if days == DATEVAL_NOEND:
        return INFINITY
    if days == DATEVAL_NOBEGIN:
        return NEG_INFINITY
    return PgDate(days)


def date_from_binary(data: bytes) -> date | Infinity | PgDate:
    """Decode date_send: Int32 days since 2000-01-01 (INT32_MIN/MAX are -/+infinity)."""
    days = _unpack_i4(data)[0]
    if _MIN_DAYS <= days <= _MAX_DAYS:
        return date.fromordinal(days + _EPOCH_ORDINAL)
    return _date_from_days(days)


def date_from_text(data: bytes) -> date | Infinity | PgDate:
    """Decode date_out (ISO): ``2024-02-29``, ``0044-03-15 BC``, ``infinity``."""
    if len(data) == 10:
        return date.fromisoformat(data.decode("ascii"))
    special = _special(data)
    if special is not None:
        return special
    match = _DATE_RE.fullmatch(data)
    if match is None:
        raise ValueError(f"invalid date text {data!r}")
    year, month, day, bc = match.groups()
    return _date_from_days(_days_of(int(year), int(month), int(day), bc is not None))


def date_to_text(value: date | Infinity | PgDate) -> str:
    """Render like date_out with ``DateStyle = ISO``."""
    if isinstance(value, date):
        if isinstance(value, datetime):
            value = value.date()
        return value.isoformat()
    if isinstance(value, Infinity):
        return _infinity_text(value)
    text, bc = _format_ymd(value.days)
    return f"{text} BC" if bc else text


# --------------------------------------------------------------------------- timestamp

_TIMESTAMP_RE: Final = re.compile(
    rb"(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?"
    rb"(?:([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?)?( BC)?"
)


def _timestamp_from_us(us: int, *, tz: bool = False) -> datetime | Infinity | PgTimestamp:
    """µs since 2000-01-01 as a datetime (aware in UTC with ``tz``), ±infinity, or beyond."""
    if _MIN_US <= us <= _MAX_US:
        return (_EPOCH_UTC if tz else _EPOCH) + timedelta(0, 0, us)
    if us == DT_NOEND:
        return INFINITY
    if us == DT_NOBEGIN:
        return NEG_INFINITY
    return PgTimestamp(us, tz=tz)


def timestamp_from_binary(data: bytes) -> datetime | Infinity | PgTimestamp:
    """Decode timestamp_send: Int64 µs since 2000-01-01 (INT64_MIN/MAX: -/+infinity)."""
    us = _unpack_i8(data)[0]
    if _MIN_US <= us <= _MAX_US:
        return _EPOCH + timedelta(0, 0, us)
    return _timestamp_from_us(us)


def timestamptz_from_binary(data: bytes) -> datetime | Infinity | PgTimestamp:
    """Decode timestamptz_send: Int64 µs since 2000-01-01 00:00 UTC."""
    us = _unpack_i8(data)[0]
    if _MIN_US <= us <= _MAX_US:
        return _EPOCH_UTC + timedelta(0, 0, us)
    return _timestamp_from_us(us, tz=True)


def _timestamp_text_to_us(data: bytes) -> int:
    match = _TIMESTAMP_RE.fullmatch(data)
    if match is None:
        raise ValueError(f"invalid timestamp text {data!r}")
    year, month, day, hour, minute, second, fraction, sign, oh, om, osec, bc = match.groups()
    days = _days_of(int(year), int(month), int(day), bc is not None)
    seconds = int(hour) * 3600 + int(minute) * 60 + int(second)
    if sign is not None:
        seconds -= _parse_offset(sign, oh, om, osec)
    return days * USECS_PER_DAY + seconds * USECS_PER_SEC + _fraction_us(fraction)


def timestamp_from_text(data: bytes) -> datetime | Infinity | PgTimestamp:
    """Decode timestamp_out (ISO): ``2024-02-29 13:45:01.5``, ``... BC``, ``infinity``."""
    if data[4:5] == b"-" and data[-1:] != b"C":
        return datetime.fromisoformat(data.decode("ascii"))
    special = _special(data)
    if special is not None:
        return special
    return _timestamp_from_us(_timestamp_text_to_us(data))


def timestamptz_from_text(data: bytes) -> datetime | Infinity | PgTimestamp:
    """Decode timestamptz_out: ``2024-02-29 13:45:01.5+00`` (any offset; stored as UTC)."""
    if data[4:5] == b"-" and data[-1:] != b"C":
        value = datetime.fromisoformat(data.decode("ascii"))
        tzinfo = value.tzinfo
        if tzinfo is UTC:
            return value
        if tzinfo is None:
            return value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:
            pass  # the UTC instant is outside years 1..9999: PgTimestamp below
    special = _special(data)
    if special is not None:
        return special
    return _timestamp_from_us(_timestamp_text_to_us(data), tz=True)


def _format_timestamp_us(us: int, tz: bool) -> str:
    days, time_us = divmod(us, USECS_PER_DAY)
    ymd, bc = _format_ymd(days)
    hours, rest = divmod(time_us, USECS_PER_HOUR)
    minutes, rest = divmod(rest, USECS_PER_MINUTE)
    seconds, fraction = divmod(rest, USECS_PER_SEC)
    text = _append_fraction(f"{ymd} {hours:02d}:{minutes:02d}:{seconds:02d}", fraction)
    if tz:
        text += "+00"
    return f"{text} BC" if bc else text


def timestamp_to_text(value: datetime | Infinity | PgTimestamp) -> str:
    """Render like timestamp_out with ``DateStyle = ISO``.

    An aware datetime is converted to UTC first, then printed without an offset.
    """
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return _format_timestamp_us((value - _EPOCH_UTC) // _ONE_US, tz=False)
        text = value.isoformat(" ")
        return text.rstrip("0") if value.microsecond else text
    if isinstance(value, Infinity):
        return _infinity_text(value)
    return _format_timestamp_us(value.microseconds, tz=False)


def timestamptz_to_text(value: datetime | Infinity | PgTimestamp) -> str:
    """Render like timestamptz_out with ``TimeZone = UTC``: ``2024-02-29 13:45:01.5+00``.

    Aware datetimes in another zone are shown as the same instant in UTC; a naive
    datetime is taken to be UTC already.
    """
    if isinstance(value, datetime):
        tzinfo = value.tzinfo
        if tzinfo is UTC:
            text = value.isoformat(" ")[:-6]  # drop "+00:00"
        elif tzinfo is None:
            text = value.isoformat(" ")
        else:
            return _format_timestamp_us((value - _EPOCH_UTC) // _ONE_US, tz=True)
        return (text.rstrip("0") if value.microsecond else text) + "+00"
    if isinstance(value, Infinity):
        return _infinity_text(value)
    return _format_timestamp_us(value.microseconds, tz=True)


# --------------------------------------------------------------------------- time

_TIME_24_US: Final = USECS_PER_DAY
_OFFSET_RE: Final = re.compile(rb"([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?")
_zones: dict[int, timezone] = {0: UTC}


def zone(seconds_east: int) -> timezone:
    """Return a cached fixed-offset ``datetime.timezone`` (UTC itself for 0)."""
    found = _zones.get(seconds_east)
    if found is None:
        found = _zones[seconds_east] = timezone(timedelta(seconds=seconds_east))
    return found


def _time_of_us(us: int, tzinfo: timezone | None) -> time:
    hours, rest = divmod(us, USECS_PER_HOUR)
    minutes, rest = divmod(rest, USECS_PER_MINUTE)
    seconds, micro = divmod(rest, USECS_PER_SEC)
    return time(hours, minutes, seconds, micro, tzinfo)


def time_from_binary(data: bytes) -> time | Time24:
    """Decode time_send: Int64 µs since midnight (86400000000 is ``24:00:00``)."""
    us = _unpack_i8(data)[0]
    if us == _TIME_24_US:
        return TIME_24
    return _time_of_us(us, None)


def time_from_text(data: bytes) -> time | Time24:
    """Decode time_out: ``13:45:01.5``, ``24:00:00``."""
    if data[:2] == b"24":
        return TIME_24
    return time.fromisoformat(data.decode("ascii"))


def _time_text(value: time) -> str:
    text = f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    return _append_fraction(text, value.microsecond)


def time_to_text(value: time | Time24) -> str:
    """Render like time_out: ``13:45:01.5`` (no trailing fractional zeros)."""
    if isinstance(value, Time24):
        return "24:00:00"
    return _time_text(value)


_TZDISP_LIMIT: Final = 16 * 3600
"""PostgreSQL's bound on a time zone displacement (exclusive): up to 15:59:59 either way."""


def timetz_from_binary(data: bytes) -> time | Time24:
    """Decode timetz_send: Int64 µs since midnight, Int32 zone in seconds WEST of UTC."""
    us, west = _TIMETZ.unpack(data)
    if not -_TZDISP_LIMIT < west < _TZDISP_LIMIT:
        raise ValueError(f"timetz zone displacement {west} s is out of range")
    if us == _TIME_24_US:
        return Time24(-west)
    return _time_of_us(us, zone(-west))


def timetz_from_text(data: bytes) -> time | Time24:
    """Decode timetz_out: ``13:45:01.5+05:30``, ``10:00:00-03:30:15``, ``24:00:00+00``."""
    if data[:2] == b"24":
        match = _OFFSET_RE.fullmatch(data, 8)
        if match is None:
            raise ValueError(f"invalid timetz text {data!r}")
        sign, hours, minutes, seconds = match.groups()
        return Time24(_parse_offset(sign, hours, minutes, seconds))
    value = time.fromisoformat(data.decode("ascii"))
    offset = value.utcoffset()
    if offset is None:
        raise ValueError(f"timetz text without an offset: {data!r}")
    return value.replace(tzinfo=zone(offset // timedelta(seconds=1)))


def timetz_to_text(value: time | Time24) -> str:
    """Render like timetz_out: the time, then the offset (``+05:30``, ``-03:30:15``)."""
    if isinstance(value, Time24):
        return "24:00:00" + _format_offset(value.utcoffset or 0)
    offset = value.utcoffset()
    seconds = 0 if offset is None else offset // timedelta(seconds=1)
    return _time_text(value) + _format_offset(seconds)


# --------------------------------------------------------------------------- interval

INTERVAL_INFINITY: Final = Interval(INT32_MAX, INT32_MAX, INT64_MAX)
"""PostgreSQL 17's ``'infinity'::interval`` (all fields at their maximum)."""
INTERVAL_NEG_INFINITY: Final = Interval(INT32_MIN, INT32_MIN, INT64_MIN)
"""PostgreSQL 17's ``'-infinity'::interval``."""


def interval_from_binary(data: bytes) -> Interval:
    """Decode interval_send: Int64 µs, Int32 days, Int32 months."""
    us, days, months = _INTERVAL.unpack(data)
    return Interval(months, days, us)


_INTERVAL_RE: Final = re.compile(
    rb"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
    rb"(?:([+-]?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?"
)


def interval_from_text(data: bytes) -> Interval:
    """Decode interval_out with ``IntervalStyle = postgres``.

    ``1 year 2 mons -3 days +04:05:06.789``; years fold into months (exact: the output
    splits months as ``months / 12`` and ``months % 12`` with the same sign).
    """
    match = _INTERVAL_RE.fullmatch(data) if data else None
    if match is None:
        if data == b"infinity":
            return INTERVAL_INFINITY
        if data == b"-infinity":
            return INTERVAL_NEG_INFINITY
        raise ValueError(f"invalid interval text (IntervalStyle postgres) {data!r}")
    years, mons, days, sign, hours, minutes, seconds, fraction = match.groups()
    months = int(years) * 12 if years else 0
    if mons:
        months += int(mons)
    us = 0
    if hours is not None:
        us = (int(hours) * 3600 + int(minutes) * 60 + int(seconds)) * USECS_PER_SEC
        if fraction:
            us += int(fraction.ljust(6, b"0"))
        if sign == b"-":
            us = -us
    return Interval(months, int(days) if days else 0, us)


def _trunc_div(value: int, divisor: int) -> int:
    """C integer division (truncates toward zero); ``divisor > 0``."""
    quotient = abs(value) // divisor
    return -quotient if value < 0 else quotient


def interval_to_text(value: Interval) -> str:
    """Render like interval_out with ``IntervalStyle = postgres``.

    Follows EncodeInterval: each nonzero field of years/mons/days, ``+`` before a positive
    field that follows a negative one, then ``[-|+]HH:MM:SS[.ffffff]`` when the time is
    nonzero or everything else is zero. Fields split with C's truncating division.
    """
    months, days, us = value.months, value.days, value.microseconds
    if months == INT32_MAX and days == INT32_MAX and us == INT64_MAX:
        return "infinity"
    if months == INT32_MIN and days == INT32_MIN and us == INT64_MIN:
        return "-infinity"
    parts: list[str] = []
    is_before = False
    if months:
        years = _trunc_div(months, 12)
        mons = months - years * 12
        if years:
            parts.append(f"{years} year" if years == 1 else f"{years} years")
            is_before = years < 0
        if mons:
            plus = "+" if is_before and mons > 0 else ""
            parts.append(f"{plus}{mons} mon" if mons == 1 else f"{plus}{mons} mons")
            is_before = mons < 0
    if days:
        plus = "+" if is_before and days > 0 else ""
        parts.append(f"{plus}{days} day" if days == 1 else f"{plus}{days} days")
        is_before = days < 0
    if us or not parts:
        if us < 0:
            sign, rest = "-", -us
        else:
            sign, rest = ("+" if is_before else ""), us
        hours, rest = divmod(rest, USECS_PER_HOUR)
        minutes, rest = divmod(rest, USECS_PER_MINUTE)
        seconds, fraction = divmod(rest, USECS_PER_SEC)
        parts.append(_append_fraction(f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}", fraction))
    return " ".join(parts)


def interval_to_timedelta(value: Interval, days_per_month: int = 30) -> timedelta:
    """Approximate an interval as a ``timedelta`` (months count ``days_per_month`` days).

    Lossy by nature (PostgreSQL's own ``justify`` uses 30-day months); offered for
    encoders that need a single duration.
    """
    days = value.months * days_per_month + value.days
    return timedelta(days=days, microseconds=value.microseconds)

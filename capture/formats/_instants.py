"""Dates and timestamps as formats need them: Unix microseconds and calendar fields.

The values come from :mod:`capture.types.datetimes` (which parses PostgreSQL's text and
binary forms exactly, BC dates and years past 9999 included); this module only turns
those Python values into the numbers output formats carry. Calendar fields use
astronomical year numbering (1 BC is year 0, 44 BC is -43), the proleptic Gregorian
calendar, and floor division (a time before 1970 has negative seconds and a microsecond
part in 0..999999).
"""

from __future__ import annotations

import datetime as dt
from typing import Final

from capture.events import PG_EPOCH_US
from capture.types.datetimes import POSTGRES_EPOCH_JDATE, USECS_PER_DAY, j2date
from capture.types.values import PgDate, PgTimestamp

_UNIX_EPOCH: Final = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - naive: timestamps as UTC
_UNIX_EPOCH_UTC: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UNIX_EPOCH_DAY: Final = dt.date(1970, 1, 1).toordinal()
_PG_EPOCH_UNIX_DAYS: Final = 10_957
"""Days from 1970-01-01 to 2000-01-01."""

Civil = tuple[int, int, int, int, int, int, int]
"""(year, month, day, hour, minute, second, microsecond)."""


def unix_us(value: dt.datetime | PgTimestamp) -> int:
    """Microseconds since the Unix epoch of a timestamp (a naive one is read as UTC)."""
    if isinstance(value, PgTimestamp):
        return value.microseconds + PG_EPOCH_US
    delta = value - (_UNIX_EPOCH if value.tzinfo is None else _UNIX_EPOCH_UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def unix_days(value: dt.date | PgDate) -> int:
    """Days since the Unix epoch of a date."""
    if isinstance(value, PgDate):
        return value.days + _PG_EPOCH_UNIX_DAYS
    return value.toordinal() - _UNIX_EPOCH_DAY


def date_fields(value: dt.date | PgDate) -> tuple[int, int, int]:
    """(astronomical year, month, day) of a date."""
    if isinstance(value, PgDate):
        return j2date(value.days + POSTGRES_EPOCH_JDATE)
    return value.year, value.month, value.day


def civil_fields(value: dt.datetime | PgTimestamp) -> Civil:
    """Calendar fields of a timestamp, as it reads (no time zone conversion)."""
    if isinstance(value, PgTimestamp):
        days, us = divmod(value.microseconds, USECS_PER_DAY)
        year, month, day = j2date(days + POSTGRES_EPOCH_JDATE)
        seconds, micros = divmod(us, 1_000_000)
        return year, month, day, seconds // 3600, seconds // 60 % 60, seconds % 60, micros
    return (
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
    )


__all__ = ["Civil", "civil_fields", "date_fields", "unix_days", "unix_us"]

"""Python values for PostgreSQL data that the standard library cannot represent.

Every value class here is a frozen, slotted dataclass: immutable, compared by value, hashable
(except :class:`PgArray`, which holds lists) and cheap. They appear only where the natural
Python type cannot hold the PostgreSQL value; the common case always uses the standard
type (``datetime.date``, ``datetime.datetime``, ``datetime.time``, ``list`` ...):

=========================  ============================================================
PostgreSQL value           Python value
=========================  ============================================================
``infinity``/``-infinity`` :data:`INFINITY` / :data:`NEG_INFINITY` (date, timestamp,
                           timestamptz)
date outside 0001..9999    :class:`PgDate` (BC dates, years 10000..5874897)
timestamp[tz] outside      :class:`PgTimestamp` (BC, years 10000..294276)
0001..9999
``24:00:00`` (time,        :class:`Time24` (``datetime.time`` stops at 23:59:59.999999)
timetz)
interval                   :class:`Interval` (always; PostgreSQL's three fields)
array with a lower bound   :class:`PgArray` (``[0:2]={1,2,3}``)
other than 1
binary value of a type     :class:`RawBinary` (kept, but never rendered as text:
without an exact decoder   see :class:`UnrenderableBinaryError`)
=========================  ============================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True, slots=True, order=True)
class Infinity:
    """PostgreSQL's ``infinity`` (``sign == 1``) or ``-infinity`` (``sign == -1``).

    Shared by date, timestamp and timestamptz, which all have the two special values.
    Use the two instances :data:`INFINITY` and :data:`NEG_INFINITY`; they compare by
    value (``NEG_INFINITY < INFINITY``), so identity checks are not required.
    ``str()`` gives PostgreSQL's text form.
    """

    sign: int

    def __post_init__(self) -> None:
        if self.sign not in (1, -1):
            raise ValueError(f"Infinity sign must be 1 or -1, not {self.sign!r}")

    def __str__(self) -> str:
        return "infinity" if self.sign > 0 else "-infinity"

    def __repr__(self) -> str:
        return "INFINITY" if self.sign > 0 else "NEG_INFINITY"


INFINITY: Final = Infinity(1)
"""PostgreSQL ``infinity`` (later than every date/timestamp)."""
NEG_INFINITY: Final = Infinity(-1)
"""PostgreSQL ``-infinity`` (earlier than every date/timestamp)."""


@dataclass(frozen=True, slots=True, order=True)
class PgDate:
    """A date that ``datetime.date`` cannot hold: BC, or after year 9999.

    ``days`` counts days since 2000-01-01 (PostgreSQL's epoch, the binary wire value),
    in the proleptic Gregorian calendar. Invariant: a decoder returns a ``PgDate`` only
    when the day is outside 0001-01-01 .. 9999-12-31; inside that range it returns a
    ``datetime.date``, so equal days always decode to the same Python type.
    """

    days: int


@dataclass(frozen=True, slots=True, order=True)
class PgTimestamp:
    """A timestamp that ``datetime.datetime`` cannot hold: BC, or after year 9999.

    ``microseconds`` counts microseconds since 2000-01-01 00:00:00 (UTC when ``tz``),
    the binary wire value. ``tz`` tells a timestamptz from a timestamp. Invariant: a
    decoder returns a ``PgTimestamp`` only outside 0001-01-01 .. 9999-12-31 23:59:59.999999
    (UTC for timestamptz); inside, it returns a naive (timestamp) or UTC-aware
    (timestamptz) ``datetime.datetime``.
    """

    microseconds: int
    tz: bool


@dataclass(frozen=True, slots=True)
class Time24:
    """PostgreSQL's ``24:00:00`` time of day, which ``datetime.time`` cannot hold.

    ``time`` and ``timetz`` accept ``24:00:00`` (end of day, binary 86400000000 µs).
    ``utcoffset`` is ``None`` for ``time``; for ``timetz`` it is the offset in seconds
    EAST of UTC, like ``datetime.utcoffset()`` (so ``24:00:00+05`` has ``18000``; the wire
    stores the opposite sign). :data:`TIME_24` is the plain ``time`` instance.
    """

    utcoffset: int | None = None


TIME_24: Final = Time24()
"""``'24:00:00'::time``."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A PostgreSQL interval: its three independent fields, never normalised.

    ``1 mon`` and ``30 days`` are different values here (as they are on the wire and in
    PostgreSQL's text output), so a round trip is exact. PostgreSQL 17's ``infinity`` is
    ``Interval(2**31 - 1, 2**31 - 1, 2**63 - 1)`` and ``-infinity`` the three minima,
    exactly as stored. No ordering is defined: PostgreSQL orders intervals by a
    normalised span, which field-wise comparison would contradict.
    """

    months: int
    days: int
    microseconds: int


@dataclass(frozen=True, slots=True)
class RawBinary:
    """The binary send bytes of a value whose type has no exact binary decoder.

    Kept losslessly with the type OID, so :meth:`~capture.events.Image.value` still hands
    it to a caller that knows the type. It has NO text form: the type's output cannot be
    derived from these bytes, so every ``to_text`` raises
    :class:`UnrenderableBinaryError` for it rather than print something else (walcast's
    rule: in binary mode it never emits bytes it cannot render).
    """

    type_oid: int
    data: bytes


class UnrenderableBinaryError(ValueError):
    """A binary value was to be rendered as text, but its type has no exact decoder.

    Raised by ``to_text`` for a :class:`RawBinary` and by container decoders (composites,
    arrays) for an element whose type cannot be decoded. Like any codec failure it stops
    the stream with a :class:`~capture.errors.DecodeError` naming the relation, column and
    WAL position (see :mod:`capture.consistency`). In a correctly wired stream it is never
    reached: :class:`~capture.relcache.RelationCache` refuses such columns up front.
    """


@dataclass(frozen=True, slots=True)
class PgArray:
    """An array whose lower bounds are not all 1 (``'[0:2]={1,2,3}'``).

    ``lower_bounds`` has one entry per dimension; ``items`` is the same nested ``list``
    a normal array decodes to. Invariant: decoders return a plain ``list`` when every
    lower bound is 1 (the usual case), and a ``PgArray`` otherwise, so the bounds are
    never lost. Not hashable, because ``items`` is a list.
    """

    lower_bounds: tuple[int, ...]
    items: list[Any]

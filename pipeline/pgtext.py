r"""Spark column expressions that turn a format's value text into PostgreSQL's text output.

Each format writes some values in its own form (IBM bool ``1``, Qlik bytea as upper-case
hex, DataWorks bytes as base64 and times as epoch ms, DTS Avro typed records). The
normalized images hold PostgreSQL's text instead (``t``, ``\x00ff``,
``2024-05-02 18:17:29.123+00``) wherever the type is known, so every format normalizes
to the same strings. All functions are pure column expressions (no Python UDF).

PostgreSQL renders timestamps as ``YYYY-MM-DD HH:MM:SS`` plus the fraction without
trailing zeros (none when it is zero) and, for timestamptz with TimeZone UTC, ``+00``.
"""

# ruff: noqa: N812
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

BOOL_TYPES = frozenset({"bool"})
BYTEA_TYPES = frozenset({"bytea"})


def bool_text(value: Column) -> Column:
    """``t``/``f`` for the spellings of a boolean (``true``, ``1``, ``t`` …); others kept."""
    low = F.lower(value)
    return (
        F.when(low.isin("true", "t", "1", "yes", "y", "on"), F.lit("t"))
        .when(low.isin("false", "f", "0", "no", "n", "off"), F.lit("f"))
        .otherwise(value)
    )


def bytea_from_hex(value: Column) -> Column:
    r"""PostgreSQL's ``\x`` hex text of bytes given as bare hex digits (any case)."""
    return F.concat(F.lit("\\x"), F.lower(value))


def bytea_from_base64(value: Column) -> Column:
    r"""PostgreSQL's ``\x`` hex text of base64-encoded bytes."""
    return F.concat(F.lit("\\x"), F.lower(F.hex(F.unbase64(value))))


def bytea_from_binary(value: Column) -> Column:
    r"""PostgreSQL's ``\x`` hex text of a binary column."""
    return F.concat(F.lit("\\x"), F.lower(F.hex(value)))


def bytea_from_latin1(value: Column) -> Column:
    r"""PostgreSQL's ``\x`` hex text of bytes read as ISO-8859-1 characters (canal's own form)."""
    return F.concat(F.lit("\\x"), F.lower(F.hex(F.encode(value, "ISO-8859-1"))))


def timestamptz_with_offset(value: Column) -> Column:
    """PostgreSQL's timestamptz text (``+00``) of a UTC wall-clock text without an offset.

    Texts that carry an offset (``+00``, ``-05:30`` …), and ``infinity``/``-infinity``, are
    kept; a ``BC`` suffix stays last (``0044-03-15 12:00:00+00 BC``).
    """
    kept = value.rlike("[+-][0-9]{2}(:[0-9]{2}){0,2}( BC)?$") | value.isin("infinity", "-infinity")
    return F.when(kept, value).otherwise(F.regexp_replace(value, "^(.*?)( BC)?$", "$1+00$2"))


def fraction(micros: Column) -> Column:
    """``.ffffff`` without trailing zeros for 0 ≤ ``micros`` < 10^6; empty for 0."""
    digits = F.lpad(micros.cast("string"), 6, "0")
    trimmed = F.regexp_replace(digits, "0+$", "")
    return F.when(micros == 0, F.lit("")).otherwise(F.concat(F.lit("."), trimmed))


def timestamp_text(epoch_micros: Column, *, with_zone: bool | Column) -> Column:
    """PostgreSQL's text of a timestamp given as µs since the Unix epoch (UTC).

    ``with_zone`` (a bool or a boolean column) appends ``+00`` (timestamptz).
    """
    # Exact integer arithmetic: µs past year ~2255 (2**53) do not fit a double.
    micros = F.pmod(epoch_micros.cast("long"), F.lit(1_000_000).cast("long"))
    seconds = ((epoch_micros.cast("decimal(20,0)") - micros) / F.lit(1_000_000)).cast("long")
    base = F.date_format(F.timestamp_seconds(seconds), "yyyy-MM-dd HH:mm:ss")
    text = F.concat(base, fraction(micros))
    if isinstance(with_zone, bool):
        return F.concat(text, F.lit("+00")) if with_zone else text
    return F.when(with_zone, F.concat(text, F.lit("+00"))).otherwise(text)


def date_text_from_millis(epoch_millis: Column) -> Column:
    """``YYYY-MM-DD`` of an instant given in ms since the Unix epoch (UTC)."""
    return F.date_format(F.timestamp_millis(epoch_millis), "yyyy-MM-dd")


def lsn_text(lsn: Column) -> Column:
    """PostgreSQL's ``X/Y`` text of an LSN given as a 64-bit integer."""
    return F.concat(
        F.hex(F.shiftrightunsigned(lsn, 32)),
        F.lit("/"),
        F.hex(lsn.bitwiseAND(F.lit(0xFFFFFFFF))),
    )


def lsn_number(text: Column) -> Column:
    """The 64-bit integer of an ``X/Y`` LSN text (null when malformed)."""
    ok = text.rlike("^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")
    hi = F.conv(F.substring_index(text, "/", 1), 16, 10).cast("long")
    lo = F.conv(F.substring_index(text, "/", -1), 16, 10).cast("long")
    return F.when(ok, F.shiftleft(hi, 32) + lo)


def hex_number(text: Column) -> Column:
    """The integer of hex digits (colons ignored), as a long; null when out of range."""
    digits = F.regexp_replace(text, ":", "")
    stripped = F.regexp_replace(digits, "^0+(?=.)", "")
    ok = digits.rlike("^[0-9A-Fa-f]+$") & (F.length(stripped) <= 16)
    return F.when(ok, F.conv(stripped, 16, 10).cast("decimal(20,0)").cast("long"))

r"""Debezium's value encodings → PostgreSQL's text output (Spark column expressions).

A Debezium change event carries each column in a Kafka Connect type chosen by the
connector's modes; to hold PostgreSQL's text (as every normalized image does, so that
materialized tables equal ``SELECT *``) each value is decoded by its **kind**: the
Connect ``type``, the logical ``name`` and parameters (``scale``, ``length``), the
element kind of an array, and the PostgreSQL type when walcast's layout names it. The
kind comes from the event's own Connect schema (``schemas.enable=true``), else from the
table's layout record, mapped the way Debezium maps PostgreSQL types under the modes the
parser is told (:func:`layout_kind`, options ``decimal_handling``, ``time_precision``,
``binary_handling``).

Decoding (kind → PostgreSQL text, TimeZone UTC, DateStyle ISO):

* ``Decimal`` (base64 of the unscaled two's complement big-endian bytes, ``scale``) and
  ``VariableScaleDecimal`` (``{"scale", "value"}``) → the digits with ``scale`` fraction
  digits, as ``numeric`` prints them. Unscaled values of up to 38 digits: a longer one
  does not decode (the change goes to the quarantine, :func:`undecoded`, never a wrong
  number).
* ``Date``/Connect ``Date`` (epoch days) → ``YYYY-MM-DD`` for years 1 to 9999, pgjdbc's
  days of ``infinity``/``-infinity`` (-2147472692/-2147472691) → ``infinity``/``-infinity``;
  any other day does not decode (the change goes to the quarantine, never a crash of the
  job: Spark's date formatting overflows past year ±290,000); ``MicroTime``, ``Time``
  (ms), Connect ``Time`` (ms), ``NanoTime`` → ``HH:MM:SS[.f]`` (``24:00:00`` kept);
  ``MicroTimestamp``, ``Timestamp`` (ms), Connect ``Timestamp``, ``NanoTimestamp`` →
  ``timestamp`` text; ``ZonedTimestamp`` (ISO, ``Z``) → ``timestamptz`` text (``+00``,
  fraction trimmed; ``infinity`` kept); ``ZonedTime`` → ``HH:MM:SS[.f]+00``.
* ``MicroDuration`` (µs, Debezium counting a month as 30.4375 days) → ``interval`` text
  in days and time (``3 days 04:05:06.789``). **Lossy**: an interval with months or
  years comes back as days and hours (``1 mon`` → ``30 days 10:30:00``).
* Connect ``bytes`` → ``\x`` hex (bytea); with ``binary_handling`` ``base64``/``hex`` a
  ``bytea`` column (known from the layout) is decoded from that text.
* ``Bits`` (little-endian bytes) → the bit string (up to 64 bits), ``length`` digits.
  Debezium's ``length`` is the declared length for ``bit(n)`` and ``varbit(n)`` alike, so
  a ``varbit`` is told apart only by the layout: with it, a varbit keeps its digits from
  the first 1 on (Debezium's bytes lose its leading zeros: ``0101`` → ``101``); without
  it, every ``Bits`` value is read as ``bit(n)`` (a ``varbit(8)`` ``0101`` →
  ``00000101``). ``bit(1)`` (a Connect boolean) → ``1``/``0``.
* ``boolean`` → ``t``/``f``; ``geometry.Point`` → ``(x,y)`` (a coordinate's ``.0``
  dropped as PostgreSQL prints it; Java's exponent form ``1.0E10`` kept).
* ``array`` → PostgreSQL's array text (``{1,NULL,"a b"}``, elements decoded by the item
  kind and quoted as ``array_out`` does).
* Everything else (integers, floats, strings: text, uuid, json, inet, enum, xml …) keeps
  its JSON text. Floats are Java's rendering (``1.0E10``): the same double as
  PostgreSQL's, printed otherwise.

Not decoded (documented differences): ``money`` (a Decimal of scale 2, read as its
number without the currency: ``12.34`` for ``$12.34``), ``hstore`` (Debezium's JSON
object text), ``timetz`` (Debezium keeps only the UTC time, not the offset), 2-D arrays
and ``numeric[]`` holding NaN (Debezium writes nulls), dates/timestamps before year 1
(BC) or past 9999, and the columns Debezium drops (``line``, ``lseg``, ``box``, ``path``,
``polygon``, ``circle``, ``tsquery``, ``pg_lsn``; ``name`` arrives null): those are
absent from the images, hence from the materialized table.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from pipeline import pgtext

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DAY_NAMES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
MICRO_TIME = "io.debezium.time.MicroTime"
MILLI_TIMES = ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time")
NANO_TIME = "io.debezium.time.NanoTime"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
MILLI_TIMESTAMPS = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
ZONED_TIME = "io.debezium.time.ZonedTime"
MICRO_DURATION = "io.debezium.time.MicroDuration"
BITS = "io.debezium.data.Bits"
POINT = "io.debezium.data.geometry.Point"
JSON_NAME = "io.debezium.data.Json"
CONNECT_TEMPORAL = (
    "org.apache.kafka.connect.data.Date",
    "org.apache.kafka.connect.data.Time",
    "org.apache.kafka.connect.data.Timestamp",
)
"""Kafka Connect's own temporal types (``time_precision=connect``): a ``java.util.Date``."""

KIND = (
    "struct<ctype:string,cname:string,scale:string,length:string,itype:string,iname:string,"
    "iscale:string,pg:string>"
)
"""A column's kind: Connect type, logical name, its parameters, the array item's kind
and the PostgreSQL type (null when no layout names it)."""

DECIMAL_MODES = ("precise", "string", "double")
TIME_MODES = ("adaptive", "adaptive_time_microseconds", "connect")
BINARY_MODES = ("bytes", "base64", "hex")

_INTS = {"bool": "boolean", "int2": "int16", "int4": "int32", "int8": "int64", "oid": "int64"}
_CONNECT_PG = {
    "int16": "int2",
    "int32": "int4",
    "int64": "int8",
    "float": "float4",
    "float32": "float4",
    "double": "float8",
    "float64": "float8",
    "boolean": "bool",
    "bytes": "bytea",
    "string": "text",
}
_NAME_PG = {
    DECIMAL: "numeric",
    VARIABLE_DECIMAL: "numeric",
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    MICRO_TIME: "time",
    "io.debezium.time.Time": "time",
    "org.apache.kafka.connect.data.Time": "time",
    NANO_TIME: "time",
    MICRO_TIMESTAMP: "timestamp",
    "io.debezium.time.Timestamp": "timestamp",
    "org.apache.kafka.connect.data.Timestamp": "timestamp",
    NANO_TIMESTAMP: "timestamp",
    ZONED_TIMESTAMP: "timestamptz",
    ZONED_TIME: "timetz",
    MICRO_DURATION: "interval",
    BITS: "varbit",
    POINT: "point",
    JSON_NAME: "json",
    "io.debezium.data.Uuid": "uuid",
    "io.debezium.data.Xml": "xml",
    "io.debezium.data.Ltree": "ltree",
}


def _lookup(mapping: Mapping[str, str], key: Column) -> Column:
    return F.element_at(F.create_map(*[F.lit(x) for kv in mapping.items() for x in kv]), key)


def pg_type_of_kind(kind: Column) -> Column:
    """The PostgreSQL type a kind stands for: the layout's, else guessed from Connect's.

    The guess is for typing the materialized columns (``column_types``): ``numeric``,
    ``date``, ``timestamp`` … from the logical name, else from the Connect type
    (``int32`` → ``int4``), arrays ``_<element>``.
    """
    scalar = F.coalesce(_lookup(_NAME_PG, kind["cname"]), _lookup(_CONNECT_PG, kind["ctype"]))
    item = F.coalesce(_lookup(_NAME_PG, kind["iname"]), _lookup(_CONNECT_PG, kind["itype"]))
    guessed = F.when(kind["ctype"] == "array", F.concat(F.lit("_"), item)).otherwise(scalar)
    return F.coalesce(kind["pg"], guessed, F.lit("text"))


# ------------------------------------------------------------------ kinds from a layout


def layout_kind(pg: Column, declared: Column, options: Mapping[str, str]) -> Column:
    """The kind Debezium gives a column of PostgreSQL type ``pg`` under ``options``' modes.

    ``declared`` is the type with its modifier (``numeric(12,2)``, ``timestamp(3) without
    time zone``); an array gets its element's kind as item kind.
    """
    element = F.when(pg.startswith("_"), F.substring(pg, 2, 1000))
    scalar = _scalar_kind(pg, declared, options)
    item = _scalar_kind(element, F.regexp_replace(declared, r"\[\]", ""), options)
    return F.when(
        pg.startswith("_"),
        F.struct(
            F.lit("array").alias("ctype"),
            F.lit(None).cast("string").alias("cname"),
            F.lit(None).cast("string").alias("scale"),
            F.lit(None).cast("string").alias("length"),
            item["ctype"].alias("itype"),
            item["cname"].alias("iname"),
            item["scale"].alias("iscale"),
            pg.alias("pg"),
        ),
    ).otherwise(scalar)


def _scalar_kind(pg: Column, declared: Column, options: Mapping[str, str]) -> Column:
    decimal_mode = options.get("decimal_handling", "precise")
    time_mode = options.get("time_precision", "adaptive")
    binary_mode = options.get("binary_handling", "bytes")
    modifier = F.regexp_extract(declared, r"\(\s*(\d+)\s*(?:,\s*(-?\d+)\s*)?\)", 1)
    second = F.regexp_extract(declared, r"\(\s*(\d+)\s*,\s*(-?\d+)\s*\)", 2)
    precision = F.when(modifier != "", modifier.cast("int")).otherwise(F.lit(6))
    milli = precision <= 3
    null = F.lit(None).cast("string")

    def kind(
        ctype: str,
        cname: str | Column | None = None,
        scale: Column | None = None,
        length: Column | None = None,
    ) -> Column:
        name = cname if isinstance(cname, Column) else F.lit(cname).cast("string")
        return F.struct(
            F.lit(ctype).alias("ctype"),
            name.alias("cname"),
            (scale if scale is not None else null).alias("scale"),
            (length if length is not None else null).alias("length"),
            null.alias("itype"),
            null.alias("iname"),
            null.alias("iscale"),
            pg.alias("pg"),
        )

    decimal = {
        "precise": F.when(second != "", kind("bytes", DECIMAL, second)).otherwise(
            kind("struct", VARIABLE_DECIMAL)
        ),
        "string": kind("string"),
        "double": kind("double"),
    }[decimal_mode]
    money = {
        "precise": kind("bytes", DECIMAL, F.lit("2")),
        "string": kind("string"),
        "double": kind("double"),
    }[decimal_mode]
    if time_mode == "connect":
        time_kind = kind("int32", "org.apache.kafka.connect.data.Time")
        ts_kind = kind("int64", "org.apache.kafka.connect.data.Timestamp")
        date_kind = kind("int32", "org.apache.kafka.connect.data.Date")
    else:
        micro_time = kind("int64", MICRO_TIME)
        time_kind = (
            micro_time
            if time_mode == "adaptive_time_microseconds"
            else F.when(milli, kind("int32", "io.debezium.time.Time")).otherwise(micro_time)
        )
        ts_kind = F.when(milli, kind("int64", "io.debezium.time.Timestamp")).otherwise(
            kind("int64", MICRO_TIMESTAMP)
        )
        date_kind = kind("int32", "io.debezium.time.Date")
    bit_length = F.when((pg == "bit") & (modifier != ""), modifier)
    expr = F.when(pg.isNull(), F.lit(None).cast(KIND))
    for name, ctype in _INTS.items():
        expr = expr.when(pg == name, kind(ctype))
    return (
        expr.when(pg == "float4", kind("float"))
        .when(pg == "float8", kind("double"))
        .when(pg == "numeric", decimal)
        .when(pg == "money", money)
        .when(pg == "date", date_kind)
        .when(pg == "time", time_kind)
        .when(pg == "timestamp", ts_kind)
        .when(pg == "timestamptz", kind("string", ZONED_TIMESTAMP))
        .when(pg == "timetz", kind("string", ZONED_TIME))
        .when(pg == "interval", kind("int64", MICRO_DURATION))
        .when(pg == "bytea", kind("bytes" if binary_mode == "bytes" else "string"))
        .when((pg == "bit") & (bit_length == "1"), kind("boolean"))
        .when(pg.isin("bit", "varbit"), kind("bytes", BITS, None, bit_length))
        .when(pg == "point", kind("struct", POINT))
        .when(pg.isin("json", "jsonb", "hstore"), kind("string", JSON_NAME))
        .otherwise(kind("string"))
    )


def schema_kinds(columns: Column, pg_types: Column) -> Column:
    """``map<column, kind>`` of the Connect schema's fields of a row struct.

    ``columns``: the ``fields`` array of the ``before``/``after`` struct schema;
    ``pg_types``: the layout's ``map<column, pg type>`` (may be null).
    """
    return F.map_from_arrays(
        F.transform(columns, lambda c: c["field"]),
        F.transform(
            columns,
            lambda c: F.struct(
                c["type"].alias("ctype"),
                c["name"].alias("cname"),
                c["parameters"]["scale"].alias("scale"),
                c["parameters"]["length"].alias("length"),
                c["items"]["type"].alias("itype"),
                c["items"]["name"].alias("iname"),
                c["items"]["parameters"]["scale"].alias("iscale"),
                F.element_at(pg_types, c["field"]).alias("pg"),
            ),
        ),
    )


# ------------------------------------------------------------------ decoding


def unscaled_decimal(raw: Column) -> Column:
    """The integer of big-endian two's complement bytes, as ``decimal(38,0)``.

    Null for more than 16 bytes or a value past 38 digits (never a wrapped number: the
    jobs run with ``spark.sql.ansi.enabled=false``, where a decimal overflow is null). Exact:
    every step is ``acc * 256 + octet`` in ``decimal(38,0)`` (no separate sign step, which
    lost the last digits of large negative values).
    """
    digits = F.hex(raw)
    count = F.length(raw)
    octets = F.transform(
        F.sequence(F.lit(1), F.greatest(count, F.lit(1))),
        lambda i: F.conv(F.substring(digits, i * 2 - 1, 2), 16, 10).cast("int"),
    )
    # two's complement: the first octet is signed (-128..127), the others are not, so the
    # value is exact in one pass: acc * 256 + octet, starting from the signed first octet.
    first = F.element_at(octets, 1)
    signed_first = F.when(first >= 128, first - F.lit(256)).otherwise(first)
    value = F.aggregate(
        F.slice(octets, 2, F.greatest(count - 1, F.lit(1))),
        signed_first.cast("decimal(38,0)"),
        lambda acc, x: (acc * F.lit(256) + x).cast("decimal(38,0)"),
    )
    single = signed_first.cast("decimal(38,0)")
    return (
        F.when((count < 1) | (count > 16), F.lit(None).cast("decimal(38,0)"))
        .when(count == 1, single)
        .otherwise(value)
    )


def numeric_text(unscaled: Column, scale: Column) -> Column:
    """PostgreSQL's numeric text of ``unscaled`` x 10^-``scale`` (``scale`` ≥ 0 digits)."""
    s = scale.cast("int")
    # the text without its sign (not F.abs: on decimal(38,0) it lost the last digits)
    digits = F.regexp_replace(unscaled.cast("string"), "^-", "")
    padded = F.lpad(digits, F.greatest(F.length(digits), s + 1), "0")
    whole = padded.substr(F.lit(1), F.length(padded) - s)
    fraction = padded.substr(F.length(padded) - s + 1, s)
    sign = F.when(unscaled < 0, F.lit("-")).otherwise(F.lit(""))
    text = F.concat(sign, whole, F.when(s > 0, F.concat(F.lit("."), fraction)).otherwise(""))
    return F.when(unscaled.isNotNull() & (s >= 0), text)


def _two(n: Column) -> Column:
    return F.lpad(n.cast("string"), 2, "0")


def time_text(micros: Column) -> Column:
    """``HH:MM:SS[.f]`` of µs since midnight (``24:00:00`` for 86 400 000 000)."""
    us = micros.cast("long")
    seconds = F.floor(us / F.lit(1_000_000)).cast("long")
    clock = F.concat_ws(
        ":",
        _two(F.floor(seconds / 3600)),
        _two(F.pmod(F.floor(seconds / 60), F.lit(60))),
        _two(F.pmod(seconds, F.lit(60))),
    )
    return F.when(us >= 0, F.concat(clock, pgtext.fraction(F.pmod(us, F.lit(1_000_000)))))


def interval_text(micros: Column) -> Column:
    """PostgreSQL's interval text of a µs duration, as days and time (``-1 days -02:00:00``)."""
    us = micros.cast("long")
    negative = us < 0
    magnitude = F.abs(us)
    day_us = F.lit(86_400_000_000)
    days = F.floor(magnitude / day_us).cast("long")
    rest = magnitude - days * day_us
    sign = F.when(negative, F.lit("-")).otherwise(F.lit(""))
    singular = (days == 1) & ~negative
    day_text = F.concat(sign, days.cast("string"), F.when(singular, " day").otherwise(" days"))
    clock = F.concat(sign, time_text(rest))
    return (
        F.when(us.isNull(), F.lit(None).cast("string"))
        .when((days != 0) & (rest == 0), day_text)
        .when(days != 0, F.concat(day_text, F.lit(" "), clock))
        .otherwise(F.when(negative, clock).otherwise(time_text(rest)))
    )


def zoned_text(iso: Column) -> Column:
    """``2024-02-29T11:45:01.123400Z`` → ``2024-02-29 11:45:01.1234+00`` (also times)."""
    trimmed = F.regexp_replace(F.regexp_replace(iso, r"(\.[0-9]*?)0+Z$", "$1Z"), r"\.Z$", "Z")
    return F.when(
        iso.endswith("Z"), F.regexp_replace(F.regexp_replace(trimmed, "T", " "), "Z$", "+00")
    ).otherwise(iso)


def bits_text(base64: Column, length: Column) -> Column:
    """The bit string of little-endian bytes (``length`` digits when known), ≤ 64 bits."""
    big_endian_hex = F.array_join(
        F.reverse(F.regexp_extract_all(F.hex(F.unbase64(base64)), F.lit("(..)"), 1)), ""
    )
    bits = F.conv(F.coalesce(F.nullif(big_endian_hex, F.lit("")), F.lit("0")), 16, 2)
    n = length.cast("int")
    ok = F.length(F.unbase64(base64)) <= 8
    return F.when(ok & n.isNotNull(), F.lpad(bits, n, "0")).when(
        ok, F.when(big_endian_hex == "", F.lit("")).otherwise(bits)
    )


def _coordinate(value: Column) -> Column:
    return F.regexp_replace(value, r"\.0$", "")


def point_text(json_text: Column) -> Column:
    """``(x,y)`` of Debezium's ``{"x", "y", "wkb", "srid"}``."""
    return F.concat(
        F.lit("("),
        _coordinate(F.get_json_object(json_text, "$.x")),
        F.lit(","),
        _coordinate(F.get_json_object(json_text, "$.y")),
        F.lit(")"),
    )


def _bytea(value: Column, ctype: Column, pg: Column, binary_mode: str) -> Column:
    if binary_mode == "hex":
        from_string = pgtext.bytea_from_hex(value)
    elif binary_mode == "base64":
        from_string = pgtext.bytea_from_base64(value)
    else:
        from_string = value
    return F.when(ctype == "bytes", pgtext.bytea_from_base64(value)).when(
        (ctype == "string") & (pg == "bytea"), from_string
    )


def scalar_text(
    value: Column,
    ctype: Column,
    cname: Column,
    scale: Column,
    length: Column,
    pg: Column,
    binary_mode: str,
    unscaled: Column,
) -> Column:
    """PostgreSQL's text of one value of a non-array kind (see the module docstring).

    ``unscaled``: the value's :func:`decimal_unscaled`, computed in an earlier pass (see
    :func:`decoded_image`).
    """
    as_long = value.cast("long")
    variable_scale = F.get_json_object(value, "$.scale")
    nanos = value.cast("decimal(38,0)")
    return (
        F.when(value.isNull(), value)
        .when(cname == DECIMAL, numeric_text(unscaled, scale))
        .when(cname == VARIABLE_DECIMAL, numeric_text(unscaled, variable_scale))
        .when(cname.isin(*DAY_NAMES), day_text(as_long))
        .when(cname == MICRO_TIME, time_text(as_long))
        .when(cname.isin(*MILLI_TIMES), time_text(as_long * 1000))
        .when(cname == NANO_TIME, time_text(F.floor(nanos / 1000)))
        .when(cname == MICRO_TIMESTAMP, pgtext.timestamp_text(as_long, with_zone=False))
        .when(cname.isin(*MILLI_TIMESTAMPS), pgtext.timestamp_text(as_long * 1000, with_zone=False))
        .when(
            cname == NANO_TIMESTAMP, pgtext.timestamp_text(F.floor(nanos / 1000), with_zone=False)
        )
        .when(cname.isin(ZONED_TIMESTAMP, ZONED_TIME), zoned_text(value))
        .when(cname == MICRO_DURATION, interval_text(as_long))
        .when(cname == BITS, bits_text(value, F.when(~pg.eqNullSafe("varbit"), length)))
        .when(cname == POINT, point_text(value))
        .when(
            (ctype == "boolean") & (pg == "bit"),
            F.when(value == "true", "1").when(value == "false", "0"),
        )
        .when(ctype == "boolean", pgtext.bool_text(value))
        .when(
            (ctype == "bytes") | ((ctype == "string") & (pg == "bytea")),
            _bytea(value, ctype, pg, binary_mode),
        )
        .otherwise(value)
    )


DATE_INFINITY = -2_147_472_692
"""pgjdbc's epoch day of ``'infinity'::date`` (walcast's encoder writes the same)."""
DATE_NEG_INFINITY = -2_147_472_691
FIRST_DAY, LAST_DAY = -719_162, 2_932_896
"""Epoch days of 0001-01-01 and 9999-12-31: the dates decoded."""


def day_text(days: Column) -> Column:
    """``YYYY-MM-DD`` of an epoch day (years 1-9999), ``infinity``/``-infinity``, else null."""
    return (
        F.when(days == F.lit(DATE_INFINITY), F.lit("infinity"))
        .when(days == F.lit(DATE_NEG_INFINITY), F.lit("-infinity"))
        .when(
            days.between(FIRST_DAY, LAST_DAY),
            F.date_format(F.date_add(F.lit("1970-01-01"), days.cast("int")), "yyyy-MM-dd"),
        )
    )


def array_element_text(text: Column) -> Column:
    """An array element as ``array_out`` writes it: quoted when needed, NULL for null."""
    quoted = F.concat(
        F.lit('"'),
        F.regexp_replace(F.regexp_replace(text, r"\\", r"\\\\"), '"', r'\\"'),
        F.lit('"'),
    )
    needs_quotes = (text == "") | text.rlike(r'[{}",\\\s]') | (F.upper(text) == "NULL")
    return F.when(needs_quotes, quoted).otherwise(text)


def decimal_unscaled(value: Column, cname: Column) -> Column:
    """The unscaled integer of a ``Decimal`` or ``VariableScaleDecimal`` value, else null."""
    encoded = F.when(cname == DECIMAL, value).when(
        cname == VARIABLE_DECIMAL, F.get_json_object(value, "$.value")
    )
    return F.when(encoded.isNotNull(), unscaled_decimal(F.unbase64(encoded)))


def staged_value(value: Column, kind: Column) -> Column:
    """The first pass of :func:`value_text`: the value, its kind, and its decimals decoded.

    ``struct<v, kind, u, items: array<struct<v, u>>>``: ``u`` is the value's (or an
    element's) :func:`decimal_unscaled`; ``items`` the elements of an array kind.
    Decoding a decimal is the largest expression here; computing it in its own pass keeps
    it out of every branch that reads it, so Spark plans the image in seconds, not tens.
    """
    items = F.when(
        kind["ctype"] == "array",
        F.transform(
            F.from_json(value, "array<string>"),
            lambda e: F.struct(e.alias("v"), decimal_unscaled(e, kind["iname"]).alias("u")),
        ),
    )
    return F.struct(
        value.alias("v"),
        kind.alias("kind"),
        decimal_unscaled(value, kind["cname"]).alias("u"),
        items.alias("items"),
    )


def staged_texts(staged: Column, binary_mode: str = "bytes") -> Column:
    """The second pass of :func:`value_text`: the texts of a :func:`staged_value`.

    ``struct<v, kind, scalar, elements: array<struct<sent, t>>>``: ``scalar`` is the
    value's :func:`scalar_text`, ``elements`` each array element's (``sent``: not null in
    the array). The third pass (:func:`finished_text`) reads these as fields: each
    :func:`scalar_text` is in the plan once, not once per reference (an element's text was
    referenced about ten times: a value's expression was 170 KB of text, an image's 185 KB;
    now 30 KB and 45 KB).
    """
    value, kind = staged["v"], staged["kind"]
    scalar = scalar_text(
        value,
        kind["ctype"],
        kind["cname"],
        kind["scale"],
        kind["length"],
        kind["pg"],
        binary_mode,
        staged["u"],
    )
    element_pg = F.when(kind["pg"].startswith("_"), F.substring(kind["pg"], 2, 1000))
    elements = F.transform(
        staged["items"],
        lambda e: F.struct(
            e["v"].isNotNull().alias("sent"),
            scalar_text(
                e["v"],
                kind["itype"],
                kind["iname"],
                kind["iscale"],
                F.lit(None).cast("string"),
                element_pg,
                binary_mode,
                e["u"],
            ).alias("t"),
        ),
    )
    return F.struct(
        value.alias("v"), kind.alias("kind"), scalar.alias("scalar"), elements.alias("elements")
    )


def finished_text(texts: Column) -> Column:
    """The third pass of :func:`value_text`: PostgreSQL's text of a :func:`staged_texts`."""
    value, kind, elements = texts["v"], texts["kind"], texts["elements"]
    # an element that does not decode leaves the whole array undecoded (never a NULL)
    array = F.when(
        ~F.exists(elements, lambda x: x["sent"] & x["t"].isNull()),
        F.concat(
            F.lit("{"),
            F.array_join(F.transform(elements, lambda x: array_element_text(x["t"])), ",", "NULL"),
            F.lit("}"),
        ),
    )
    return (
        F.when(kind.isNull() | value.isNull(), value)
        .when(kind["ctype"] == "array", array)
        .otherwise(texts["scalar"])
    )


def value_text(value: Column, kind: Column, binary_mode: str = "bytes") -> Column:
    """PostgreSQL's text of a value (JSON text) of ``kind`` (null kind: kept as it is).

    One value decoded as :func:`decoded_image` decodes an image's (the same three passes).
    """
    name = F.lit("value")
    image = decoded_image(F.create_map(name, value), F.create_map(name, kind), binary_mode)
    return F.element_at(image, name)


def decoded_image(image: Column, kinds: Column, binary_mode: str = "bytes") -> Column:
    """``image`` with every value decoded by its column's kind (null kinds: null image).

    Three passes over the image's entries (:func:`staged_value`, :func:`staged_texts`,
    :func:`finished_text`): Spark does not merge two ``transform`` calls, so each pass
    reads the one before as fields instead of repeating its expression.
    """
    staged = F.transform(
        F.map_entries(image),
        lambda e: F.struct(
            e["key"].alias("k"),
            staged_value(e["value"], F.element_at(kinds, e["key"])).alias("s"),
        ),
    )
    texts = F.transform(
        staged,
        lambda e: F.struct(e["k"].alias("k"), staged_texts(e["s"], binary_mode).alias("s")),
    )
    finished = F.transform(
        texts, lambda e: F.struct(e["k"].alias("key"), finished_text(e["s"]).alias("value"))
    )
    return F.when(kinds.isNotNull(), F.map_from_entries(finished))


def undecoded(raw: Column, decoded: Column) -> Column:
    """Columns whose value is not null in ``raw`` but did not decode (null in ``decoded``)."""
    return F.coalesce(
        F.map_keys(
            F.map_filter(raw, lambda k, v: v.isNotNull() & F.element_at(decoded, k).isNull())
        ),
        F.array().cast("array<string>"),
    )

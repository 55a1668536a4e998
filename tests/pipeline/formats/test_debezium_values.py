"""Debezium's value encodings → PostgreSQL's text (``pipeline.formats.debezium.decode_values``).

Each expected text is computed here in Python from the original value (the encodings as
Kafka Connect and Debezium define them), not copied from the decoder's output.
"""

# ruff: noqa: N812, DTZ001, DTZ901
# (naive datetimes: Debezium's timestamps are wall-clock times)
from __future__ import annotations

import base64
import datetime as dt
import random
from decimal import Context, Decimal, localcontext

import pytest

pytestmark = pytest.mark.integration

EPOCH = dt.datetime(1970, 1, 1)


def connect_decimal(value: Decimal, scale: int) -> str:
    """Kafka Connect's Decimal: BigInteger.toByteArray of the unscaled value, base64."""
    with localcontext(Context(prec=100)):
        unscaled = int(value.scaleb(scale))
    magnitude = unscaled if unscaled >= 0 else -unscaled - 1
    raw = unscaled.to_bytes((magnitude.bit_length() + 8) // 8, "big", signed=True)
    return base64.b64encode(raw).decode()


def pg_numeric(value: Decimal, scale: int) -> str:
    """numeric's text with ``scale`` fraction digits."""
    return f"{value:.{scale}f}"


FIELDS = ("ctype", "cname", "scale", "length", "itype", "iname", "iscale", "pg")


def _decode_many(spark, cases: list[tuple[str | None, dict[str, str | None]]]) -> list[str | None]:
    """Each ``(value, kind)`` decoded, in one Spark job."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    from pipeline.formats.debezium.decode_values import KIND, value_text  # noqa: PLC0415
    from pipeline.local_frames import local_rows  # noqa: PLC0415

    rows = [(i, v, *[kind.get(f) for f in FIELDS]) for i, (v, kind) in enumerate(cases)]
    schema = "i int, v string, " + ", ".join(f"{f} string" for f in FIELDS)
    frame = local_rows(spark, rows, schema)
    k = F.struct(*[F.col(f) for f in FIELDS]).cast(KIND)
    out = frame.select("i", value_text(F.col("v"), k).alias("t")).orderBy("i").collect()
    return [r["t"] for r in out]


def _decode(spark, rows: list[tuple], kind: dict[str, str | None]) -> list[str | None]:
    return _decode_many(spark, [(v, kind) for _, v in rows])


def test_decimals_of_every_sign_and_size(spark) -> None:
    rng = random.Random(26)
    cases: list[tuple[Decimal, int]] = [(Decimal(0), 2), (Decimal("-0.01"), 2)]
    for _ in range(40):
        scale = rng.randint(0, 12)
        digits = rng.randint(1, 38 - scale)
        unscaled = rng.randint(-(10**digits) + 1, 10**digits - 1)
        with localcontext(Context(prec=100)):
            cases.append((Decimal(unscaled).scaleb(-scale), scale))
    cases += [(Decimal(-128), 0), (Decimal(127), 0), (Decimal(255), 0), (Decimal(-129), 0)]
    cases += [(Decimal(10**37 * 9 + 1), 0), (Decimal(-(10**37) * 9 - 1), 0)]
    name = "org.apache.kafka.connect.data.Decimal"
    got = _decode_many(
        spark,
        [
            (connect_decimal(v, scale), {"ctype": "bytes", "cname": name, "scale": str(scale)})
            for v, scale in cases
        ],
    )
    assert got == [pg_numeric(v, scale) for v, scale in cases]


def test_variable_scale_decimal_and_overflow(spark) -> None:
    value = Decimal("12345678901234567890.123456789")
    wrapped = f'{{"scale":9,"value":"{connect_decimal(value, 9)}"}}'
    too_long = Decimal(10**40)
    rows = [
        (0, wrapped),
        (1, f'{{"scale":0,"value":"{connect_decimal(too_long, 0)}"}}'),
    ]
    got = _decode(
        spark, rows, {"ctype": "struct", "cname": "io.debezium.data.VariableScaleDecimal"}
    )
    assert got == [pg_numeric(value, 9), None]  # past 38 digits: not decoded, never wrapped


def test_dates_times_timestamps_intervals(spark) -> None:
    cases: list[tuple[str | None, dict[str, str | None]]] = []
    expected: list[str | None] = []

    def case(value: str, kind: dict[str, str | None], text: str) -> None:
        cases.append((value, kind))
        expected.append(text)

    for d in (0, -1, 19782, 2932896):  # 1970-01-01, 1969-12-31, 2024-02-29, 9999-12-31
        day = (dt.date(1970, 1, 1) + dt.timedelta(days=d)).isoformat()
        case(str(d), {"ctype": "int32", "cname": "io.debezium.time.Date"}, day)

    def clock(us: int) -> str:
        if us == 86_400_000_000:
            return "24:00:00"
        text = (dt.datetime.min + dt.timedelta(microseconds=us)).strftime("%H:%M:%S.%f")
        return text.rstrip("0").rstrip(".")

    for us in (0, 1, 45_296_789_000, 86_399_999_999, 86_400_000_000):
        case(str(us), {"ctype": "int64", "cname": "io.debezium.time.MicroTime"}, clock(us))
    case("45296789", {"ctype": "int32", "cname": "io.debezium.time.Time"}, clock(45_296_789_000))

    def ts_text(t: dt.datetime) -> str:  # isoformat: a 4-digit year (strftime: "1" for 1)
        return t.replace(microsecond=0).isoformat(sep=" ") + clock(t.microsecond)[8:]

    for t in (
        dt.datetime(2024, 2, 29, 13, 45, 1, 123456),
        dt.datetime(1969, 12, 31, 23, 59, 59, 500000),
        dt.datetime(1, 1, 1),
        dt.datetime(2999, 12, 31, 23, 59, 59),
    ):
        micros = (t - EPOCH) // dt.timedelta(microseconds=1)
        case(
            str(micros), {"ctype": "int64", "cname": "io.debezium.time.MicroTimestamp"}, ts_text(t)
        )
        millis = (t - EPOCH) // dt.timedelta(milliseconds=1)
        truncated = t.replace(microsecond=t.microsecond // 1000 * 1000)
        case(
            str(millis),
            {"ctype": "int64", "cname": "io.debezium.time.Timestamp"},
            ts_text(truncated),
        )
    zoned = {"ctype": "string", "cname": "io.debezium.time.ZonedTimestamp"}
    for iso, text in (
        ("2024-02-29T11:45:01.123400Z", "2024-02-29 11:45:01.1234+00"),
        ("1970-01-01T00:00:00.500000Z", "1970-01-01 00:00:00.5+00"),
        ("2024-01-01T00:00:00Z", "2024-01-01 00:00:00+00"),
        ("infinity", "infinity"),
        ("-infinity", "-infinity"),
    ):
        case(iso, zoned, text)
    day_us = 86_400_000_000
    duration = {"ctype": "int64", "cname": "io.debezium.time.MicroDuration"}
    for us, text in (
        (3 * day_us + 14_706_789_000, "3 days 04:05:06.789"),
        (0, "00:00:00"),
        (day_us, "1 day"),
        (-day_us, "-1 days"),
        (-(day_us + 7_200_000_000), "-1 days -02:00:00"),
        (5_000_000, "00:00:05"),
    ):
        case(str(us), duration, text)
    assert _decode_many(spark, cases) == expected


def test_bytes_bits_points_booleans_arrays(spark) -> None:
    cases: list[tuple[str | None, dict[str, str | None]]] = []
    expected: list[str | None] = []

    def case(value: str, kind: dict[str, str | None], text: str | None) -> None:
        cases.append((value, kind))
        expected.append(text)

    for blob in (bytes.fromhex("00ff00deadbeef"), b"", bytes(range(256))):
        case(base64.b64encode(blob).decode(), {"ctype": "bytes"}, "\\x" + blob.hex())
    case("00FF", {"ctype": "string", "pg": "bytea"}, "00FF")  # binary_handling=bytes: kept

    def bits(text: str) -> str:  # Debezium: the bits as a little-endian number's bytes
        number = int(text, 2)
        return base64.b64encode(number.to_bytes((len(text) + 7) // 8, "little")).decode()

    bit4 = {"ctype": "bytes", "cname": "io.debezium.data.Bits", "length": "4"}
    for pattern in ("1010", "0101", "0000", "1"):
        case(bits(pattern), bit4, pattern.rjust(4, "0"))
    varbit = {"ctype": "bytes", "cname": "io.debezium.data.Bits", "length": "8", "pg": "varbit"}
    case(bits("0101"), varbit, "101")  # a layout's varbit: Debezium lost its leading zero
    point = {"ctype": "struct", "cname": "io.debezium.data.geometry.Point"}
    case('{"x":1.5,"y":-2.0,"wkb":"AQ==","srid":null}', point, "(1.5,-2)")
    case("true", {"ctype": "boolean"}, "t")
    case("false", {"ctype": "boolean"}, "f")
    case("true", {"ctype": "boolean", "pg": "bit"}, "1")
    ints = {"ctype": "array", "itype": "int32"}
    case("[1,null,-3]", ints, "{1,NULL,-3}")
    case("[]", ints, "{}")
    texts = {"ctype": "array", "itype": "string"}
    case(
        '["a b","c,d","e\\"f",null,"NULL","","x\\\\y"]',
        texts,
        '{"a b","c,d","e\\"f",NULL,"NULL","","x\\\\y"}',
    )
    zoned = {"ctype": "array", "itype": "string", "iname": "io.debezium.time.ZonedTimestamp"}
    case('["2024-01-01T00:00:00.000000Z","infinity"]', zoned, '{"2024-01-01 00:00:00+00",infinity}')
    case("[true,false]", {"ctype": "array", "itype": "boolean"}, "{t,f}")
    assert _decode_many(spark, cases) == expected

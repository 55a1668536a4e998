"""``walcast spark materialize --partition-by``: state tables partitioned as asked, or one line.

The rules (:mod:`pipeline.partitioning`) without Spark; the CLI's errors before any JVM;
then Delta (columns) and Iceberg (columns and transforms) tables created partitioned,
read back equal to the changes, and a later run asking for another partitioning refused
before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capture.errors import ConfigError
from capture.events import Op
from pipeline.iceberg_store import catalog_for, partition_fields, table_name
from pipeline.partitioning import (
    PartitionField,
    check_columns,
    check_store,
    parse_partition_by,
)
from pipeline.tables import table_path
from tests.pipeline.layout_changes import Materialized
from tests.pipeline.test_cli import assert_one_line_error
from tests.support import scenario as sc
from tests.support.events import table_with

ORDERS = table_with(
    "public", "orders",
    [("id", "int8", True, -1), ("region", "text", False, -1), ("at", "timestamptz", False, -1),
     ("n", "int4", False, -1)],
)  # fmt: skip


def test_fields_are_columns_or_transforms_in_the_order_given() -> None:
    parsed = parse_partition_by(
        ["shop.orders=region, days(created_at)", "shop.orders=bucket(16, id)", " a . b = n_2"]
    )
    assert parsed == {
        ("shop", "orders"): (
            PartitionField("identity", "region"),
            PartitionField("days", "created_at"),
            PartitionField("bucket", "id", 16),
        ),
        ("a", "b"): (PartitionField("identity", "n_2"),),
    }
    assert [f.text() for f in parsed[("shop", "orders")]] == [
        "region",
        "days(created_at)",
        "bucket(16, id)",
    ]
    assert parse_partition_by(None) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("orders=region", "--partition-by orders=region: write SCHEMA.TABLE=FIELD[,FIELD...]"),
        ("shop.orders", "write SCHEMA.TABLE=FIELD"),
        ("shop.orders=", "an empty field is not a column"),
        ("shop.orders=region-1", "'region-1' is not a column or a transform of one"),
        ("shop.orders=truncate(4, name)", "truncate() is not a partition transform"),
        ("shop.orders=bucket(id)", "write bucket(N, column)"),
        ("shop.orders=days(3, at)", "write days(column)"),
        ("shop.orders=bucket(0, id)", "bucket needs 1 to 2,147,483,647 buckets"),
        ("shop.orders=bucket(2147483648, id)", "bucket needs 1 to"),
        ("shop.orders=region,region", "region is given twice"),
        ("shop.orders=bucket(4, id),bucket(8, id)", "id has two bucket fields"),
        ("shop.orders=days(at),months(at)", "at has two time transforms"),
        ("shop.orders=`a b`", "'`a b`' is not a column or a transform of one"),
    ],
)
def test_a_wrong_field_is_one_line_naming_it(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^--partition-by ") as raised:
        parse_partition_by([value])
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_parquet_and_a_delta_transform_are_refused_and_types_are_checked() -> None:
    fields = parse_partition_by(["shop.orders=days(at)"])
    with pytest.raises(ConfigError, match="needs Delta Lake or Iceberg tables"):
        check_store(fields, "parquet")
    with pytest.raises(ConfigError, match=r"days\(at\): Delta Lake partitions by columns only"):
        check_store(fields, "delta")
    check_store(fields, "iceberg")
    check_store(parse_partition_by(["shop.orders=region"]), "delta")
    check_store({}, "parquet")
    columns = [("id", "bigint"), ("at", "string"), ("score", "double")]
    with pytest.raises(ConfigError, match="column at is string in the table, and days"):
        check_columns(fields[("shop", "orders")], "shop", "orders", columns)
    bucket = parse_partition_by(["shop.orders=bucket(4, score)"])[("shop", "orders")]
    with pytest.raises(ConfigError, match="column score is double"):
        check_columns(bucket, "shop", "orders", columns)
    gone = parse_partition_by(["shop.orders=region"])[("shop", "orders")]
    with pytest.raises(ConfigError, match=r"has no column region \(its columns: id, at, score\)"):
        check_columns(gone, "shop", "orders", columns)


def test_cli_errors_before_spark_are_one_line(tmp_path: Path) -> None:
    args = ["spark", "materialize", "--input", str(tmp_path), "--output", str(tmp_path / "o"),
            "--checkpoint", str(tmp_path / "c")]  # fmt: skip
    done = sc.walcast(*args, "--partition-by", "orders=region")
    assert done.returncode == 2
    assert_one_line_error(done, "--partition-by orders=region: write SCHEMA.TABLE=FIELD")
    done = sc.walcast(*args, "--parquet", "--partition-by", "public.orders=region")
    assert done.returncode == 2
    assert_one_line_error(done, "--partition-by needs Delta Lake or Iceberg tables")
    for store in (["--store", "delta"], []):  # Delta is the default store
        done = sc.walcast(*args, *store, "--partition-by", "public.orders=hours(at)")
        assert done.returncode == 2
        assert_one_line_error(done, "Delta Lake partitions by columns only", "--store iceberg")


def _rows(n: int) -> list[tuple]:
    return [
        (ORDERS, Op.INSERT, {"id": str(i), "region": "eu" if i % 2 else "us",
                             "at": f"2026-12-0{1 + i % 3} 10:00:00+00", "n": str(i)})
        for i in range(1, n + 1)
    ]  # fmt: skip


def test_a_partitioned_table_nothing_names_is_said_once() -> None:
    """A misspelt ``--partition-by`` table would partition nothing, silently: the job says
    so once (after a batch that read the layouts, and at the end of the run)."""
    from pipeline.materialize import MaterializeJob  # noqa: PLC0415 - imports pyspark

    lines: list[str] = []
    asked = parse_partition_by(["shop.ordrs=region", "shop.orders=region"])
    job = MaterializeJob("in", "out", "ckpt", partition_by=asked, report=lines.append)
    job.seen |= {("shop", "orders"), ("shop", "items")}
    job._unmatched()
    job.seen.add(("shop", "customers"))
    job._unmatched()
    said = (
        "walcast spark materialize: --partition-by shop.ordrs: no layout or change of this "
        "run names that table, so nothing is partitioned by it yet; check the name (tables "
        "seen: shop.items, shop.orders)"
    )
    assert lines == [said]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("store", "fields", "shown"),
    [
        ("delta", "region", ["region"]),
        ("iceberg", "region,days(at),bucket(4, id)", ["region", "days(at)", "bucket(4, id)"]),
        # columns only: DESCRIBE prints another section (its second batch was refused)
        ("iceberg", "region,n", ["region", "n"]),
    ],
)
def test_a_table_is_created_partitioned_and_never_re_partitioned(
    spark, tmp_path, store: str, fields: str, shown: list[str]
) -> None:
    root = str(tmp_path / "state")
    asked = parse_partition_by([f"public.orders={fields}"])
    seen: set[tuple[str, str]] = set()
    tables = Materialized(spark, root, store, partition_by=asked, seen=seen)
    tables.source.publish(ORDERS)
    tables.apply(0, *_rows(6))
    assert seen == {("public", "orders")}  # what the job checks --partition-by names against
    tables.apply(1, (ORDERS, Op.UPDATE, {"id": "2", "region": "eu", "at": None, "n": "20"}),
                 (ORDERS, Op.DELETE, {"id": "3"}, None))  # fmt: skip
    assert tables.rows("orders", "id", "region", "n") == [
        (1, "eu", 1), (2, "eu", 20), (4, "us", 4), (5, "eu", 5), (6, "us", 6),
    ]  # fmt: skip
    if store == "delta":
        path = table_path(root, "public", "orders")
        found = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["partitionColumns"]
        assert list(found) == shown
        regions = {p.name for p in Path(path).iterdir() if p.name.startswith("region=")}
        assert regions == {"region=eu", "region=us"}
    else:
        name = table_name(catalog_for(spark, root), "public", "orders", None)
        assert partition_fields(spark, name) == shown
        assert spark.table(f"{name}.partitions").count() > 1
    # a later run asking for another partitioning (or one for a table made without):
    # one line, and the table as it was
    other = Materialized(spark, root, store, partition_by=parse_partition_by(["public.orders=n"]))
    other.source = tables.source
    with pytest.raises(ConfigError) as refused:
        other.apply(2, (ORDERS, Op.DELETE, {"id": "1"}, None))
    text = str(refused.value)
    assert text.startswith(
        f"--partition-by public.orders=n: the {store} table public.orders exists with another "
        f"partitioning ({', '.join(shown)}); walcast never re-partitions a table"
    ), text
    assert (1, "eu", 1) in tables.rows("orders", "id", "region", "n")
    # none asked for: applied to the table as it is
    again = Materialized(spark, root, store)
    again.source = tables.source
    again.apply(2, (ORDERS, Op.DELETE, {"id": "1"}, None))
    assert tables.rows("orders", "id") == [(2,), (4,), (5,), (6,)]

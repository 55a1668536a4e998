"""How state tables are partitioned: ``walcast spark materialize --partition-by``.

``--partition-by SCHEMA.TABLE=FIELD[,FIELD...]`` (the flag repeats, one table or several
fields each time) partitions the state table of ``SCHEMA.TABLE`` when materialize creates
it. A FIELD is one of the table's columns, or with ``--store iceberg`` one of Iceberg's
transforms of a column: ``years(c)``, ``months(c)``, ``days(c)``, ``hours(c)``,
``bucket(N, c)``. A table's fields keep the order given.

Decisions (where the issue is silent):

* **Delta Lake partitions by columns only**: a transform with Delta is refused (one line,
  naming the field and ``--store iceberg``); Delta's generated columns are not offered.
* **The Parquet store is refused**: it rewrites the whole table each batch, and a reader
  of partition directories gets the partition columns back last, with guessed types.
* **Set once, at creation.** A table that exists keeps its partitioning. When it differs
  from the one asked for (another, or none), materialize stops with one line naming the
  table, both partitionings and what to do, before writing that table: it never
  re-partitions a table silently. (The batch's tables before it, in name order, may be
  written already: the batch's checkpoint is not committed, so the run with the right
  flags applies it again, and each store skips what it has: idempotent per batch.) Without
  ``--partition-by`` for a table, nothing is checked (a later run need not repeat it). The
  refusals of a field by the new table's columns stop the batch the same way.
* A field naming a column the table does not have when it is created is refused (one
  line naming the table's columns); so is a transform of a column of the wrong type (the
  message names the field and the type). ``truncate(W, c)`` is not offered (Spark's
  DataFrame API has no such transform).
* Histories (``--history``) are not partitioned.

Parsing (:func:`parse_partition_by`, :class:`PartitionField`) needs no pyspark; the stores
use :func:`iceberg_columns`, :func:`delta_columns` and :func:`check_partitioning`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capture.errors import ConfigError

_TIME = ("years", "months", "days", "hours")
TRANSFORMS = (*_TIME, "bucket")
"""Iceberg's transforms that ``--partition-by`` offers (``identity`` is a bare column)."""

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
"""A column name a partition field may name: plain (Iceberg's Spark writer parses each
field's column again, and a name that needs quoting breaks there)."""
_MAX_BUCKETS = 2**31 - 1
_FIELD = re.compile(
    rf"^\s*(?:(?P<column>{_NAME})"
    rf"|(?P<transform>[a-z]+)\s*\(\s*(?:(?P<number>[0-9]+)\s*,\s*)?(?P<arg>{_NAME})\s*\))\s*$"
)


@dataclass(frozen=True, slots=True)
class PartitionField:
    """One partition field: a column (``transform`` ``identity``) or a transform of one."""

    transform: str
    """``identity`` or one of :data:`TRANSFORMS`."""
    column: str
    """The column's name: plain, never quoted (:data:`_NAME`)."""
    buckets: int | None = None
    """``bucket``'s number of buckets (None for the others)."""

    def text(self) -> str:
        """The field as Spark and Iceberg print it: ``region``, ``days(at)``, ``bucket(8, id)``."""
        if self.transform == "identity":
            return self.column
        if self.transform == "bucket":
            return f"bucket({self.buckets}, {self.column})"
        return f"{self.transform}({self.column})"


Partitioning = Mapping[tuple[str, str], tuple[PartitionField, ...]]
"""``(schema, table)`` → the table's partition fields, in order."""


def _split_fields(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses (``bucket(8, id)`` is one field)."""
    fields, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            fields.append(current)
            current = ""
        else:
            current += char
    fields.append(current)
    return fields


def parse_field(text: str, flag: str) -> PartitionField:
    """One FIELD of ``--partition-by`` (``flag``: the whole value, for the error line)."""
    match = _FIELD.match(text)
    if match is None:
        raise ConfigError(
            f"--partition-by {flag}: {repr(text.strip()) if text.strip() else 'an empty field'} "
            "is not a column or a transform of one",
            hint="give plain column names (letters, digits, _) or "
            f"{', '.join(f'{t}(column)' for t in _TIME)}, bucket(N, column)",
        )
    if match["column"] is not None:
        return PartitionField("identity", match["column"])
    transform, number = match["transform"], match["number"]
    if transform not in TRANSFORMS:
        raise ConfigError(
            f"--partition-by {flag}: {transform}() is not a partition transform walcast offers",
            hint=f"one of {', '.join(TRANSFORMS)} (Iceberg's; truncate is not offered)",
        )
    if (transform == "bucket") != (number is not None):
        shape = "bucket(N, column)" if transform == "bucket" else f"{transform}(column)"
        raise ConfigError(f"--partition-by {flag}: write {shape}")
    buckets = None if number is None else int(number)
    if buckets is not None and not 1 <= buckets <= _MAX_BUCKETS:
        raise ConfigError(f"--partition-by {flag}: bucket needs 1 to {_MAX_BUCKETS:,} buckets")
    return PartitionField(transform, match["arg"], buckets)


def parse_partition_by(
    values: Sequence[str] | None,
) -> dict[tuple[str, str], tuple[PartitionField, ...]]:
    """``--partition-by`` values → :data:`Partitioning`; a ConfigError names a wrong one.

    A table named twice gets the fields of both, in order; a field named twice, or two time
    transforms of one column, are refused.
    """
    tables: dict[tuple[str, str], tuple[PartitionField, ...]] = {}
    for value in values or ():
        name, eq, fields = value.partition("=")
        schema, dot, table = (part.strip() for part in name.strip().partition("."))
        if not eq or not dot or not schema or not table or "." in table:
            raise ConfigError(
                f"--partition-by {value}: write SCHEMA.TABLE=FIELD[,FIELD...]",
                hint="e.g. --partition-by shop.orders=region or "
                "--partition-by shop.orders='days(created_at)' (Iceberg)",
            )
        parsed = [parse_field(f, value) for f in _split_fields(fields)]
        known = tables.get((schema, table), ())
        for field in parsed:
            same = [f for f in known if f.column == field.column]
            if any(f.transform == field.transform for f in same):
                raise ConfigError(
                    f"--partition-by {value}: {field.column} has two {field.transform} fields"
                    if field.transform != "identity"
                    else f"--partition-by {value}: {field.column} is given twice"
                )
            if field.transform in _TIME and any(f.transform in _TIME for f in same):
                raise ConfigError(
                    f"--partition-by {value}: {field.column} has two time transforms "
                    "(Iceberg takes one per column)",
                    hint="keep the finest you need",
                )
            known = (*known, field)
        tables[(schema, table)] = known
    return tables


def check_store(partitioning: Partitioning, store: str) -> None:
    """Refuse ``partitioning`` for a store that cannot have it (module doc)."""
    if not partitioning:
        return
    if store == "parquet":
        raise ConfigError(
            "--partition-by needs Delta Lake or Iceberg tables: the Parquet store rewrites "
            "each table whole every batch",
            hint="use --store delta or --store iceberg, or drop --partition-by",
        )
    if store == "delta":
        for (schema, table), fields in sorted(partitioning.items()):
            for field in fields:
                if field.transform != "identity":
                    raise ConfigError(
                        f"--partition-by {schema}.{table}={field.text()}: Delta Lake "
                        "partitions by columns only",
                        hint="name a column, or use --store iceberg for transforms",
                    )


_TIME_TYPES = ("date", "timestamp", "timestamp_ntz")
_UNBUCKETED = ("float", "double", "boolean", "map", "array", "struct")
_DATED = (lambda kind: kind in _TIME_TYPES, "a date or timestamp")
_ACCEPTS: dict[str, tuple[Callable[[str], bool], str]] = {
    **dict.fromkeys(("years", "months", "days"), _DATED),
    "hours": (lambda kind: kind in _TIME_TYPES[1:], "a timestamp"),
    "bucket": (
        lambda kind: not kind.startswith(_UNBUCKETED),
        "a number, text, binary, date or timestamp",
    ),
}
"""Per transform: which Spark column types it takes (a type's name, e.g. ``decimal(12,2)``,
``array<int>``), and those types in words."""


def check_columns(
    fields: Sequence[PartitionField], schema: str, table: str, columns: Sequence[tuple[str, str]]
) -> None:
    """Refuse a field whose column the new table lacks, or whose transform its type refuses.

    ``columns``: the table's columns as it is created (name, Spark type).
    """
    types = dict(columns)
    for field in fields:
        where = f"--partition-by {schema}.{table}={field.text()}"
        kind = types.get(field.column)
        if kind is None:
            raise ConfigError(
                f"{where}: {schema}.{table} has no column {field.column} (its columns: "
                f"{', '.join(types)})",
                hint="name one of its columns",
            )
        takes, need = _ACCEPTS.get(field.transform, (lambda _: True, ""))
        if not takes(kind):
            raise ConfigError(
                f"{where}: column {field.column} is {kind} in the table, and "
                f"{field.transform}() needs {need}",
                hint="typed columns need materialize without --text"
                if kind == "string"
                else "partition by another column",
            )


def check_partitioning(
    fields: Sequence[PartitionField], schema: str, table: str, found: Sequence[str], store: str
) -> None:
    """Refuse a table that exists with another partitioning (``found``: its fields' text)."""
    wanted = [f.text() for f in fields]
    if [f.replace("`", "") for f in found] == wanted:  # names are plain: no quotes to keep
        return
    has = ", ".join(found) if found else "none"
    raise ConfigError(
        f"--partition-by {schema}.{table}={','.join(wanted)}: the {store} table "
        f"{schema}.{table} exists with another partitioning ({has}); walcast never "
        "re-partitions a table",
        hint="give its partitioning, drop the flag for it, or materialize into a new "
        "--output to create the table anew",
    )


def delta_columns(fields: Sequence[PartitionField]) -> list[str]:
    """The Delta table's partition columns (:func:`check_store` refused transforms)."""
    return [f.column for f in fields]


def iceberg_columns(fields: Sequence[PartitionField]) -> list[Any]:
    """The Iceberg table's partition fields as Spark columns (``writeTo(…).partitionedBy``)."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415
    from pyspark.sql.functions import partitioning as P  # noqa: N812, PLC0415

    out: list[Any] = []
    for field in fields:
        column = F.col(field.column)  # a plain name (:data:`_NAME`)
        if field.transform == "identity":
            out.append(column)
        elif field.transform == "bucket":
            out.append(P.bucket(field.buckets or 1, column))
        else:
            out.append(getattr(P, field.transform)(column))
    return out

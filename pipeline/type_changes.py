"""Column type changes at the source (``ALTER COLUMN … TYPE``), as each store follows them.

A state table's columns have the Spark types of the table's newest layout
(:mod:`pipeline.pgtypes`). When a layout changes a column's type, materialize compares
the stored column's type with the new one before it writes anything to the table:

* **the same** (after the store's own reading: Iceberg has no ``smallint``, it stores an
  ``int``): nothing to do. PostgreSQL changes that keep the Spark type, such as
  ``varchar(20)`` → ``varchar(200)`` or ``varchar`` → ``text``, land here;
* **a widening the store can follow**: the column's type is changed in place before the
  batch is applied; every stored value is kept exactly (:data:`WIDENINGS`);
* **anything else** (a narrowing such as ``bigint`` → ``int``, or another kind, such as
  ``text`` → ``int`` or ``int`` → ``text``): the table cannot take the new values without
  casting them, and a cast would change or lose some. The table's changes of the batch are
  quarantined (:func:`quarantine_path`), the table is left as it was (never half-applied),
  and one line names the column, both types and what to do (:func:`refusal_line`).

The widenings, per store (decided from each format's documentation, and the intersection
of what Spark casts exactly):

================  ===================================================================
store             widenings followed
================  ===================================================================
delta             ``smallint`` → ``int`` → ``bigint``; ``float`` → ``double``;
                  ``smallint``/``int`` → ``double``; ``decimal(p,s)`` →
                  ``decimal(p+k1,s+k2)`` with k1 ≥ k2 ≥ 0; ``smallint``/``int`` →
                  ``decimal(p,s)`` with p - s ≥ 10, ``bigint`` with p - s ≥ 20;
                  ``date`` → ``timestamp_ntz``. Delta Lake's type widening (delta-spark
                  4.0): the table gets the ``typeWidening`` feature
                  (``delta.enableTypeWidening``) at its first widening, and its readers
                  need a Delta Lake that supports it (4.0 and later).
parquet           the same as delta: the table is rewritten, its values cast.
iceberg           ``int`` → ``bigint``; ``float`` → ``double``; ``decimal(p,s)`` →
                  ``decimal(p',s)`` with p' ≥ p (Iceberg's type promotion: the scale
                  stays).
================  ===================================================================

``typed=False`` (``--text``) stores every column as text, so no type ever changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.tables import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STORES = ("delta", "parquet", "iceberg")
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_INTEGRAL_DIGITS = {"smallint": 10, "int": 10, "bigint": 20}
"""The least integer digits (precision - scale) of a decimal an integral type widens to
(Delta Lake's rule: ``decimal(10,0)`` for smallint and int, ``decimal(20,0)`` for bigint)."""

WIDENINGS: dict[str, dict[str, frozenset[str]]] = {
    "delta": {
        "smallint": frozenset({"int", "bigint", "double"}),
        "int": frozenset({"bigint", "double"}),
        "float": frozenset({"double"}),
        "date": frozenset({"timestamp_ntz"}),
    },
    "iceberg": {
        "int": frozenset({"bigint"}),
        "float": frozenset({"double"}),
    },
}
"""Store → old type → the types it widens to in place (decimals: :func:`is_widening`)."""
WIDENINGS["parquet"] = WIDENINGS["delta"]


@dataclass(frozen=True, slots=True)
class TypeChange:
    """A column whose stored type differs from its newest layout's."""

    column: str
    old: str
    """The stored column's Spark type."""
    new: str
    """The newest layout's Spark type."""

    def __str__(self) -> str:
        return f"{self.column} {self.old} → {self.new}"


def _stored_form(spark_type: str, store: str) -> str:
    """The type as the store keeps it (Iceberg has no smallint: it keeps an int)."""
    kind = spark_type.replace(" ", "").lower()
    if store == "iceberg" and kind in {"smallint", "tinyint"}:
        return "int"
    return kind


def _decimal(kind: str) -> tuple[int, int] | None:
    match = _DECIMAL.match(kind)
    return (int(match.group(1)), int(match.group(2))) if match else None


def is_widening(old: str, new: str, store: str) -> bool:
    """Whether ``store`` changes a column of Spark type ``old`` to ``new`` keeping every value."""
    old, new = _stored_form(old, store), _stored_form(new, store)
    if new == old or new in WIDENINGS[store].get(old, ()):
        return True
    target = _decimal(new)
    if target is None:
        return False
    precision, scale = target
    source = _decimal(old)
    if source is not None:
        grown, scaled = precision - source[0], scale - source[1]
        if store == "iceberg":
            return scaled == 0 and grown >= 0
        return grown >= scaled >= 0
    digits = _INTEGRAL_DIGITS.get(old)
    return store != "iceberg" and digits is not None and precision - scale >= digits


def type_changes(
    stored: Mapping[str, str], wanted: Sequence[tuple[str, str]], store: str
) -> tuple[list[TypeChange], list[TypeChange]]:
    """``(widened, refused)``: the columns whose type ``stored`` holds otherwise.

    ``wanted`` is (name, Spark type) pairs, ``stored`` the table as it is (name → Spark
    type). The columns it holds with another type are split into the widenings ``store``
    follows and the changes it cannot (a column ``stored`` lacks is an ADD COLUMN:
    neither).
    """
    widened: list[TypeChange] = []
    refused: list[TypeChange] = []
    for name, kind in wanted:
        old = stored.get(name)
        if old is None or _stored_form(old, store) == _stored_form(kind, store):
            continue
        change = TypeChange(name, old, kind)
        (widened if is_widening(old, kind, store) else refused).append(change)
    return widened, refused


class TypeChangeRefused(Exception):  # noqa: N818 - a decision, not a failure: apply_batch quarantines
    """A table's newest layout changes a column's type in a way its store cannot follow.

    Raised by a store before it writes anything to the table; :func:`pipeline.materialize.
    apply_batch` quarantines the table's changes of the batch and goes on with the others.
    """

    def __init__(self, store: str, refused: Sequence[TypeChange]) -> None:
        self.store = store
        self.refused = tuple(refused)
        super().__init__(", ".join(map(str, self.refused)))


def stored_types(table: DataFrame) -> dict[str, str]:
    """A stored table's columns: name → Spark type (``DataType.simpleString``)."""
    return {f.name: f.dataType.simpleString() for f in table.schema.fields}


def checked_type_changes(
    stored: Mapping[str, str], wanted: Sequence[tuple[str, str]], store: str
) -> list[TypeChange]:
    """The widenings ``store`` makes before writing columns ``wanted`` over ``stored``.

    :class:`TypeChangeRefused` (nothing written) when a column
    changed type in a way the store cannot follow (module doc).
    """
    widened, refused = type_changes(stored, wanted, store)
    if refused:
        raise TypeChangeRefused(store, refused)
    return widened


def widen_delta(spark: SparkSession, path: str, widened: Sequence[TypeChange]) -> None:
    """Change the type of ``widened``'s columns of the Delta table at ``path`` in place.

    Delta Lake's type widening: the table gets the ``typeWidening`` feature.
    """
    table = f"delta.`{path}`"
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    for change in widened:
        column = quote_identifier(change.column)
        spark.sql(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {change.new}")


# ------------------------------------------------------------------ refused: the quarantine


TYPE_CHANGE = "type_change"
"""The quarantine reason of a table's changes held back by a type change its store cannot
follow (:func:`pipeline.materialize.apply_batch`)."""


def quarantine_path(state_root: str) -> str:
    """Where materialize quarantines changes: ``<state root>_quarantine``.

    Beside the state, as normalize's ``<output>_quarantine`` is beside its output.

    Parquet, one directory per batch (``batch_id=<n>``, rewritten whole when a batch runs
    again: no duplicates): the normalized changes (:data:`~pipeline.model.NORMALIZED`) with
    ``reason`` (:data:`TYPE_CHANGE`) and ``detail`` (the columns and their types).
    """
    return state_root.rstrip("/") + "_quarantine"


def refused_changes(part: DataFrame, refusal: TypeChangeRefused) -> DataFrame:
    """The changes ``part`` of a table held back by ``refusal``, with reason and detail."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415 - the rules need no Spark

    detail = f"{refusal.store} cannot change column type: {refusal}"
    return part.select("*", F.lit(TYPE_CHANGE).alias("reason"), F.lit(detail).alias("detail"))


def write_quarantine(frames: list[DataFrame], root: str, batch_id: int) -> None:
    """Write a batch's held-back changes to ``root``'s ``batch_id=<n>`` (replaced whole)."""
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    rows.write.mode("overwrite").parquet(f"{root}/batch_id={batch_id}")


def refusal_line(
    label: str,
    schema: str,
    table: str,
    store: str,
    refusal: TypeChangeRefused,
    count: int,
    batch_id: int,
    root: str,
) -> str:
    """The one line that says a table's changes of a batch were held back, and what to do."""
    columns = ", ".join(f"{c.column} ({c.old} → {c.new})" for c in refusal.refused)
    kind = {"delta": "a Delta", "iceberg": "an Iceberg", "parquet": "a Parquet"}[store]
    return (
        f"walcast spark materialize: {label}: the source changed the type of {columns}, "
        f"which {kind} table cannot follow without changing stored values; the table is "
        f"left as it was and its {count:,} changes of batch {batch_id} are quarantined in "
        f"{root} (reason {TYPE_CHANGE}). To follow the new type, drop the table (and its "
        f"history), then reload it at the source: walcast snapshot --table {schema}.{table}"
    )

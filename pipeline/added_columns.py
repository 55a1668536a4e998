"""Columns the source added with a DEFAULT: the rows stored before get its value.

PostgreSQL adds a column with a non-volatile DEFAULT (``ALTER TABLE … ADD COLUMN c int
DEFAULT 7``) without writing any row: the rows stored before read the value from the
catalog. No change carries it, so a table materialized from the changes would hold NULL
there, silently unlike the source. walcast's layout record names the value (a column's
``missing``: capture's :attr:`capture.events.Table.missing_values`; a spec's
:attr:`~pipeline.tables.TableSpec.missing`), and materialize gives it

* to the stored rows, when the column is added to the table (:func:`add_and_fill`: one
  MERGE over the table; a keyless table's row keys are made again with the value). In
  Delta and Iceberg the columns to fill are recorded in the table property
  :data:`PENDING_FILL` before the ``ADD COLUMNS`` and the property is removed after the
  fill, so a crash between them fills on the next run. Invariant: the fill runs before the
  batch's MERGE, so every stored row it touches is a row stored before the ADD (the fill
  is idempotent). The Parquet store adds and fills in the rewrite of its batch.
* to the batch's changes encoded before the column existed (:func:`fill_images`: their
  ``column_types``, the layout they were encoded with, lack it): their images get the
  value, as their row got it at the source. The history keeps the changes as they were
  sent.

Decisions: a column added with a volatile DEFAULT (``clock_timestamp()``, ``random()``)
made PostgreSQL rewrite the table with a value per row; no layout names those values, and
the stored rows keep NULL there: reload the table (``walcast snapshot --table``), as the
README says. A change without ``column_types`` (no layout: another producer) is never
filled.
"""

# ruff: noqa: N812
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.fold import ROW_KEY, rekeyed
from pipeline.pgtypes import from_text
from pipeline.tables import TableProperties, TableSpec, quote_identifier

PENDING_FILL = "walcast.pendingFill"
"""Table property (Delta, Iceberg): the added columns whose stored rows still await their
value, a JSON object of column → text value (:func:`add_and_fill`)."""


def fill_images(
    changes: DataFrame, missing: Sequence[tuple[str, str]], *, keyless: bool
) -> DataFrame:
    """``changes`` with each added column's value in the images encoded before it existed.

    The after image always; the before image too for a keyless table, whose rows are
    found by their whole image.
    """
    if not missing:
        return changes
    types = F.col("column_types")
    for image in ("after", "before") if keyless else ("after",):
        value: Column = F.col(image)
        for name, text in missing:
            lacks = (
                types.isNotNull()
                & ~F.map_contains_key(types, F.lit(name))
                & value.isNotNull()
                & ~F.map_contains_key(value, F.lit(name))
            )
            value = F.when(
                lacks, F.map_concat(value, F.create_map(F.lit(name), F.lit(text)))
            ).otherwise(value)
        changes = changes.withColumn(image, value)
    return changes


def add_and_fill(
    spec: TableSpec,
    adding: Sequence[str],
    properties: TableProperties,
    *,
    add: Callable[[], Any],
) -> Any:
    """Add the columns ``adding`` to a table and give its stored rows their DEFAULT.

    ``spec`` is the source's columns (no lineage ones); ``properties`` the table's, where
    :data:`PENDING_FILL` is kept. ``add()`` adds the columns (none to add: nothing) and
    returns the table to fill (a ``DeltaTable``, or the Iceberg store's stand-in), which
    this returns.
    """
    pending = properties.get(PENDING_FILL)
    fills = {n: v for n, v in spec.missing if n in set(adding)}
    todo = {**(json.loads(pending) if pending else {}), **fills}
    if fills:
        properties.set(PENDING_FILL, json.dumps(todo, sort_keys=True))
    target = add()
    if todo:
        _fill_stored(target, spec, todo)
        properties.unset(PENDING_FILL)
    return target


def _fill_stored(target: Any, spec: TableSpec, fills: dict[str, str]) -> None:
    """Give every stored row of ``target`` the ``fills`` (column → text value): one UPDATE.

    A keyless table's row keys are made again with the values (:func:`pipeline.fold.rekeyed`).
    """
    types = dict(spec.columns)
    pairs = sorted(fills.items())
    quoted = quote_identifier
    sets: dict[str, Column] = {quoted(n): from_text(F.lit(v), types[n]) for n, v in pairs}
    if not spec.primary_key:
        sets[quoted(ROW_KEY)] = rekeyed(F.col(quoted(ROW_KEY)), spec.names, pairs)
    target.update(set=sets)

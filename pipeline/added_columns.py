"""Columns the source added: the rows stored before get the DEFAULT's value (or NULL).

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
  value, as their row got it at the source. So does a column added without a DEFAULT
  (the layout's ``missing_null``): such images get NULL, and are complete rows (the
  stored rows need no fill: the ``ADD COLUMNS`` gives them NULL). Without either, the
  value is unknown and a row such an image alone would make is kept out
  (:mod:`pipeline.stores`).

The history (:func:`pipeline.history_store.apply_history`) gets the same: its stored versions are
filled (a value only in the current versions), and so are the batch's changes, whose
renamed columns keep their values under every name they had (:func:`under_every_name`).

The same fill, with the same record, gives a renamed column the values the old name holds
and a name used again by a new column that column's value
(:mod:`pipeline.column_numbers` says which columns, :func:`fill_values` reads them all from
the row as it was).

Decisions: a column added with a volatile DEFAULT (``clock_timestamp()``, ``random()``)
made PostgreSQL rewrite the table with a value per row; no layout names those values, and
the stored rows keep NULL there: reload the table (``walcast snapshot --table``), as the
README says. A change without ``column_types`` (no layout: another producer) is never
filled.
"""

# ruff: noqa: N812
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.column_numbers import Fill, planned_fills, record_numbers, recorded_numbers
from pipeline.fold import ROW_KEY, rekeyed
from pipeline.lineage import LINEAGE_NAMES
from pipeline.pgtypes import from_text
from pipeline.tables import TableProperties, TableSpec, quote_identifier

PENDING_FILL = "walcast.pendingFill"
"""Table property (Delta, Iceberg): the columns whose stored rows still await their values,
a JSON object of column → ``[how, what]`` (a :data:`~pipeline.column_numbers.Fill`;
walcast 0.2 wrote a DEFAULT's text alone) (:func:`add_and_fill`)."""


def fill_images(
    changes: DataFrame,
    missing: Sequence[tuple[str, str | None]],
    *,
    keyless: bool,
    before: Mapping[str, Sequence[Sequence[str]]] | None = None,
) -> DataFrame:
    """``changes`` with each added column's value (None: NULL) in images encoded before it.

    The after image always; the before image too for a keyless table, whose rows are
    found by their whole image. An image is filled where its ``column_types`` (the layout
    it was encoded with) lack the column and the image does not have it. ``before`` (the
    history's, whose columns include those dropped since) names, per column, the layouts
    (their column names, sorted) that came before the column was added: only images
    encoded with one of them are filled, never one encoded after the column was dropped.

    One expression per image whatever the number of columns (the names an image lacks, then
    one ``map_concat``): a table whose every column is in ``missing`` (NULL where there is
    no DEFAULT) stays cheap to plan.
    """
    if before is not None:  # a column no earlier layout lacked is in every image's layout
        missing = [(n, v) for n, v in missing if n not in before or before[n]]
    if not missing:
        return changes
    types = F.col("column_types")
    signature = F.array_sort(F.map_keys(types))
    names = F.array(*[F.lit(n) for n, _ in missing]).cast("array<string>")
    values = F.create_map(*[x for n, v in missing for x in (F.lit(n), F.lit(v).cast("string"))])
    restricted = [(n, before[n]) for n, _ in missing if before is not None and n in before]
    if restricted:
        signatures = [F.when(_one_of(signature, layouts), F.lit(n)) for n, layouts in restricted]
        limited = {n for n, _ in restricted}
        open_names = [n for n, _ in missing if n not in limited]
        allowed = F.array_compact(
            F.array(*signatures, *[F.lit(n) for n in open_names]).cast("array<string>")
        )
        names = F.array_intersect(names, allowed)
    for image in ("after", "before") if keyless else ("after",):
        value = F.col(image)
        lacking = F.array_except(F.array_except(names, F.map_keys(types)), F.map_keys(value))
        changes = changes.withColumn(
            image,
            F.when(
                types.isNotNull() & value.isNotNull() & (F.size(lacking) > 0),
                F.map_concat(value, _entries_of(values, lacking)),
            ).otherwise(value),
        )
    return changes


def _entries_of(values: Column, names: Column) -> Column:
    """The entries of the map ``values`` whose key is in the array ``names``."""
    return F.map_filter(values, lambda k, _: F.array_contains(names, k))


def _one_of(signature: Column, layouts: Sequence[Sequence[str]]) -> Column:
    """``signature`` (sorted column names) is one of ``layouts``'."""
    found = F.lit(False)  # noqa: FBT003
    for names in layouts:
        found = found | (signature == F.array(*[F.lit(n) for n in names]).cast("array<string>"))
    return found


def renamed_images(
    changes: DataFrame, renames: Sequence[tuple[list[str], dict[str, str | None]]]
) -> DataFrame:
    """``changes`` with older layouts' images (and names) in the newest layout's names.

    See :func:`pipeline.column_numbers.image_renames`.
    """
    if not renames:
        return changes
    signature = F.array_sort(F.map_keys(F.col("column_types")))
    mapped: dict[str, Column] = {
        c: F.col(c)
        for c in ("before", "after", "column_types", "unchanged_toast", "changed_columns")
    }
    for names, mapping in renames:
        matches = F.col("column_types").isNotNull() & (
            signature == F.array(*[F.lit(n) for n in names]).cast("array<string>")
        )
        renamed = {k: v for k, v in mapping.items() if v is not None}
        dropped = sorted(set(mapping) | set(renamed.values()))
        for column in ("before", "after", "column_types"):
            mapped[column] = F.when(matches, _map_keys(F.col(column), renamed, dropped)).otherwise(
                mapped[column]
            )
        for column in ("unchanged_toast", "changed_columns"):
            mapped[column] = F.when(matches, _names(F.col(column), renamed, dropped)).otherwise(
                mapped[column]
            )
    return changes.withColumns(mapped)


def under_every_name(changes: DataFrame, groups: Sequence[Sequence[str]]) -> DataFrame:
    """``changes`` whose images hold each column's value under every name of its group.

    ``groups``: :func:`pipeline.column_numbers.names_per_column` (the history's). An image
    that has one name of a group gets the value under the group's other names too (an
    image never has two of them: one layout gives a column one name). A version read as
    of a time before or after a rename then has the column under the name of then.
    """
    if not groups:
        return changes
    return changes.withColumns({i: _every_name(F.col(i), groups) for i in ("before", "after")})


def _every_name(image: Column, groups: Sequence[Sequence[str]]) -> Column:
    """``image`` with the entries a group's other names lack (:func:`under_every_name`)."""
    entries = []
    for group in groups:
        has = {n: F.map_contains_key(image, F.lit(n)) for n in group}
        value: Column = F.lit(None)
        present: Column = F.lit(False)  # noqa: FBT003
        for name in group:
            value = F.when(has[name], F.element_at(image, F.lit(name))).otherwise(value)
            present = present | has[name]
        entries += [
            F.when(present & ~has[n], F.struct(F.lit(n).alias("key"), value.alias("value")))
            for n in group
        ]
    added = F.map_from_entries(F.filter(F.array(*entries), lambda e: e.isNotNull()))
    return F.when(image.isNotNull(), F.map_concat(image, added))


def _renamed(name: Column, renamed: Mapping[str, str]) -> Column:
    result: Column = name
    for old, new in renamed.items():
        result = F.when(name == F.lit(old), F.lit(new)).otherwise(result)
    return result


def _map_keys(image: Column, renamed: Mapping[str, str], dropped: Sequence[str]) -> Column:
    """The image without ``dropped`` keys, with each ``renamed`` key's value under its new name.

    No key comes twice: every name added is among ``dropped``.
    """
    old = list(renamed)
    rest = F.map_filter(image, lambda k, _: ~k.isin(*dropped)) if dropped else image
    if not old:
        return rest
    moved = F.transform_keys(
        F.map_filter(image, lambda k, _: k.isin(*old)), lambda k, _: _renamed(k, renamed)
    )
    return F.map_concat(rest, moved)


def _names(names: Column, renamed: Mapping[str, str], dropped: Sequence[str]) -> Column:
    old = list(renamed)
    rest = F.filter(names, lambda n: ~n.isin(*dropped)) if dropped else names
    if not old:
        return rest
    moved = F.transform(F.filter(names, lambda n: n.isin(*old)), lambda n: _renamed(n, renamed))
    return F.concat(rest, moved)


def add_and_fill(
    spec: TableSpec,
    stored: Mapping[str, str],
    properties: TableProperties,
    *,
    store: str,
    add: Callable[[], Any],
    values_where: Column | None = None,
    also: Mapping[str, Fill] | None = None,
) -> Any:
    """Add the source's new columns to a table and give its stored rows their values.

    ``spec`` is the source's columns (no lineage ones); ``stored`` the table's columns
    (name → Spark type) before; ``properties`` the table's, where :data:`PENDING_FILL` is
    kept. The values: a DEFAULT's (the layout's ``missing``), a renamed column's (copied
    from the column that held them), or NULL for a column whose name the source gave to
    a new column (:func:`pipeline.column_numbers.stored_fills`); the table then records
    the numbers its columns stand for. ``add()`` adds the columns not stored (none: nothing)
    and returns the table to fill (a ``DeltaTable``, or the Iceberg store's stand-in), which
    this returns. A renamed column whose new type the store cannot follow from the old one
    raises :class:`~pipeline.type_changes.TypeChangeRefused` before anything is written.
    ``values_where`` limits the value fills (not the copies) to the rows it selects (the
    history's current versions: a closed version of a name used again held the old column).
    ``also``: fills of the columns to add besides those (the history's: a column's other
    names, :func:`pipeline.history_store.apply_history`); the newest layout's win.
    """
    stored = {n: t for n, t in stored.items() if n not in LINEAGE_NAMES and n != ROW_KEY}
    fills, numbers = planned_fills(spec, stored, recorded_numbers(properties), store)
    fills = {**(also or {}), **fills}
    pending = properties.get(PENDING_FILL)
    todo = {**(_decoded(pending) if pending else {}), **fills}
    if fills:
        properties.set(PENDING_FILL, json.dumps(todo, sort_keys=True))
    target = add()
    if todo:
        _fill_stored(target, spec, todo, stored, values_where)
    record_numbers(properties, numbers, spec.layouts[-1] if spec.layouts else ())
    if pending or fills:
        properties.unset(PENDING_FILL)
    return target


def _decoded(pending: str) -> dict[str, Fill]:
    """:data:`PENDING_FILL`'s fills (walcast 0.2 wrote column → DEFAULT text)."""
    found: dict[str, Any] = json.loads(pending)
    return {n: ("value", f) if isinstance(f, str) else (str(f[0]), f[1]) for n, f in found.items()}


def _fill_stored(
    target: Any,
    spec: TableSpec,
    fills: Mapping[str, Fill],
    stored: Mapping[str, str],
    values_where: Column | None = None,
) -> None:
    """Set the ``fills`` in every stored row of ``target``: one UPDATE (:func:`fill_values`).

    A keyless table's row keys are made again with them (:func:`pipeline.fold.rekeyed`).
    """
    sets, values, renamed = fill_values(fills, spec, stored)
    if values_where is not None:
        for name, (how, _) in fills.items():
            if how == "value" and name in stored:
                sets[name] = F.when(values_where, sets[name]).otherwise(
                    F.col(quote_identifier(name))
                )
    quoted = {quote_identifier(n): value for n, value in sets.items()}
    if not spec.primary_key:
        quoted[quote_identifier(ROW_KEY)] = rekeyed(
            F.col(quote_identifier(ROW_KEY)), spec.names, values, renamed
        )
    target.update(set=quoted)


def fill_values(
    fills: Mapping[str, Fill], spec: TableSpec, stored: Mapping[str, str]
) -> tuple[dict[str, Column], list[tuple[str, str | None]], dict[str, str]]:
    """Each filled column's new value, read from the stored row as it was.

    A swap of two names is one step; values are typed as ``spec`` has the column
    (``stored``: the stored types).

    Also returns, for a keyless table's row keys (:func:`pipeline.fold.rekeyed`), the
    columns given a value and the renames (old name → new).
    """
    types = dict(spec.columns)
    sets: dict[str, Column] = {}
    values: list[tuple[str, str | None]] = []
    renamed: dict[str, str] = {}
    for name, (how, what) in sorted(fills.items()):
        if how == "from" and what is not None:
            copied = F.col(quote_identifier(what))
            sets[name] = copied if stored.get(what) == types[name] else copied.cast(types[name])
            renamed[what] = name
        else:
            sets[name] = from_text(F.lit(what), types[name])
            if what is not None or name in stored:
                values.append((name, what))
    return sets, values, renamed

"""Columns followed by their catalog number: a RENAME COLUMN, and a name used again.

PostgreSQL's Relation message names a table's columns but does not number them, so a
``RENAME COLUMN a TO b`` looks like ``a`` dropped and ``b`` added, and a column dropped then
added again under its old name looks like nothing happened. Both leave a materialized
table silently unlike the source: ``b`` NULL in every stored row (PostgreSQL kept ``a``'s
values), or the new ``a`` holding the dropped column's values. walcast's layout record gives
each column its catalog number (``attnum``: capture's
:attr:`capture.events.Table.column_numbers`), which a rename keeps and no other column ever
gets again; :attr:`pipeline.tables.TableSpec.layouts` holds every layout of the table with
those numbers, and this module turns them into

* the **stored rows' fills** (:func:`stored_fills`): a column of the newest layout whose
  number a stored column has under another name gets that column's values (a rename: one
  UPDATE, :mod:`pipeline.added_columns` runs it with the DEFAULT fills and the same
  crash-safe record); a stored column whose name the newest layout gives to another number
  gets the new column's value for the rows stored before (its DEFAULT's, else NULL). The
  renamed-away column stays in a Delta or Iceberg table like a dropped one (with the values
  it last had: an additive change, which streaming readers of the table and its Change Data
  Feed follow, where Delta's RENAME COLUMN would need column mapping and stop them); the
  Parquet store rewrites without it. The numbers the stored columns stand for are the table
  property :data:`COLUMN_NUMBERS` (Delta, Iceberg); without it (Parquet, or a table written
  before walcast recorded it) they are those of the newest layout with exactly the stored
  columns, else each name's newest number (:func:`stored_numbers`);
* the **batch's images** encoded with an older layout (:func:`image_renames`;
  :func:`pipeline.added_columns.renamed_images` applies it): a change's ``column_types``
  names the columns of the layout it was encoded with; the images of a change whose
  columns are exactly an older layout's get that layout's names mapped to the newest ones
  (a value sent as ``a`` lands in ``b``; a value of a dropped column whose name the newest
  layout gives to another column is left out). A consumer of the topics does the same
  (README, "What walcast guarantees"): this module imports no pyspark.

Decisions: a column without a number (its layout was decoded after later DDL had renamed or
retyped it, where the catalog cannot say which column it was:
:mod:`capture.catalog_numbers`; or a layout from before walcast recorded numbers)
is followed by its name, as before. A layout with the same column names as another but
other numbers (two columns swapping names; a column dropped and added again under its name)
cannot be told apart from it by a change's ``column_types``: its images are not mapped, so
such a change in the same batch as the DDL is applied by name (the stored rows are
right). A column dropped and added again with the same name and type, with no other
change, gives no new layout version at all: its stored values stay (reload the table).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pipeline.tables import Layout, TableProperties, TableSpec
from pipeline.type_changes import checked_type_changes

COLUMN_NUMBERS = "walcast.columnNumbers"
"""Table property (Delta, Iceberg): the catalog number each stored column stands for, a JSON
object of column → number (:func:`record_numbers`)."""

Fill = tuple[str, str | None]
"""How a stored column gets its values: ``("from", column)`` (copied from another stored
column: a rename) or ``("value", text)`` (the same value in every row: a DEFAULT's, or NULL
for None)."""


def numbers_of(layout: Layout) -> dict[str, int]:
    """Column → number, for the layout's columns that have one."""
    return {name: number for name, number in layout if number is not None}


def stored_numbers(
    recorded: Mapping[str, int] | None, stored: Sequence[str], layouts: Sequence[Layout]
) -> dict[str, int]:
    """The number each stored column stands for (module doc: recorded, else derived)."""
    if recorded is not None:
        return {n: k for n, k in recorded.items() if n in set(stored)}
    names = set(stored)
    for layout in reversed(layouts):  # the newest layout with exactly the stored columns
        if {n for n, _ in layout} == names:
            return numbers_of(layout)
    derived: dict[str, int] = {}
    for layout in layouts:  # oldest first: each name's newest number, each number's newest name
        for name, number in numbers_of(layout).items():
            if name in names:
                derived = {n: k for n, k in derived.items() if k != number}
                derived[name] = number
    return derived


def stored_fills(
    numbers: Mapping[str, int],
    stored: Sequence[str],
    newest: Layout,
    missing: Mapping[str, str | None],
) -> dict[str, Fill]:
    """The columns of the newest layout whose stored values must be set, and how.

    ``numbers``: what the stored columns stand for (:func:`stored_numbers`); ``missing``: the
    DEFAULT values the rows stored before an ADD read (:attr:`TableSpec.missing`). A column
    not stored yet and new at the source is not here (its ADD gives it NULL, or its DEFAULT
    through :func:`pipeline.added_columns.add_and_fill`).
    """
    by_number = {k: n for n, k in numbers.items()}
    fills: dict[str, Fill] = {}
    for name, number in newest:
        if number is None or numbers.get(name) == number:
            continue
        source = by_number.get(number)
        if source is not None and source != name:
            fills[name] = ("from", source)  # renamed: the values the old name holds
        elif name in stored and name in numbers:
            fills[name] = ("value", missing.get(name))  # the name is another column's now
    return fills


def planned_fills(
    spec: TableSpec, stored: Mapping[str, str], recorded: Mapping[str, int] | None, store: str
) -> tuple[dict[str, Fill], dict[str, int]]:
    """What a table's stored rows get before a batch is applied, and what its columns were.

    ``stored``: the table's source columns (name → Spark type); ``recorded``: its
    :data:`COLUMN_NUMBERS` (None: none). The fills are :func:`stored_fills`' and, for a
    column new to the table, its DEFAULT's value when the layout names one. A renamed
    column whose new type ``store`` cannot follow from the old one raises
    :class:`~pipeline.type_changes.TypeChangeRefused` (nothing written yet). Also returns
    what the stored columns stand for (:func:`stored_numbers`).
    """
    newest = spec.layouts[-1] if spec.layouts else ()
    numbers = stored_numbers(recorded, list(stored), spec.layouts)
    fills = stored_fills(numbers, list(stored), newest, dict(spec.missing))
    types = dict(spec.columns)
    copies = {n: stored[s] for n, (how, s) in fills.items() if how == "from" and s is not None}
    checked_type_changes(copies, [(n, types[n]) for n in copies], store)
    fills |= {
        n: ("value", v)
        for n, v in spec.missing
        if v is not None and n not in stored and n not in fills  # NULL: the ADD gives it
    }
    return fills, numbers


def record_numbers(properties: TableProperties, numbers: Mapping[str, int], newest: Layout) -> None:
    """Record what the stored columns stand for (:data:`COLUMN_NUMBERS`).

    After the fills: the newest layout's numbers, and those of the columns it no longer
    has (kept, like a dropped column) unless a column of now has it (renamed: the old name
    holds the values it last had, no longer the column's, and is followed by name).
    """
    now = numbers_of(newest)
    taken = set(now.values())
    kept = {n: k for n, k in numbers.items() if n not in now and k not in taken}
    value = json.dumps({**kept, **now}, sort_keys=True)
    if now and properties.get(COLUMN_NUMBERS) != value:
        properties.set(COLUMN_NUMBERS, value)


def recorded_numbers(properties: TableProperties) -> dict[str, int] | None:
    """The table's :data:`COLUMN_NUMBERS`, or None when it has none."""
    value = properties.get(COLUMN_NUMBERS)
    return None if value is None else {str(n): int(k) for n, k in json.loads(value).items()}


def image_renames(layouts: Sequence[Layout]) -> list[tuple[list[str], dict[str, str | None]]]:
    """Per older layout whose images need mapping: its column names (sorted), the mapping.

    The mapping takes its names to the newest layout's (None: left out). Ambiguous
    layouts are skipped (module doc).
    """
    if not layouts:
        return []
    newest = layouts[-1]
    by_number = {k: n for n, k in numbers_of(newest).items()}
    current = {n for n, _ in newest}
    found: dict[tuple[str, ...], dict[str, str | None] | None] = {}
    for layout in layouts[:-1]:
        names = tuple(sorted(n for n, _ in layout))
        if set(names) == current or not numbers_of(layout):
            continue  # the newest's names, or numbers unknown (followed by name)
        mapping: dict[str, str | None] = {}
        for name, number in layout:
            if number is None:
                continue
            target = by_number.get(number)
            if target is not None and target != name:
                mapping[name] = target
            elif target is None and name in current:
                mapping[name] = None  # dropped; its name is another column's now
        if names in found and found[names] != mapping:
            found[names] = None  # the same names, other columns: cannot tell which
        else:
            found[names] = mapping
    return [(list(names), m) for names, m in found.items() if m]


def names_per_column(layouts: Sequence[Layout]) -> list[list[str]]:
    """Per column that had several names no other column ever had: those names (sorted).

    Every column of every layout, the newest's or not (one renamed and then dropped
    counts too). The history keeps a column's value under each of them
    (:func:`pipeline.added_columns.under_every_name`): a version read as of any time
    finds it under the name of then, also when a rename came after the version opened.
    A name another column had too (dropped, then used again) is left out: a version
    cannot hold two columns' values under it.
    """
    owners: dict[str, set[int]] = {}
    for layout in layouts:
        for name, number in numbers_of(layout).items():
            owners.setdefault(name, set()).add(number)
    names: dict[int, list[str]] = {}
    for name, owned in sorted(owners.items()):
        if len(owned) == 1:
            names.setdefault(next(iter(owned)), []).append(name)
    return [group for _, group in sorted(names.items()) if len(group) > 1]


def every_name(groups: Sequence[Sequence[str]], names: Sequence[str]) -> list[str]:
    """``names`` and every other name their columns had (``groups``: :func:`names_per_column`)."""
    have = set(names)
    return [*names, *(n for g in groups if have & set(g) for n in g if n not in have)]

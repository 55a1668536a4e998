"""The catalog number (``attnum``) of each column a Relation message names.

pgoutput's Relation message names a table's columns in ``attnum`` order but does not number
them; walcast asks the catalog when it decodes the message, which may be after later DDL
(walcast lags behind the WAL). What the catalog of now says is used only where it must be
the message's column:

* **By name**: a column whose name the catalog has now, with the message's type, gets that
  number, unless the numbers so found do not rise in the message's order (two names
  swapped since): then no column gets one.
* **Renamed since**: columns the name does not find, between two columns it found (or
  before the first), get the numbers of the catalog's columns the message does not name
  that lie between those two, in order, when there are exactly as many, with the
  message's types, and no column was dropped between the two. PostgreSQL numbers a new
  column above every column it ever had, so a number between two of the message's existed
  when the message was sent; with none dropped there, each of the message's columns there
  is still in the catalog, under another name. The same holds after the last column found
  when the catalog has, above it, exactly as many columns it does not name and none
  dropped: nothing was added since either.
* **Then no column gets one** when a column of now that the message does not name (and
  that no rule above placed) has a number below one given: it existed when the message
  was sent, so the message named it otherwise (renamed since, its old name perhaps given
  to a new column, which the name would find).

A table published with a column list (PostgreSQL 15+) may leave columns out of the
message: such a column counts among those between two found (so no number is given
there), and one below a number given leaves no column a number, as before.

A column without a number is followed by its name downstream
(:mod:`pipeline.column_numbers`). The limit the rules leave: a column dropped and added
again under its name with its type after the message was sent is found by its name, with
the new column's number (no catalog of now tells them apart).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from capture.replication.catalog import CatalogColumn

NamedColumn = tuple[str, int]
"""A column of the message: its name and type OID."""


def message_numbers(
    columns: Sequence[NamedColumn], found: Mapping[str, CatalogColumn]
) -> dict[str, int]:
    """Name → number for the message's ``columns`` (in its order) given the catalog of now."""
    live = {n: f for n, f in found.items() if not f.dropped}
    numbers = {
        name: facts.number
        for name, type_oid in columns
        if (facts := live.get(name)) is not None and facts.type_oid == type_oid
    }
    rising = [numbers[name] for name, _ in columns if name in numbers]
    if any(a >= b for a, b in itertools.pairwise(rising)):
        return {}
    numbers |= _renamed_since(columns, numbers, found)
    given = set(numbers.values())
    highest = max(given, default=0)
    if any(f.number < highest for f in live.values() if f.number not in given):
        return {}
    return numbers


def _renamed_since(
    columns: Sequence[NamedColumn], numbers: Mapping[str, int], found: Mapping[str, CatalogColumn]
) -> dict[str, int]:
    """The numbers of the runs of columns the name did not find (module doc: renamed since)."""
    given = set(numbers.values())
    free = sorted(
        (f.number, f.type_oid) for f in found.values() if not f.dropped and f.number not in given
    )
    dropped = [f.number for f in found.values() if f.dropped]
    out: dict[str, int] = {}
    position = 0
    for unnumbered, run in itertools.groupby(columns, key=lambda c: c[0] not in numbers):
        run_columns = list(run)
        start, position = position, position + len(run_columns)
        if not unnumbered:
            continue
        low = numbers[columns[start - 1][0]] if start > 0 else 0
        high = numbers[columns[position][0]] if position < len(columns) else None
        between = [(k, t) for k, t in free if k > low and (high is None or k < high)]
        if len(between) != len(run_columns):
            continue
        if any(d > low and (high is None or d < high) for d in dropped):
            continue
        if all(t == type_oid for (_, t), (_, type_oid) in zip(between, run_columns, strict=True)):
            out |= {name: k for (k, _), (name, _) in zip(between, run_columns, strict=True)}
    return out

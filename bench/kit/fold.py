"""Fold walcast's changes into tables the way a consumer does (the README's contract).

Two steps, usable apart:

* :func:`drop_replays`: per source (the ``walcast.source`` header), topic and partition, in
  offset order, a message whose position ``(walcast.commit_lsn, walcast.ordinal)`` is not
  above the last one kept there is a replay and is dropped (README, "What walcast
  guarantees": "per source and partition, drop a position not above the last one seen").
* :class:`Tables`: apply :class:`Change`\\ s in order. A load row or an insert sets a row,
  an update replaces it (a key change moves it), keeping the value of each
  ``unchanged_toast`` column from the row it replaces, a delete removes it, a TRUNCATE
  empties the table. A table without a key is a multiset whose counts are exact (a delete
  of a row the fold does not hold takes its count below zero); a load row with ordinal 1
  starts such a table over, since the chunk holds the whole table.

:func:`fold_json` does both for the json format's messages, per source, applying each
source's kept changes in position order (a load row's position sorts after every change its
chunk includes, README "Loads").

Decisions where the contract is silent:

* A keyless delete of a row the fold does not hold is counted (``absent_deletes``) and the
  count goes below zero, exactly as the arithmetic says: before a table's load chunk that is
  expected (the load starts the table over), anywhere else it is wrong data, which
  :meth:`Tables.below_zero` shows at the end (a consumer that ignored such a delete could
  hide a change applied out of order).
* An ``unchanged_toast`` column of a row the fold does not hold yet (a change before the
  row's load chunk) gets :data:`MISSING_TOAST` and is counted (``missing_toast``): a later
  load row replaces it; if none does, the comparison with the source shows it.
* Positions are compared as numbers (the LSN's ``X/Y`` text parsed), never as text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson

from capture.events import ChangeEvent
from pipeline.column_numbers import image_renames
from pipeline.tables import Layout

MISSING_TOAST = "<unchanged TOAST value never received>"
"""The value an ``unchanged_toast`` column gets when the fold holds no earlier value."""

Position = tuple[int, int]
"""``(commit LSN as a number, ordinal)``: what orders a source's changes."""


def lsn_number(text: str) -> int:
    """``'16/B374D848'`` → the LSN as one number."""
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def header_position(headers: Mapping[str, str]) -> Position:
    """A message's position from walcast's ``walcast.commit_lsn`` and ``walcast.ordinal``."""
    return lsn_number(headers["walcast.commit_lsn"]), int(headers["walcast.ordinal"])


class Delivered(Protocol):
    """A message as read from Kafka: where it was and walcast's headers."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


D = TypeVar("D", bound=Delivered)


def drop_replays(records: Iterable[D]) -> tuple[list[D], list[D]]:
    """(kept, replays): per source, topic and partition, in offset order, a position not
    above the last one kept there is a replay. Kept messages come in (topic, partition,
    offset) order."""
    high: dict[tuple[str, str, int], Position] = {}
    kept: list[D] = []
    replays: list[D] = []
    for record in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        where = (record.headers.get("walcast.source", ""), record.topic, record.partition)
        position = header_position(record.headers)
        if where in high and position <= high[where]:
            replays.append(record)
            continue
        high[where] = position
        kept.append(record)
    return kept, replays


@dataclass(frozen=True)
class Change:
    """One row change as a consumer sees it: column name → value images."""

    table: str
    op: str
    """``insert``, ``update``, ``delete``, ``truncate`` or ``snapshot`` (a load row)."""
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    ordinal: int
    unchanged_toast: Sequence[str] = ()

    @classmethod
    def from_json(cls, message: Mapping[str, Any], ordinal: int) -> Change:
        """A json-format message (README's json layout) at ``ordinal``."""
        return cls(
            message["table"], message["op"], message.get("before"), message.get("after"),
            ordinal, tuple(message.get("unchanged_toast") or ()),
        )  # fmt: skip

    @classmethod
    def from_event(cls, event: ChangeEvent) -> Change:
        """A change event of the capture pipeline, values in PostgreSQL's text form."""
        before = event.before.as_dict(typed=False) if event.before is not None else None
        after = event.after.as_dict(typed=False) if event.after is not None else None
        toast = event.after.unchanged_toast_columns() if event.after is not None else []
        return cls(event.table.name, str(event.op), before, after, event.ordinal, tuple(toast))


Row = tuple[tuple[str, Any], ...]
"""A keyless row as a multiset element: its (column, value) pairs, sorted."""


@dataclass
class Tables:
    """The tables a sequence of changes describes, as a consumer keeps them.

    ``keys`` names every table the fold accepts and its key columns (None: no key, kept as
    a multiset); a change of another table is a ``KeyError``.
    """

    keys: Mapping[str, Sequence[str] | None]
    keyed: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(init=False)
    bags: dict[str, Counter[Row]] = field(init=False)
    missing_toast: int = 0
    """``unchanged_toast`` columns of rows the fold did not hold (got :data:`MISSING_TOAST`)."""
    absent_deletes: int = 0
    """Keyless deletes (or updates) of a row the fold did not hold at the time."""

    def __post_init__(self) -> None:
        self.keyed = {t: {} for t, key in self.keys.items() if key is not None}
        self.bags = {t: Counter() for t, key in self.keys.items() if key is None}

    def apply(self, change: Change) -> None:
        """Apply one change (see the module docstring for the rules)."""
        key = self.keys[change.table]
        if change.op == "truncate":
            (self.bags if key is None else self.keyed)[change.table].clear()
            return
        if key is None:
            self._apply_keyless(change)
            return
        rows = self.keyed[change.table]
        before, after = change.before, change.after
        if change.op == "delete":
            if before is not None:
                rows.pop(tuple(before[c] for c in key), None)
            return
        if after is None:
            raise ValueError(f"{change.table}: a {change.op} without an after image")
        new_key = tuple(after[c] for c in key)
        previous = rows.get(new_key)
        if change.op == "update" and before is not None:
            previous = rows.pop(tuple(before[c] for c in key), None)
        image = dict(after)
        for column in change.unchanged_toast:
            if previous is not None and column in previous:
                image[column] = previous[column]
            else:
                image[column] = MISSING_TOAST
                self.missing_toast += 1
        rows[new_key] = image

    def _apply_keyless(self, change: Change) -> None:
        bag = self.bags[change.table]
        if change.op == "snapshot" and change.ordinal == 1:
            bag.clear()  # the load's one chunk holds the whole table
        if change.before is not None and change.op in ("update", "delete"):
            row = tuple(sorted(change.before.items()))
            if bag[row] <= 0:
                self.absent_deletes += 1
            bag[row] -= 1
            if bag[row] == 0:
                del bag[row]
        if change.after is not None:
            row = tuple(sorted(change.after.items()))
            bag[row] += 1
            if bag[row] == 0:
                del bag[row]

    def rows(
        self,
        table: str,
        columns: Sequence[str],
        missing: Mapping[str, str] | None = None,
        renames: Sequence[tuple[list[str], dict[str, str | None]]] = (),
    ) -> list[tuple[Any, ...]]:
        """The table's rows as tuples of ``columns``, unsorted; a keyless row as often as its
        count (a count below zero gives none). A row whose image has exactly an older
        layout's columns has them under the newest names (``renames``:
        :func:`column_renames`; README, "A renamed column"). A column a row's image lacks
        (encoded before the column was added) is ``missing``'s value for it (the layout's:
        README, "A column added with a DEFAULT"), else None."""
        absent = missing or {}
        by_names = {tuple(names): mapping for names, mapping in renames}

        def named(image: Mapping[str, Any]) -> Mapping[str, Any]:
            mapping = by_names.get(tuple(sorted(image))) if by_names else None
            if not mapping:
                return image
            return {mapping.get(c, c): v for c, v in image.items() if mapping.get(c, c)}

        if self.keys[table] is None:
            return [
                tuple(named(dict(row)).get(c, absent.get(c)) for c in columns)
                for row, n in self.bags[table].items()
                for _ in range(max(n, 0))
            ]
        return [
            tuple(named(row).get(c, absent.get(c)) for c in columns)
            for row in self.keyed[table].values()
        ]

    def below_zero(self) -> dict[str, list[Row]]:
        """Keyless rows deleted more often than added, per table (empty when none)."""
        out = {t: sorted(r for r, n in bag.items() if n < 0) for t, bag in self.bags.items()}
        return {t: rows for t, rows in out.items() if rows}


def column_renames(
    layouts: Iterable[D],
) -> dict[tuple[str, str], list[tuple[list[str], dict[str, str | None]]]]:
    """``(source, table)`` → the renames of its older layouts' images, from the schema
    topic's ``layouts`` in offset order (every version of each table, with the columns'
    catalog numbers: :func:`pipeline.column_numbers.image_renames`)."""
    versions: dict[tuple[str, str], dict[str, Layout]] = {}
    for record in layouts:
        key = getattr(record, "key", None)
        value = getattr(record, "value", None)
        if not key or not value:
            continue
        source, _, version = key.decode().rsplit("/", 2)
        layout = orjson.loads(value)
        seen = versions.setdefault((source, layout["table"]), {})
        seen.pop(version, None)  # published again: it is the newest copy now
        seen[version] = tuple((c["name"], c.get("number")) for c in layout["columns"])
    return {name: image_renames(list(seen.values())) for name, seen in versions.items()}


def missing_values(layouts: Iterable[D]) -> dict[tuple[str, str], dict[str, str]]:
    """``(source, table)`` → column → ``missing``, from the schema topic's ``layouts`` in
    offset order: each table's newest layout record (keyed ``<source>/<schema>.<table>/
    <version>``) names the value rows stored before an ``ADD COLUMN … DEFAULT`` read."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for record in layouts:
        key = getattr(record, "key", None)
        value = getattr(record, "value", None)
        if not key or not value:
            continue
        source = key.decode().rsplit("/", 2)[0]
        layout = orjson.loads(value)
        out[(source, layout["table"])] = {
            c["name"]: c["missing"] for c in layout["columns"] if "missing" in c
        }
    return out


@dataclass
class JsonFold:
    """The tables per source, and what was read and dropped."""

    sources: dict[str, Tables]
    messages: int
    replays: int


def fold_json(
    records: Iterable[D],
    keys: Mapping[str, Sequence[str] | None],
    *,
    value: Callable[[D], bytes] | None = None,
) -> JsonFold:
    """The tables the json messages ``records`` describe, per source, as a consumer folds
    them: replays dropped (:func:`drop_replays`), then each source's changes in position
    order. ``value`` reads a record's message bytes (default: its ``value`` attribute)."""
    read: Callable[[D], bytes] = value or (lambda r: getattr(r, "value"))  # noqa: B009
    everything = list(records)
    kept, replays = drop_replays(everything)
    by_source: dict[str, list[tuple[Position, D]]] = {}
    for record in kept:
        source = record.headers.get("walcast.source", "")
        by_source.setdefault(source, []).append((header_position(record.headers), record))
    out: dict[str, Tables] = {}
    for source, changes in by_source.items():
        tables = out[source] = Tables(keys)
        changes.sort(key=lambda c: c[0])
        for (_, ordinal), record in changes:
            tables.apply(Change.from_json(orjson.loads(read(record)), ordinal))
    return JsonFold(out, len(everything), len(replays))

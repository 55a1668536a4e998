"""The schema history: each change of a table's layout at the source, with its position.

``walcast spark materialize`` writes, for each batch whose changes show a table's layout
changing, one row per change to ``<output>/_walcast_schema_history``
(:func:`schema_history_path`): Parquet, one ``batch_id=<n>`` directory per such batch,
rewritten whole when the batch runs again (no duplicates). Read it with
:func:`read_schema_history` (``spark.read.parquet`` works too) or ``walcast spark show
--schema-history``.

**Where a change is seen.** Every normalized change names the layout version it was
encoded with (``layout``, walcast's ``walcast.layout`` header), and the layout topic
holds each version's columns (:mod:`pipeline.layouts`). A table's layout changes between
two of its changes, in apply order, that name different versions. The change is dated by
the **first change encoded with the new version**: its ``commit_lsn``/``commit_lsn_num``
and ``commit_time``. pgoutput gives DDL no position of its own (the Relation message
comes just before the table's first change after it), so that is the first point at
which a reader of the table can see the new layout; an ``ALTER TABLE`` followed by no
change of the table has no row yet.

**Rows** (:data:`SCHEMA`): ``source``, ``schema``, ``table``; the position above;
``layout`` (the new version) and ``previous_layout``; ``change``, one of

* ``first_seen``: the layout of the first change of the table this output recorded (one
  row, ``column`` null): where the history starts, not a change at the source;
* ``add_column`` (``after``: its declared type, e.g. ``numeric(12,2)``), ``drop_column``
  (``before``: its declared type);
* ``rename_column`` (``column``: the new name, ``before``/``after``: the old and new
  names): a column whose catalog number (``attnum``, the layout's ``columns[].number``)
  stays under another name. A layout without numbers (decoded after later DDL, or of
  walcast 0.1) takes them by name from the version before it
  (:meth:`LayoutShape.numbered_from`); with none known, a rename reads as a drop and an
  add;
* ``type_change`` (``before``/``after``: the declared types, modifiers included, so
  ``varchar(20)`` → ``varchar(200)`` is one);
* ``primary_key`` and ``replica_identity`` (``before``/``after``: the key's columns,
  comma-separated; the replica identity);
* ``layout``: the version changed in a way none of the above names (a column's replica
  identity flag, say);

then ``column``, ``before``, ``after``, ``columns`` (the new layout's columns as JSON:
``[{"name", "number", "type"}]``, so each row stands alone) and ``batch_id``.

Invariants and decisions:

* Rows follow the changes' order (:data:`pipeline.model.LOG_ORDER`; a table applied in
  Kafka order by its Kafka positions); a layout that returns (A → B → A in one batch) is
  two changes.
* The version before a batch's first is the last one an earlier batch recorded for the
  table, read from the history once per job and then kept (:class:`SchemaHistory`); a
  batch run again after a crash starts from the same version, so it writes the same
  rows.
* A change naming a version the layout topic does not hold (compacted away, or lost with
  the topic), and a change without ``layout`` (other producers, walcast 0.1, a Debezium
  key change whose halves came in two batches) are skipped: the history says what the
  held layouts tell, never a guess.
* Without a layout topic (``--bootstrap-servers`` not given) there is no history.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.batch_tables import LayoutSpan, TableCounts, TableKey, _ordered
from pipeline.errors import AsOfError
from pipeline.local_frames import local_rows
from pipeline.model import LOG_ORDER
from pipeline.tables import hadoop_fs

SCHEMA_HISTORY_DIR = "_walcast_schema_history"

SCHEMA = (
    "source string, schema string, table string, commit_lsn string, commit_lsn_num bigint, "
    "commit_time timestamp, layout string, previous_layout string, change string, "
    "column string, before string, after string, columns string, "
    "primary_key array<string>, replica_identity string, layout_index int"
)
"""The schema history's columns as written; a read adds ``batch_id`` (its directories)."""

CHANGES = (
    "first_seen",
    "add_column",
    "drop_column",
    "rename_column",
    "type_change",
    "primary_key",
    "replica_identity",
    "layout",
)
"""Every ``change`` a row may name (module docstring)."""


def schema_history_path(root: str) -> str:
    """Where materialize's output ``root`` keeps its schema history."""
    return f"{root.rstrip('/')}/{SCHEMA_HISTORY_DIR}"


def read_schema_history(spark: SparkSession, root: str) -> DataFrame | None:
    """The schema history of materialize's output ``root`` (None: none written yet)."""
    path = schema_history_path(root)
    jvm, fs = hadoop_fs(spark, path)
    if not fs.exists(jvm.org.apache.hadoop.fs.Path(path)):
        return None
    return spark.read.schema(f"{SCHEMA}, batch_id bigint").parquet(path)


def no_history(label: str, root: str) -> AsOfError:
    """The one line for a table asked for under a ``root`` without a schema history."""
    return AsOfError(
        f"{label}: {root} has no schema history (materialize writes one when it reads the "
        "layout topic)",
        hint="materialize with --bootstrap-servers (the layouts are on Kafka)",
    )


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a layout: its name, catalog number (None: unknown) and declared type."""

    name: str
    number: int | None
    type: str


@dataclass(frozen=True, slots=True)
class LayoutShape:
    """What the schema history compares of a layout version."""

    version: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    replica_identity: str | None

    @classmethod
    def of(cls, row: Any) -> LayoutShape:
        """The shape of a layout row (:func:`pipeline.layouts.parse_layouts`)."""
        return cls(
            row["version"],
            tuple(
                Column(c["name"], c["number"], c["declared_type"] or c["type"])
                for c in row["columns"]
            ),
            tuple(row["primary_key"] or ()),
            row["replica_identity"],
        )

    @classmethod
    def recorded(cls, row: Any) -> LayoutShape:
        """The shape a schema-history row recorded (its ``layout`` and after)."""
        return cls(
            row["layout"],
            tuple(Column(c["name"], c["number"], c["type"]) for c in json.loads(row["columns"])),
            tuple(row["primary_key"] or ()),
            row["replica_identity"],
        )

    def numbered_from(self, previous: LayoutShape | None) -> LayoutShape:
        """The shape with the catalog numbers it lacks taken from ``previous`` by name.

        A layout decoded after later DDL had renamed its columns has no numbers
        (:mod:`pipeline.column_numbers`); its columns are followed by name, as the tables
        follow them, so a column keeps the number the same name had in the version
        before it, and a rename after it is still told by its number. Only for comparing:
        the rows' ``columns`` say what the layout says.
        """
        if previous is None or all(c.number is not None for c in self.columns):
            return self
        taken = {c.number for c in self.columns if c.number is not None}
        known = {c.name: c.number for c in previous.columns if c.number not in taken}
        columns = tuple(
            c if c.number is not None else Column(c.name, known.get(c.name), c.type)
            for c in self.columns
        )
        return dataclasses.replace(self, columns=columns)

    def columns_json(self) -> str:
        """The ``columns`` a row carries."""
        return json.dumps(
            [{"name": c.name, "number": c.number, "type": c.type} for c in self.columns]
        )


Change = tuple[str, str | None, str | None, str | None]
"""``(change, column, before, after)``."""


def differences(old: LayoutShape, new: LayoutShape) -> list[Change]:
    """What changed from ``old`` to ``new``.

    The new layout's columns in order, then the dropped ones, then the key and the
    replica identity. A column is the same column in both when its catalog number is
    (both known), else when its name is: renames are told by numbers only.
    """

    def same(a: Column, b: Column) -> bool:
        if a.number is not None and b.number is not None:
            return a.number == b.number
        return a.name == b.name

    found: list[Change] = []
    matched: set[int] = set()
    for column in new.columns:
        before = next((i for i, o in enumerate(old.columns) if same(o, column)), None)
        if before is None:
            found.append(("add_column", column.name, None, column.type))
            continue
        matched.add(before)
        previous = old.columns[before]
        if previous.name != column.name:
            found.append(("rename_column", column.name, previous.name, column.name))
        if previous.type != column.type:
            found.append(("type_change", column.name, previous.type, column.type))
    found += [
        ("drop_column", o.name, o.type, None) for i, o in enumerate(old.columns) if i not in matched
    ]
    if old.primary_key != new.primary_key:
        found.append(("primary_key", None, ",".join(old.primary_key), ",".join(new.primary_key)))
    if old.replica_identity != new.replica_identity:
        found.append(("replica_identity", None, old.replica_identity, new.replica_identity))
    if not found and old.version != new.version:
        found.append(("layout", None, None, None))
    return found


@dataclass(frozen=True, slots=True)
class _Recorded:
    """A version the history recorded for a table, in which batch, at which place.

    ``shape`` is as compared: numbers its layout lacks taken from the version before
    (:meth:`LayoutShape.numbered_from`).
    """

    batch_id: int
    index: int
    shape: LayoutShape


def _overlapping(spans: Sequence[LayoutSpan]) -> bool:
    """Whether a version's changes interleave with another's (A, B, then A again)."""
    return any(b.first < a.last for a, b in itertools.pairwise(spans))


def _exact_spans(changes: DataFrame, key: TableKey, held: Iterable[str]) -> list[LayoutSpan]:
    """The table's runs of one version, in order: one Spark job over its changes."""
    source, schema, table = key
    part = changes.where(
        F.col("source").eqNullSafe(F.lit(source).cast("string"))
        & (F.col("schema") == schema)
        & (F.col("table") == table)
        & F.col("layout").isin(*held)
    )
    position = F.struct(*[F.col(c) for c in LOG_ORDER])
    # one table's changes of one batch: a single window partition is what is asked for
    ordered = Window.orderBy(*LOG_ORDER)
    starts = (
        part.select(
            position.alias("p"),
            "layout",
            "commit_lsn",
            "commit_lsn_num",
            "commit_time",
            F.lag("layout").over(ordered).alias("_previous"),
        )
        .where(F.col("_previous").isNull() | (F.col("_previous") != F.col("layout")))
        .orderBy("p")
        .collect()
    )
    return [
        LayoutSpan(
            r["layout"],
            _ordered(r["p"]),
            _ordered(r["p"]),
            r["commit_lsn"],
            r["commit_lsn_num"],
            r["commit_time"],
        )
        for r in starts
    ]


@dataclass(slots=True)
class SchemaHistory:
    """The schema history of one materialize output: what it recorded, and each batch's rows.

    Invariant: :attr:`recorded` holds, per table, the versions the history holds, in order
    (read once from disk, then kept as batches are recorded), so the version before a
    batch is the last one an earlier batch recorded.
    """

    root: str
    recorded: dict[TableKey, list[_Recorded]] = field(default_factory=dict)
    loaded: bool = False

    def _load(self, spark: SparkSession) -> None:
        self.loaded = True
        frame = read_schema_history(spark, self.root)
        if frame is None:
            return
        rows = frame.dropDuplicates(["source", "schema", "table", "batch_id", "layout_index"])
        for r in rows.collect():
            entry = _Recorded(r["batch_id"], r["layout_index"], LayoutShape.recorded(r))
            self.recorded.setdefault((r["source"], r["schema"], r["table"]), []).append(entry)
        for key, entries in self.recorded.items():
            entries.sort(key=lambda e: (e.batch_id, e.index))
            numbered: list[_Recorded] = []
            for e in entries:  # the numbers each had when it was compared
                before = numbered[-1].shape if numbered else None
                numbered.append(dataclasses.replace(e, shape=e.shape.numbered_from(before)))
            self.recorded[key] = numbered

    def record(
        self,
        spark: SparkSession,
        batch_id: int,
        counted: Mapping[TableKey, TableCounts],
        layouts: Mapping[tuple[TableKey, str], LayoutShape],
        changes: DataFrame,
    ) -> int:
        """Write batch ``batch_id``'s rows (none: nothing written); returns their number.

        ``counted``: the batch's tables (:func:`pipeline.batch_tables.count_tables`);
        ``layouts``: every held layout version by table and version; ``changes``: the
        batch, read again only for a table whose versions interleave.
        """
        if not self.loaded:
            self._load(spark)
        rows: list[tuple[Any, ...]] = []
        for key in sorted(counted, key=lambda k: (k[0] or "", k[1], k[2])):
            held = [s for s in counted[key].spans if (key, s.version) in layouts]
            if not held:
                continue
            if _overlapping(held):
                held = _exact_spans(changes, key, {s.version for s in held})
            entries = [e for e in self.recorded.get(key, []) if e.batch_id < batch_id]
            previous = entries[-1].shape if entries else None  # the version before the batch
            index = 0
            for span in held:
                shape = layouts[(key, span.version)]
                if previous is not None and previous.version == shape.version:
                    continue
                compared = shape.numbered_from(previous)
                found = (
                    differences(previous, compared)
                    if previous
                    else [("first_seen", None, None, None)]
                )
                for change, column, before, after in found:
                    rows.append((
                        *key, span.commit_lsn, span.commit_lsn_num, span.commit_time,
                        shape.version, previous.version if previous else None,
                        change, column, before, after, shape.columns_json(),
                        list(shape.primary_key), shape.replica_identity, index,
                    ))  # fmt: skip
                entries.append(_Recorded(batch_id, index, compared))
                previous = compared
                index += 1
            self.recorded[key] = entries
        path = f"{schema_history_path(self.root)}/batch_id={batch_id}"
        if rows:
            local_rows(spark, rows, SCHEMA).coalesce(1).write.mode("overwrite").parquet(path)
        else:  # a run of this batch before may have seen other layouts: its rows go
            jvm, fs = hadoop_fs(spark, path)
            fs.delete(jvm.org.apache.hadoop.fs.Path(path), True)  # noqa: FBT003 - Java API
        return len(rows)

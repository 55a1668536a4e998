"""Where the state tables live, and the shape of one: paths, versions, :class:`TableSpec`.

The stores (:mod:`pipeline.stores`, :mod:`pipeline.iceberg_store`) write the tables;
:mod:`pipeline.asof` and :mod:`pipeline.history_store` read them. All of them find a table here,
so this module imports no other module of ``pipeline`` (it sits below all of them).

Invariants:

* ``<root>/<source dir>/<schema>/<table>`` is a source's copy of a table
  (:func:`table_path`); a table without a source keeps ``<root>/<schema>/<table>``.
* A directory is a table when it holds a Parquet store's ``_CURRENT`` pointer, a
  ``_delta_log`` or an Iceberg version hint (:func:`table_paths` lists only those).
* A table's history (``materialize --history``) is its sibling
  ``<...>/<schema>/_walcast_history/<table>`` (:func:`history_path`), a Delta or an
  Iceberg table (:mod:`pipeline.history_store` writes it).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capture.state.identity import SourceIdentity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CURRENT = "_CURRENT"
HISTORY_DIR = "_walcast_history"
"""A state table's history lives in this sibling directory (:mod:`pipeline.history_store`)."""
ICEBERG_HINT = "metadata/version-hint.text"
"""An Iceberg table of a Hadoop catalog has it (:mod:`pipeline.iceberg_store`)."""


Layout = tuple[tuple[str, int | None], ...]
"""One layout version of a table: its columns in order, each with its catalog number (None
when its layout record gives none: :mod:`pipeline.column_numbers`)."""


@dataclass(frozen=True, slots=True)
class TableSpec:
    """What a state table looks like: columns (name, Spark type) and primary key."""

    schema: str
    table: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]
    retired: tuple[str, ...] = ()
    """Columns (among ``columns``) that changes of the batch carry but the table's layout
    no longer has: dropped (or renamed) at the source after those changes. Stored when a
    change sends them, never required of a change (a row inserted after the DROP has no
    such column)."""
    missing: tuple[tuple[str, str | None], ...] = ()
    """Columns with the value (PostgreSQL text) the rows stored before their ADD read as:
    the layout's ``missing`` (a DEFAULT's), or None (NULL) where it says ``missing_null``
    (no DEFAULT). A column not here has a value unknown to walcast for such rows
    (:mod:`pipeline.added_columns`)."""
    layouts: tuple[Layout, ...] = ()
    """Every layout version of the table known to the job, oldest first (the newest last,
    the one ``columns`` come from), for following renames (:mod:`pipeline.column_numbers`);
    empty without a layout topic."""

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [n for n, _ in self.columns]

    @property
    def required(self) -> list[str]:
        """The columns a change must send for its row to be complete (not retired)."""
        return [n for n, _ in self.columns if n not in self.retired]


def hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """The JVM gateway and the Hadoop file system of ``path``."""
    jvm = spark._jvm  # noqa: SLF001
    assert jvm is not None
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    return jvm, jpath.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001


def current_version(spark: SparkSession, path: str) -> str | None:
    """The version directory name ``_CURRENT`` points to (None: no table yet)."""
    jvm, fs = hadoop_fs(spark, path)
    pointer = jvm.org.apache.hadoop.fs.Path(f"{path}/{CURRENT}")
    if not fs.exists(pointer):
        return None
    stream = fs.open(pointer)
    try:
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        line = reader.readLine()
    finally:
        stream.close()
    return line.strip() if line else None


SOURCE_DIR_PREFIX = "source-"
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def source_dir(source: str) -> str:
    """The directory of a source's tables: ``source-<database>.<slot>.<system identifier>``.

    Each part keeps letters, digits, ``_`` and ``-``; when anything else had to be replaced
    (by ``_``), a hash of the whole source is appended, so two sources never share one.
    """
    identity = SourceIdentity.parse(source)
    parts = [identity.database, identity.slot, identity.system_identifier] if identity else [source]
    safe = [_SAFE.sub("_", p) for p in parts]
    name = ".".join(safe)
    if safe != parts:
        name += "-" + hashlib.sha256(source.encode()).hexdigest()[:8]
    return SOURCE_DIR_PREFIX + name


def table_path(root: str, schema: str, table: str, source: str | None = None) -> str:
    """Where the state of ``schema.table`` of ``source`` lives under ``root``.

    ``<root>/<source dir>/<schema>/<table>`` (:func:`source_dir`); changes without a source
    (not written by walcast, or by walcast 0.1) keep ``<root>/<schema>/<table>``.
    """
    base = root.rstrip("/")
    if source is not None:
        base += "/" + source_dir(source)
    return f"{base}/{schema}/{table}"


def history_path(table_path: str) -> str:
    """Where the history of the state table at ``table_path`` lives (its sibling).

    ``<...>/<schema>/<table>`` → ``<...>/<schema>/_walcast_history/<table>``: names that
    start with ``_walcast_`` are walcast's, in directories as in columns (not inside the
    state table's directory, which Delta would read as a partition of it).
    """
    parent, _, name = table_path.rstrip("/").rpartition("/")
    return f"{parent}/{HISTORY_DIR}/{name}"


def read_history(spark: SparkSession, table_path: str) -> DataFrame | None:
    """The history of the state table at ``table_path`` (Delta or Iceberg), or None.

    By path: an Iceberg history is found in the Hadoop catalog on ``--output``.
    """
    path = history_path(table_path)
    jvm, fs = hadoop_fs(spark, path)
    if fs.exists(jvm.org.apache.hadoop.fs.Path(f"{path}/{ICEBERG_HINT}")):
        return spark.read.format("iceberg").load(path)
    from delta.tables import DeltaTable  # noqa: PLC0415

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark.read.format("delta").load(path)


def is_table(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds a state table of any store."""
    jvm, fs = hadoop_fs(spark, path)
    return bool(
        fs.exists(jvm.org.apache.hadoop.fs.Path(f"{path}/{CURRENT}"))
        or fs.exists(jvm.org.apache.hadoop.fs.Path(f"{path}/_delta_log"))
        or fs.exists(jvm.org.apache.hadoop.fs.Path(f"{path}/{ICEBERG_HINT}"))
    )


def table_paths(spark: SparkSession, root: str, schema: str, table: str) -> list[str]:
    """Every materialized copy of ``schema.table`` under ``root``: one per source."""
    jvm, fs = hadoop_fs(spark, root)
    found = []
    plain = table_path(root, schema, table)
    if is_table(spark, plain):
        found.append(plain)
    base = jvm.org.apache.hadoop.fs.Path(root)
    if fs.exists(base):
        for status in fs.listStatus(base):
            name = status.getPath().getName()
            if status.isDirectory() and name.startswith(SOURCE_DIR_PREFIX):
                path = f"{root.rstrip('/')}/{name}/{schema}/{table}"
                if is_table(spark, path):
                    found.append(path)
    return sorted(found)


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier: in backticks, a backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class TableProperties:
    """A Delta or Iceberg table's properties, read once, and kept as this object changes them.

    ``table`` is the table as SQL names it (``delta.`<path>``` or a catalog identifier);
    Delta and Iceberg answer the same statements.
    """

    spark: SparkSession
    table: str
    values: dict[str, str]

    @classmethod
    def read(cls, spark: SparkSession, table: str) -> TableProperties:
        """The properties ``table`` has now (one ``SHOW TBLPROPERTIES``)."""
        rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
        return cls(spark, table, {str(r[0]): str(r[1]) for r in rows})

    def get(self, key: str) -> str | None:
        """The property's value, or None when the table does not have it."""
        return self.values.get(key)

    def set(self, key: str, value: str) -> None:
        """Give the table the property (one commit)."""
        self.spark.sql(
            f"ALTER TABLE {self.table} SET TBLPROPERTIES ({sql_string(key)} = {sql_string(value)})"
        )
        self.values[key] = value

    def unset(self, key: str) -> None:
        """Take the property from the table (one commit; nothing when it has none)."""
        self.spark.sql(
            f"ALTER TABLE {self.table} UNSET TBLPROPERTIES IF EXISTS ({sql_string(key)})"
        )
        self.values.pop(key, None)

"""Keeping the state tables fast: compaction and removal of old files (``walcast spark maintain``).

Every materialize batch adds files to each table it touches, and every MERGE leaves the
files it replaced behind for time travel. :func:`maintain` runs, per table under a
materialize ``--output`` (every source's copy, and the history tables):

* **Delta Lake**: ``OPTIMIZE`` (bin-packing compaction; a commit that changes no data),
  then ``VACUUM … RETAIN n HOURS`` (removes the files no version younger than the
  retention needs);
* **Apache Iceberg**: ``rewrite_data_files`` (compaction), then ``expire_snapshots``
  older than the retention (and the files only they held);
* **Parquet**: nothing to do: every batch writes the table whole into a new version and
  removes the previous ones.

Decisions and invariants:

* **Safe beside a running materialize.** Both table formats commit optimistically: when
  a compaction and a MERGE overlap, one of them fails without writing anything and runs
  again (:mod:`pipeline.conflicts`: materialize's steps are idempotent per batch, a
  compaction only works on what is there).
* **The retention** (``--retain-hours``, default 168 = 7 days, Delta's own default) is the
  time travel kept: as-of reads from a Delta table's versions
  (:mod:`pipeline.delta_versions`) need the files of the version they read, so points
  older than the retention may no longer be readable after a VACUUM (a history table keeps
  every version as rows, whatever the retention). Less than one hour is refused: a MERGE
  still reading files older than that would fail.
* **Iceberg's exactly-once marks survive.** The Iceberg store finds what a batch already
  committed in the snapshot summaries (:func:`pipeline.iceberg_store.last_commit`); the
  expiry never removes the newest snapshot of any walcast job (``older_than`` is at most
  its time), so a batch replayed after a crash is still recognised.
* One line per table says what was done (files compacted, files or snapshots removed);
  a table that fails stops the command with one line naming it (exit 1).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capture.errors import ConfigError
from pipeline.conflicts import retry_conflicts
from pipeline.tables import (
    CURRENT,
    HISTORY_DIR,
    ICEBERG_HINT,
    SOURCE_DIR_PREFIX,
    hadoop_fs,
    quote_identifier,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_RETAIN_HOURS = 168.0
"""Delta Lake's own default retention (``delta.deletedFileRetentionDuration``): 7 days."""
MIN_RETAIN_HOURS = 1.0
"""Below this, a MERGE running beside the command could lose the files it reads."""


@dataclass(frozen=True, slots=True)
class MaintainOptions:
    """What :func:`maintain` does to each table."""

    compact: bool = True
    expire: bool = True
    retain_hours: float = DEFAULT_RETAIN_HOURS

    def __post_init__(self) -> None:
        if self.retain_hours < MIN_RETAIN_HOURS:
            raise ConfigError(
                f"--retain-hours {self.retain_hours:g}: less than {MIN_RETAIN_HOURS:g} hour "
                "could remove files a running materialize still reads",
                hint=f"give at least {MIN_RETAIN_HOURS:g} (default {DEFAULT_RETAIN_HOURS:g})",
            )


@dataclass(frozen=True, slots=True)
class FoundTable:
    """A table under the root: where, which store, and its name in the command's lines."""

    path: str
    store: str
    """``delta``, ``iceberg`` or ``parquet``."""
    label: str
    """``schema.table`` (``schema._walcast_history.table`` for a history), with the source
    directory before it when it has one."""
    parts: tuple[str, ...]
    """The directories from the root to the table (Iceberg's namespace and name)."""


def find_tables(spark: SparkSession, root: str) -> list[FoundTable]:
    """Every state and history table under ``root`` (a materialize ``--output``), by name."""
    jvm, fs = hadoop_fs(spark, root)
    path_of = jvm.org.apache.hadoop.fs.Path

    def children(path: str) -> list[str]:
        base = path_of(path)
        if not fs.exists(base):
            return []
        return sorted(s.getPath().getName() for s in fs.listStatus(base) if s.isDirectory())

    def store(path: str) -> str | None:
        if fs.exists(path_of(f"{path}/_delta_log")):
            return "delta"
        if fs.exists(path_of(f"{path}/{ICEBERG_HINT}")):
            return "iceberg"
        if fs.exists(path_of(f"{path}/{CURRENT}")):
            return "parquet"
        return None

    base = root.rstrip("/")
    found: list[FoundTable] = []

    def schemas(prefix: tuple[str, ...]) -> None:
        for schema in children("/".join([base, *prefix])):
            if schema.startswith((SOURCE_DIR_PREFIX, "_")):
                continue
            for table in children("/".join([base, *prefix, schema])):
                tables: list[tuple[str, ...]] = [(table,)]
                if table == HISTORY_DIR:
                    here = "/".join([base, *prefix, schema, HISTORY_DIR])
                    tables = [(HISTORY_DIR, name) for name in children(here)]
                for names in tables:
                    parts = (*prefix, schema, *names)
                    path = "/".join([base, *parts])
                    kind = store(path)
                    if kind is not None:
                        found.append(FoundTable(path, kind, ".".join(parts), parts))

    schemas(())
    for name in children(base):
        if name.startswith(SOURCE_DIR_PREFIX):
            schemas((name,))
    return found


def maintain(
    spark: SparkSession,
    root: str,
    options: MaintainOptions,
    *,
    only: Sequence[str] = (),
    report: Callable[[str], None] = print,
) -> list[str]:
    """Compact and expire the tables under ``root``; returns the lines it reported.

    Every table, or those named ``schema.table`` in ``only`` (each source's copy and its
    history); one line per table. ConfigError when ``only`` names a table that is not
    there (one line, nothing done).
    """
    tables = find_tables(spark, root)
    if only:
        wanted = set(only)
        missing = sorted(w for w in wanted if not any(_plain_name(t) == w for t in tables))
        if missing:
            raise ConfigError(
                f"--table {missing[0]}: no such table under {root}",
                hint="give SCHEMA.TABLE as materialize wrote it (walcast spark show lists it)",
            )
        tables = [t for t in tables if _plain_name(t) in wanted]
    lines = []
    for table in tables:
        if table.store == "delta":
            done = _delta(spark, table, options)
        elif table.store == "iceberg":
            done = _iceberg(spark, root, table, options)
        else:
            done = "nothing to do (each batch writes the table whole)"
        line = f"walcast spark maintain: {table.label} ({table.store}): {done}"
        report(line)
        lines.append(line)
    return lines


def _plain_name(table: FoundTable) -> str:
    """``schema.table`` of a state table or of its history."""
    parts = [p for p in table.parts if not p.startswith(SOURCE_DIR_PREFIX) and p != HISTORY_DIR]
    return ".".join(parts)


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _compacted(removed: int, added: int) -> str:
    return f"compacted {_plural(removed, 'file')} into {added}" if removed else "nothing to compact"


# ------------------------------------------------------------------ Delta Lake


LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
"""The tasks Delta's VACUUM lists a table's directories with. Spark's default is 10,000
whatever the table: on a small table one VACUUM took 40 s, with 4 tasks 6 s (a fresh
`local[*]` session on two cores, 2026-12-03). walcast asks for 4 per core of the session
(its default parallelism) unless the user set the key (``--conf``)."""


@contextmanager
def _vacuum_settings(spark: SparkSession) -> Iterator[None]:
    """The session settings VACUUM runs with, put back afterwards.

    The retention check is off: the hour minimum is walcast's own check (Delta's would
    refuse less than 7 days). The listing parallelism is :data:`LISTING_PARALLELISM`'s.
    """
    settings = {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}
    if not spark.sparkContext.getConf().contains(LISTING_PARALLELISM):
        settings[LISTING_PARALLELISM] = str(max(4 * spark.sparkContext.defaultParallelism, 4))
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            spark.conf.unset(key)


def _delta(spark: SparkSession, table: FoundTable, options: MaintainOptions) -> str:
    from delta.tables import DeltaTable  # noqa: PLC0415

    said = []
    if options.compact:
        metrics = retry_conflicts(
            f"{table.label} (OPTIMIZE)",
            lambda: (
                DeltaTable.forPath(spark, table.path)
                .optimize()
                .executeCompaction()
                .select("metrics.numFilesRemoved", "metrics.numFilesAdded")
                .first()
            ),
        )
        removed, added = (int(metrics[0]), int(metrics[1])) if metrics else (0, 0)
        said.append(_compacted(removed, added))
    if options.expire:
        hours = options.retain_hours
        quoted = quote_identifier(table.path)
        with _vacuum_settings(spark):
            retry_conflicts(
                f"{table.label} (VACUUM)",
                lambda: spark.sql(f"VACUUM delta.{quoted} RETAIN {hours:g} HOURS").collect(),
            )
        # the count from the VACUUM END commit Delta logs (a DRY RUN first would list the
        # table's files a second time: measured, 68 s against 24 s for the VACUUM itself)
        ended = (
            DeltaTable.forPath(spark, table.path)
            .history(10)
            .where("operation = 'VACUUM END'")
            .select("operationMetrics")
            .first()
        )
        deleted = (ended[0] or {}).get("numDeletedFiles") if ended else None
        said.append(
            f"removed {_plural(int(deleted), 'file')} older than {hours:g} h"
            if deleted is not None
            else f"removed the files older than {hours:g} h"
        )
    return "; ".join(said) or "nothing asked"


# ------------------------------------------------------------------ Iceberg


def expiry_cutoff(
    now: dt.datetime, retain_hours: float, newest_marks: Sequence[dt.datetime]
) -> dt.datetime:
    """The time before which Iceberg snapshots may be expired.

    The retention, but never a walcast job's newest snapshot (``newest_marks``: one time
    per job), which marks its last batch.
    """
    return min([now - dt.timedelta(hours=retain_hours), *newest_marks])


def _iceberg(spark: SparkSession, root: str, table: FoundTable, options: MaintainOptions) -> str:
    from pipeline.iceberg_store import APP_ID, BATCH_ID, catalog_for  # noqa: PLC0415

    catalog = catalog_for(spark, root)
    inner = ".".join(quote_identifier(p) for p in table.parts)
    name = f"`{catalog}`.{inner}"
    argument = inner.replace("'", "\\'")
    said = []
    if options.compact:
        row = retry_conflicts(
            f"{table.label} (rewrite_data_files)",
            lambda: spark.sql(
                f"CALL `{catalog}`.system.rewrite_data_files(table => '{argument}', "
                # Iceberg's default leaves groups of fewer than 5 files: walcast's tables
                # get one or two files per batch, which is what needs compacting
                "options => map('min-input-files', '2'))"
            ).first(),
        )
        removed, added = (int(row[0]), int(row[1])) if row else (0, 0)
        said.append(_compacted(removed, added))
    if options.expire:
        # never the newest snapshot of a walcast job: it says which batch committed last
        marks = spark.sql(
            f"SELECT summary['{APP_ID}'] AS app, max(committed_at) AS at "  # noqa: S608 - quoted
            f"FROM {name}.snapshots WHERE summary['{APP_ID}'] IS NOT NULL "
            f"AND summary['{BATCH_ID}'] IS NOT NULL GROUP BY 1"
        ).collect()
        cutoff = expiry_cutoff(
            dt.datetime.now(dt.UTC),
            options.retain_hours,
            # naive: PySpark's local time of the session's UTC timestamps
            [m["at"].astimezone(dt.UTC) for m in marks],
        )
        stamp = cutoff.strftime("%Y-%m-%d %H:%M:%S.%f")
        row = retry_conflicts(
            f"{table.label} (expire_snapshots)",
            lambda: spark.sql(
                f"CALL `{catalog}`.system.expire_snapshots(table => '{argument}', "
                f"older_than => TIMESTAMP '{stamp}', retain_last => 1)"
            ).first(),
        )
        files = int(row["deleted_data_files_count"]) if row else 0
        said.append(
            f"removed {_plural(files, 'data file')} of snapshots older than "
            f"{options.retain_hours:g} h"
        )
    return "; ".join(said) or "nothing asked"

"""A keyless table's stored row keys, kept equal to its rows' keys of now.

A table without a primary key is a multiset of whole rows; each stored row carries its key,
``_walcast_row_key`` (:func:`pipeline.fold.row_key`: its non-null values of the table's
columns of now, as JSON). A row's later changes find it by that key, so the stored keys
must be made again when the columns they cover change: after a DROP COLUMN (the dropped
column's values leave every key) and once for a table written by walcast before 0.2 (whose
keys held NULLs). An ADD COLUMN changes no key (the new column is NULL in the stored rows),
unless the column came with a DEFAULT the stored rows read as
(:mod:`pipeline.added_columns` makes those keys when it fills the column). Delta and
Iceberg tables record the columns their keys cover in a table property; the Parquet store
makes every key again as it rewrites the table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import functions as F  # noqa: N812

from pipeline.conflicts import retry_conflicts
from pipeline.fold import ROW_KEY, rekeyed
from pipeline.tables import TableProperties

ROW_KEY_COLUMNS = "walcast.rowKeyColumns"
"""Table property of a keyless Delta or Iceberg table: the columns its stored row keys
cover, a JSON list (:func:`keep_row_keys`)."""


def keep_row_keys(
    target: Any,
    properties: TableProperties,
    columns: Sequence[str],
    *,
    created: bool,
    what: str,
) -> None:
    """Keep a keyless table's stored row keys equal to its rows' keys now.

    A row's key covers the table's columns of now (:func:`pipeline.fold.row_key`), so a key
    stored before a DROP COLUMN, which names the dropped column, would never again match
    the row's changes (a DELETE would not remove it, an UPDATE would add a copy). Such
    keys, and any key of a table that records no columns (written by walcast before 0.2,
    whose keys held NULLs), are made again (:func:`_rekey`, one MERGE of the rows whose
    key changes) before the batch is applied; then ``columns`` become the table's
    :data:`ROW_KEY_COLUMNS` (in ``properties``). An added column changes no key: nothing to do but
    record it. Made again twice (a crash between the MERGE and the record), a key is the
    same: the step is idempotent.
    """
    value = json.dumps(sorted(columns))
    recorded = properties.get(ROW_KEY_COLUMNS)
    if recorded == value:
        return
    stale = not created if recorded is None else bool(set(json.loads(recorded)) - set(columns))
    if stale:
        retry_conflicts(f"{what} (row keys)", lambda: _rekey(target, columns))
    properties.set(ROW_KEY_COLUMNS, value)


def _rekey(target: Any, columns: Sequence[str]) -> None:
    """Make every stored row key of ``target`` again over ``columns`` (one MERGE)."""
    changed = (
        target.toDF()
        .select(F.col(ROW_KEY).alias("_old"), rekeyed(F.col(ROW_KEY), columns).alias("_new"))
        .where(~F.col("_old").eqNullSafe(F.col("_new")))
        .distinct()
    )
    (
        target.alias("t")
        .merge(changed.alias("s"), f"t.`{ROW_KEY}` = s._old")
        .whenMatchedUpdate(set={f"`{ROW_KEY}`": "s._new"})
        .execute()
    )

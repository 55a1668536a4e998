"""A differential soak test: a seeded random workload with faults, then every format checked.

Two databases with the same schema (``soak``) and table names, different data, each
streamed by its own ``walcast run`` (its own slot, every format at once) into the SAME
topics and the same schema topic. A writer per database runs a random workload from
``random.Random`` seeded by ``--seed`` (every choice of the workload and of the faults comes
from the seed; only the interleaving with the faults depends on timing):

* tables with a primary key (``accounts``), a composite key (``pairs``), no key at all
  (``bag``, REPLICA IDENTITY FULL, duplicate rows), TOASTed values and NULLs (``docs``:
  ``body`` is ``SET STORAGE EXTERNAL``, ``blob`` a large bytea) and a partitioned table
  (``parted``, three partitions, published with ``publish_via_partition_root = true``);
  values with delimiters, quotes, newlines, NaN/±Infinity, infinity dates, numerics;
* inserts, updates, deletes, key changes (also of TOASTed rows whose TOAST columns do not
  change, twice in one transaction, and rows moving between partitions), multi-row and
  large statements, TRUNCATE, ``ALTER TABLE accounts ADD COLUMN`` (half of them with a
  DEFAULT) / ``DROP COLUMN`` / ``RENAME COLUMN`` (to a new name, or to a dropped column's),
  multi-statement transactions, rolled-back transactions and rolled-back savepoints.

Rows exist before walcast starts (the initial load is exercised, while the writer goes on).
Faults at random times: ``kill -9`` of a daemon and a restart; a clean stop, ``walcast slot
drop --yes`` and a restart with ``--create-slot`` (a new slot: a new generation, every
table loaded again); ``walcast snapshot --table … --slot …`` (an on-demand reload while
streaming).

KNOWN LIMIT the workload respects: changes committed while no slot exists are never
streamed, and neither are changes the old slot had not delivered when it was dropped; a row
deleted then stays in any consumer (a reload sets rows, it does not remove keyed rows it
does not hold). So before a slot re-creation the database's writer is paused, the daemon
catches up to the current WAL position and stops, the slot is dropped, the new daemon runs,
and the writer resumes only once the new slot exists (the daemon logged
``session_started``). Two more limits of logical replication itself are avoided: a column
added with a DEFAULT gives existing rows a value no change carries (columns are added
without one, existing rows are then NULL), and a column dropped and added again under the
same name cannot be told from one that never went away (added columns get fresh names).

Moments (for the history check, below): ``--moments N`` (default 3) per database while the
workload runs. A moment pauses the database's writer (between two transactions), then, in
one session with ``synchronous_commit = on``, records ``SELECT *`` of each table with a
primary key (``accounts``, ``pairs``, ``docs``, ``parted``; ``bag`` has no key and so no
history) with the columns it has then, and ``pg_current_wal_lsn()``; then the writer
resumes. Decisions (:class:`MomentPlan`): no moment before every table's initial load is
done (the current generation's, from the load progress topic), since a history does not
know a row before its load (an as-of read there is refused, or misses the rows not loaded
yet); then the moments are spread over what is left of the workload but its last tenth
(3 to 20 s), one at a seeded point of each N-th of that window. Moments and faults run in
one loop, one at a time, so no moment is taken during a fault (a daemon down, a slot being
dropped and re-created, a reload being asked for); a moment that is due also waits until
the database's daemon streams again (its run logged ``session_started``). A load that
runs later (an on-demand reload, or a re-created slot's new generation loading every table
again, its versions re-opened at the load's position) does not hold moments back: the
history has every row's version by then, so reads as of moments before, during and after
it must all be exact. After the workload, each keyed table gets a sentinel row and loses it
(two transactions), so every history reaches past the last moment (an as-of read after a
table's last change is refused); the final rows do not change.

The check, once the writers stopped, the daemons caught up and every load finished:

* ``json``: the topics are read back and folded per source (the ``walcast.source`` header)
  as the README's consumer contract says: a message whose position ``(walcast.commit_lsn,
  walcast.ordinal)`` is not above the last one of its source in its partition is a replay
  and is dropped; the rest is applied in position order (load rows and inserts set a row,
  updates replace it, keeping ``unchanged_toast`` columns, a key change moves it, deletes
  remove it, TRUNCATE empties the table; ``bag`` is a multiset that a load row with
  ordinal 1 starts over);
* every vendor format, debezium included (``debezium.skipped_operations=none``, so
  TRUNCATE is carried): ``NormalizeJob`` over all the format's topics (layouts from the
  schema topic), then ``MaterializeJob`` (``typed=False``: exact text) and
  ``read_table(…, source=<source key>)``;

and each must equal ``SELECT *`` of its database, as a multiset, value for value (floats as
numbers), over the table's current columns. One vendor format (``--history-format``,
``canal`` by default when it is checked, else the first checked one; not ``debezium``,
whose history is not verified here) is materialized with ``history=True`` into ``--store``
when it keeps histories (Delta Lake or Apache Iceberg), else into Delta Lake (the others go
to ``--store``: Parquet by default, Delta Lake or Apache Iceberg), and for each moment and
keyed table
``read_table(…, source=<source key>, as_of_lsn=<the moment's LSN>)`` must equal the moment's
rows in the same way (same value normalization, same known-bug and IBM rules), over the
columns the table had at that moment only: ``accounts`` gains and loses columns, and the
history may hold columns the table did not have then (added later, or dropped before and
seen by an earlier batch); those are not compared. A compared column the history does not
have reads as NULL (a mismatch); so does a value of a column dropped since the moment
that differs in its text (each change is typed by the layout it names, the
``walcast.layout`` header). A moment whose
table was empty and whose history starts after it (refused with ``AsOfError`` "covers …
to …") is noted, not a mismatch; any other refusal or failed read is one. A history
mismatch is reported as format ``<format> history``, with the moment's label, LSN and time
into the workload. IBM delimited has no TRUNCATE
(capture/formats/ibm/encode.py): for a table truncated during the run, IBM's state must hold
every source row unchanged (rows the TRUNCATE removed may remain). Debezium's tables must
equal the source like the others: a key change of a row whose TOASTed values did not change
(its create holds the unchanged-TOAST placeholder) is paired by the connector's
``__debezium.oldkey``/``newkey`` headers (pipeline/formats/debezium/decode.py). Debezium's
unconstrained ``numeric`` (``VariableScaleDecimal``) drops trailing zeros (``1.50`` →
``1.5``), so its unconstrained numeric columns are compared as numbers (``Decimal``:
``1.50`` equals ``1.5``, ``1.5`` does not equal ``1.51``); ``numeric(p,s)`` keeps its scale
and is compared as text. Table topics are created with ``--partitions`` partitions
(default 3), so key changes move rows across partitions.

Prints the seed, the numbers (the moments recorded and checked per database too) and, on
a mismatch, the format, database, table and the first differing row (expected vs got);
exits 1 on a mismatch, 2 when the run itself failed (a daemon died, a writer failed, a
timeout).

Usage: eval "$(scripts/local-services start all)"
       .venv/bin/python bench/soak.py [--minutes 3] [--seed N] [--formats json,canal,...]
           [--moments 3] [--history-format canal|none|...] [--store parquet|delta|iceberg]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from bench.kit import kafka as k
from bench.kit.daemon import RunningDaemon, confirmed_lsn, current_lsn
from bench.kit.fold import Tables, column_renames, fold_json, missing_values
from capture.replication.slots import source_identity

REPO = Path(__file__).resolve().parent.parent
SCHEMA = "soak"
ALL_FORMATS = ("json", "canal", "shareplex", "dataworks", "qlik", "ibm", "dts-avro", "debezium")
VENDOR_FORMATS = ALL_FORMATS[1:]
HISTORY_FORMATS = tuple(f for f in VENDOR_FORMATS if f != "debezium")
"""Formats ``--history-format`` may name: their changes carry walcast's commit LSN (the
``walcast.commit_lsn`` header). Debezium's is not verified with a history here."""
STORES = ("parquet", "delta", "iceberg")
"""``--store``: the stores ``walcast spark materialize --store`` offers."""

DEFAULT_HISTORY_FORMAT = "canal"
FORMAT_OPTIONS: dict[str, tuple[str, ...]] = {"debezium": ("debezium.skipped_operations=none",)}
"""Format settings the daemons run with (Debezium skips TRUNCATE by default)."""
KEYS: dict[str, tuple[str, ...] | None] = {
    "accounts": ("id",),
    "pairs": ("a", "b"),
    "bag": None,
    "docs": ("id",),
    "parted": ("id", "region"),
}
"""Every table and its primary key (None: no key, REPLICA IDENTITY FULL, a multiset)."""
TABLES = tuple(KEYS)
SESSION = (
    "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'; "
    "SET extra_float_digits = 1; SET bytea_output = 'hex'"
)
FLOAT_OIDS = {700, 701}
NUMERIC_OID = 1700
DDL = f"""
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.accounts (
    id bigint PRIMARY KEY, name text NOT NULL, balance numeric(12, 2), score float8,
    active boolean, updated timestamptz
);
CREATE TABLE {SCHEMA}.pairs (
    a integer, b text, qty integer, payload jsonb, born date, PRIMARY KEY (a, b)
);
CREATE TABLE {SCHEMA}.bag (x integer, y text, z float8);
ALTER TABLE {SCHEMA}.bag REPLICA IDENTITY FULL;
CREATE TABLE {SCHEMA}.docs (id integer PRIMARY KEY, body text, note text, blob bytea);
ALTER TABLE {SCHEMA}.docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE {SCHEMA}.parted (
    id integer, region integer, v text, amount numeric, PRIMARY KEY (id, region)
) PARTITION BY LIST (region);
CREATE TABLE {SCHEMA}.parted_a PARTITION OF {SCHEMA}.parted FOR VALUES IN (0, 1);
CREATE TABLE {SCHEMA}.parted_b PARTITION OF {SCHEMA}.parted FOR VALUES IN (2, 3);
CREATE TABLE {SCHEMA}.parted_rest PARTITION OF {SCHEMA}.parted DEFAULT;
CREATE PUBLICATION soak_pub FOR TABLE {", ".join(f"{SCHEMA}.{t}" for t in TABLES)}
    WITH (publish_via_partition_root = true);
"""


class SoakError(Exception):
    """The run itself failed (not a mismatch): a daemon died, a writer failed, a timeout."""


# -- values ------------------------------------------------------------------------------

TEXTS = (
    "plain", "comma,inside", 'quote"inside', "new\nline", "tab\there", "back\\slash",
    "ünïcødé ✓", "", "semi;colon", "x'y", "  spaces  ", "NULL", "\\N", "|pipe|",
)  # fmt: skip


def text(rng: random.Random) -> str:
    return rng.choice(TEXTS) + (str(rng.randint(0, 9999)) if rng.random() < 0.7 else "")


def nullable(rng: random.Random, value: Any, p: float = 0.1) -> Any:
    return None if rng.random() < p else value


def numeric(rng: random.Random, digits: int = 12) -> Decimal:
    return Decimal(rng.randint(-(10**digits) + 1, 10**digits - 1)).scaleb(-2)


def float8(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.02:
        return rng.choice(
            [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 1.7976931348623157e308]
        )
    if r < 0.5:
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 6))
    return rng.uniform(-1e9, 1e9)


def timestamptz(rng: random.Random) -> str:
    if rng.random() < 0.01:
        return rng.choice(["infinity", "-infinity"])
    at = dt.datetime(1990, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
        seconds=rng.randint(0, 45 * 365 * 86400), microseconds=rng.randint(0, 999_999)
    )
    return at.isoformat()


def date(rng: random.Random) -> str:
    if rng.random() < 0.01:
        return rng.choice(["infinity", "-infinity"])
    return (dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 73_000))).isoformat()


def body(rng: random.Random) -> str | None:
    """``docs.body``: long (TOASTed, out of line), short, or NULL."""
    r = rng.random()
    if r < 0.45:
        return rng.randbytes(rng.randint(1_300, 4_500)).hex() + text(rng)
    return None if r < 0.6 else text(rng)


def blob(rng: random.Random) -> bytes | None:
    r = rng.random()
    if r < 0.2:
        return rng.randbytes(rng.randint(2_500, 6_000))  # random bytes do not compress: TOAST
    return None if r < 0.5 else rng.randbytes(rng.randint(0, 20))


COLUMN_TYPES = ("text", "integer", "numeric", "float8", "boolean", "timestamptz", "date")
COLUMN_DEFAULTS = {
    "text": "'soak default'",
    "integer": "7",
    "numeric": "12.50",
    "float8": "0.25",
    "boolean": "true",
    "timestamptz": "'2024-05-02 18:17:29.5+02'",
    "date": "'2024-02-29'",
}
"""A non-volatile DEFAULT per added column's type: half the ADD COLUMNs give one, which the
rows stored before read without any change carrying it (the layout's ``missing``)."""


def value_of(rng: random.Random, sql_type: str) -> Any:
    """A random value (or NULL) for a column of ``sql_type``, bound with a cast."""
    if rng.random() < 0.12:
        return None
    return {
        "text": lambda: text(rng),
        "integer": lambda: rng.randint(-(2**31), 2**31 - 1),
        "numeric": lambda: numeric(rng, 10),
        "numeric(12,2)": lambda: numeric(rng, 10),
        "float8": lambda: float8(rng),
        "boolean": lambda: rng.random() < 0.5,
        "timestamptz": lambda: timestamptz(rng),
        "date": lambda: date(rng),
    }[sql_type]()


ACCOUNT_COLUMNS = {
    "name": "text",
    "balance": "numeric(12,2)",
    "score": "float8",
    "active": "boolean",
    "updated": "timestamptz",
}


# -- the workload -------------------------------------------------------------------------


@dataclass
class WriterStats:
    transactions: int = 0
    rolled_back: int = 0
    changes: int = 0
    statements: int = 0
    failed_statements: int = 0
    savepoints_rolled_back: int = 0
    truncates: int = 0
    ddl: int = 0
    added_columns: int = 0
    dropped_columns: int = 0
    renamed_columns: int = 0
    large: int = 0
    truncated_tables: set[str] = field(default_factory=set)


Statement = tuple[str, Sequence[Any]]


class Writer:
    """The random workload of one database, in a thread; pausable between transactions."""

    def __init__(self, dsn: str, seed: int, label: str, rate: float, scale: float = 1.0) -> None:
        self.dsn, self.label, self.rate, self.scale = dsn, label, rate, scale
        self.rng = random.Random(f"{seed}/writer/{label}")
        self.stats = WriterStats()
        self.columns = dict(ACCOUNT_COLUMNS)
        """The non-key columns of ``accounts`` now (ADD/DROP COLUMN change them)."""
        self.added = 0
        self.dropped: dict[str, str] = {}
        """Columns of ``accounts`` dropped so far → type (a rename may give a name again)."""
        self.next_id = {"accounts": 0, "docs": 0, "parted": 0, "pairs": 0}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._pause = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{label}", daemon=True)

    # -- initial rows (before walcast starts) --

    def populate(self) -> dict[str, int]:
        rng = self.rng
        sizes = {
            table: max(int(rng.randint(low, high) * self.scale), 10)
            for table, (low, high) in {
                "accounts": (1_500, 3_000),
                "pairs": (300, 600),
                "bag": (500, 1_000),
                "docs": (150, 300),
                "parted": (1_000, 2_000),
            }.items()
        }
        with psycopg.connect(self.dsn, autocommit=True) as conn, conn.transaction():
            cur = conn.cursor()
            cur.executemany(
                f"INSERT INTO {SCHEMA}.accounts VALUES "
                "(%s, %s, %s::numeric, %s::float8, %s, %s::timestamptz)",
                [self._account_row(i) for i in range(1, sizes["accounts"] + 1)],
            )
            self.next_id["accounts"] = sizes["accounts"] + 1
            cur.executemany(
                f"INSERT INTO {SCHEMA}.pairs VALUES (%s, %s, %s, %s, %s::date) "
                "ON CONFLICT DO NOTHING",
                [self._pair_row(a) for a in range(1, sizes["pairs"] + 1) for _ in range(3)],
            )
            self.next_id["pairs"] = sizes["pairs"] + 1
            cur.executemany(
                f"INSERT INTO {SCHEMA}.bag VALUES (%s, %s, %s::float8)",
                [self._bag_row() for _ in range(sizes["bag"])],
            )
            cur.executemany(
                f"INSERT INTO {SCHEMA}.docs VALUES (%s, %s, %s, %s)",
                [self._doc_row(i) for i in range(1, sizes["docs"] + 1)],
            )
            self.next_id["docs"] = sizes["docs"] + 1
            cur.executemany(
                f"INSERT INTO {SCHEMA}.parted VALUES (%s, %s, %s, %s::numeric)",
                [self._parted_row(i) for i in range(1, sizes["parted"] + 1)],
            )
            self.next_id["parted"] = sizes["parted"] + 1
        return sizes

    def _account_row(self, i: int) -> tuple[Any, ...]:
        rng = self.rng
        return (
            i, text(rng), nullable(rng, numeric(rng, 10)), nullable(rng, float8(rng)),
            nullable(rng, rng.random() < 0.5), nullable(rng, timestamptz(rng)),
        )  # fmt: skip

    def _pair_row(self, a: int) -> tuple[Any, ...]:
        rng = self.rng
        payload = Jsonb({"n": rng.randint(0, 10**6), "s": text(rng), "l": [1, None, 'x"y']})
        return (
            a, f"k{rng.randint(0, 5)}", nullable(rng, rng.randint(-1000, 1000)),
            nullable(rng, payload), nullable(rng, date(rng)),
        )  # fmt: skip

    def _bag_row(self) -> tuple[Any, ...]:
        rng = self.rng
        return (
            rng.randint(0, 40), rng.choice(["dup", "twin", text(rng)]),
            nullable(rng, rng.choice([1.5, 0.1, float8(rng)]), 0.2),
        )  # fmt: skip

    def _doc_row(self, i: int) -> tuple[Any, ...]:
        rng = self.rng
        return (i, body(rng), nullable(rng, text(rng), 0.3), blob(rng))

    def _parted_row(self, i: int) -> tuple[Any, ...]:
        rng = self.rng
        return (i, rng.randint(0, 5), nullable(rng, text(rng)), nullable(rng, numeric(rng, 20)))

    # -- control --

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pause.clear()
        self._thread.join(120)
        if self._thread.is_alive():
            raise SoakError(f"writer {self.label} did not stop")

    def pause(self, timeout: float = 120) -> None:
        """Return once the writer is between transactions and waits."""
        self._idle.clear()
        self._pause.set()
        deadline = time.monotonic() + timeout
        while not self._idle.wait(0.2):
            self.check()
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise SoakError(f"writer {self.label} did not pause")

    def resume(self) -> None:
        self._pause.clear()

    def check(self) -> None:
        if self.error is not None:
            raise SoakError(f"writer {self.label} failed: {self.error!r}") from self.error

    # -- the loop --

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = on")
                interval = 1.0 / self.rate
                next_at = time.monotonic()
                while not self._stop.is_set():
                    if self._pause.is_set():
                        while self._pause.is_set() and not self._stop.is_set():
                            # set on every turn: a pause() right after a resume() (a moment
                            # due just after a fault) clears it before this loop has seen
                            # the resume, and would otherwise wait for it forever
                            self._idle.set()
                            time.sleep(0.05)
                        next_at = time.monotonic()
                        continue
                    self._transaction(conn)
                    next_at += interval
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        next_at = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.error = exc
        finally:
            self._idle.set()

    def _transaction(self, conn: psycopg.Connection[Any]) -> None:
        rng = self.rng
        r = rng.random()
        count = 1 if r < 0.45 else rng.randint(2, 4) if r < 0.9 else rng.randint(5, 12)
        rollback = rng.random() < 0.08
        columns_before = dict(self.columns)
        counts = Counter[str]()
        truncated: set[str] = set()
        try:
            with conn.transaction() as tx:
                for _ in range(count):
                    self._statement(conn, counts, truncated)
                if rollback:
                    raise psycopg.Rollback(tx)
        except psycopg.errors.DeadlockDetected:
            rollback = True
        if rollback:
            self.columns = columns_before
            self.stats.rolled_back += 1
            return
        s = self.stats
        s.transactions += 1
        s.changes += counts["changes"]
        s.statements += counts["statements"]
        s.failed_statements += counts["failed"]
        s.savepoints_rolled_back += counts["savepoints"]
        s.truncates += counts["truncates"]
        s.ddl += counts["ddl"]
        s.added_columns += counts["added_columns"]
        s.dropped_columns += counts["dropped_columns"]
        s.renamed_columns += counts["renamed_columns"]
        s.large += counts["large"]
        s.truncated_tables |= truncated

    def _statement(
        self, conn: psycopg.Connection[Any], counts: Counter[str], truncated: set[str]
    ) -> None:
        rng = self.rng
        r = rng.random()
        self._truncating: list[str] = []
        if r < 0.0002:
            statements, kind = self._truncate(), "truncates"
        elif r < 0.0017:
            statements, kind = self._ddl(), "ddl"
        elif r < 0.0027:
            statements, kind = self._large(), "large"
        else:
            table = rng.choices(TABLES, weights=(30, 15, 15, 20, 20))[0]
            statements, kind = getattr(self, f"_{table}")(), ""
        discard = rng.random() < 0.04  # a savepoint rolled back on purpose
        for query, params in statements:
            counts["statements"] += 1
            try:
                with conn.transaction() as savepoint:
                    cur = conn.execute(query, params)
                    if discard:
                        counts["savepoints"] += 1
                        raise psycopg.Rollback(savepoint)
            except (psycopg.errors.UniqueViolation, psycopg.errors.NotNullViolation):
                counts["failed"] += 1
                continue
            if discard:
                continue
            counts["changes"] += max(cur.rowcount, 0)
            truncated.update(self._truncating)
            if kind == "ddl":
                counts[self._ddl_kind] += 1
            if kind:
                counts[kind] += 1
        if discard and kind == "ddl":
            self._ddl_undone()

    # ADD/DROP/RENAME COLUMN: the column list changes with the statement; a savepoint or a
    # transaction rolled back puts it back (see _transaction and _statement).
    _ddl_before: tuple[dict[str, str], dict[str, str]] | None = None
    _ddl_kind = "added_columns"

    def _ddl(self) -> list[Statement]:
        rng = self.rng
        self._ddl_before = (dict(self.columns), dict(self.dropped))
        droppable = [c for c in self.columns if c != "name"]
        r = rng.random()
        if droppable and (r < 0.35 or len(self.columns) > 9):
            column = rng.choice(droppable)
            self.dropped[column] = self.columns.pop(column)
            self._ddl_kind = "dropped_columns"
            return [(f"ALTER TABLE {SCHEMA}.accounts DROP COLUMN {column}", ())]
        if droppable and r < 0.55:  # renamed: to a new name, or to a dropped column's
            column = rng.choice(droppable)
            sql_type = self.columns[column]
            again = sorted(d for d, t in self.dropped.items() if t == sql_type)
            self.added += 1
            name = rng.choice(again) if again and rng.random() < 0.5 else f"r{self.added}"
            self.dropped.pop(name, None)
            self.columns = {name if c == column else c: t for c, t in self.columns.items()}
            self._ddl_kind = "renamed_columns"
            return [(f"ALTER TABLE {SCHEMA}.accounts RENAME COLUMN {column} TO {name}", ())]
        self.added += 1
        column, sql_type = f"c{self.added}", rng.choice(COLUMN_TYPES)
        self.columns[column] = sql_type
        self._ddl_kind = "added_columns"
        default = f" DEFAULT {COLUMN_DEFAULTS[sql_type]}" if rng.random() < 0.5 else ""
        return [(f"ALTER TABLE {SCHEMA}.accounts ADD COLUMN {column} {sql_type}{default}", ())]

    def _ddl_undone(self) -> None:
        if self._ddl_before is not None:
            self.columns, self.dropped = (dict(d) for d in self._ddl_before)

    def _truncate(self) -> list[Statement]:
        rng = self.rng
        tables = rng.sample(TABLES, rng.choice([1, 1, 1, 2]))
        self._truncating = tables
        names = ", ".join(f"{SCHEMA}.{t}" for t in tables)
        return [(f"TRUNCATE {names}", ())]

    def _large(self) -> list[Statement]:
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            first = self._fresh("accounts", 500)
            query = (
                f"INSERT INTO {SCHEMA}.accounts (id, name) "
                "SELECT g, 'bulk ' || g FROM generate_series(%s::int8, %s::int8) g"
            )
            return [(query, (first, first + 499))]
        if r < 0.7:  # every docs row, TOASTed bodies unchanged
            return [(f"UPDATE {SCHEMA}.docs SET note = coalesce(note, '') || '+'", ())]
        return [(f"DELETE FROM {SCHEMA}.parted WHERE id %% 13 = %s", (rng.randint(0, 12),))]

    def _fresh(self, table: str, count: int = 1) -> int:
        first = self.next_id[table]
        self.next_id[table] += count
        return first

    def _some(self, table: str) -> int:
        return self.rng.randint(1, max(self.next_id[table], 2))

    def _accounts(self) -> list[Statement]:
        rng = self.rng
        r = rng.random()
        pick = f"(SELECT min(id) FROM {SCHEMA}.accounts WHERE id >= %s)"
        names = list(self.columns)
        if r < 0.3:
            chosen = ["name", *rng.sample(names[1:], rng.randint(0, len(names) - 1))]
            holes = ", ".join(f"%s::{self.columns[c]}" for c in chosen)
            return [(
                f"INSERT INTO {SCHEMA}.accounts (id, {', '.join(chosen)}) VALUES (%s, {holes})",
                (self._fresh("accounts"), text(rng),
                 *[value_of(rng, self.columns[c]) for c in chosen[1:]]),
            )]  # fmt: skip
        if r < 0.6:
            chosen = rng.sample(names, rng.randint(1, min(3, len(names))))
            sets = ", ".join(f"{c} = %s::{self.columns[c]}" for c in chosen)
            values = [text(rng) if c == "name" else value_of(rng, self.columns[c]) for c in chosen]
            return [(f"UPDATE {SCHEMA}.accounts SET {sets} WHERE id = {pick}",
                     (*values, self._some("accounts")))]  # fmt: skip
        if r < 0.68:  # several rows
            low = self._some("accounts")
            column = rng.choice(names)
            query = (
                f"UPDATE {SCHEMA}.accounts SET {column} = %s::{self.columns[column]} "
                "WHERE id BETWEEN %s AND %s"
            )
            return [(
                query,
                (text(rng) if column == "name" else value_of(rng, self.columns[column]),
                 low, low + rng.randint(1, 40)),
            )]  # fmt: skip
        if r < 0.82:
            return [(f"DELETE FROM {SCHEMA}.accounts WHERE id = {pick}", (self._some("accounts"),))]
        if r < 0.95:  # the key changes
            return [(f"UPDATE {SCHEMA}.accounts SET id = %s WHERE id = {pick}",
                     (self._fresh("accounts"), self._some("accounts")))]  # fmt: skip
        low = self._some("accounts")  # several keys move at once (into an older range)
        return [(
            f"UPDATE {SCHEMA}.accounts SET id = -id WHERE id BETWEEN %s AND %s", (low, low + 5)
        )]  # fmt: skip

    def _pairs(self) -> list[Statement]:
        rng = self.rng
        r = rng.random()
        a = self._some("pairs")
        pick = f"a = %s AND b = (SELECT min(b) FROM {SCHEMA}.pairs WHERE a = %s)"
        if r < 0.3:
            row = self._pair_row(a if rng.random() < 0.5 else self._fresh("pairs"))
            return [(f"INSERT INTO {SCHEMA}.pairs VALUES (%s, %s, %s, %s, %s::date)", row)]
        if r < 0.55:
            return [(
                f"UPDATE {SCHEMA}.pairs SET qty = %s, payload = payload || %s WHERE {pick}",
                (rng.randint(-1000, 1000), Jsonb({"u": rng.randint(0, 99)}), a, a),
            )]  # fmt: skip
        if r < 0.7:
            return [(f"DELETE FROM {SCHEMA}.pairs WHERE {pick}", (a, a))]
        if r < 0.88:  # one key column changes
            return [(f"UPDATE {SCHEMA}.pairs SET b = b || %s WHERE {pick}",
                     (rng.choice("mnz"), a, a))]  # fmt: skip
        return [(f"UPDATE {SCHEMA}.pairs SET a = %s WHERE a = %s", (self._fresh("pairs"), a))]

    def _bag(self) -> list[Statement]:
        rng = self.rng
        r = rng.random()
        x = rng.randint(0, 40)
        one = f"ctid = (SELECT ctid FROM {SCHEMA}.bag WHERE x = %s LIMIT 1)"
        if r < 0.35:
            return [(f"INSERT INTO {SCHEMA}.bag VALUES (%s, %s, %s::float8)", self._bag_row())]
        if r < 0.45:  # duplicates of existing rows
            return [(f"INSERT INTO {SCHEMA}.bag SELECT * FROM {SCHEMA}.bag WHERE x = %s LIMIT 3",
                     (x,))]  # fmt: skip
        if r < 0.65:
            return [(f"DELETE FROM {SCHEMA}.bag WHERE {one}", (x,))]
        if r < 0.85:
            return [
                (f"UPDATE {SCHEMA}.bag SET y = %s WHERE {one}", (rng.choice(["dup", "upd"]), x))
            ]
        if r < 0.93:  # identical rows updated together
            return [(f"UPDATE {SCHEMA}.bag SET z = %s::float8 WHERE x = %s AND y = 'dup'",
                     (nullable(rng, 1.5, 0.3), x))]  # fmt: skip
        return [(f"DELETE FROM {SCHEMA}.bag WHERE x = %s AND y = 'twin'", (x,))]

    def _docs(self) -> list[Statement]:
        rng = self.rng
        r = rng.random()
        pick = f"(SELECT min(id) FROM {SCHEMA}.docs WHERE id >= %s)"
        some = self._some("docs")
        if r < 0.2:
            return [(f"INSERT INTO {SCHEMA}.docs VALUES (%s, %s, %s, %s)",
                     self._doc_row(self._fresh("docs")))]  # fmt: skip
        if r < 0.45:  # TOASTed values unchanged
            return [(f"UPDATE {SCHEMA}.docs SET note = %s WHERE id = {pick}",
                     (nullable(rng, text(rng), 0.3), some))]  # fmt: skip
        if r < 0.55:
            return [(f"UPDATE {SCHEMA}.docs SET body = %s WHERE id = {pick}", (body(rng), some))]
        if r < 0.62:
            return [(f"UPDATE {SCHEMA}.docs SET blob = %s WHERE id = {pick}", (blob(rng), some))]
        if r < 0.75:  # the key changes, the TOASTed values do not
            return [(f"UPDATE {SCHEMA}.docs SET id = %s WHERE id = {pick}",
                     (self._fresh("docs"), some))]  # fmt: skip
        if r < 0.82:  # the key changes twice in the transaction, with a note
            first, second = self._fresh("docs"), self._fresh("docs")
            return [
                (f"UPDATE {SCHEMA}.docs SET id = %s WHERE id = {pick}", (first, some)),
                (f"UPDATE {SCHEMA}.docs SET id = %s, note = %s WHERE id = %s",
                 (second, text(rng), first)),
            ]  # fmt: skip
        if r < 0.88:  # into an older range, below the rows of earlier load chunks
            return [(f"UPDATE {SCHEMA}.docs SET id = -id WHERE id = {pick}", (some,))]
        return [(f"DELETE FROM {SCHEMA}.docs WHERE id = {pick}", (some,))]

    def _parted(self) -> list[Statement]:
        rng = self.rng
        r = rng.random()
        pick = f"(SELECT min(id) FROM {SCHEMA}.parted WHERE id >= %s)"
        some = self._some("parted")
        if r < 0.3:
            return [(f"INSERT INTO {SCHEMA}.parted VALUES (%s, %s, %s, %s::numeric)",
                     self._parted_row(self._fresh("parted")))]  # fmt: skip
        if r < 0.55:
            query = f"UPDATE {SCHEMA}.parted SET v = %s, amount = %s::numeric WHERE id = {pick}"
            return [(query, (nullable(rng, text(rng)), nullable(rng, numeric(rng, 20)), some))]
        if r < 0.75:  # moves the row to another partition (the region is in the key)
            return [(f"UPDATE {SCHEMA}.parted SET region = %s WHERE id = {pick}",
                     (rng.randint(0, 7), some))]  # fmt: skip
        if r < 0.85:
            return [(f"UPDATE {SCHEMA}.parted SET id = %s WHERE id = {pick}",
                     (self._fresh("parted"), some))]  # fmt: skip
        return [(f"DELETE FROM {SCHEMA}.parted WHERE id = {pick}", (some,))]


# -- the databases and their daemons -------------------------------------------------------


@dataclass
class Options:
    dsn: str
    bootstrap: str
    seed: int
    minutes: float = 3.0
    formats: tuple[str, ...] = ALL_FORMATS
    rate: float = 30.0
    """Transactions per second per database."""
    fault_every: float | None = None
    """Mean seconds between faults (default: the workload's duration / 8, 8 to 30 s)."""
    partitions: int = 3
    scale: float = 1.0
    """Rows before walcast starts, relative to the default sizes (1,500-3,000 accounts…)."""
    workdir: Path | None = None
    keep: bool = False
    catch_up_timeout: float = 600.0
    store: str = "parquet"
    """Where the vendor formats are materialized (:data:`STORES`); the history format goes
    to the same store, or to Delta Lake when it is Parquet (a history needs Delta or
    Iceberg: :func:`history_store`)."""
    verbose: bool = False
    """Print the Spark jobs' lines too."""
    strict: bool = True
    """Known bugs (:data:`KNOWN_BUGS`) fail the run too."""
    check_formats: tuple[str, ...] | None = None
    """The formats to check (default: all of ``formats``; the daemons write ``formats``)."""
    moments: int = 3
    """Moments recorded per database for the history check (0: no history check)."""
    history_format: str | None = DEFAULT_HISTORY_FORMAT
    """The vendor format materialized with a history and read as of each moment (None: no
    history check; nor when it is not among the checked formats)."""
    log: Callable[[str], None] = field(default=lambda line: print(line, flush=True))


@dataclass
class FaultStats:
    kills: int = 0
    recreations: int = 0
    reloads: int = 0
    events: list[str] = field(default_factory=list)


class Database:
    """One source database, its writer and its (current) daemon."""

    def __init__(self, label: str, options: Options, tag: str, prefix: str, logs: Path) -> None:
        self.label = label
        self.name = f"soak_{tag}_{label}"
        self.slot = f"soak_{tag}_{label}"
        self.dsn = make_conninfo(options.dsn, dbname=self.name)
        self.options = options
        self.prefix = prefix
        self.logs = logs
        self.writer = Writer(self.dsn, options.seed, label, options.rate, options.scale)
        self.daemon: RunningDaemon | None = None
        self.runs = 0
        self.source_key = ""
        self.moments: list[Moment] = []
        """Recorded during the workload (:func:`record_moment`), checked against a history."""

    def create(self, admin_dsn: str) -> dict[str, int]:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.name}")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(DDL)
        return self.writer.populate()

    def args(self) -> list[str]:
        prefix = self.prefix
        args = [
            "--dsn", self.dsn, "--slot", self.slot, "--publication", "soak_pub",
            "--create-slot", "--bootstrap-servers", self.options.bootstrap,
            "--metrics-port", "0", "--heartbeat-interval", "1",
            "--topic", prefix + ".{format}.{schema}.{table}",
            "--transaction-topic", prefix + ".{format}",
            "--schema-topic", prefix + ".schemas",
            "--snapshot-workers", "2", "--snapshot-chunk-rows", "300",
        ]  # fmt: skip
        for fmt in self.options.formats:
            args += ["--format", fmt]
            for option in FORMAT_OPTIONS.get(fmt, ()):
                args += ["--format-option", option]
        return args

    def start(self) -> RunningDaemon:
        self.runs += 1
        log_path = self.logs / f"{self.label}.run{self.runs}.log"
        self.daemon = RunningDaemon(
            *self.args(),
            log_path=log_path,
            env={"WALCAST__DAEMON__SNAPSHOT_TOPIC": self.prefix + ".snapshots"},
        )
        return self.daemon

    def session_started(self) -> bool:
        """Whether the current daemon's run logged ``session_started`` (it streams)."""
        daemon = self.daemon
        return (
            daemon is not None
            and daemon.process.poll() is None
            and '"event": "session_started"' in daemon.log()
        )

    def check_alive(self) -> None:
        daemon = self.daemon
        if daemon is not None and daemon.process.poll() is not None:
            raise SoakError(
                f"walcast run of database {self.label} exited {daemon.process.returncode} "
                f"({daemon.log_path}):\n{daemon.log()[-3000:]}"
            )

    def wait_event(self, event: str, count: int = 1, timeout: float = 120) -> None:
        daemon = self.daemon
        assert daemon is not None
        deadline = time.monotonic() + timeout
        while daemon.log().count(f'"event": "{event}"') < count:
            self.check_alive()
            if time.monotonic() > deadline:
                raise SoakError(f"{self.label}: no {event} within {timeout:.0f} s "
                                f"({daemon.log_path}):\n{daemon.log()[-3000:]}")  # fmt: skip
            time.sleep(0.2)

    def slot_active(self) -> bool:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
            ).fetchone()
        return bool(row and row[0])

    def wait_slot_released(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.slot_active():
            if time.monotonic() > deadline:
                raise SoakError(f"slot {self.slot} still active {timeout:.0f} s after its daemon")
            time.sleep(0.1)

    def catch_up(self, timeout: float) -> None:
        """Wait until the slot is confirmed up to the current WAL position."""
        target = current_lsn(self.dsn)
        deadline = time.monotonic() + timeout
        while confirmed_lsn(self.dsn, self.slot) < target:
            self.check_alive()
            if time.monotonic() > deadline:
                raise SoakError(
                    f"{self.label}: slot {self.slot} stuck at "
                    f"{confirmed_lsn(self.dsn, self.slot):X} < {target:X}"
                )
            time.sleep(0.3)


def walcast(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capture", *args],
        capture_output=True, text=True, check=False, timeout=timeout, cwd=REPO,
    )  # fmt: skip


class Faults:
    """Faults at random times (the seed picks their times, kinds and targets)."""

    KINDS = ("kill", "recreate", "reload")

    def __init__(self, options: Options, databases: list[Database]) -> None:
        self.rng = random.Random(f"{options.seed}/faults")
        self.options = options
        self.databases = databases
        self.stats = FaultStats()
        duration = options.minutes * 60
        self.every = options.fault_every or min(max(duration / 8, 8.0), 30.0)
        # every kind at least once early on, then at random
        self._plan = list(self.KINDS)
        self.rng.shuffle(self._plan)

    def next_delay(self) -> float:
        return self.rng.uniform(0.5, 1.5) * self.every

    def run_one(self, elapsed: float) -> None:
        rng = self.rng
        kind = self._plan.pop(0) if self._plan else rng.choices(self.KINDS, (4, 2, 3))[0]
        db = rng.choice(self.databases)
        note = f"{elapsed:6.1f} s  {db.label}: "
        if kind == "kill":
            pause = rng.uniform(0, 3)
            assert db.daemon is not None
            db.daemon.kill()
            self.stats.kills += 1
            time.sleep(pause)
            db.wait_slot_released()
            db.start()
            note += f"kill -9, restarted after {pause:.1f} s"
        elif kind == "recreate":
            started = time.monotonic()
            db.writer.pause()
            try:
                db.catch_up(self.options.catch_up_timeout)
                assert db.daemon is not None
                code = db.daemon.stop()
                if code != 0:
                    raise SoakError(f"{db.label}: walcast run stopped with exit {code}:\n"
                                    f"{db.daemon.log()[-3000:]}")  # fmt: skip
                db.wait_slot_released()
                dropped = walcast("slot", "drop", "--dsn", db.dsn, "--slot", db.slot, "--yes")
                if dropped.returncode != 0:
                    raise SoakError(f"walcast slot drop failed: {dropped.stderr.strip()}")
                db.start()
                db.wait_event("session_started")
            finally:
                db.writer.resume()
            self.stats.recreations += 1
            note += (f"slot dropped and re-created (writer paused "
                     f"{time.monotonic() - started:.1f} s)")  # fmt: skip
        else:
            table = rng.choice(TABLES)
            done = walcast(
                "snapshot", "--dsn", db.dsn, "--table", f"{SCHEMA}.{table}", "--slot", db.slot
            )
            if done.returncode != 0:
                raise SoakError(f"walcast snapshot failed: {done.stderr.strip()}")
            self.stats.reloads += 1
            note += f"walcast snapshot --table {SCHEMA}.{table}"
        self.stats.events.append(note)
        self.options.log("  fault " + note)


# -- waiting for the loads -----------------------------------------------------------------


def loads_unfinished(bootstrap: str, topic: str, source: str) -> list[str]:
    """Tables whose load (of the source's current generation) is not done yet.

    Read from walcast's load progress topic (compacted, keyed ``<source>/<schema>.<table>``,
    generation records keyed ``<source>``), newest record per key.
    """
    progress = load_progress(bootstrap, topic, source)
    if progress is None:
        return ["(no progress topic yet)"]
    _, states = progress
    return [table for table, state in states.items() if state in ("pending", "loading")]


def load_progress(
    bootstrap: str, topic: str, source: str
) -> tuple[str | None, dict[str, str]] | None:
    """The source's current generation and the state of each table's load under it
    (``schema.table`` → ``pending``, ``loading``, ``done``, ``dropped``); None: no topic."""
    names = k.topics(bootstrap, topic)
    if topic not in names:
        return None
    records = sorted(k.read_all(bootstrap, [topic]), key=lambda r: (r.partition, r.offset))
    generation: str | None = None
    latest: dict[bytes, dict[str, Any]] = {}
    for record in records:
        if not record.value or record.key is None:
            continue
        value = orjson.loads(record.value)
        if value.get("kind") == "generation":
            if value.get("source") == source:
                generation = value.get("id")
        elif record.key.decode().startswith(source + "/"):
            latest[record.key] = value
    states = {
        str(v.get("table")): str(v.get("state"))
        for v in latest.values()
        if v.get("generation") == generation
    }
    return generation, states


def initial_loads_done(bootstrap: str, topic: str, source: str) -> bool:
    """Whether the source has a generation and every table's load under it is done."""
    progress = load_progress(bootstrap, topic, source)
    if progress is None or progress[0] is None:
        return False
    states = progress[1]
    return all(states.get(f"{SCHEMA}.{table}") == "done" for table in TABLES)


# -- the expected tables -------------------------------------------------------------------


@dataclass
class SourceTable:
    columns: list[str]
    floats: set[int]
    rows: list[tuple[Any, ...]]
    numerics: set[int] = field(default_factory=set)
    """Unconstrained ``numeric`` columns (no typmod): compared as numbers for debezium."""


def source_table(dsn: str, table: str) -> SourceTable:
    """``SELECT *`` as PostgreSQL's output functions print it (libpq text results)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(SESSION)
        return select_all(conn, table)


def select_all(conn: psycopg.Connection[Any], table: str) -> SourceTable:
    """``SELECT *`` of ``table`` on ``conn`` (its session already set with :data:`SESSION`)."""
    result = conn.pgconn.exec_(f"SELECT * FROM {SCHEMA}.{table}".encode())
    if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
        raise SoakError(f"SELECT * FROM {SCHEMA}.{table}: {result.error_message.decode()}")
    columns = [result.fname(i).decode() for i in range(result.nfields)]
    floats = {i for i in range(result.nfields) if result.ftype(i) in FLOAT_OIDS}
    numerics = {
        i for i in range(result.nfields)
        if result.ftype(i) == NUMERIC_OID and result.fmod(i) == -1
    }  # fmt: skip
    rows = [
        tuple(
            None if (v := result.get_value(r, c)) is None else v.decode()
            for c in range(result.nfields)
        )
        for r in range(result.ntuples)
    ]
    return SourceTable(columns, floats, rows, numerics)


@dataclass
class Moment:
    """The keyed tables of one database at one point of the workload, for the history check.

    Taken with the database's writer paused: ``SELECT *`` of each table with a primary key
    (with its columns of then), then ``pg_current_wal_lsn()``, in one session with
    ``synchronous_commit = on`` (so the position is after every commit the rows show; the
    writer commits with it on too). A history read as of ``lsn`` must give ``tables``.
    """

    label: str
    """``a1``, ``a2`` … (the database's label and the moment's number)."""
    elapsed: float
    """Seconds into the workload."""
    lsn: str
    """``pg_current_wal_lsn()`` (``X/Y``)."""
    tables: dict[str, SourceTable]

    def describe(self) -> str:
        return f"as of moment {self.label} (LSN {self.lsn}, {self.elapsed:.0f} s into the workload)"


HISTORY_TABLES = tuple(t for t in TABLES if KEYS[t])
"""The tables that have a history (a primary key; ``bag`` has none)."""


def record_moment(db: Database, elapsed: float) -> Moment:
    """A :class:`Moment` of ``db``: its writer paused meanwhile (between two transactions)."""
    db.writer.pause()
    try:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute(SESSION)
            tables = {table: select_all(conn, table) for table in HISTORY_TABLES}
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    finally:
        db.writer.resume()
    assert row is not None
    moment = Moment(f"{db.label}{len(db.moments) + 1}", elapsed, str(row[0]), tables)
    db.moments.append(moment)
    return moment


def comparable(
    rows: list[tuple[Any, ...]], floats: set[int], numerics: frozenset[int] = frozenset()
) -> list[tuple[Any, ...]]:
    """Floats as numbers (a format's double is PostgreSQL's value, printed its own way);
    ``numerics`` as exact ``Decimal`` numbers (``1.50`` equals ``1.5``); NaN, which equals
    nothing, as the text NaN."""

    def one(v: Any) -> Any:
        number = float(v)
        return "NaN" if math.isnan(number) else number

    def exact(v: Any) -> Any:
        number = Decimal(v)
        return "NaN" if number.is_nan() else number

    def value(i: int, v: Any) -> Any:
        if v is None:
            return v
        if i in floats:
            return one(v)
        return exact(v) if i in numerics else v

    return [tuple(value(i, v) for i, v in enumerate(row)) for row in rows]


@dataclass
class Diff:
    """How a table differs from the source: counts and the differing rows (by key)."""

    columns: list[str]
    header: str
    pairs: list[tuple[tuple[Any, ...], tuple[Any, ...] | None, list[tuple[Any, ...]]]]
    """Keyed tables: (key, the source's row or None, the rows got for the key), in key
    order; keyless: one ((), missing row or None, [unexpected row]) per first difference."""
    key: tuple[str, ...] | None

    def text(self, first: int = 0) -> str:
        key, want, got = self.pairs[first]
        cols = self.columns
        if self.key is None:
            return (f"{self.header}\n    expected, missing: {_row(cols, want)}\n"
                    f"    got, unexpected:   {_rows(cols, got)}")  # fmt: skip
        return (f"{self.header}\n    first differing row, key "
                f"{dict(zip(self.key, key, strict=True))}:\n"
                f"    expected {_row(cols, want)}\n    got      {_rows(cols, got)}")  # fmt: skip


@dataclass
class Mismatch:
    format: str
    database: str
    table: str
    detail: str
    known: str | None = None
    """The :data:`KNOWN_BUGS` entry this mismatch is an instance of (None: a new one)."""

    def __str__(self) -> str:
        what = f"KNOWN BUG {self.known}" if self.known else "MISMATCH"
        return (f"{what} {self.format} database {self.database} table {SCHEMA}.{self.table}: "
                f"{self.detail}")  # fmt: skip


def compare(
    expected: SourceTable, got_rows: list[tuple[Any, ...]], key: tuple[str, ...] | None,
    *, superset: bool = False, numbers: bool = False,
) -> Diff | None:  # fmt: skip
    """None when ``got_rows`` (in ``expected.columns`` order) equal the source's rows;
    else how they differ. ``superset``: only every source row must be there. ``numbers``:
    unconstrained numeric columns compare as numbers (debezium: module docstring)."""
    numerics = frozenset(expected.numerics) if numbers else frozenset()
    want = Counter(comparable(expected.rows, expected.floats, numerics))
    got = Counter(comparable(got_rows, expected.floats, numerics))
    missing, extra = want - got, got - want
    if superset:
        extra = Counter()
    if not missing and not extra:
        return None
    cols = expected.columns
    header = (f"{sum(got.values())} rows, {sum(want.values())} in PostgreSQL "
              f"({sum(missing.values())} missing, {sum(extra.values())} unexpected"
              f"{', more rows allowed' if superset else ''}); columns {cols}")  # fmt: skip
    if key is None:
        first_missing = min(missing, key=_sort_key) if missing else None
        first_extra = [min(extra, key=_sort_key)] if extra else []
        return Diff(cols, header, [((), first_missing, first_extra)], None)
    at = [cols.index(c) for c in key]
    by_key_want = {tuple(r[i] for i in at): r for r in want}
    by_key_got: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for r in got:
        by_key_got.setdefault(tuple(r[i] for i in at), []).extend([r] * got[r])
    keys = {tuple(r[i] for i in at) for r in missing} | {tuple(r[i] for i in at) for r in extra}
    pairs = [
        (k_, by_key_want.get(k_), by_key_got.get(k_, [])) for k_ in sorted(keys, key=_sort_key)
    ]
    return Diff(cols, header, pairs, key)


KNOWN_BUGS: dict[str, str] = {}
"""Walcast bugs this soak found and reports as such (not fixed here): a mismatch that
fits one (see :func:`known_bug`) is listed as ``KNOWN BUG <name>``; ``strict`` counts them
as mismatches (exit 1), else they are reported but do not fail the run."""
# Fixed: "dropped-column-values-by-newest-layout" (normalize typed each message with its
# table's newest layout, so a column dropped since kept the vendor's rendering in the
# versions from before the DROP: each change message now names its layout version, the
# walcast.layout header, pipeline/formats/base.py join_layout),
# "history-loses-dropped-columns" (a batch spanning a DROP COLUMN left the column out
# of the history: pipeline/materialize.py with_retired), "ibm-second-unchanged-toast" (IBM
# flagged only the first unchanged TOAST column of a row change) and
# "ibm-layout-by-field-count" (normalize chose an IBM record's layout by its field count):
# see capture/formats/ibm/encode.py and pipeline/formats/ibm/decode.py.

TOAST_COLUMNS = {"docs": ("body", "blob")}


def known_bug(fmt: str, table: str, diff: Diff, writer: WriterStats) -> list[str | None]:
    """For each differing row of ``diff``, the :data:`KNOWN_BUGS` entry it fits (or None).

    Names not in :data:`KNOWN_BUGS` (fixed) are None.
    """
    if fmt != "ibm" or diff.key is None:
        return [None] * len(diff.pairs)
    cols = diff.columns
    toast = TOAST_COLUMNS.get(table, ())

    def fits(want: tuple[Any, ...] | None, got: list[tuple[Any, ...]]) -> str | None:
        if want is None or len(got) != 1:
            return None
        lost = [c for c, w, g in zip(cols, want, got[0], strict=True) if w != g]
        if lost and all(
            c in toast and g is None for c, g in zip(cols, got[0], strict=True) if c in lost
        ):
            return "ibm-second-unchanged-toast"
        if table == "accounts" and writer.added_columns and writer.dropped_columns:
            return "ibm-layout-by-field-count"
        return None

    bugs = [fits(want, got) for _, want, got in diff.pairs]
    return [bug if bug in KNOWN_BUGS else None for bug in bugs]


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, str(v)) for v in row)


def _row(cols: list[str], row: tuple[Any, ...] | None) -> str:
    if row is None:
        return "(no row)"
    return "{" + ", ".join(f"{c}: {_short(v)}" for c, v in zip(cols, row, strict=True)) + "}"


def _rows(cols: list[str], rows: list[tuple[Any, ...]] | None) -> str:
    if not rows:
        return "(no row)"
    return " | ".join(_row(cols, r) for r in rows)


def _short(v: Any) -> str:
    text_ = repr(v)
    return text_ if len(text_) <= 80 else f"{text_[:60]}…({len(text_)} chars)"


# -- the run -------------------------------------------------------------------------------


@dataclass
class FormatResult:
    rows: int = 0
    tables: int = 0
    weak: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Report:
    seed: int
    strict: bool = True
    workload_seconds: float = 0.0
    total_seconds: float = 0.0
    check_seconds: float = 0.0
    initial_rows: dict[str, dict[str, int]] = field(default_factory=dict)
    writers: dict[str, WriterStats] = field(default_factory=dict)
    faults: FaultStats = field(default_factory=FaultStats)
    formats: dict[str, FormatResult] = field(default_factory=dict)
    history_format: str | None = None
    """The format whose history was checked as of the moments (None: no history check)."""
    moments: dict[str, int] = field(default_factory=dict)
    """Moments recorded per database."""
    history: FormatResult | None = None
    """The history check's numbers (None: it did not run)."""
    moments_checked: dict[str, int] = field(default_factory=dict)
    """Moments whose tables were all read back from the history, per database."""
    mismatches: list[Mismatch] = field(default_factory=list)
    error: str | None = None
    kept: str | None = None

    @property
    def failures(self) -> list[Mismatch]:
        """The mismatches that fail the run (known bugs too when ``strict``)."""
        return [m for m in self.mismatches if self.strict or m.known is None]

    @property
    def exit_code(self) -> int:
        return 2 if self.error else 1 if self.failures else 0

    def _history_lines(self) -> list[str]:
        fmt = self.history_format
        if fmt is None:
            return []
        label = f"{fmt} history"
        recorded = ", ".join(f"{n} of {db}" for db, n in self.moments.items()) or "none"
        r = self.history
        if r is None:
            return [f"  {label}: moments recorded: {recorded}; not checked"]
        checked = ", ".join(f"{n} of {db}" for db, n in self.moments_checked.items()) or "none"
        state = self._state(label)
        weak = f"; weaker check of {', '.join(sorted(set(r.weak)))}" if r.weak else ""
        lines = [
            (f"  {label}: moments checked: {checked} (recorded: {recorded}); {r.tables} "
             f"tables read as of them, {r.rows:,} rows compared: {state}{weak} "
             f"({r.seconds:.0f} s)")
        ]  # fmt: skip
        lines.extend(f"      {n}" for n in r.notes)
        return lines

    def _state(self, fmt: str) -> str:
        """``equal``, or how many mismatches (and known bugs) format ``fmt`` had."""
        bad = [m for m in self.mismatches if m.format == fmt]
        known = [m for m in bad if m.known]
        return (
            "equal" if not bad else
            f"{len(bad) - len(known)} MISMATCHES, {len(known)} known bugs" if known else
            f"{len(bad)} MISMATCHES"
        )  # fmt: skip

    def text(self) -> str:
        lines = [
            (
                f"walcast soak: seed {self.seed}, workload {self.workload_seconds:.0f} s, check "
                f"{self.check_seconds:.0f} s, total {self.total_seconds:.0f} s"
            )
        ]
        for label, s in self.writers.items():
            initial = sum(self.initial_rows.get(label, {}).values())
            truncated = ", ".join(sorted(s.truncated_tables)) or "-"
            lines.append(
                f"  database {label}: {initial:,} rows before walcast; {s.changes:,} rows "
                f"changed by {s.transactions:,} committed transactions ({s.rolled_back:,} "
                f"rolled back; {s.statements:,} statements, {s.failed_statements:,} refused, "
                f"{s.savepoints_rolled_back:,} savepoints rolled back); {s.added_columns} "
                f"ADD COLUMN, {s.dropped_columns} DROP COLUMN, {s.renamed_columns} RENAME "
                f"COLUMN, {s.truncates} TRUNCATE "
                f"({truncated}), {s.large} large statements"
            )
        f = self.faults
        lines.append(
            f"  faults: {f.kills} kill -9, {f.recreations} slot re-creations, {f.reloads} reloads"
        )
        for fmt, r in self.formats.items():
            state = self._state(fmt)
            weak = f"; weaker check of {', '.join(r.weak)}" if r.weak else ""
            lines.append(
                f"  {fmt:10} {r.tables} tables, {r.rows:,} rows compared: {state}{weak} "
                f"({r.seconds:.0f} s)"
            )
            lines.extend(f"      {n}" for n in r.notes)
        lines.extend(self._history_lines())
        lines.extend(f"  {m}" for m in self.mismatches)
        names = sorted({n for m in self.mismatches if m.known for n in m.known.split(", ")})
        lines.extend(f"  known bug {name}: {KNOWN_BUGS[name]}" for name in names)
        if self.error:
            lines.append(f"  RUN FAILED: {self.error}")
        if self.kept:
            lines.append(f"  kept for inspection: {self.kept}")
        verdict = {0: "OK", 1: "MISMATCH", 2: "FAILED"}[self.exit_code]
        if self.exit_code == 0 and self.mismatches:
            verdict += " apart from known bugs"
        lines.append(f"result: {verdict} (seed {self.seed})")
        return "\n".join(lines)


def create_topics(bootstrap: str, prefix: str, formats: Sequence[str], partitions: int) -> None:
    """The tables' topics with several partitions (a key change moves a row across them)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [
        NewTopic(f"{prefix}.{fmt}.{SCHEMA}.{table}", num_partitions=partitions,
                 replication_factor=1)
        for fmt in formats for table in TABLES
    ]  # fmt: skip
    for future in admin.create_topics(new).values():
        future.result(30)


def delete_topics(bootstrap: str, prefix: str) -> None:
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    names = k.topics(bootstrap, prefix + ".")
    if names:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.delete_topics(names).values():
            with contextlib.suppress(Exception):
                future.result(30)


def build_spark() -> Any:
    from pipeline.session import SessionOptions, build_session  # noqa: PLC0415

    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ.setdefault("WALCAST_SPARK_LOG_LEVEL", "ERROR")
    return build_session(
        SessionOptions(
            shuffle_partitions=2,
            iceberg=True,
            extra={
                "spark.sql.ansi.enabled": "false",
                "spark.default.parallelism": "2",
                "spark.driver.memory": "2g",
                "spark.ui.showConsoleProgress": "false",
            },
        )
    )


def history_store(options: Options) -> str | None:
    """The history format's store: Iceberg with ``--store iceberg``, else Delta (None)."""
    return "iceberg" if options.store == "iceberg" else None


def history_format(options: Options) -> str | None:
    """The format whose history is checked: ``options.history_format`` when it is checked
    and moments are asked for, else None."""
    fmt = options.history_format
    checked = options.check_formats or options.formats
    return fmt if fmt in checked and fmt in HISTORY_FORMATS and options.moments > 0 else None


def run_soak(options: Options, spark: Any = None) -> Report:
    """The whole soak; ``spark``: a session to use (else one is built for the check)."""
    report = Report(options.seed, strict=options.strict)
    log = options.log
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    prefix = f"soak_{tag}"
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix=f"walcast-soak-{tag}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    log(f"walcast soak: seed {options.seed}, {options.minutes:g} min of workload, formats "
        f"{','.join(options.formats)}; topics {prefix}.*, work directory {workdir}")  # fmt: skip
    databases = [Database(label, options, tag, prefix, logs) for label in ("a", "b")]
    report.writers = {db.label: db.writer.stats for db in databases}
    faults = Faults(options, databases)
    report.faults = faults.stats
    clean = False
    try:
        create_topics(options.bootstrap, prefix, options.formats, options.partitions)
        for db in databases:
            report.initial_rows[db.label] = db.create(options.dsn)
            log(f"  database {db.name}: {report.initial_rows[db.label]}")
        for db in databases:
            db.writer.start()  # the load runs while the tables change
            db.start()
            db.source_key = source_identity(db.dsn, db.slot).key
        history = history_format(options)
        report.history_format = history
        _workload(options, databases, faults, report, prefix + ".snapshots",
                  moments=history is not None)  # fmt: skip
        report.moments = {db.label: len(db.moments) for db in databases}
        _sentinels(databases)
        _finish(options, databases, prefix)
        spark_started = time.monotonic()
        _check_json(options, databases, prefix, report)
        checked = options.check_formats or options.formats
        vendor = [f for f in checked if f != "json"]
        if vendor:
            if spark is None:
                spark = build_spark()
            for fmt in vendor:
                try:
                    _check_format(spark, fmt, options, databases, prefix, workdir, report)
                except Exception as exc:  # noqa: BLE001 - a job that fails is a finding
                    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                    report.mismatches.append(
                        Mismatch(
                            fmt, "-", "-", f"the Spark jobs failed: {type(exc).__name__}: {first}"
                        )
                    )
                    log(f"  {report.mismatches[-1]}")
        report.check_seconds = time.monotonic() - spark_started
        clean = report.exit_code == 0
    except SoakError as exc:
        report.error = str(exc)
    finally:
        for db in databases:
            with contextlib.suppress(Exception):
                db.writer.stop()
            if db.daemon is not None and db.daemon.process.poll() is None:
                with contextlib.suppress(Exception):
                    db.daemon.stop(60)
                if db.daemon.process.poll() is None:
                    db.daemon.kill()
        report.total_seconds = time.monotonic() - started
        if clean and not options.keep:
            _cleanup(options, databases, prefix)
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            report.kept = (f"databases {', '.join(db.name for db in databases)} (slots "
                           f"{', '.join(db.slot for db in databases)}), topics {prefix}.*, "
                           f"{workdir}")  # fmt: skip
    return report


class MomentPlan:
    """When one database's moments are taken (the module docstring: "Moments").

    Not before every table's initial load is done (the current generation's, read from the
    load progress topic every 2 s until then); then ``count`` moments spread over what is
    left of the workload but its last ``margin`` seconds, one at a seeded point of each
    ``count``-th of that window. A moment that is due waits until the database's daemon
    streams (its current run logged ``session_started``, e.g. after a ``kill -9``).
    Moments and faults run in the same loop (:func:`_workload`), one at a time, so no
    moment is taken while a fault is in progress.
    """

    def __init__(self, options: Options, db: Database, begin: float, end: float) -> None:
        rng = random.Random(f"{options.seed}/moments/{db.label}")
        count = options.moments
        self.fractions = [(i + rng.uniform(0.05, 0.95)) / count for i in range(count)]
        self.begin, self.end = begin, end
        self.margin = min(max(0.1 * (end - begin), 3.0), 20.0)
        self.due: list[float] | None = None
        """When each remaining moment is due (None: the initial loads are not done yet)."""
        self.loaded_at: float | None = None
        self._next_check = begin

    def step(self, options: Options, db: Database, now: float, progress_topic: str) -> None:
        if self.due is None:
            if now < self._next_check:
                return
            self._next_check = now + 2
            if not initial_loads_done(options.bootstrap, progress_topic, db.source_key):
                return
            self.loaded_at = now
            stop = max(self.end - self.margin, now)
            self.due = [now + f * (stop - now) for f in self.fractions]
            options.log(f"  {now - self.begin:6.1f} s  {db.label}: every initial load done; "
                        f"moments due at " + ", ".join(f"{t - self.begin:.0f}" for t in self.due)
                        + " s")  # fmt: skip
        if self.due and now >= self.due[0] and db.session_started():
            self.due.pop(0)
            moment = record_moment(db, now - self.begin)
            sizes = ", ".join(f"{t} {len(st.rows):,}" for t, st in moment.tables.items())
            options.log(f"  {moment.elapsed:6.1f} s  {db.label}: moment {moment.label} at LSN "
                        f"{moment.lsn} ({sizes} rows; accounts columns "
                        f"{len(moment.tables['accounts'].columns)})")  # fmt: skip


def _workload(
    options: Options, databases: list[Database], faults: Faults, report: Report,
    progress_topic: str = "", *, moments: bool = False,
) -> None:  # fmt: skip
    """The writers and the faults for ``options.minutes``; with ``moments``, the moments too."""
    log = options.log
    begin = time.monotonic()
    end = begin + options.minutes * 60
    next_fault = begin + faults.next_delay()
    next_line = begin + 15
    plans = [MomentPlan(options, db, begin, end) for db in databases] if moments else []
    while (now := time.monotonic()) < end:
        for db in databases:
            db.writer.check()
            db.check_alive()
        if now >= next_fault:
            faults.run_one(now - begin)
            next_fault = time.monotonic() + faults.next_delay()
        for plan, db in zip(plans, databases, strict=False):
            plan.step(options, db, time.monotonic(), progress_topic)
        if now >= next_line:
            next_line = now + 30
            parts = []
            for db in databases:
                s = db.writer.stats
                lag = current_lsn(db.dsn) - confirmed_lsn(db.dsn, db.slot)
                parts.append(f"{db.label}: {s.transactions:,} txns {s.changes:,} changes, "
                             f"lag {lag / 1024:,.0f} kB")  # fmt: skip
            log(f"  {now - begin:6.0f} s  " + "; ".join(parts))
        time.sleep(0.2)
    for db in databases:
        db.writer.stop()
        db.writer.check()
    report.workload_seconds = time.monotonic() - begin
    for plan, db in zip(plans, databases, strict=False):
        if plan.loaded_at is None:
            log(f"  {db.label}: the initial loads were not done before the workload ended: "
                "no moments")  # fmt: skip
        elif plan.due:
            log(f"  {db.label}: {len(plan.due)} moments not taken (their daemon was not "
                "streaming when they were due)")  # fmt: skip


SENTINELS: dict[str, tuple[str, str]] = {
    "accounts": ("(id, name) VALUES (%s, 'sentinel')", "id = %s"),
    "pairs": ("(a, b) VALUES (%s, 'sentinel')", "a = %s AND b = 'sentinel'"),
    "docs": ("(id) VALUES (%s)", "id = %s"),
    "parted": ("(id, region) VALUES (%s, 0)", "id = %s AND region = 0"),
}
"""Per keyed table, a row with a fresh key (insert, where the row is deleted)."""


def _sentinels(databases: list[Database]) -> None:
    """After the last moment, each keyed table gets a row (one transaction) and loses it
    (another): its history then reaches past every moment (an as-of read after a table's
    last change is refused), and no table's final rows change."""
    for db in databases:
        if not db.moments:
            continue
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            for table, (insert, where) in SENTINELS.items():
                key = db.writer.next_id[table]  # a fresh key (the writer has stopped)
                db.writer.next_id[table] += 1
                conn.execute(f"INSERT INTO {SCHEMA}.{table} {insert}", (key,))
                conn.execute(f"DELETE FROM {SCHEMA}.{table} WHERE {where}", (key,))


def _finish(options: Options, databases: list[Database], prefix: str) -> None:
    """Every change delivered, every load done; then the daemons stop cleanly."""
    log = options.log
    for db in databases:
        started = time.monotonic()
        deadline = started + options.catch_up_timeout
        db.catch_up(options.catch_up_timeout)
        while pending := loads_unfinished(options.bootstrap, prefix + ".snapshots", db.source_key):
            db.check_alive()
            if time.monotonic() > deadline:
                raise SoakError(f"{db.label}: loads not finished: {pending}")
            time.sleep(1)
        db.catch_up(options.catch_up_timeout)
        log(f"  {db.label}: caught up and loads done in {time.monotonic() - started:.0f} s")
    for db in databases:
        assert db.daemon is not None
        code = db.daemon.stop()
        if code != 0:
            raise SoakError(f"{db.label}: walcast run stopped with exit {code}:\n"
                            f"{db.daemon.log()[-3000:]}")  # fmt: skip


def _format_topics(bootstrap: str, prefix: str, fmt: str) -> list[str]:
    return [
        t
        for t in k.topics(bootstrap, f"{prefix}.{fmt}")
        if t == f"{prefix}.{fmt}" or t.startswith(f"{prefix}.{fmt}.")
    ]


def _check_json(options: Options, databases: list[Database], prefix: str, report: Report) -> None:
    if "json" not in (options.check_formats or options.formats):
        return
    started = time.monotonic()
    records = k.read_all(options.bootstrap, _format_topics(options.bootstrap, prefix, "json"),
                         timeout=600)  # fmt: skip
    folded = fold_json(records, KEYS)
    layouts = k.read_all(options.bootstrap, [prefix + ".schemas"], timeout=600)
    ordered = sorted(layouts, key=lambda r: (r.partition, r.offset))
    missing, renames = missing_values(ordered), column_renames(ordered)
    result = report.formats["json"] = FormatResult()
    result.notes.append(f"{folded.messages:,} messages read, {folded.replays:,} replays dropped")
    for db in databases:
        state = folded.sources.get(db.source_key, Tables(KEYS))
        if state.missing_toast:
            result.notes.append(f"{db.label}: {state.missing_toast} unchanged TOAST values of "
                                "rows not known yet (before their load chunk)")  # fmt: skip
        if state.absent_deletes:
            result.notes.append(f"{db.label}: {state.absent_deletes} keyless deletes of absent "
                                "rows "
                                "(before the table's load)")  # fmt: skip
        for table in TABLES:
            expected = source_table(db.dsn, table)
            got = state.rows(
                table, expected.columns, missing.get((db.source_key, table)),
                renames.get((db.source_key, table), []),
            )  # fmt: skip
            _record(report, result, "json", db, table, expected, got)
    result.seconds = time.monotonic() - started


def _record(
    report: Report, result: FormatResult, fmt: str, db: Database, table: str,
    expected: SourceTable, got: list[tuple[Any, ...]], *, superset: bool = False,
    moment: Moment | None = None,
) -> None:  # fmt: skip
    """Compare and count; a difference becomes a :class:`Mismatch` (with ``moment``: one of
    ``fmt``'s history read as of that moment, reported as format ``<fmt> history``)."""
    log = db.options.log
    result.tables += 1
    result.rows += len(expected.rows)
    diff = compare(expected, got, KEYS[table], superset=superset, numbers=fmt == "debezium")
    if diff is not None:
        bugs = known_bug(fmt, table, diff, db.writer.stats)
        unknown = [i for i, bug in enumerate(bugs) if bug is None]
        kinds = sorted({bug for bug in bugs if bug is not None})
        detail = diff.text(unknown[0] if unknown else 0)
        if kinds and unknown:  # show a row no known bug explains
            detail += (f"\n    ({len(bugs) - len(unknown)} other differing rows fit known bugs "
                       f"{', '.join(kinds)})")  # fmt: skip
        if moment is not None:
            detail = f"{moment.describe()}: {detail}"
        mismatch = Mismatch(
            fmt if moment is None else f"{fmt} history",
            f"{db.label} ({db.name}, source {db.source_key})", table, detail,
            None if unknown else ", ".join(kinds),
        )  # fmt: skip
        report.mismatches.append(mismatch)
        log(f"  {mismatch}")


def _check_format(
    spark: Any, fmt: str, options: Options, databases: list[Database], prefix: str,
    workdir: Path, report: Report,
) -> None:  # fmt: skip
    from pipeline.lineage import LINEAGE_NAMES  # noqa: PLC0415
    from pipeline.materialize import MaterializeJob, read_table  # noqa: PLC0415
    from pipeline.normalize import NormalizeJob  # noqa: PLC0415

    started = time.monotonic()
    result = report.formats[fmt] = FormatResult()
    base = workdir / "spark" / fmt
    lines: list[str] = []

    def job_line(line: str) -> None:
        lines.append(line)
        if options.verbose:
            options.log(f"    {time.monotonic() - started:6.1f} s {line}")

    normalize = NormalizeJob(
        bootstrap=options.bootstrap, topics=_format_topics(options.bootstrap, prefix, fmt),
        format=fmt, output=str(base / "changes"), checkpoint=str(base / "normalize-ckpt"),
        layout_topic=prefix + ".schemas", available_now=True, report=job_line,
        query_name=f"soak-normalize-{fmt}",
    )  # fmt: skip
    normalize.run(spark)
    history = fmt == report.history_format
    materialize = MaterializeJob(
        normalized=str(base / "changes"), state=str(base / "state"),
        checkpoint=str(base / "materialize-ckpt"), bootstrap=options.bootstrap,
        layout_topic=prefix + ".schemas", typed=False, available_now=True, report=job_line,
        use_delta=True if history else options.store == "delta", history=history,
        store=history_store(options) if history else options.store,
        query_name=f"soak-materialize-{fmt}",
    )  # fmt: skip
    materialize.run(spark)
    reasons = ", ".join(f"{n:,} {r}" for r, n in sorted(normalize.totals.reasons.items()))
    kept = f"{history_store(options) or 'delta'}, with a history" if history else options.store
    result.notes.append(
        f"normalize: {normalize.totals.written:,} changes written"
        + (f", quarantined {reasons}" if reasons else "")
        + f"; materialize ({kept}): "
        + f"{materialize.totals.changes:,} changes applied"
    )
    for db in databases:
        truncated = db.writer.stats.truncated_tables
        for table in TABLES:
            expected = source_table(db.dsn, table)
            try:
                frame = read_table(spark, str(base / "state"), SCHEMA, table, source=db.source_key)
                names = set(frame.columns)
                got = [
                    tuple(row[c] if c in names else None for c in expected.columns)
                    for row in frame.collect()
                ]
                # The row key of keyless tables and each row's last change (lineage) are
                # walcast's own columns.
                ours = {"_walcast_row_key", *LINEAGE_NAMES}
                extra = sorted(names - set(expected.columns) - ours)
                if extra:
                    result.notes.append(f"{db.label} {table}: columns not at the source "
                                        f"(ignored): {extra}")  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - no table: nothing was materialized
                got = []
                result.notes.append(f"{db.label} {table}: no materialized table "
                                    f"({str(exc).splitlines()[0][:120]})")  # fmt: skip
            superset = fmt == "ibm" and table in truncated
            if superset:
                result.weak.append(f"{db.label}.{table} (TRUNCATE not carried)")
            _record(report, result, fmt, db, table, expected, got, superset=superset)
    if history:
        kind = "Iceberg" if history_store(options) == "iceberg" else "Delta Lake"
        result.notes.append(f"materialized into {kind} with a history ({fmt} history below)")
    result.seconds = time.monotonic() - started
    options.log(f"  {fmt}: {result.tables} tables, {result.rows:,} rows compared, "
                f"{len([m for m in report.mismatches if m.format == fmt])} mismatches "
                f"({result.seconds:.0f} s)")  # fmt: skip
    if history:
        _check_history(spark, fmt, str(base / "state"), databases, report)


def _check_history(
    spark: Any, fmt: str, root: str, databases: list[Database], report: Report
) -> None:
    """Each moment's tables against ``fmt``'s history read as of the moment's LSN, over the
    columns the table had then (the history may hold more: columns added or dropped later)."""
    from pipeline.errors import AsOfError  # noqa: PLC0415
    from pipeline.lineage import LINEAGE_NAMES  # noqa: PLC0415
    from pipeline.materialize import read_table  # noqa: PLC0415

    started = time.monotonic()
    result = report.history = FormatResult()
    label = f"{fmt} history"
    ignored: dict[str, set[str]] = {}
    for db in databases:
        truncated = db.writer.stats.truncated_tables
        report.moments_checked[db.label] = 0
        for moment in db.moments:
            for table, expected in moment.tables.items():
                try:
                    frame = read_table(spark, root, SCHEMA, table, source=db.source_key,
                                       as_of_lsn=moment.lsn)  # fmt: skip
                    names = set(frame.columns)
                    got = [
                        tuple(row[c] if c in names else None for c in expected.columns)
                        for row in frame.collect()
                    ]
                except Exception as exc:  # noqa: BLE001 - a read that fails is a finding
                    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                    if isinstance(exc, AsOfError) and not expected.rows:
                        # empty then, and no version opened before: the history starts later
                        result.notes.append(f"{db.label} {table} {moment.describe()}: empty "
                                            f"then; the history refused: {first}")  # fmt: skip
                        continue
                    result.tables += 1
                    mismatch = Mismatch(
                        label, f"{db.label} ({db.name}, source {db.source_key})", table,
                        f"{moment.describe()}: the read failed: {type(exc).__name__}: {first}",
                    )  # fmt: skip
                    report.mismatches.append(mismatch)
                    db.options.log(f"  {mismatch}")
                    continue
                if absent := [c for c in expected.columns if c not in names]:
                    result.notes.append(f"{db.label} {table} {moment.describe()}: columns not "
                                        f"in the history (read as NULL): {absent}")  # fmt: skip
                # columns added after the moment or dropped before it
                ignored.setdefault(f"{db.label} {table}", set()).update(
                    names - set(expected.columns) - set(LINEAGE_NAMES)
                )
                superset = fmt == "ibm" and table in truncated
                if superset:
                    result.weak.append(f"{db.label}.{table} (TRUNCATE not carried)")
                _record(report, result, fmt, db, table, expected, got, superset=superset,
                        moment=moment)  # fmt: skip
            report.moments_checked[db.label] += 1
    result.notes.extend(
        f"{where}: history columns not in the table at some moments (not compared there): "
        f"{sorted(columns)}"
        for where, columns in ignored.items()
        if columns
    )
    result.seconds = time.monotonic() - started
    db_counts = ", ".join(f"{n} of {db}" for db, n in report.moments_checked.items())
    databases[0].options.log(
        f"  {label}: moments {db_counts}, {result.tables} tables, {result.rows:,} rows "
        f"compared, {len([m for m in report.mismatches if m.format == label])} mismatches "
        f"({result.seconds:.0f} s)"
    )


def _cleanup(options: Options, databases: list[Database], prefix: str) -> None:
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        for db in databases:
            with contextlib.suppress(Exception):
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (db.slot,),
                )
            conn.execute(f"DROP DATABASE IF EXISTS {db.name} WITH (FORCE)")
    delete_topics(options.bootstrap, prefix)


def drop_run(dsn: str, bootstrap: str, tag: str) -> None:
    """Remove what a kept run left (``--drop TAG``: its databases, slots and topics)."""
    prefix = f"soak_{tag}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE %s AND NOT active",
            (prefix + "\\_%",),
        )
        for (name,) in conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "\\_%",)
        ).fetchall():
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    delete_topics(bootstrap, prefix)


def parse_args(argv: Sequence[str] | None = None) -> Options | str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--minutes", type=float, default=3.0, help="workload duration")
    parser.add_argument(
        "--formats", default=",".join(ALL_FORMATS), help="comma-separated (default: all)"
    )
    parser.add_argument("--rate", type=float, default=30.0, help="transactions/s per database")
    parser.add_argument("--fault-every", type=float, default=None, help="mean seconds")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per table topic")
    parser.add_argument("--scale", type=float, default=1.0, help="initial rows (x default sizes)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep databases, topics, files")
    parser.add_argument(
        "--check-formats",
        default=None,
        help="comma-separated formats to check (default: --formats; the daemons write --formats)",
    )
    parser.add_argument(
        "--moments",
        type=int,
        default=3,
        metavar="N",
        help="moments recorded per database for the history check (default 3; 0: none)",
    )
    parser.add_argument(
        "--history-format",
        default=None,
        metavar="FORMAT",
        help=f"the vendor format materialized with a history and read as of each moment "
        f"(one of {', '.join(HISTORY_FORMATS)}, or none; default {DEFAULT_HISTORY_FORMAT} "
        "when it is checked, else the first checked of those)",
    )
    parser.add_argument(
        "--store",
        choices=STORES,
        default="parquet",
        help="where the vendor formats are materialized (default parquet; the history "
        "format's tables are Delta Lake)",
    )
    parser.add_argument(
        "--tolerate-known-bugs",
        action="store_true",
        help="known walcast bugs (KNOWN_BUGS) are reported but do not fail the run",
    )
    parser.add_argument("--verbose", action="store_true", help="print the Spark jobs' lines")
    parser.add_argument("--drop", metavar="TAG", help="remove what kept run soak_TAG left, exit")
    parser.add_argument("--dsn", default=os.environ.get("WALCAST_TEST_DSN"))
    parser.add_argument("--bootstrap-servers", default=os.environ.get("WALCAST_TEST_KAFKA"))
    args = parser.parse_args(argv)
    if not args.dsn or not args.bootstrap_servers:
        parser.error('no services: eval "$(scripts/local-services start all)" first, or pass '
                     "--dsn and --bootstrap-servers")  # fmt: skip
    if args.drop:
        drop_run(args.dsn, args.bootstrap_servers, args.drop)
        return f"dropped soak_{args.drop}: databases, slots and topics"
    formats = _formats(parser, "--formats", args.formats)
    checked = (
        _formats(parser, "--check-formats", args.check_formats) if args.check_formats else None
    )
    if checked and set(checked) - set(formats):
        parser.error(f"--check-formats: {sorted(set(checked) - set(formats))} not written")
    if args.moments < 0:
        parser.error(f"--moments: {args.moments} is negative")
    history = _history_format(parser, args.history_format, checked or formats)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    return Options(
        dsn=args.dsn, bootstrap=args.bootstrap_servers, seed=seed, minutes=args.minutes,
        formats=formats, check_formats=checked, rate=args.rate, fault_every=args.fault_every,
        partitions=args.partitions, scale=args.scale, workdir=args.workdir, keep=args.keep,
        strict=not args.tolerate_known_bugs, verbose=args.verbose, moments=args.moments,
        history_format=history, store=args.store,
    )  # fmt: skip


def _history_format(
    parser: argparse.ArgumentParser, value: str | None, checked: tuple[str, ...]
) -> str | None:
    """``--history-format``: a checked format of :data:`HISTORY_FORMATS`, or None (none)."""
    if value is None:
        return next((f for f in (DEFAULT_HISTORY_FORMAT, *HISTORY_FORMATS) if f in checked), None)
    value = value.strip()
    if value == "none":
        return None
    if value not in HISTORY_FORMATS:
        parser.error(f"--history-format: {value!r} is not one of {', '.join(HISTORY_FORMATS)} "
                     "(or none); debezium's history is not verified here")  # fmt: skip
    if value not in checked:
        parser.error(f"--history-format: {value} is not checked (--check-formats/--formats)")
    return value


def _formats(parser: argparse.ArgumentParser, flag: str, value: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(f.strip() for f in value.split(",") if f.strip()))
    unknown = sorted(set(formats) - set(ALL_FORMATS))
    if unknown or not formats:
        parser.error(f"{flag}: unknown {unknown} (known: {', '.join(ALL_FORMATS)})")
    return formats


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    if isinstance(options, str):
        print(options)
        return 0
    report = run_soak(options)
    print(report.text(), flush=True)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())

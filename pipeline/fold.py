"""The fold of a batch of normalized changes into one result per row (no I/O).

Changes sort by the order the caller names (``order``): ``(commit_lsn_num, ordinal)``
then the Kafka position (:data:`pipeline.model.LOG_ORDER`, the default), or the Kafka
position alone for a table none of whose changes has a commit LSN
(:data:`pipeline.model.KAFKA_ORDER`; :func:`pipeline.model.order_columns` picks, and
refuses a mix); :func:`without_truncated` drops what a TRUNCATE
in the batch wiped out. Tables with a primary key fold per key (:func:`fold_by_key`:
insert resets the row to the after image, update overlays the after image's columns so
an absent column, e.g. unchanged TOAST, keeps its value, delete removes; a key change is
a delete of the old key and a move into the new one, which carries the old row's values
of the columns the change did not send), as a Spark ``aggregate`` over the key's sorted
events. Tables without one are multisets of whole rows
(:func:`fold_multiset`: ``+1``/``-1`` per row image). :mod:`pipeline.stores` applies the
results.
"""

# ruff: noqa: N812, FBT003
# (PySpark idioms: `functions as F`, `F.lit(True)`)
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from pipeline.model import LOG_ORDER

ROW_KEY = "_walcast_row_key"
"""The column of a keyless table that identifies a whole row (its image as JSON)."""


def _sort_key(order: Sequence[str]) -> Column:
    return F.struct(*[F.col(c) for c in order])


def load_start() -> Column:
    """A change that starts a whole-table load: a load row with ordinal 1.

    A table without a key is loaded as one chunk (:mod:`capture.snapshot.loading_source`),
    whose rows are the whole table at the chunk's position; the first of them starts the
    table over, as a TRUNCATE would.
    """
    return F.coalesce(F.col("load"), F.lit(False)) & (F.col("ordinal") == 1)


def without_truncated(
    changes: DataFrame, *, reset_at_load: bool = False, order: Sequence[str] = LOG_ORDER
) -> tuple[DataFrame, bool]:
    """The changes from the last reset on, and whether there was one (collects 1 row).

    A reset is a TRUNCATE (dropped itself) or, with ``reset_at_load`` (tables kept as
    multisets), a :func:`load_start` (kept: it is the table's first row again). The table
    is emptied before the changes that follow it are applied.
    """
    cuts = F.col("op") == "truncate"
    if reset_at_load:
        cuts = cuts | load_start()
    last = changes.where(cuts).select(F.max(_sort_key(order)).alias("t")).collect()
    cut = last[0]["t"] if last else None
    if cut is None:
        return changes.where(F.col("op") != "truncate"), False
    # Typed literals: a NULL field (e.g. an ordinal a format does not carry) must keep
    # the column's type, or the struct comparison does not resolve.
    types = {f.name: f.dataType for f in changes.schema.fields}
    cut_col = F.struct(*[F.lit(v).cast(types[c]).alias(c) for c, v in zip(order, cut, strict=True)])
    return changes.where((F.col("op") != "truncate") & (_sort_key(order) >= cut_col)), True


@dataclass(frozen=True, slots=True)
class KeyFold:
    """The result of :func:`fold_by_key`.

    ``rows``: per primary key ``_key`` (array of text values), ``_reset``, ``_exists``,
    ``_row`` (text map) and ``_base_key``. The row after the batch is, when ``_exists``:

    * ``_reset`` false: the stored row of ``_key`` overlaid with ``_row``;
    * ``_reset`` true, ``_base_key`` null: ``_row`` alone;
    * ``_reset`` true, ``_base_key`` set: the stored row (before the batch) of the key
      ``_base_key`` overlaid with ``_row``. That is a row whose key changed in the batch
      (an UPDATE of its primary key) while some of its columns were not sent (unchanged
      TOAST, or a format that sends changed columns only): they keep the old row's values.

    ``moves``: whether the batch changed a primary key at all (without it ``_base_key`` is
    always null and the stores skip the join that reads it).

    ``cached``: frames :func:`fold_by_key` persisted to resolve the moves (the fold is
    computed once, not once per link and again by the store); the caller :meth:`release`s
    them once it has used ``rows``.
    """

    rows: DataFrame
    moves: bool
    cached: tuple[DataFrame, ...] = ()

    def release(self) -> None:
        """Unpersist :attr:`cached` (``rows`` may be read again after, computed anew)."""
        for frame in self.cached:
            frame.unpersist()


def fold_by_key(
    changes: DataFrame, pk: Sequence[str], *, order: Sequence[str] = LOG_ORDER
) -> KeyFold:
    """Fold a table's changes per primary key (see :class:`KeyFold` for the result).

    Events per key, in order: insert resets the row to the after image; update overlays
    the after image; delete removes the row; a key change is a delete of the old key and
    a *move* into the new key, which resets it to the old key's row at that moment
    overlaid with the after image. Where the old key's row at that moment is itself known
    only in part (it was moved into in the same batch, or it is the stored row), the
    rows are resolved by :func:`_resolve_moves`, which walks each chain of moves back to
    a reset or to the store, one join per link (chains longer than one link need a row
    to change its key twice in one batch).
    """

    def key_of(image: Column) -> Column:
        return F.array(*[F.element_at(image, F.lit(c)) for c in pk])

    def has_key(image: Column) -> Column:
        cond = image.isNotNull()
        for c in pk:
            cond = cond & F.map_contains_key(image, F.lit(c))
        return cond

    before_key = F.when(has_key(F.col("before")), key_of(F.col("before")))
    after_key = key_of(F.col("after"))
    op = F.col("op")
    main_key = (
        F.when(op == "insert", after_key)
        .when(op == "delete", before_key)
        .otherwise(F.coalesce(before_key, after_key))
    )
    moved = (
        (op == "update")
        & before_key.isNotNull()
        & has_key(F.col("after"))
        & (before_key != after_key)
    )

    def event(key: Column, kind: Column, img: Column, sub: int, source: Column) -> Column:
        return F.struct(
            key.alias("key"),
            _sort_key(order).alias("pos"),
            F.lit(sub).alias("sub"),
            kind.alias("op"),
            img.alias("img"),
            source.alias("from"),
        )

    first = event(
        main_key,
        F.when(moved, F.lit("delete")).otherwise(op),
        F.when(op == "delete", _empty_map()).otherwise(F.coalesce(F.col("after"), _empty_map())),
        0,
        _null_key(),
    )
    second = event(
        after_key, F.lit("move"), F.coalesce(F.col("after"), _empty_map()), 1, before_key
    )
    # an update whose after image lacks key columns (Shareplex: changed columns only)
    # is about its before key; only a complete new key different from it is a move
    # explode_outer: the array is never empty, and a plain explode makes Spark infer a
    # size(...) > 0 filter that it pushes below this projection, building the events twice.
    events = changes.select(
        F.explode_outer(F.when(moved, F.array(first, second)).otherwise(F.array(first))).alias("e")
    ).select("e.*")
    grouped = events.groupBy("key").agg(
        F.array_sort(
            F.collect_list(F.struct("pos", "sub", "op", "img", "from")), _by_position
        ).alias("evs")
    )
    pos_type = events.schema["pos"].dataType
    step = _stepper(pos_type)
    folded = grouped.select("key", F.aggregate("evs", _init(pos_type), step).alias("f")).select(
        F.col("key").alias("_key"),
        F.col("f.reset").alias("_reset"),
        F.col("f.exists").alias("_exists"),
        F.col("f.row").alias("_row"),
        F.col("f.base_key").alias("_base_key"),
        F.col("f.base_pos").alias("_base_pos"),
    )
    if not changes.where(moved).limit(1).count():
        return KeyFold(folded.drop("_base_pos"), moves=False)
    # each link of _resolve_moves reads both: sorted and folded once
    grouped, folded = grouped.persist(), folded.persist()
    return KeyFold(
        _resolve_moves(folded, grouped, step, _init(pos_type)),
        moves=True,
        cached=(folded, grouped),
    )


def _empty_map() -> Column:
    return F.create_map().cast("map<string,string>")


def _null_key() -> Column:
    return F.lit(None).cast("array<string>")


def _acc(reset: Column, exists: Column, row: Column, base_key: Column, base_pos: Column) -> Column:
    return F.struct(
        reset.alias("reset"),
        exists.alias("exists"),
        row.alias("row"),
        base_key.alias("base_key"),
        base_pos.alias("base_pos"),
    )


def _init(pos_type: DataType) -> Column:
    """The fold's start: the stored row (not reset), nothing overlaid yet."""
    return _acc(F.lit(False), F.lit(True), _empty_map(), _null_key(), F.lit(None).cast(pos_type))


def _stepper(pos_type: DataType) -> Callable[[Column, Column], Column]:
    """One event applied to a key's accumulated row (``base_key``/``base_pos``: KeyFold)."""
    no_pos = F.lit(None).cast(pos_type)

    def step(acc: Column, e: Column) -> Column:
        return (
            F.when(
                e["op"] == "insert", _acc(F.lit(True), F.lit(True), e["img"], _null_key(), no_pos)
            )
            .when(
                e["op"] == "delete",
                _acc(F.lit(True), F.lit(False), _empty_map(), _null_key(), no_pos),
            )
            .when(e["op"] == "move", _acc(F.lit(True), F.lit(True), e["img"], e["from"], e["pos"]))
            .otherwise(
                _acc(
                    acc["reset"],
                    F.lit(True),
                    F.map_concat(acc["row"], e["img"]),
                    acc["base_key"],
                    acc["base_pos"],
                )
            )
        )

    return step


def _resolve_moves(
    folded: DataFrame,
    grouped: DataFrame,
    step: Callable[[Column, Column], Column],
    init: Column,
) -> DataFrame:
    """Rows whose fold starts with a move, rebuilt on the old key's row at the move.

    The old key's row just before the move is the fold of its events before that position
    (on its stored row, or on an earlier move's result: the next link of the chain).
    Each round joins the unresolved rows with their old key's events; a row is resolved
    when that fold did not reset it (``_base_key`` = the old key, read from the store), or
    reset it without a move (``_base_key`` null). Positions strictly decrease along a
    chain, so the loop ends; it runs one Spark job per link (a row whose key changed
    twice in the batch needs two).
    """
    no_events = F.array().cast(grouped.schema["evs"].dataType)
    done = folded.where(F.col("_base_key").isNull()).drop("_base_pos")
    pending = folded.where(F.col("_base_key").isNotNull())
    while pending.limit(1).count():
        earlier = F.filter(
            F.coalesce(F.col("g.evs"), no_events),
            lambda e: (
                F.struct(e["pos"].alias("p"), e["sub"].alias("s"))
                < F.struct(F.col("p._base_pos").alias("p"), F.lit(0).alias("s"))
            ),
        )
        linked = (
            pending.alias("p")
            .join(grouped.alias("g"), F.col("p._base_key") == F.col("g.key"), "left")
            .select(
                "p._key",
                "p._reset",
                "p._exists",
                "p._row",
                "p._base_key",
                F.aggregate(earlier, init, step).alias("b"),
            )
            .select(
                "_key",
                "_reset",
                "_exists",
                F.map_concat(F.col("b.row"), F.col("_row")).alias("_row"),
                # not reset before the move: the old key's stored row is the base
                F.when(~F.col("b.reset"), F.col("_base_key"))
                .otherwise(F.col("b.base_key"))
                .alias("_base_key"),
                F.col("b.base_pos").alias("_base_pos"),
                F.col("b.reset").alias("_linked"),
            )
        )
        resolved = ~F.col("_linked") | F.col("_base_key").isNull()
        done = done.unionByName(linked.where(resolved).drop("_base_pos", "_linked"))
        pending = linked.where(~resolved).drop("_linked")
    return done


def _by_position(a: Column, b: Column) -> Column:
    x = F.struct(a["pos"], a["sub"])
    y = F.struct(b["pos"], b["sub"])
    return F.when(x < y, F.lit(-1)).when(x > y, F.lit(1)).otherwise(F.lit(0))


def row_key(image: Column, columns: Sequence[str] | None = None) -> Column:
    """Identity of a whole row (multiset tables): the image's non-null values as JSON.

    Only ``columns`` count (the table's columns as its newest layout has them; every column
    of the image when None), sorted by name, and a NULL counts as absent. So a row has one
    key across its table's layouts: a column added since (NULL in the rows written before,
    absent from their images) and a column dropped since (absent from the images written
    after) change no row's key. Invariant: ``row_key(rekey_image(k), columns)`` of a key
    ``k`` made with more columns or with NULLs is the key of the same row made now
    (:func:`rekeyed`). Null for a null image.
    """
    if columns is None:
        kept = F.map_filter(image, lambda _, v: v.isNotNull())
    else:
        wanted = F.array(*[F.lit(c) for c in columns]).cast("array<string>")
        kept = F.map_filter(image, lambda k, v: v.isNotNull() & F.array_contains(wanted, k))
    return F.to_json(F.map_from_entries(F.array_sort(F.map_entries(kept))))


def rekeyed(
    key: Column,
    columns: Sequence[str],
    added: Sequence[tuple[str, str | None]] = (),
    renamed: Mapping[str, str] | None = None,
) -> Column:
    """A stored row key (:func:`row_key`'s JSON) made again over ``columns``.

    A key written before a DROP COLUMN (or by walcast before 0.2, which kept NULLs) becomes
    the key the row's images have now, so the row's later changes find it. ``renamed``:
    columns the row now holds under another name (old → new: a RENAME COLUMN,
    :mod:`pipeline.column_numbers`). ``added``: columns the row now holds with these
    (text) values (None: NULL), whatever its key named (a column added with a DEFAULT:
    :mod:`pipeline.added_columns`).
    """
    image = F.from_json(key, "map<string,string>")
    if renamed:
        replaced = sorted(set(renamed.values()) - set(renamed))  # a name used again
        if replaced:
            image = F.map_filter(image, lambda k, _: ~k.isin(*replaced))
        old = F.create_map(*[F.lit(x) for pair in renamed.items() for x in pair])
        image = F.transform_keys(image, lambda k, _: F.coalesce(F.element_at(old, k), k))
    if added:
        names = F.array(*[F.lit(n) for n, _ in added]).cast("array<string>")
        image = F.map_filter(image, lambda k, _: ~F.array_contains(names, k))
        values = [(n, v) for n, v in added if v is not None]
        if values:
            image = F.map_concat(image, F.create_map(*[F.lit(x) for pair in values for x in pair]))
    return row_key(image, columns)


def fold_multiset(changes: DataFrame, columns: Sequence[str] | None = None) -> DataFrame:
    """Per whole-row identity: ``_row_key``, ``_delta`` (copies added or removed), ``_row``.

    ``columns``: the columns a row's identity covers (:func:`row_key`).
    """
    op = F.col("op")
    minus = F.struct(
        row_key(F.col("before"), columns).alias("k"),
        F.lit(-1).alias("d"),
        F.col("before").alias("row"),
    )
    plus = F.struct(
        row_key(F.col("after"), columns).alias("k"),
        F.lit(1).alias("d"),
        F.col("after").alias("row"),
    )
    deltas = (
        F.when(op == "insert", F.array(plus))
        .when(op == "delete", F.array(minus))
        .when(op == "update", F.array(minus, plus))
    )
    return (
        # explode_outer (see the events of fold_by_key); its null rows fail the key test
        changes.select(F.explode_outer(deltas).alias("x"))
        .where(F.col("x.k").isNotNull())
        .groupBy(F.col("x.k").alias("_row_key"))
        .agg(F.sum("x.d").alias("_delta"), F.first("x.row").alias("_row"))
    )

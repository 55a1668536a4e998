"""The harness of the tests that change a table's layout under materialize, in every store.

:class:`Source` encodes changes of hand-built tables (:mod:`tests.support.events`) with
walcast's json encoder and normalizes them with its parser and the tables' layout records,
as ``walcast spark materialize`` reads them; :class:`Materialized` applies its batches to
one store and reads the tables back, and can make the process die once at a step
(:meth:`Materialized.apply_after_a_crash`): the batch run again must give the same tables.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from capture.events import Table
from capture.formats import encoder_for
from capture.formats.layout import layout_record
from capture.synthetic import format_options
from pipeline.formats import parser_for
from pipeline.layouts import parse_layouts
from pipeline.materialize import apply_batch, read_table
from pipeline.normalize import normalize_frame
from tests.pipeline.conftest import records, walcast_records
from tests.pipeline.formats.test_layout_in_effect import transaction
from tests.support.events import event

STORES: dict[str, dict[str, Any]] = {
    "parquet": {"use_delta": False},
    "delta": {"use_delta": True},
    "iceberg": {"store": "iceberg"},
}
"""Each store as ``apply_batch``'s keywords."""


class Source:
    """Changes of hand-built tables, one transaction each, through walcast's json encoder."""

    def __init__(self) -> None:
        self.encoder = encoder_for("json", format_options())
        self.lsn = 0
        self.published: list[Table] = []

    def publish(self, *tables: Table) -> None:
        self.published.extend(tables)

    def batch(self, spark, *changes: tuple):
        """Normalized changes and layouts: each change ``(table, op, after)`` or ``(table, op,
        before, after)``, a transaction of its own."""
        messages = []
        for table, op, *images in changes:
            self.lsn += 0x1000
            before, after = (None, images[0]) if len(images) == 1 else images
            change = event(op, table, before=before, after=after, xid=self.lsn, commit_lsn=self.lsn)
            for item in transaction(change):
                messages.extend(m for m in self.encoder.encode(item) if m.kind == "change")
        layouts = parse_layouts(
            records(
                spark,
                [
                    (
                        f"{t.qualified_name}/{t.layout_version}".encode(),
                        json.dumps(layout_record(t)).encode(),
                    )
                    for t in self.published
                ],
            )
        )
        result = normalize_frame(
            walcast_records(spark, messages), parser_for("json"), layouts, persist=True
        )
        changes_frame = result.changes.persist()
        assert changes_frame.count() == len(changes)
        assert result.quarantine.count() == 0
        return changes_frame, layouts


class CrashError(Exception):
    """The process dies at the step :meth:`Materialized.apply_after_a_crash` names."""


class Materialized:
    """One store's tables under ``root``, written from ``source``'s batches."""

    def __init__(self, spark: Any, root: str, store: str, **options: Any) -> None:
        self.spark, self.root = spark, root
        self.options = {**STORES[store], **options}
        """``apply_batch``'s keywords: the store's, then ``options`` (e.g. ``history=True``)."""
        self.source = Source()

    def apply(self, batch_id: int, *changes: tuple) -> None:
        """Apply the changes (:meth:`Source.batch`) as batch ``batch_id``."""
        frame, layouts = self.source.batch(self.spark, *changes)
        try:
            apply_batch(self.spark, frame, self.root, batch_id, layouts, **self.options)
        finally:
            frame.unpersist()

    def apply_after_a_crash(
        self, monkeypatch: pytest.MonkeyPatch, module: Any, step: str, batch_id: int,
        *changes: tuple,
    ) -> None:  # fmt: skip
        """Apply the batch with ``module.step`` dying (:class:`CrashError`), then again."""

        def crash(*args: Any, **kwargs: Any) -> None:
            raise CrashError

        with monkeypatch.context() as patched:
            patched.setattr(module, step, crash)
            with pytest.raises(CrashError):
                self.apply(batch_id, *changes)
        self.apply(batch_id, *changes)

    def rows(self, table: str, *columns: str, as_of_lsn: int | None = None) -> list[tuple]:
        """The table's rows (``columns`` of them), sorted; as of an LSN from its history."""
        frame = read_table(self.spark, self.root, "public", table, as_of_lsn=as_of_lsn)
        return sorted(tuple(r) for r in frame.select(*columns).collect())

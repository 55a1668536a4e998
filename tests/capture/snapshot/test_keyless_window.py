"""A keyless table's loaded chunk, and the stream transactions it already holds.

The chunk of a table without a key is read in a snapshot taken just after its watermark;
a transaction committed between the watermark and the read's WAL horizon, and visible to
the read, is in the chunk, so its changes of the table must not be streamed again. The
daemon that read the chunk drops them; after a restart the slot may replay them, and the
``done`` progress record must carry what the new daemon needs to drop them too. Without
it, a consumer that folds the table (a bag of rows) counts those rows twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from capture.events import Op, StreamItem, TransactionBegin, TransactionCommit
from capture.snapshot import LoadingSource, LoadSettings
from capture.snapshot.reader import ReadSnapshot
from capture.state.progress import KeylessWindow, MemoryProgress, TableProgress
from tests.support.events import event, make_table

BAG = make_table("s", "bag", [("v", "int4", False)], identity="f")
LOW, HORIZON = 0x5000, 0x6000
SNAPSHOT = "900:905:902"
"""Sees xids below 900, and 900, 901, 903, 904; not 902 (in progress) nor 905 and up."""


class ReplayingSource:
    """Stands for the replication source: yields fixed items, once."""

    def __init__(self, items: list[StreamItem]) -> None:
        self.items = items
        self.relations = SimpleNamespace(types=None, key_resolver=None, column_resolver=None)

    def poll(self, timeout: float) -> Iterator[StreamItem]:
        yield from self.items
        self.items = []


def transaction(xid: int, commit_lsn: int, value: int) -> list[StreamItem]:
    change = event(Op.INSERT, BAG, after={"v": str(value)}, xid=xid, commit_lsn=commit_lsn)
    return [
        TransactionBegin(xid, commit_lsn, 0, 1),
        change,
        TransactionCommit(xid, commit_lsn, commit_lsn + 8, 0, 1),
    ]


def streamed_values(progress: MemoryProgress, items: list[StreamItem]) -> list[str]:
    source: Any = LoadingSource(
        ReplayingSource(items),  # type: ignore[arg-type]
        dsn="host=unused",
        slot="s",
        publications=["p"],
        settings=LoadSettings(mode="never"),
        progress=progress,
        delivered_lsn=lambda: 0,
    )
    return [
        item.after.text(0)
        for item in source.poll(0.1)
        if getattr(item, "op", None) is Op.INSERT and item.after is not None
    ]


def replay() -> list[StreamItem]:
    return [
        *transaction(899, LOW - 16, 1),  # committed before the watermark: not in the window
        *transaction(901, LOW + 16, 2),  # in the window and seen by the read: in the chunk
        *transaction(902, LOW + 32, 3),  # in the window, not seen (was in progress)
        *transaction(905, LOW + 48, 4),  # in the window, not seen (started after the read)
        *transaction(903, HORIZON, 5),  # at the horizon: after the read
    ]


def test_a_restarted_daemon_drops_what_the_chunk_holds() -> None:
    progress = MemoryProgress()
    progress.save(
        TableProgress("s.bag", BAG.relation_id, "initial", "done", chunks=1, rows=10,
                      keyless_window=KeylessWindow(LOW, HORIZON, SNAPSHOT))
    )  # fmt: skip
    assert streamed_values(progress, replay()) == ["1", "3", "4", "5"]


def test_without_the_window_every_change_is_streamed() -> None:
    progress = MemoryProgress()
    progress.save(TableProgress("s.bag", BAG.relation_id, "initial", "done", chunks=1, rows=10))
    assert streamed_values(progress, replay()) == ["1", "2", "3", "4", "5"]


def test_the_window_survives_the_progress_record() -> None:
    window = KeylessWindow(LOW, HORIZON, SNAPSHOT)
    record = TableProgress("s.bag", 7, "initial", "done", keyless_window=window)
    assert TableProgress.from_json(record.to_json("slot")) == record
    assert (
        TableProgress.from_json(
            b'{"slot":"s","table":"s.t","relation_id":1,"request":"r","state":"done"}'
        ).keyless_window
        is None
    )


def test_a_snapshot_text_reads_back() -> None:
    snapshot = ReadSnapshot.parse("900:910:903,901,907", "0/6000")
    assert snapshot.text() == "900:910:901,903,907"
    assert ReadSnapshot.parse(snapshot.text(), "0/6000") == snapshot

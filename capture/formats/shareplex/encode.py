r"""``shareplex``: Shareplex JSON as Alibaba DTS writes it to Kafka.

One JSON object per row change: ``{"meta": {...}, "data": {...}}``, plus ``"key": {...}``
for an update::

    {"meta": {"time": "2024-05-02T18:17:29", "userid": null, "op": "ins",
              "scn": "23803720", "rowid": null, "trans": "700", "seq": 1, "size": 3,
              "table": "public.orders", "idx": "1/3", "posttime": "2024-05-02T18:17:30"},
     "data": {"id": "1", "note": "hi"}}

Decisions:

* ``meta`` keys in DTS's order. ``time`` = commit time and ``posttime`` = the time the
  message was built, both UTC as ``yyyy-MM-ddTHH:mm:ss`` (the form of DTS's examples).
* ``scn`` = the commit LSN as a decimal integer string (an SCN is a number; the LSN
  ``X/Y`` is ``(X << 32) + Y``), so it increases in commit order and sorts numerically.
* ``trans`` = the xid (decimal string). ``seq`` = the change's 1-based ordinal in the
  transaction, ``size`` = the number of changes in the transaction
  (``TransactionBegin.change_count``; the format sets ``needs_transaction_size`` so the
  source holds transactions and always knows it), ``idx`` = ``"seq/size"``. ``scn`` and
  ``seq`` together identify a change across replays.
* ``userid`` and ``rowid`` are null: pgoutput carries no committing user, and PostgreSQL
  rows have no stable row address (ctid changes on update and is not sent).
* ``table`` = ``schema.table`` (OWNER.TABLE), names as PostgreSQL spells them.
* ``op``: ``ins``, ``upd``, ``del``; a TRUNCATE is ``truncate`` with an empty ``data``
  (DTS lists TRUNCATE among the operations; ``shareplex.truncate=skip`` drops it).
* Values are strings or null, whatever the type (as in DTS's examples): PostgreSQL's
  exact text output (DateStyle=ISO, TimeZone=UTC, bytea as ``\\x`` + hex), so numeric
  digits, microseconds and bytes survive; a consumer parses the text as PostgreSQL does.
* **Insert**: ``data`` = the new row. **Delete**: ``data`` = the old row; without
  REPLICA IDENTITY FULL that is the key columns only (the others were not sent and are
  absent, not null).
* **Update**: ``data`` = the changed columns' new values; ``key`` = the key columns'
  before values, then (as in DTS's example) the changed non-key columns' old values, in
  table column order. The key is the primary key (the replica identity columns when the
  primary key is unknown). Which columns changed is known only from a complete old image
  (REPLICA IDENTITY FULL). Without one, ``data`` holds every sent non-key column of the
  new row (it cannot say which of them changed) plus the key columns whose value changed
  (without an old key the key did not change), and ``key`` holds the key's before
  values: from the old key when the key changed, else from the new row.
* **Unchanged TOAST** values (not sent) did not change, so they never appear in an
  update's ``data``; an old image's unchanged TOAST values are left out of ``key``.
* **Load rows** (``Op.SNAPSHOT``, read by an initial or on-demand load): ``op`` ``INIT``
  (DTS's value for full data synchronization), ``data`` = the row, ``trans`` ``0``;
  ``scn`` is the load chunk's watermark LSN (after every change the row includes, before
  every later one), ``seq``/``size``/``idx`` number the rows of the chunk.
* ``EncodedMessage.key`` is :func:`~capture.formats._common.row_key` (``schema.table``
  for a table without a primary key: one partition, commit order) of the new row
  (the old row for a delete).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from capture import events
from capture.errors import WalcastError
from capture.events import Op
from capture.formats._common import (
    PerTable,
    RowKeys,
    clock_us,
    json_change,
    present_text_row,
    text_row,
)
from capture.formats._common import column_texts as image_texts
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.settings import FormatSettings
from capture.pgoutput.messages import UnchangedToast

_PG_EPOCH_S: Final = events.PG_EPOCH_US // 1_000_000
_OPS: Final = {
    Op.INSERT: "ins",
    Op.UPDATE: "upd",
    Op.DELETE: "del",
    Op.TRUNCATE: "truncate",
    Op.SNAPSHOT: "INIT",
}


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``shareplex.*`` settings (see the module docstring)."""

    format_name: ClassVar[str] = "shareplex"

    truncate: Literal["emit", "skip"] = "emit"
    """Write a TRUNCATE as op ``truncate``, or drop it."""


class TransactionSizeError(WalcastError):
    """A change arrived without its transaction's size (the source did not hold it)."""


def _seconds_text(unix_s: int) -> str:
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(slots=True)
class _Plan:
    table: events.Table
    names: tuple[str, ...]
    qualified: str
    key_indexes: tuple[int, ...]
    """The key reported in ``key``: primary-key columns, else replica identity."""
    is_key: tuple[bool, ...]
    keys: RowKeys


class ShareplexEncoder(Encoder, name="shareplex", needs_transaction_size=True, settings=Settings):
    """Shareplex JSON; needs each transaction's size before its first change."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        self._plans = PerTable(self._plan)
        self._size: int | None = None
        self._size_xid: int | None = None
        self._lsn = -1
        self._scn = ""
        self._xid = -1
        self._trans = ""
        self._ts = -1
        self._time = ""
        self._post_s = -1
        self._post = ""

    def begin(self, begin: events.TransactionBegin) -> list[EncodedMessage]:
        """Remember the transaction's size (``change_count``)."""
        self._size = begin.change_count
        self._size_xid = begin.xid
        return []

    def commit(self, commit: events.TransactionCommit) -> list[EncodedMessage]:  # noqa: ARG002
        """Forget the transaction's size."""
        self._size = None
        self._size_xid = None
        return []

    @staticmethod
    def _plan(table: events.Table) -> _Plan:
        names = table.column_names
        if table.primary_key:
            index = {n: i for i, n in enumerate(names)}
            keys = tuple(sorted(index[n] for n in table.primary_key))
        else:
            keys = table.key_indexes
        return _Plan(
            table=table,
            names=names,
            qualified=table.qualified_name,
            key_indexes=keys,
            is_key=tuple(i in keys for i in range(len(names))),
            keys=RowKeys(table),
        )

    def meta(self, event: events.ChangeEvent) -> dict[str, Any]:
        """Build the ``meta`` object of ``event``."""
        size = self._size
        if size is None or self._size_xid != event.xid:
            raise TransactionSizeError(
                f"shareplex: change {event.ordinal} of transaction {event.xid} arrived "
                "without the transaction's size",
                hint="the source must hold transactions (needs_transaction_size) and send "
                "TransactionBegin with change_count before the changes",
            )
        if event.commit_lsn != self._lsn:
            self._lsn = event.commit_lsn
            self._scn = str(event.commit_lsn)
        if event.xid != self._xid:
            self._xid = event.xid
            self._trans = str(event.xid)
        if event.commit_ts != self._ts:
            self._ts = event.commit_ts
            self._time = _seconds_text(event.commit_ts // 1_000_000 + _PG_EPOCH_S)
        now_s = clock_us(self._clock) // 1_000_000
        if now_s != self._post_s:
            self._post_s = now_s
            self._post = _seconds_text(now_s)
        seq = event.ordinal
        return {
            "time": self._time,
            "userid": None,
            "op": _OPS[event.op],
            "scn": self._scn,
            "rowid": None,
            "trans": self._trans,
            "seq": seq,
            "size": size,
            "table": event.table.qualified_name,
            "idx": f"{seq}/{size}",
            "posttime": self._post,
        }

    def document(self, event: events.ChangeEvent) -> dict[str, Any] | None:
        """Build the message of ``event`` as a dict (None for a skipped TRUNCATE)."""
        op = event.op
        if op is Op.TRUNCATE and self.settings.truncate == "skip":
            return None
        meta = self.meta(event)
        plan = self._plans[event.table]
        if op is Op.INSERT or op is Op.SNAPSHOT:
            assert event.after is not None
            return {"meta": meta, "data": text_row(plan.names, image_texts(event.after))}
        if op is Op.DELETE:
            before = event.before
            return {"meta": meta, "data": present_text_row(before) if before else {}}
        if op is Op.UPDATE:
            data, key = _update(plan, event.before, event.after)
            return {"meta": meta, "data": data, "key": key}
        return {"meta": meta, "data": {}}

    def change(self, event: events.ChangeEvent) -> list[EncodedMessage]:
        """One message per row change."""
        return json_change(event, self.document(event), self._plans[event.table].keys)


def _update(
    plan: _Plan, before: events.Image | None, after: events.Image | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the ``data`` and ``key`` objects of an update."""
    assert after is not None
    names = plan.names
    new = image_texts(after)
    data: dict[str, Any]
    key: dict[str, Any]
    if before is None or before.key_only:
        # Which columns changed is unknown, except for the replica identity: it did not
        # change when no old key was sent, and the old key tells whether it did.
        identity = plan.table.key_indexes
        old = new if before is None else image_texts(before)
        data = {
            name: now
            for i, name in enumerate(names)
            if not isinstance(now := new[i], UnchangedToast)
            and (i not in identity or old[i] != now)
        }
        indexes = plan.key_indexes if before is None else identity
        key = {names[i]: t for i in indexes if not isinstance(t := old[i], UnchangedToast)}
        return data, key
    old = image_texts(before)
    data = {}
    key = {}
    is_key = plan.is_key
    for i, name in enumerate(names):
        was = old[i]
        if isinstance(was, UnchangedToast):
            continue
        now = new[i]
        if not isinstance(now, UnchangedToast) and was != now:
            data[name] = now
            key[name] = was
        elif is_key[i]:
            key[name] = was
    return data, key

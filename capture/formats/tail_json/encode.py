"""``json``: walcast's own line format, one JSON object per row change (``walcast tail``).

Keys: ``op`` (insert/update/delete/truncate/snapshot), ``schema``, ``table``, ``xid``,
``commit_lsn`` ("X/Y"), ``commit_time`` (ISO-8601, UTC), ``before``/``after`` (column →
PostgreSQL text value, or null for a missing image), ``unchanged_toast``.

Decisions:

* Values are PostgreSQL's text representation: exactly the server's own output in text
  mode (the walsender session runs with TimeZone=UTC and DateStyle=ISO), and the same
  text re-rendered from binary values in ``--binary`` mode.
* A key-only before image (REPLICA IDENTITY DEFAULT/INDEX) holds only the key columns;
  ``before`` is null when the server sent no old image.
* Columns in ``unchanged_toast`` were not sent (their TOASTed value did not change); they
  are absent from ``after``.
* **Load rows** (``Op.SNAPSHOT``, read by an initial or on-demand load): ``op``
  ``"snapshot"``, ``before`` null, ``after`` the whole row, ``xid`` 0, ``commit_lsn`` the
  load chunk's watermark, which sorts the row after every change it includes and before
  every later one.
* The Kafka key is :func:`~capture.formats._common.row_key`: table plus primary key; the
  table alone (``schema.table``) for a table without a primary key, so that all its
  changes keep one partition and commit order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

import orjson

from capture.events import ChangeEvent, Image, Op, Table, pg_ts_to_datetime
from capture.formats._common import PerTable, RowKeys
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.settings import FormatSettings
from capture.lsn import format_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST

_BINARY: Final = ord("b")
_TEXT: Final = ord("t")
_UNCHANGED: Final = ord("u")


def image_texts(image: Image | None) -> dict[str, Any] | None:
    """Column → PostgreSQL text for the present, sent columns of ``image``."""
    if image is None:
        return None
    table = image.table
    names = table.column_names
    values = image.tuple.values
    kinds = image.tuple.kinds
    if not image.key_only and kinds.count(_TEXT) == len(kinds):
        # Every column sent as text and none NULL/unchanged: all in C.
        return dict(zip(names, map(bytes.decode, values), strict=False))  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    for i in image.present_indexes():
        raw = values[i]
        if raw is None:
            out[names[i]] = None
        elif raw is UNCHANGED_TOAST:
            continue
        elif kinds[i] == _BINARY:
            out[names[i]] = table.renderers[i](table.binary_decoders[i](raw))  # type: ignore[arg-type]
        else:
            out[names[i]] = raw.decode()  # type: ignore[union-attr]  # the u kind was handled above
    return out


@dataclass(frozen=True, slots=True)
class Settings(FormatSettings):
    """The ``json`` format has no settings (any ``json.*`` key is an error)."""

    format_name: ClassVar[str] = "json"


class TailJsonEncoder(Encoder, name="json", settings=Settings):
    """One JSON object per row change.

    The keys before ``before`` are the same for every change of one operation on one
    table in one transaction, so their bytes are built once and reused (the hot path
    then serializes only the images).
    """

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        self._prefix_key: tuple[Op, Table, int] | None = None
        self._prefix = b""
        self._keys = PerTable(RowKeys)

    def _head(self, event: ChangeEvent) -> bytes:
        key = (event.op, event.table, event.commit_lsn)
        if key != self._prefix_key:
            table = event.table
            head = orjson.dumps(
                {
                    "op": event.op,
                    "schema": table.schema,
                    "table": table.name,
                    "xid": event.xid,
                    "commit_lsn": format_lsn(event.commit_lsn),
                    "commit_time": pg_ts_to_datetime(event.commit_ts).isoformat(),
                }
            )
            self._prefix = head[:-1] + b',"before":'
            self._prefix_key = key
        return self._prefix

    def render(self, event: ChangeEvent) -> bytes:
        """The JSON document, newline-terminated, for ``event``."""
        before = event.before
        after = event.after
        toast = (
            orjson.dumps(after.unchanged_toast_columns())
            if after is not None and _UNCHANGED in after.tuple.kinds
            else b"[]"
        )
        return b"".join(
            (
                self._head(event),
                b"null" if before is None else orjson.dumps(image_texts(before)),
                b',"after":',
                b"null" if after is None else orjson.dumps(image_texts(after)),
                b',"unchanged_toast":',
                toast,
                b"}\n",
            )
        )

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """One message per change."""
        image = event.after if event.after is not None else event.before
        key = self._keys[event.table].key(image)
        return [EncodedMessage.for_change(event, self.render(event)[:-1], key)]

    def tail_lines(self, event: ChangeEvent) -> bytes:
        """What ``walcast tail`` prints for ``event``, without building messages."""
        return self.render(event)

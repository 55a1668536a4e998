"""``json``: walcast's own line format, one JSON object per row change (``walcast tail``).

Keys: ``op`` (insert/update/delete/truncate), ``schema``, ``table``, ``xid``,
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
* The key of each message is ``schema.table`` (tail ignores keys).
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import orjson

from capture.events import ChangeEvent, Image, pg_ts_to_datetime
from capture.formats.base import EncodedMessage, Encoder
from capture.lsn import format_lsn
from capture.pgoutput.messages import UNCHANGED_TOAST

_BINARY: Final = ord("b")


def image_texts(image: Image | None) -> dict[str, Any] | None:
    """Column → PostgreSQL text for the present, sent columns of ``image``."""
    if image is None:
        return None
    table = image.table
    names = table.column_names
    values = image.tuple.values
    kinds = image.tuple.kinds
    out: dict[str, Any] = {}
    for i in image.present_indexes():
        raw = values[i]
        if raw is None:
            out[names[i]] = None
        elif raw is UNCHANGED_TOAST:
            continue
        elif kinds[i] == _BINARY:
            out[names[i]] = table.renderers[i](table.binary_decoders[i](raw))
        else:
            out[names[i]] = raw.decode()  # type: ignore[union-attr]
    return out


class TailJsonEncoder(Encoder):
    """One JSON object per row change; per-transaction fields are computed once."""

    name: ClassVar[str] = "json"

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self._ts = -1
        self._time = ""
        self._lsn = -1
        self._lsn_text = ""

    def render(self, event: ChangeEvent) -> bytes:
        """The JSON document (without newline) for ``event``."""
        if event.commit_ts != self._ts:
            self._ts = event.commit_ts
            self._time = pg_ts_to_datetime(event.commit_ts).isoformat()
        if event.commit_lsn != self._lsn:
            self._lsn = event.commit_lsn
            self._lsn_text = format_lsn(event.commit_lsn)
        after = event.after
        return orjson.dumps(
            {
                "op": event.op.value,
                "schema": event.table.schema,
                "table": event.table.name,
                "xid": event.xid,
                "commit_lsn": self._lsn_text,
                "commit_time": self._time,
                "before": image_texts(event.before),
                "after": image_texts(after),
                "unchanged_toast": after.unchanged_toast_columns() if after is not None else [],
            }
        )

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """One message per change."""
        table = event.table
        return [
            EncodedMessage(
                self.render(event),
                table.qualified_name.encode(),
                "change",
                table.schema,
                table.name,
                event.commit_lsn,
                event.xid,
                event.ordinal,
            )
        ]

"""Change events that fit their tables: a cheap check at the source, a diagnosis at the sink.

The decoder accepts any message whose bytes are well formed; a well-formed message can
still disagree with the Relation it names (a tuple with more columns), or carry a value
its type cannot hold (text that is not UTF-8, a 1-byte binary int4). Both must stop the
stream with a :class:`~capture.errors.DecodeError` naming the WAL position, the relation
and the column, before anything at or after it is acknowledged, never crash an encoder.

* :class:`~capture.transactions.TransactionAssembler` checks every row message, so
  encoders only ever see tuples with their table's column count, text values in valid
  UTF-8 (which some encoders copy as bytes without decoding), old key images with NULL
  outside the key, and binary values of fixed-size types (int4, timestamptz, uuid ...) of
  exactly their size. The common row (every column sent as ASCII text) is recognised by
  :func:`plainly_fits` / :func:`plain_key_image` at a cost of well under 0.1 µs (an
  identity test of the kind bytes, one join and ``bytes.isascii()``); any other row goes
  through :func:`check_row`, which checks it fully.
* Whether each value is valid for its TYPE is not checked per row (that would decode every
  value twice on the hot path). An encoder that fails on a value raises; the caller of the
  encoder then asks :func:`explain` which value of the event is at fault: it decodes and
  renders every value of the event with the table's codecs, and returns a DecodeError for
  the first one they reject, or None when all are fine (then the exception is a bug in the
  encoder and must propagate unchanged)::

      try:
          messages = encoder.change(event)
      except Exception as exc:
          found = explain(event, exc)
          if found is None:
              raise
          raise found from exc
"""

from __future__ import annotations

from typing import Final

from capture.errors import DecodeError
from capture.events import ChangeEvent, Image, Op, Table
from capture.pgoutput.messages import TupleData
from capture.types.registry import FIXED_BINARY_SIZES

_TEXT: Final = ord("t")
_NULL: Final = ord("n")
_BINARY: Final = ord("b")
_MESSAGE_TYPES: Final = {Op.INSERT: "I", Op.UPDATE: "U", Op.DELETE: "D", Op.TRUNCATE: "T"}


_join: Final = b"".join


def plainly_fits(data: TupleData, text_kinds: bytes) -> bool:
    """Whether ``data`` certainly fits its table: every column sent as ASCII text.

    ``text_kinds`` is the table's entry in ``RelationCache.rows_by_id`` (the decoder's
    object for an all-text tuple of the table's column count). False says nothing: the
    tuple must then go through :func:`check_row`.
    """
    return data.kinds is text_kinds and _join(data.values).isascii()  # type: ignore[arg-type]


def key_image_kinds(table: Table) -> bytes:
    """The kind bytes of an old key image of ``table`` whose key is sent as text."""
    keys = table.key_indexes
    return bytes(_TEXT if i in keys else _NULL for i in range(len(table.columns)))


def plain_key_image(data: TupleData, kinds: bytes) -> bool:
    """Whether old key image ``data`` certainly fits (False says nothing, see above).

    It does when its kinds are exactly ``kinds`` (from :func:`key_image_kinds`) and its key
    values are ASCII.
    """
    return data.kinds == kinds and _join(filter(None, data.values)).isascii()  # type: ignore[arg-type]


def check_row(
    table: Table,
    message_type: str,
    raw: bytes,
    wal_start: int,
    *tuples: TupleData | None,
    key_only: TupleData | None = None,
) -> None:
    """Raise a DecodeError unless every tuple of a row message fits ``table``.

    ``raw`` is the whole message: when it is all ASCII, so is every text value in it, and
    only the column counts are compared. ``key_only`` is an old key image (``'K'``), whose
    non-key columns must be NULL (pgoutput sends them so; encoders may read every column).
    """
    ncols = len(table.columns)
    ascii_only = raw.isascii()
    for data in (*tuples, key_only):
        if data is None:
            continue
        if len(data.values) != ncols:
            raise DecodeError(
                f"the tuple has {len(data.values)} columns, but the Relation message of "
                f"{table.qualified_name} (OID {table.relation_id}) describes {ncols}",
                message_type=message_type,
                offset=None,
                lsn=wal_start,
                relation=table.qualified_name,
            )
        if _BINARY in data.kinds:
            _check_binary_sizes(table, data, message_type, wal_start)
        if not ascii_only:
            _check_text(table, data, message_type, wal_start)
    if key_only is not None:
        _check_key_image(table, key_only, message_type, wal_start)


def _column_error(
    reason: str, table: Table, i: int, message_type: str, wal_start: int
) -> DecodeError:
    """The DecodeError for column ``i`` of ``table``, in a message at ``wal_start``."""
    return DecodeError(
        reason,
        message_type=message_type,
        offset=None,
        lsn=wal_start,
        relation=table.qualified_name,
        column=table.columns[i].name,
    )


def _check_key_image(table: Table, data: TupleData, message_type: str, wal_start: int) -> None:
    kinds = data.kinds
    keys = table.key_indexes
    for i in range(len(kinds)):
        if kinds[i] != _NULL and i not in keys:
            raise _column_error(
                "the old key image carries a value in a column that is not part of the "
                "replica identity",
                table, i, message_type, wal_start,
            )  # fmt: skip


def _check_binary_sizes(table: Table, data: TupleData, message_type: str, wal_start: int) -> None:
    kinds = data.kinds
    decoders = table.binary_decoders
    for i, raw in enumerate(data.values):
        if kinds[i] == _BINARY:
            size = FIXED_BINARY_SIZES.get(decoders[i])
            if size is not None and len(raw) != size:  # type: ignore[arg-type]
                name = table.columns[i].type_name
                reason = f"the binary {name} value has {len(raw)} bytes, its send format {size}"  # type: ignore[arg-type]
                raise _column_error(reason, table, i, message_type, wal_start)


def _check_text(table: Table, data: TupleData, message_type: str, wal_start: int) -> None:
    kinds = data.kinds
    texts = [v for k, v in zip(kinds, data.values, strict=True) if k == _TEXT]
    try:
        b"\x00".join(texts).decode()  # type: ignore[arg-type]  # NUL: no character spans two
    except UnicodeDecodeError:
        pass
    else:
        return
    for i, raw in enumerate(data.values):
        if kinds[i] == _TEXT:
            try:
                raw.decode()  # type: ignore[union-attr]  # a 't' value is bytes
            except UnicodeDecodeError as exc:
                reason = (
                    f"the text value is not valid UTF-8 (byte {exc.start} of {len(exc.object)})"
                )
                raise _column_error(reason, table, i, message_type, wal_start) from None


def explain(event: ChangeEvent, exc: BaseException) -> DecodeError | None:
    """The DecodeError for the first value of ``event`` its table's codecs reject, or None.

    ``exc`` is what the encoder raised; its type and message are part of the reason.
    The WAL position named is the transaction's commit LSN (the change is its
    ``event.ordinal``-th).
    """
    for label, image in (("new row", event.after), ("old row", event.before)):
        if image is None:
            continue
        table = image.table
        column = None
        if len(image.tuple.values) != len(table.columns):
            reason = (
                f"change {event.ordinal} of transaction {event.xid}: the {label} has "
                f"{len(image.tuple.values)} columns, the table {len(table.columns)}"
            )
        else:
            found = _first_bad_value(image)
            if found is None:
                continue
            index, problem = found
            column = table.columns[index].name
            reason = (
                f"change {event.ordinal} of transaction {event.xid} ({event.op.value}, "
                f"{label}): {problem}, so the output format failed "
                f"({type(exc).__name__}: {_short(str(exc))})"
            )
        return DecodeError(
            reason,
            message_type=_MESSAGE_TYPES.get(event.op, "?"),
            offset=None,
            lsn=event.commit_lsn,
            relation=table.qualified_name,
            column=column,
        )
    return None


def _first_bad_value(image: Image) -> tuple[int, str] | None:
    """(column index, what is wrong) of the first value the codecs reject, or None."""
    table = image.table
    data = image.tuple
    for i, raw in enumerate(data.values):
        if type(raw) is not bytes:
            continue
        column = table.columns[i]
        binary = data.kinds[i] == _BINARY
        form = "binary" if binary else "text"
        try:
            if binary:
                # Formats often render a binary value as text and parse that: both must work.
                text = table.renderers[i](table.binary_decoders[i](raw))
                table.text_decoders[i](text.encode())
            else:
                raw.decode()
                table.renderers[i](table.text_decoders[i](raw))
        except Exception as exc:  # noqa: BLE001 - any failure of a codec is the answer
            return i, (
                f"its {form} value ({len(raw)} bytes) is not a valid {column.type_name} "
                f"({type(exc).__name__}: {_short(str(exc))})"
            )
    return None


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

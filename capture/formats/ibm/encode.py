r"""``ibm``: IBM Q Replication Event Publishing, delimited messages.

One Kafka message carries a whole transaction (or one segment of a large one); each row
change is one record ending with the record delimiter::

    10,"IBM","2024123","181729123456","public","orders","REPL",
    "0000:0000:0000:0000:0000:02bc","0000:0000:0000:0000:0000:0000:016b:3748",
    "2024-05-02-18.17.29","0efd47f9fd2cd13a",0000,<before values>,<after values>\n

(one line in the real output). The full layout, every value rendering and the table
layout records are documented in ``schemas/ibm-delimited.md``; the decisions are:

Header
    * ``type`` is always ``10`` (bare), as in every IBM example.
    * ``identifier`` is the ``ibm.identifier`` setting (default ``IBM``: consumers check
      for ``IBM`` and ``IBM-INVALID-COLUMN-…``). When column values are not available
      (see "unchanged TOAST" below) it becomes ``<identifier>-INVALID-COLUMN-nnnX-NULL``
      as IBM does for values it cannot send: ``nnn`` is the 1-based column number (three
      digits or more), ``X`` is ``B`` (before value) or ``A`` (after value). IBM's form
      names one column; walcast names EVERY unavailable value, ``-``-separated, before
      values first, each side in column order: ``IBM-INVALID-COLUMN-002A-005A-NULL``. The
      first ``nnnX`` is where IBM's consumers look for it (the first column), the
      ``<identifier>-INVALID-COLUMN-`` prefix and the ``-NULL`` suffix are IBM's, and a
      reader that keeps the previous value of only the first column still never takes a
      listed one for NULL if it reads the list (``pipeline/formats/ibm/decode.py`` does).
    * ``date`` (``YYYYddd``) and ``time`` (``HHMMSSffffff``) are "when the message was
      put"; walcast uses the COMMIT time (UTC), so a replayed transaction is
      byte-for-byte identical and the output is deterministic.
    * ``table_owner`` is the schema, ``table_name`` the table (both quoted).
    * ``transaction_identifier`` is the xid as a 96-bit big-endian number in six
      colon-separated groups of four lower-case hex digits (xid 700 →
      ``0000:0000:0000:0000:0000:02bc``): ``int(value.replace(":", ""), 16) == xid``.
    * ``commit_lsn`` is the commit LSN as a 128-bit big-endian number in eight groups
      (``0/16B3748`` → ``0000:0000:0000:0000:0000:0000:016b:3748``): groups 5-6 are the
      LSN's high 32 bits, groups 7-8 its low 32 bits. Fixed width, so string order is
      commit order; :func:`parse_commit_lsn` reverses it.
    * ``commit_time`` is ``YYYY-MM-DD-HH.mm.ss`` (UTC).
    * ``plan_name`` is the record's **layout version**: the ``version`` of the layout
      record of the table as it was when the change was made
      (:attr:`capture.events.Table.layout_version`, 16 lower-case hex digits,
      quoted). IBM defines plan_name as z/OS's plan name and sends NULL elsewhere; walcast
      uses the field because the format has no other place for it, and a reader needs it:
      the layout topic holds every layout of a table, and the field count does not tell
      them apart (ADD COLUMN then DROP COLUMN bring it back; so can an ALTER inside one
      transaction). Readers take the layout whose ``version`` the record names, never one
      picked by field count. IBM's consumers read plan_name as an opaque string. A
      non-empty ``ibm.plan_name`` setting is written instead (then records name no
      layout; a 16-hex-digit setting is refused, it would pass for a version).
    * ``segment_number`` is ``0000`` for a transaction that fits in one message; a larger
      one is split at record boundaries into segments numbered ``0001``, ``0002``, …
      with the last one ``0000`` (after ``9999`` numbering wraps to ``0001``).

Segmentation and memory
    A message is at most :attr:`IbmDelimitedEncoder.max_message_size` bytes. By default
    that is derived from the sink's limit, ``FormatOptions.max_message_bytes`` (for Kafka:
    the producer's effective ``message.max.bytes`` less the envelope the daemon reserves),
    minus what this format's messages carry besides their value: the key (the database
    name), walcast's four headers at their largest (``settings.HEADER_BYTES``) and
    Kafka's record and batch overhead (``settings.RECORD_OVERHEAD``). So a whole
    message, as the producer counts it, never exceeds ``message.max.bytes`` at the
    defaults, whatever the transaction's size (a 2,000-row transaction of 1 kB rows is two
    segments at librdkafka's default 1,000,000). A sink without a limit (stdout) keeps 1,000,000.
    ``ibm.max_message_size`` sets the limit explicitly (at least 256 bytes); a value that
    the sink cannot take (above the derived limit) is a ConfigError at start.
    Records are appended to one pending segment; when the next record would overflow it,
    the pending segment is sent (its segment numbers patched in place) and a new one
    starts, so at most one segment is ever held. The last segment is sent at COMMIT with
    ``0000``. ``TransactionBegin.change_count`` is not needed. A single record larger
    than the limit is sent alone in its own segment (records are never split).
    :meth:`IbmDelimitedEncoder.flush` (shutdown mid-transaction) sends the pending
    records as a NON-final segment (never ``0000``): consumers see the transaction as
    incomplete, and walcast sends it again in full after a restart.

Values (before values of every column, then after values, in column order)
    * NULL is an empty field. An empty string is two string delimiters (``""``).
    * Bare: int2/int4/int8/oid/xid as PostgreSQL prints them; numeric, real and double
      with ``.`` replaced by the decimal character. ``NaN``, ``Infinity`` and
      ``-Infinity`` are bare too, spelled as PostgreSQL (and Java's
      ``Double.parseDouble``) spell them. bool is bare ``1``/``0``.
    * Quoted (string delimiter doubled inside): every other type, in PostgreSQL's exact
      text form (the walsender runs with DateStyle ISO, TimeZone UTC): char, varchar,
      text, enums, date/time/timestamp[tz]/interval (``2024-05-02 18:17:29.123456+00``,
      ``infinity``, ``0044-03-15 BC``), uuid, json/jsonb (the format's CLOBs), inet/
      cidr/macaddr, arrays (``{1,2,3}``), money, bit strings, geometric types …
      DB2's timestamp form cannot hold time zones, BC dates or infinity; the layout
      record tells consumers each column's type.
    * bytea (a BLOB) is quoted upper-case hex without a prefix (``"00FF"``; empty
      bytea is ``""``), like IBM's hex strings.
    * Record delimiters inside quoted values are not escaped (only the string delimiter
      is, as the IBM document says): split records with a quote-aware reader such as
      :func:`capture.formats.ibm.records.split_records`, or a CSV reader in multi-line mode.

Images
    * INSERT: all before values empty. DELETE: all after values empty.
    * UPDATE without an old image (REPLICA IDENTITY DEFAULT/INDEX and the key did not
      change): the key columns' before values are their after values (the key is
      unchanged, that is why PostgreSQL did not send it); the other before values are
      empty. A key-only old image (``K``: key changed, or any DELETE under DEFAULT/INDEX)
      gives the key columns' values and empty fields for the others. So for tables
      without REPLICA IDENTITY FULL, empty non-key before values mean "not known";
      the layout record's ``replica_identity`` says which tables these are.
    * Unchanged TOAST (a large value that did not change and was not sent): the after
      value is copied from the before image when the old row was sent (FULL); otherwise
      it is empty and the record's identifier names every such column
      (``IBM-INVALID-COLUMN-005A-007A-NULL``) so that none is mistaken for NULL:
      consumers keep each listed column's previous value.
    * TRUNCATE: the format has no such operation and every consumer would misread a
      made-up one, so TRUNCATE changes are skipped (not published). Records are
      numbered by position, so a transaction's record positions equal the PostgreSQL
      ordinals unless it contains a TRUNCATE.

Initial load
    A row read by an initial or on-demand load (``Op.SNAPSHOT``) is an insert record
    (``ISRT``): the format has no load operation, and consumers apply it as an insert.
    What marks it as a load is its ``transaction_identifier``,
    ``0000:0000:0000:0000:0000:0000``: xid 0 is PostgreSQL's InvalidTransactionId, never a
    real transaction's. Its ``commit_lsn`` is the load chunk's watermark, after every
    change the row includes and before every later one; a chunk travels as one message
    (segmented like a transaction), with the chunk's read time as its date and time.

Settings (``FormatOptions.settings``; validated at construction, errors name the key)
    ``ibm.column_delimiter`` (``,``), ``ibm.record_delimiter`` (``\n``),
    ``ibm.string_delimiter`` (``"``), ``ibm.decimal_character`` (``.``): single ASCII
    characters, all four distinct, none alphanumeric (IBM's rules), and none ``+`` or
    ``-`` (which bare numbers contain). Escapes ``\n``, ``\r``, ``\t``, ``\\`` and
    ``\xHH`` are accepted. ``ibm.identifier`` (``IBM``), ``ibm.plan_name`` (empty =
    NULL), ``ibm.max_message_size`` (bytes, at least 256; default: derived from the
    sink's limit, see above).

Kafka key
    The source database name (``FormatOptions.database``) for every message: one
    constant key puts all transactions in one partition, in commit order, which the
    format needs (a transaction spans tables, and segments must stay in order).

Layout records
    The format carries no column names or types. walcast publishes a layout record per
    table and Relation message (:func:`capture.formats.layout.layout_record`: names,
    types, key, replica identity, each column's rendering, ``version`` fingerprint; see
    ``schemas/ibm-delimited.md``). Every record names its layout's ``version`` in
    ``plan_name`` (see "Header"): a reader takes that layout, and quarantines a record
    whose layout it does not hold (or whose field count is not that layout's) rather
    than read it with another one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from capture.events import (
    ChangeEvent,
    Image,
    Op,
    Table,
    TransactionBegin,
    TransactionCommit,
    pg_ts_to_datetime,
)
from capture.formats._common import PerTable
from capture.formats._common import raw_texts as _resolve
from capture.formats.base import EncodedMessage, Encoder, FormatOptions
from capture.formats.ibm.settings import Settings, segment_limit
from capture.formats.layout import rendering
from capture.pgoutput.messages import UnchangedToast
from capture.types.text import bytea_from_text

if TYPE_CHECKING:
    from collections.abc import Sequence

HEADER_FIELDS: Final = (
    "type",
    "identifier",
    "date",
    "time",
    "table_owner",
    "table_name",
    "operation",
    "transaction_identifier",
    "commit_lsn",
    "commit_time",
    "plan_name",
    "segment_number",
)
"""The 12 header fields, in order."""
RECORD_TYPE: Final = b"10"
OPERATIONS: Final = {Op.INSERT: "ISRT", Op.UPDATE: "REPL", Op.DELETE: "DLET", Op.SNAPSHOT: "ISRT"}
"""A load row (Op.SNAPSHOT) is an insert record; see "Initial load" in the module docstring."""

INVALID_COLUMN: Final = "-INVALID-COLUMN-"
"""Between the identifier and the unavailable columns' ``nnnX`` list (see "Images")."""

_SEG_FINAL: Final = b"0000"
_BINARY: Final = ord("b")
_UNCHANGED: Final = ord("u")

# How a column's values are rendered.
_QUOTED: Final = 0
_BARE: Final = 1
_NUMBER: Final = 2
"""Bare, with ``.`` replaced by the decimal character."""
_BOOL: Final = 3
_BYTES: Final = 4

_KIND_BY_RENDERING: Final = {
    "quoted": _QUOTED,
    "bare": _BARE,
    "number": _NUMBER,
    "bool": _BOOL,
    "hex": _BYTES,
}


# --------------------------------------------------------------------------- positions


def format_transaction_id(xid: int) -> str:
    """Format ``xid`` as a ``transaction_identifier``: 96-bit big-endian, six hex groups."""
    digits = f"{xid:024x}"
    return ":".join(digits[i : i + 4] for i in range(0, 24, 4))


def parse_transaction_id(text: str) -> int:
    """Return the xid of a ``transaction_identifier`` (inverse of :func:`format_transaction_id`)."""
    return int(text.replace(":", ""), 16)


def format_commit_lsn(lsn: int) -> str:
    """Format ``lsn`` as a ``commit_lsn`` field: 128-bit big-endian, eight hex groups."""
    digits = f"{lsn:032x}"
    return ":".join(digits[i : i + 4] for i in range(0, 32, 4))


def parse_commit_lsn(text: str) -> int:
    """Return the LSN of a ``commit_lsn`` field (inverse of :func:`format_commit_lsn`)."""
    return int(text.replace(":", ""), 16)


# --------------------------------------------------------------------------- encoder


def _hex(raw: bytes) -> bytes:
    """Upper-case hex of a bytea's text form (hex or escape format)."""
    if raw[:2] == b"\\x":
        return raw[2:].upper()
    return bytea_from_text(raw).hex().upper().encode()


class _TableState:
    """Per-Table rendering state (a new Relation message makes a new Table object)."""

    __slots__ = (
        "empty_fields",
        "key_indexes",
        "key_mask",
        "kinds",
        "plan_part",
        "size",
        "table_part",
    )

    def __init__(self, table: Table, quote: Any, cd: bytes, dc: bytes, plan: bytes | None) -> None:
        kinds = tuple(_KIND_BY_RENDERING[rendering(c)] for c in table.columns)
        if dc == b".":
            kinds = tuple(_BARE if k == _NUMBER else k for k in kinds)
        self.kinds = kinds
        self.size = len(table.columns)
        self.key_indexes = table.key_indexes
        self.key_mask = tuple(i in table.key_indexes for i in range(self.size))
        self.empty_fields = [b""] * self.size
        self.table_part = quote(table.schema) + cd + quote(table.name) + cd
        self.plan_part = (quote(table.layout_version) if plan is None else plan) + cd
        """The ``plan_name`` field and its delimiter: the layout version unless set."""


class IbmDelimitedEncoder(Encoder, name="ibm", settings=Settings):
    """Delimited Event Publishing messages, one per transaction (or segment)."""

    settings: Settings

    def __init__(self, options: FormatOptions | None = None) -> None:
        super().__init__(options)
        cfg = self.settings
        self._cd = cfg.column_delimiter.encode()
        self._rd = cfg.record_delimiter.encode()
        self._q = cfg.string_delimiter.encode()
        self._qq = self._q + self._q
        self._dc = cfg.decimal_character.encode()
        self.max_message_size = segment_limit(cfg.max_message_size, self.options)
        """The largest message this encoder writes (see "Segmentation and memory")."""
        self._max = self.max_message_size
        self._key = self.options.database.encode()
        self._plan = self.quote(cfg.plan_name) if cfg.plan_name else None
        self._tables = PerTable(self._new_state)
        # The open transaction.
        self._txn: tuple[int, int, int] | None = None
        self._txn_part = b""
        self._txn_tail = b""
        self._heads: dict[tuple[Table, Op], bytes] = {}
        # The pending segment.
        self._buf = bytearray()
        self._offsets: list[int] = []
        self._first_ordinal: int | None = None
        self._first_lsn: int | None = None
        self._segment = 0
        self.skipped_truncates = 0
        """TRUNCATE changes seen and not published (the format has no such operation)."""

    # ------------------------------------------------------------------ rendering

    def quote(self, text: str | bytes) -> bytes:
        """``text`` enclosed in the string delimiter, inner delimiters doubled."""
        raw = text.encode() if isinstance(text, str) else text
        q = self._q
        return q + raw.replace(q, self._qq) + q

    def _new_state(self, table: Table) -> _TableState:
        return _TableState(table, self.quote, self._cd, self._dc, self._plan)

    def _open(self, xid: int, commit_lsn: int, commit_ts: int) -> list[EncodedMessage]:
        """Start a transaction: compute the header fields it shares.

        A change of another transaction without a commit in between means the previous
        one ended (the stream keeps order; this only happens when a caller feeds bare
        changes): its records are sent as complete first.
        """
        out = [self._emit(_SEG_FINAL)] if self._buf else []
        self._txn = (xid, commit_lsn, commit_ts)
        self._segment = 0
        self._heads = {}
        when = pg_ts_to_datetime(commit_ts)
        cd = self._cd
        q = self.quote
        self._txn_part = (
            RECORD_TYPE
            + cd
            + q(self.settings.identifier)
            + cd
            + q(when.strftime("%Y%j"))
            + cd
            + q(when.strftime("%H%M%S%f"))
            + cd
        )
        self._txn_tail = (
            cd
            + q(format_transaction_id(xid))
            + cd
            + q(format_commit_lsn(commit_lsn))
            + cd
            + q(when.strftime("%Y-%m-%d-%H.%M.%S"))
            + cd
        )
        return out

    def _head(self, table: Table, state: _TableState, op: Op) -> bytes:
        head = self._heads.get((table, op))
        if head is None:
            head = self._heads[(table, op)] = (
                self._txn_part
                + state.table_part
                + self.quote(OPERATIONS[op])
                + self._txn_tail
                + state.plan_part
            )
        return head

    def _render(
        self,
        state: _TableState,
        image: Image,
        fallback: list[bytes] | None,
        missing: list[int],
    ) -> list[bytes]:
        """Render the fields of one image; ``missing`` collects unavailable columns' indexes."""
        tup = image.tuple
        values: Sequence[bytes | UnchangedToast | None] = tup.values
        kinds = tup.kinds
        patch: list[int] | None = None
        if _UNCHANGED in kinds or _BINARY in kinds:
            values, patch = _resolve(image)
        q = self._q
        qq = self._qq
        dc = self._dc
        out: list[bytes] = []
        append = out.append
        for kind, raw in zip(state.kinds, values, strict=True):
            if raw is None:
                append(b"")
            elif kind == _QUOTED:
                append(q + raw.replace(q, qq) + q)  # type: ignore[union-attr]
            elif kind == _BARE:
                append(raw)  # type: ignore[arg-type]
            elif kind == _BOOL:
                append(b"1" if raw == b"t" else b"0")
            elif kind == _NUMBER:
                append(raw.replace(b".", dc))  # type: ignore[union-attr]
            else:
                append(q + _hex(raw) + q)  # type: ignore[arg-type]
        if patch:
            for i in patch:
                if fallback is not None and fallback[i]:
                    out[i] = fallback[i]
                else:
                    missing.append(i)
        if image.key_only:
            return [f if key else b"" for f, key in zip(out, state.key_mask, strict=True)]
        return out

    def record(self, event: ChangeEvent) -> tuple[bytes, int] | None:
        """Render ``event``'s record and its segment number's offset (None: skipped)."""
        op = event.op
        if op is Op.TRUNCATE:
            return None
        table = event.table
        state = self._tables[table]
        cd = self._cd
        missing: list[int] = []
        before = event.before
        after = event.after
        before_fields = self._render(state, before, None, missing) if before is not None else None
        first_missing = len(missing)
        if after is not None:
            fallback = before_fields if before is not None and not before.key_only else None
            after_fields = self._render(state, after, fallback, missing)
            if op is Op.UPDATE and before_fields is None:
                before_fields = [
                    f if key else b"" for f, key in zip(after_fields, state.key_mask, strict=True)
                ]
        else:
            after_fields = state.empty_fields
        body = cd.join((before_fields or state.empty_fields) + after_fields)
        head = self._head(table, state, op)
        if missing:
            columns = "-".join(
                f"{i + 1:03d}{'B' if n < first_missing else 'A'}" for n, i in enumerate(missing)
            )
            identifier = self.settings.identifier
            flagged = f"{identifier}{INVALID_COLUMN}{columns}-NULL"
            head = head.replace(self.quote(identifier), self.quote(flagged), 1)
        if not state.size:  # no values: no separator after the header
            return head + _SEG_FINAL + self._rd, len(head)
        return head + _SEG_FINAL + cd + body + self._rd, len(head)

    # ------------------------------------------------------------------ stream

    def _emit(self, segment: bytes) -> EncodedMessage:
        """Turn the pending segment into a message numbered ``segment``; reset the buffer."""
        buf = self._buf
        if segment != _SEG_FINAL:
            for offset in self._offsets:
                buf[offset : offset + 4] = segment
        txn = self._txn
        message = EncodedMessage(
            bytes(buf),
            self._key,
            "transaction",
            None,
            None,
            txn[1] if txn else None,
            txn[0] if txn else None,
            self._first_ordinal,
            change_lsn=self._first_lsn,
        )
        self._buf = bytearray()
        self._offsets = []
        self._first_ordinal = None
        self._first_lsn = None
        return message

    def _next_segment(self) -> bytes:
        self._segment = self._segment % 9999 + 1
        return b"%04d" % self._segment

    def begin(self, begin: TransactionBegin) -> list[EncodedMessage]:
        """Open the transaction's message."""
        return self._open(begin.xid, begin.commit_lsn, begin.commit_ts)

    def change(self, event: ChangeEvent) -> list[EncodedMessage]:
        """Append the change's record; returns a full segment when one overflows."""
        txn = self._txn
        if (
            txn is None
            or txn[0] != event.xid
            or txn[1] != event.commit_lsn
            or txn[2] != event.commit_ts
        ):
            out = self._open(event.xid, event.commit_lsn, event.commit_ts)
        else:
            out = []
        made = self.record(event)
        if made is None:
            self.skipped_truncates += 1
            return out
        record, seg_offset = made
        buf = self._buf
        if buf and len(buf) + len(record) > self._max:
            out.append(self._emit(self._next_segment()))
            buf = self._buf
        if self._first_ordinal is None:
            self._first_ordinal = event.ordinal
            self._first_lsn = event.lsn or event.commit_lsn
        self._offsets.append(len(buf) + seg_offset)
        buf += record
        return out

    def commit(self, commit: TransactionCommit) -> list[EncodedMessage]:  # noqa: ARG002
        """Send the last (or only) segment, numbered ``0000``."""
        out = [self._emit(_SEG_FINAL)] if self._buf else []
        self._txn = None
        self._heads = {}
        return out

    def flush(self) -> list[EncodedMessage]:
        """Send pending records as a non-final segment (the transaction is incomplete)."""
        if not self._buf:
            return []
        return [self._emit(self._next_segment())]

    def frame_for_tail(self, message: EncodedMessage) -> bytes:
        """Print the records as they are: each already ends with the record delimiter."""
        assert message.value is not None, "ibm writes no tombstones"
        return message.value

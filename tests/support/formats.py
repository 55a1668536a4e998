"""Shared pieces of the encoder tests (``tests/capture/formats``): fixture tables, one
transaction through an encoder with every message checked against the format's schema, and
the golden synthetic stream.

    ORDERS, ORDERS_FULL = orders_tables()
    encode = partial(encode_transaction, validator=VALIDATOR)
    messages = encode(CanalEncoder(), [event(Op.INSERT, ORDERS, after={"id": "1"})])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import orjson
from jsonschema.protocols import Validator

from capture.events import ChangeEvent, Table, TransactionBegin, TransactionCommit
from capture.formats.base import EncodedMessage, Encoder
from capture.teststream import generate, produce
from tests.support.events import make_table, table_with

DELIMITERS = "a,b;c|d\te\nf\rg\"h'i\\j`k{l}m[n]o:p/q<r>s=t&u%v#w@x!y~z^ \x01\x1f\x7f é €中😀"
"""A text value with every delimiter, quote and escape a consumer could trip over."""

GOLDEN_UPDATE_VARIABLE = "WALCAST_UPDATE_GOLDEN"
"""Set (to anything non-empty) to rewrite the golden files instead of comparing with them."""


def orders_tables(note_type: str = "text") -> tuple[Table, Table]:
    """``public.orders`` (``id int4`` key, ``note``, ``qty int8``), twice.

    First with REPLICA IDENTITY DEFAULT, then with REPLICA IDENTITY FULL (every column in the
    identity) and the catalog primary key ``id``. ``note_type`` is the type of ``note``.
    """
    default = make_table(
        "public",
        "orders",
        [("id", "int4", True), ("note", note_type, False), ("qty", "int8", False)],
    )
    full = table_with(
        "public",
        "orders",
        [("id", "int4", True, -1), ("note", note_type, True, -1), ("qty", "int8", True, -1)],
        identity="f",
        pk=("id",),
    )
    return default, full


def encode_transaction(
    encoder: Encoder,
    events: Sequence[ChangeEvent],
    count: int | None = None,
    *,
    validator: Validator,
) -> list[EncodedMessage]:
    """One transaction through the encoder; every message is checked against the schema.

    The transaction is the first event's (xid, commit LSN and time); ``count`` is the size
    stated by TransactionBegin and TransactionCommit (default: the number of events).
    """
    first = events[0]
    n = len(events) if count is None else count
    out = encoder.encode(TransactionBegin(first.xid, first.commit_lsn, first.commit_ts, n))
    for ev in events:
        out += encoder.encode(ev)
    out += encoder.encode(
        TransactionCommit(first.xid, first.commit_lsn, first.commit_lsn + 64, first.commit_ts, n)
    )
    for message in out:
        validator.validate(orjson.loads(message.value))
    return out


def assert_golden_stream(
    encoder: Encoder, path: Path, *, count: int = 60, seed: int = 7, tables: int = 8
) -> bytes:
    """The synthetic stream as ``tail`` frames it, byte for byte the golden file at ``path``.

    With ``WALCAST_UPDATE_GOLDEN`` set the file is rewritten first. Returns the framed bytes.
    """
    out: list[bytes] = []
    produce(
        encoder,
        generate(count, seed=seed, tables=tables),
        lambda m: out.append(encoder.frame_for_tail(m)),
    )
    data = b"".join(out)
    if os.environ.get(GOLDEN_UPDATE_VARIABLE):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert data == path.read_bytes()
    return data


__all__ = [
    "DELIMITERS",
    "GOLDEN_UPDATE_VARIABLE",
    "assert_golden_stream",
    "encode_transaction",
    "orders_tables",
]

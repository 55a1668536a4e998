"""Shared pieces of the encoder tests (``tests/capture/formats``): fixture tables, one
transaction through an encoder with every message checked against the format's schema, and
the golden synthetic stream.

    ORDERS, ORDERS_FULL = orders_tables()
    encode = partial(encode_transaction, validator=VALIDATOR)
    messages = encode(CanalEncoder(), [event(Op.INSERT, ORDERS, after={"id": "1"})])
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import orjson
from fastavro import parse_schema, schemaless_reader
from jsonschema.protocols import Validator

from capture.events import ChangeEvent, Table, TransactionBegin, TransactionCommit
from capture.formats.base import EncodedMessage, Encoder
from capture.formats.ibm.encode import HEADER_FIELDS
from capture.formats.ibm.records import split_records
from capture.synthetic import generate
from capture.teststream import produce
from tests.support.events import make_table, table_with

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
GOLDEN = REPO / "tests" / "data" / "formats"
DTS_NAMESPACE = "com.alibaba.dts.formats.avro."
JSON_SCHEMAS = {
    "json": "json.schema.json",
    "canal": "canal.schema.json",
    "shareplex": "shareplex.schema.json",
    "dataworks": "dataworks.schema.json",
    "qlik": "qlik.schema.json",
}
"""The JSON Schema of each JSON format (``schemas/``)."""
GOLDEN_SUFFIX = {"ibm": "txt", "dts-avro": "b64"}
"""How each format's golden stream file ends (``jsonl`` unless listed)."""

DELIMITERS = "a,b;c|d\te\nf\rg\"h'i\\j`k{l}m[n]o:p/q<r>s=t&u%v#w@x!y~z^ \x01\x1f\x7f é €中😀"
"""A text value with every delimiter, quote and escape a consumer could trip over."""

GOLDEN_UPDATE_VARIABLE = "WALCAST_UPDATE_GOLDEN"
"""Set (to anything non-empty) to rewrite the golden files instead of comparing with them."""


def json_validator(fmt: str) -> Validator:
    """The Draft 2020-12 validator of a JSON format's schema."""
    schema = json.loads((SCHEMAS / JSON_SCHEMAS[fmt]).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def dts_record_schema() -> Any:
    """The ``Record`` type of the published DTS schema (a union list), parsed unchanged."""
    parsed = parse_schema(json.loads((SCHEMAS / "dts-avro-Record.avsc").read_text()))
    [record] = [s for s in parsed if s["name"] == DTS_NAMESPACE + "Record"]
    return record


def decode_dts(datum: bytes, record: Any = None) -> dict[str, Any]:
    """Decode one DTS Avro datum with the published schema (no trailing bytes allowed)."""
    buf = io.BytesIO(datum)
    decoded: dict[str, Any] = schemaless_reader(
        buf, record or dts_record_schema(), return_record_name=True
    )
    assert buf.tell() == len(datum), "trailing bytes"
    return decoded


def message_checker(fmt: str) -> Callable[[bytes], Any]:
    """A function checking one message value of ``fmt`` against ``schemas/`` (returns it decoded).

    JSON formats: their JSON Schema. dts-avro: decoding with the published ``Record.avsc``.
    ibm: every record has 12 header fields matching ``ibm-delimited.layout.json``'s patterns
    followed by an even number of values.
    """
    if fmt in JSON_SCHEMAS:
        validator = json_validator(fmt)

        def check_json(value: bytes) -> Any:
            doc = orjson.loads(value)
            validator.validate(doc)
            return doc

        return check_json
    if fmt == "dts-avro":
        record = dts_record_schema()
        return lambda value: decode_dts(value, record)
    layout = json.loads((SCHEMAS / "ibm-delimited.layout.json").read_text())
    header = layout["header"]
    assert [h["name"] for h in header] == list(HEADER_FIELDS)

    def check_ibm(value: bytes) -> Any:
        records = list(split_records(value))
        assert records
        for fields in records:
            assert len(fields) >= len(HEADER_FIELDS)
            assert (len(fields) - len(HEADER_FIELDS)) % 2 == 0
            for spec, field in zip(header, fields, strict=False):
                if field is not None:
                    assert re.fullmatch(spec["pattern"], field), (spec["name"], field)
        return records

    return check_ibm


DATAWORKS_SPECIALS = {"DOUBLE": {"NaN", "Infinity", "-Infinity"}, "DATE": {"infinity", "-infinity"}}
"""Values DataWorks' JSON types cannot hold, written as strings (documented in the encoder)."""


def dataworks_type_errors(doc: dict[str, Any]) -> list[str]:
    """Values of a DataWorks record that do not have their column's declared JSON type.

    The six types of the DataWorks spec: BOOLEAN a JSON bool, LONG a JSON integer, DOUBLE
    a JSON number, DATE an integer (ms), BYTES a base64 string, STRING a string; null for
    SQL NULL (and :data:`DATAWORKS_SPECIALS`).
    """
    columns = doc["schema"]["dataColumn"]
    if columns is None:
        return []
    types = {c["name"]: c["type"] for c in columns}
    errors = []
    for image in (doc["payload"]["before"], doc["payload"]["after"]):
        for name, value in ((image or {}).get("dataColumn") or {}).items():
            kind = types[name]
            if value is None or value in DATAWORKS_SPECIALS.get(kind, ()):
                continue
            if kind == "BOOLEAN":
                ok = isinstance(value, bool)
            elif kind in ("LONG", "DATE"):
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif kind == "DOUBLE":
                ok = isinstance(value, int | float) and not isinstance(value, bool)
            elif kind == "BYTES":
                ok = isinstance(value, str) and _is_base64(value)
            else:
                ok = kind == "STRING" and isinstance(value, str)
            if not ok:
                errors.append(f"{name}: {kind} holds {value!r}")
    return errors


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


def golden_path(fmt: str) -> Path:
    """The golden synthetic stream of ``fmt`` (``walcast produce-test-stream`` output)."""
    suffix = GOLDEN_SUFFIX.get(fmt, "jsonl")
    return GOLDEN / fmt / f"stream-seed7-count60-tables8.{suffix}"


def framed_values(fmt: str, data: bytes) -> list[bytes]:
    """The message values of a golden file (IBM: one per record line)."""
    if fmt == "dts-avro":
        return [base64.b64decode(line) for line in data.splitlines()]
    return [line for line in data.split(b"\n") if line]


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
    "JSON_SCHEMAS",
    "assert_golden_stream",
    "dataworks_type_errors",
    "decode_dts",
    "dts_record_schema",
    "encode_transaction",
    "framed_values",
    "golden_path",
    "json_validator",
    "message_checker",
    "orders_tables",
]

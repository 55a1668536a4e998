r"""The Kafka headers the Debezium connector puts on the two halves of a primary-key change.

An UPDATE that changes a row's primary key is, in Debezium's topics, a delete of the old
key (and its tombstone) and a create of the new key (:mod:`capture.formats.debezium.encode`).
The connector marks them (``RelationalChangeRecordEmitter.emitUpdateAsPrimaryKeyChangeRecord``,
checked in the connector's source): the delete and its tombstone carry
``__debezium.newkey`` (the new key), the create ``__debezium.oldkey`` (the old key). Each
header's value is the key ``Struct`` as Kafka Connect's default header converter
(``SimpleHeaderConverter``: ``Values.convertToString``) writes it, UTF-8:
``{"id":6}``, ``{"a":1,"b":"x"}``: fields in key order, names quoted, strings quoted with
only ``\`` and ``"`` escaped (no control-character escapes), numbers and booleans bare,
null ``null``, bytes as quoted base64, nested structs (``VariableScaleDecimal``) and
arrays alike. :func:`key_header` builds that text from the key's values in the record's
form (what :mod:`capture.formats.debezium.encode_values` converts them to):

* a Connect ``Decimal`` (``numeric(p,s)``/``money`` under ``decimal_handling=precise``)
  is a ``BigDecimal`` in the header, written by its ``toString`` (``1.50``; ``1E-7``
  below 10^-6, which Python's ``Decimal`` prints alike), not the base64 of the record;
* Connect ``Date``/``Time``/``Timestamp`` (``time_precision=connect``) are a
  ``java.util.Date``, written by ``Values.dateFormatFor`` (chosen by the value, not the
  type: under a day's milliseconds a time, a whole day a date, else a timestamp), in
  UTC. Decision: the connector formats them in its JVM's default time zone; walcast
  assumes UTC (the usual setting of a Connect worker in a container);
* doubles and floats keep Java's digits (they are already in that form).

Only these two headers are written; ``__debezium.context.*`` (the connector's MDC, off by
default) are not.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

import orjson

from capture.formats.debezium.encode_values import ColumnForm

OLD_KEY: Final = "__debezium.oldkey"
"""On the create of the new key: the key the row had."""
NEW_KEY: Final = "__debezium.newkey"
"""On the delete of the old key (and its tombstone): the key the row moved to."""

_DECIMAL: Final = "org.apache.kafka.connect.data.Decimal"
_CONNECT_TEMPORAL: Final = {
    "org.apache.kafka.connect.data.Date": 86_400_000,  # days
    "org.apache.kafka.connect.data.Time": 1,  # milliseconds
    "org.apache.kafka.connect.data.Timestamp": 1,
}
_DAY_MS: Final = 86_400_000
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def key_header(forms: Sequence[ColumnForm], row: dict[str, Any]) -> bytes:
    """The header value of the key ``row`` (its key columns ``forms``), as the connector's."""
    parts = [f"{_quoted(f.name)}:{_value_text(row[f.name], f.schema)}" for f in forms]
    return ("{" + ",".join(parts) + "}").encode()


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value_text(value: Any, schema: dict[str, Any] | None) -> str:
    """One value as ``Values.append`` writes it embedded in a struct."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        name = schema.get("name") if schema else None
        if name in _CONNECT_TEMPORAL:
            return _date_text(value * _CONNECT_TEMPORAL[name])
        return str(value)
    if isinstance(value, orjson.Fragment):
        contents = value.contents  # a number in Java's digits
        return contents.decode() if isinstance(contents, bytes) else str(contents)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if schema is not None and schema.get("name") == _DECIMAL:
            scale = int(schema.get("parameters", {}).get("scale", "0"))
            unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
            return str(Decimal(unscaled).scaleb(-scale))
        return _quoted(value)
    if isinstance(value, dict):
        fields = {f["field"]: f for f in (schema or {}).get("fields", [])}
        inner = [f"{_quoted(k)}:{_value_text(v, fields.get(k))}" for k, v in value.items()]
        return "{" + ",".join(inner) + "}"
    if isinstance(value, list):
        items = (schema or {}).get("items")
        return "[" + ",".join(_value_text(v, items) for v in value) + "]"
    return _quoted(str(value))


def _date_text(millis: int) -> str:
    """``Values.dateFormatFor``'s text of a ``java.util.Date`` (in UTC)."""
    at = _EPOCH + dt.timedelta(milliseconds=millis)
    fraction = f"{at.microsecond // 1000:03d}"
    if millis < _DAY_MS:
        return f"{at:%H:%M:%S}.{fraction}Z"
    if millis % _DAY_MS == 0:
        return f"{at.year:04d}-{at:%m-%d}"
    return f"{at.year:04d}-{at:%m-%dT%H:%M:%S}.{fraction}Z"


__all__ = ["NEW_KEY", "OLD_KEY", "key_header"]

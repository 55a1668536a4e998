r"""Arrays of any element type, in text (array_out) and binary (array_send) form.

Python value: a ``list``; a multi-dimensional array is a list of lists (rectangular);
NULL elements are ``None``; the empty array ``{}`` is ``[]``. When some lower bound is not
1 (``'[0:2]={1,2,3}'``) the value is a :class:`~capture.types.values.PgArray` holding
the bounds and the same nested list, so nothing is lost.

These builders take the element's decoders/encoder as plain callables, so the registry
can compose them for every element type, including ones registered at run time.

Text syntax handled: nested braces, double-quoted elements with backslash escapes,
unquoted elements (backslash escapes allowed, surrounding whitespace ignored), unquoted
``NULL`` in any case as SQL NULL versus quoted ``"NULL"`` as the string, dimension
decorations, and a per-type delimiter (``;`` for box). Output quotes an element exactly
when array_out does: empty, ``NULL`` in any case, or containing ``{ } " \``, the
delimiter or whitespace; ``"`` and ``\`` are escaped with a backslash.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any, Final

from capture.types.values import PgArray

Decoder = Callable[[bytes], Any]
Encoder = Callable[[Any], str]

_HEAD: Final = struct.Struct(">iiI")
_DIM: Final = struct.Struct(">ii")
_LEN: Final = struct.Struct(">i")
_WHITESPACE: Final = b" \t\n\r\v\f"
_BOUNDS: Final = re.compile(rb"\[([+-]?\d+):([+-]?\d+)\]")
_ESCAPED: Final = re.compile(rb"\\(.)", re.DOTALL)
MAXDIM: Final = 6


def _unquoted(raw: bytes) -> bytes | None:
    """Return an unquoted element unescaped and right-trimmed, or None for NULL."""
    if b"\\" not in raw:
        raw = raw.rstrip(_WHITESPACE)
        if len(raw) == 4 and raw.upper() == b"NULL":
            return None
        return raw
    out = bytearray()
    keep = 0
    index = 0
    while index < len(raw):
        byte = raw[index]
        if byte == 0x5C and index + 1 < len(raw):
            out.append(raw[index + 1])
            index += 2
            keep = len(out)
        else:
            out.append(byte)
            index += 1
            if byte not in _WHITESPACE:
                keep = len(out)
    return bytes(out[:keep])


def _lower_bounds(data: bytes) -> tuple[tuple[int, ...], bytes]:
    equals = data.find(b"=")
    if equals < 0:
        raise ValueError(f"invalid array dimensions in {data[:40]!r}")
    bounds = tuple(int(lower) for lower, _upper in _BOUNDS.findall(data, 0, equals))
    if not bounds:
        raise ValueError(f"invalid array dimensions in {data[:40]!r}")
    return bounds, data[equals + 1 :].lstrip(_WHITESPACE)


def text_array_decoder(element: Decoder, delimiter: bytes = b",") -> Decoder:
    """Build an array_out parser whose elements go through ``element`` (a from_text).

    Element bytes are sliced from the UTF-8 input directly: every structural character
    is ASCII, and UTF-8 multi-byte sequences never contain ASCII bytes.
    """
    delim = re.escape(delimiter)
    token = re.compile(
        rb"[ \t\n\r\v\f]*(?:(\{)|(\})|(" + delim + rb')|"((?:[^"\\]|\\.)*)"|'
        rb'((?:[^{}"\\' + delim + rb"]|\\.)+))",
        re.DOTALL,
    )
    complicated = re.compile(rb'["\\{}\s]')

    def parse(data: bytes) -> list[Any]:
        data = data.strip(_WHITESPACE)
        stack: list[list[Any]] = []
        root: list[Any] | None = None
        position = 0
        end = len(data)
        while position < end:
            match = token.match(data, position)
            if match is None:
                raise ValueError(f"malformed array text at byte {position}: {data[:60]!r}")
            position = match.end()
            opening, closing, separator, quoted, bare = match.groups()
            if separator is not None:
                continue
            if opening is not None:
                nested: list[Any] = []
                if stack:
                    stack[-1].append(nested)
                elif root is None:
                    root = nested
                else:
                    raise ValueError(f"junk after array text: {data[:60]!r}")
                stack.append(nested)
                if len(stack) > MAXDIM:
                    raise ValueError("array has more than 6 dimensions")
            elif closing is not None:
                if not stack:
                    raise ValueError(f"unbalanced braces in array text: {data[:60]!r}")
                stack.pop()
            elif not stack:
                raise ValueError(f"array element outside braces: {data[:60]!r}")
            elif quoted is not None:
                if b"\\" in quoted:
                    quoted = _ESCAPED.sub(rb"\1", quoted)
                stack[-1].append(element(quoted))
            else:
                value = _unquoted(bare)
                stack[-1].append(None if value is None else element(value))
        if root is None or stack:
            raise ValueError(f"malformed array text: {data[:60]!r}")
        return root

    def decode(data: bytes) -> Any:
        bounds: tuple[int, ...] | None = None
        if data[:1] == b"[":
            bounds, data = _lower_bounds(data)
        body = data[1:-1]
        if data[:1] == b"{" and data[-1:] == b"}" and complicated.search(body) is None:
            # Fast path: one dimension, nothing quoted or escaped.
            if not body:
                items: list[Any] = []
            elif b"NULL" in body.upper():
                items = [
                    None if len(part) == 4 and part.upper() == b"NULL" else element(part)
                    for part in body.split(delimiter)
                ]
            else:
                items = list(map(element, body.split(delimiter)))
        else:
            items = parse(data)
        if bounds is not None and any(lower != 1 for lower in bounds):
            return PgArray(bounds, items)
        return items

    return decode


def _reshape(flat: list[Any], dims: list[int]) -> list[Any]:
    items = flat
    for size in reversed(dims[1:]):
        items = [items[start : start + size] for start in range(0, len(items), size)]
    return items


def _elements(
    data: bytes,
    offset: int,
    count: int,
    convert: Decoder,
    unpack_len: Callable[[bytes, int], tuple[Any, ...]],
) -> tuple[list[Any], int]:
    items: list[Any] = []
    append = items.append
    for _ in range(count):
        length = unpack_len(data, offset)[0]
        offset += 4
        if length < 0:
            append(None)
        else:
            end = offset + length
            append(convert(data[offset:end]))
            offset = end
    return items, offset


def binary_array_decoder(
    element_oid: int,
    element: Decoder,
    lookup: Callable[[int], Decoder],
    fixed: str | None = None,
) -> Decoder:
    """Build an array_send parser.

    Layout: Int32 ndim, Int32 flags (has-nulls), UInt32 element OID, ndim x (Int32 size,
    Int32 lower bound), then per element Int32 length (-1 for NULL) and the element's
    send bytes. Elements of ``element_oid`` go through ``element``; any other element
    OID on the wire (e.g. a domain's) is resolved with ``lookup``.

    ``fixed`` is an optional struct code (``"i"``, ``"d"`` ...) that decodes one element
    exactly as ``element`` does; when the array has no NULLs (flags 0) the elements are
    then unpacked in one pass, which is several times faster.
    """
    unpack_len = _LEN.unpack_from
    fixed_struct = struct.Struct(">4x" + fixed) if fixed else None
    fixed_length = _LEN.pack(fixed_struct.size - 4) if fixed_struct else b""

    def decode(data: bytes) -> Any:
        ndim, flags, oid = _HEAD.unpack_from(data)
        if ndim == 0:
            return []
        if not 0 < ndim <= MAXDIM:
            raise ValueError(f"invalid array dimension count {ndim}")
        convert = element if oid == element_oid else lookup(oid)
        dims: list[int] = []
        bounds: list[int] = []
        offset = 12
        count = 1
        for _ in range(ndim):
            size, lower = _DIM.unpack_from(data, offset)
            offset += 8
            dims.append(size)
            bounds.append(lower)
            count *= size
        items: list[Any]
        if (
            fixed_struct is not None
            and not flags
            and oid == element_oid
            and len(data) - offset == count * fixed_struct.size
            and data[offset : offset + 4] == fixed_length
        ):
            items = [value for (value,) in fixed_struct.iter_unpack(data[offset:])]
            offset = len(data)
        else:
            items, offset = _elements(data, offset, count, convert, unpack_len)
        if offset != len(data):
            raise ValueError(f"array send data has {len(data) - offset} trailing bytes")
        if ndim > 1:
            items = _reshape(items, dims)
        if any(lower != 1 for lower in bounds):
            return PgArray(tuple(bounds), items)
        return items

    return decode


def _shape(items: list[Any]) -> list[int]:
    dims: list[int] = []
    current: Any = items
    while type(current) is list and current:
        dims.append(len(current))
        current = current[0]
    return dims


def array_encoder(element: Encoder, delimiter: str = ",") -> Encoder:
    """Build an array_out renderer whose elements go through ``element`` (a to_text)."""
    needs_quotes = re.compile('[{}"\\\\ \t\n\r\v\f' + re.escape(delimiter) + "]")

    def quote(text: str) -> str:
        if (
            text
            and needs_quotes.search(text) is None
            and not (len(text) == 4 and text.isascii() and text.upper() == "NULL")
        ):
            return text
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def encode_items(items: list[Any]) -> str:
        parts: list[str] = []
        for item in items:
            if item is None:
                parts.append("NULL")
            elif type(item) is list:
                parts.append(encode_items(item))
            else:
                parts.append(quote(element(item)))
        return "{" + delimiter.join(parts) + "}"

    def encode(value: Any) -> str:
        if isinstance(value, PgArray):
            if not value.items:
                return "{}"
            dims = _shape(value.items)
            if len(dims) != len(value.lower_bounds):
                raise ValueError("PgArray lower_bounds do not match its dimensions")
            decoration = "".join(
                f"[{lower}:{lower + size - 1}]"
                for lower, size in zip(value.lower_bounds, dims, strict=True)
            )
            return decoration + "=" + encode_items(value.items)
        return encode_items(value)

    return encode

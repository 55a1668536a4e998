r"""Text search types: tsvector and tsquery (binary send form).

Python value: ``str``, the text tsvectorout / tsqueryout print, in both wire formats
(``from_text`` keeps the text; the decoders here render the send bytes to it).

tsvectorsend (tsvector.c): Int32 lexeme count, then per lexeme its text (client encoding,
NUL-terminated), UInt16 position count and that many UInt16 WordEntryPos (position in the
low 14 bits, weight in the top 2: 3 = A, 2 = B, 1 = C, 0 = D, which prints nothing).
tsvectorout: every lexeme in single quotes with ``'`` and ``\`` doubled, then ``:`` and
the comma-separated positions (``'fat':2,4A``) when it has any; lexemes are separated by
one space, in the order sent (the stored, sorted order).

tsquerysend (tsquery.c): UInt32 item count, then the query tree in prefix order, each
operator followed by its RIGHT operand and then its left one (the stored "polish"
order). An operand is UInt8 type 1, UInt8 weight bitmap (8 = A, 4 = B, 2 = C, 1 = D),
UInt8 prefix flag, its text NUL-terminated; an operator is UInt8 type 2, UInt8 operator
(1 NOT, 2 AND, 3 OR, 4 PHRASE) and, for PHRASE, an Int16 distance.

tsqueryout prints the tree as infix() does, which this module follows exactly: an operand
in single quotes with ``'`` and ``\`` doubled, then ``:``, ``*`` if prefix, and ``A`` ``B``
``C`` ``D`` for the weight bits, when it has a weight or prefix; ``!x``; ``l & r``, ``l | r``,
``l <-> r`` (distance 1) or ``l <N> r``. Operator priorities are NOT 4, PHRASE 3, AND 2,
OR 1; an operator is wrapped in ``( `` ... `` )`` when its priority is below its parent's,
and a PHRASE that is the right operand of a PHRASE is always wrapped (NOT, of the highest
priority, never is). The empty query prints as the empty string. The tree is rebuilt
bottom-up with an explicit stack (reading the items backwards is a post-order walk), so a
deeply nested query cannot exhaust Python's recursion limit.
"""

from __future__ import annotations

import struct
from typing import Final

_COUNT: Final = struct.Struct(">i")
_U2: Final = struct.Struct(">H")
_I2: Final = struct.Struct(">h")
_WEIGHTS: Final = ("", "C", "B", "A")
_WEIGHT_BITS: Final = ((8, "A"), (4, "B"), (2, "C"), (1, "D"))

QI_VAL: Final = 1
QI_OPR: Final = 2
OP_NOT: Final = 1
OP_AND: Final = 2
OP_OR: Final = 3
OP_PHRASE: Final = 4
_PRIORITY: Final = {OP_NOT: 4, OP_AND: 2, OP_OR: 1, OP_PHRASE: 3}


def _cstring(data: bytes, offset: int) -> tuple[str, int]:
    end = data.find(b"\x00", offset)
    if end < 0:
        raise ValueError("text search send data: unterminated string")
    return data[offset:end].decode(), end + 1


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''").replace("\\", "\\\\") + "'"


def tsvector_from_binary(data: bytes) -> str:
    """Decode tsvectorsend into tsvectorout's text."""
    (count,) = _COUNT.unpack_from(data)
    if count < 0:
        raise ValueError(f"tsvector send data: lexeme count {count}")
    offset = 4
    parts: list[str] = []
    for _ in range(count):
        lexeme, offset = _cstring(data, offset)
        (npos,) = _U2.unpack_from(data, offset)
        offset += 2
        text = _quoted(lexeme)
        if npos:
            end = offset + 2 * npos
            if end > len(data):
                raise ValueError("tsvector send data: positions run past the end")
            positions = struct.unpack_from(f">{npos}H", data, offset)
            offset = end
            text += ":" + ",".join(f"{p & 0x3FFF}{_WEIGHTS[p >> 14]}" for p in positions)
        parts.append(text)
    if offset != len(data):
        raise ValueError(f"tsvector send data has {len(data) - offset} trailing bytes")
    return " ".join(parts)


# A parsed item: (kind, operator, distance, text). kind is QI_VAL or QI_OPR.
_Item = tuple[int, int, int, str]
# A rendered subtree: (text, operator or 0 for an operand).
_Node = tuple[str, int]


def _operand_text(weight: int, prefix: int, text: str) -> str:
    out = _quoted(text)
    if weight or prefix:
        out += ":" + ("*" if prefix else "")
        out += "".join(letter for bit, letter in _WEIGHT_BITS if weight & bit)
    return out


def _items(data: bytes) -> list[_Item]:
    (count,) = _COUNT.unpack_from(data)
    if count < 0:
        raise ValueError(f"tsquery send data: item count {count}")
    offset = 4
    items: list[_Item] = []
    for _ in range(count):
        if offset + 2 > len(data):
            raise ValueError("tsquery send data ends inside an item")
        kind, second = data[offset], data[offset + 1]
        offset += 2
        if kind == QI_VAL:
            if offset >= len(data):
                raise ValueError("tsquery send data ends inside an operand")
            prefix = data[offset]
            text, offset = _cstring(data, offset + 1)
            if second > 0xF or prefix > 1:
                raise ValueError(f"tsquery send data: weight {second} / prefix {prefix}")
            items.append((QI_VAL, 0, 0, _operand_text(second, prefix, text)))
        elif kind == QI_OPR and second in _PRIORITY:
            distance = 0
            if second == OP_PHRASE:
                (distance,) = _I2.unpack_from(data, offset)
                offset += 2
            items.append((QI_OPR, second, distance, ""))
        else:
            raise ValueError(f"tsquery send data: item type {kind}, operator {second}")
    if offset != len(data):
        raise ValueError(f"tsquery send data has {len(data) - offset} trailing bytes")
    return items


def _child(node: _Node, parent: int, *, right_of_phrase: bool) -> str:
    """A subtree's text as infix() prints it below operator ``parent``."""
    text, operator = node
    if operator in (0, OP_NOT):
        return text  # operands and NOT (the highest priority) are never wrapped
    if _PRIORITY[operator] < _PRIORITY[parent] or (operator == OP_PHRASE and right_of_phrase):
        return "( " + text + " )"
    return text


def tsquery_from_binary(data: bytes) -> str:
    """Decode tsquerysend into tsqueryout's text."""
    items = _items(data)
    if not items:
        return ""
    stack: list[_Node] = []
    for kind, operator, distance, text in reversed(items):
        if kind == QI_VAL:
            stack.append((text, 0))
            continue
        if operator == OP_NOT:
            if not stack:
                raise ValueError("tsquery send data: NOT without an operand")
            stack.append(("!" + _child(stack.pop(), OP_NOT, right_of_phrase=False), OP_NOT))
            continue
        if len(stack) < 2:
            raise ValueError("tsquery send data: operator without two operands")
        right = stack.pop()  # read backwards, the left subtree was pushed first
        left = stack.pop()
        if operator == OP_AND:
            sign = "&"
        elif operator == OP_OR:
            sign = "|"
        else:
            sign = "<->" if distance == 1 else f"<{distance}>"
        phrase = operator == OP_PHRASE
        stack.append(
            (
                _child(left, operator, right_of_phrase=False)
                + f" {sign} "
                + _child(right, operator, right_of_phrase=phrase),
                operator,
            )
        )
    if len(stack) != 1:
        raise ValueError("tsquery send data does not form one query tree")
    return stack[0][0]

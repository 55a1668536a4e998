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
from enum import IntEnum
from typing import Final

from capture.types._wire import INT2, UINT2, read_count

_WEIGHTS: Final = ("", "C", "B", "A")
_WEIGHT_BITS: Final = ((8, "A"), (4, "B"), (2, "C"), (1, "D"))


class ItemType(IntEnum):
    """The type byte of a tsquerysend item (``QI_VAL`` ... in ts_type.h)."""

    VAL = 1
    """An operand: weight, prefix flag and text follow."""
    OPR = 2
    """An operator: its :class:`Operator` code follows."""


class Operator(IntEnum):
    """The operator byte of a tsquerysend operator item (``OP_NOT`` ... in ts_type.h)."""

    NOT = 1
    """``!x``: one operand."""
    AND = 2
    """``l & r``."""
    OR = 3
    """``l | r``."""
    PHRASE = 4
    """``l <-> r`` / ``l <N> r``: an Int16 distance follows."""


# Plain ints for the decoding loops: looking an enum member up costs several int tests.
_QI_VAL, _QI_OPR = int(ItemType.VAL), int(ItemType.OPR)
_OP_NOT, _OP_AND = int(Operator.NOT), int(Operator.AND)
_OP_OR, _OP_PHRASE = int(Operator.OR), int(Operator.PHRASE)
_PRIORITY: Final = {_OP_NOT: 4, _OP_AND: 2, _OP_OR: 1, _OP_PHRASE: 3}


def _cstring(data: bytes, offset: int) -> tuple[str, int]:
    end = data.find(b"\x00", offset)
    if end < 0:
        raise ValueError("text search send data: unterminated string")
    return data[offset:end].decode(), end + 1


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''").replace("\\", "\\\\") + "'"


def tsvector_from_binary(data: bytes) -> str:
    """Decode tsvectorsend into tsvectorout's text."""
    offset = 4
    parts: list[str] = []
    for _ in range(read_count(data, "tsvector", "lexeme")):
        lexeme, offset = _cstring(data, offset)
        (npos,) = UINT2.unpack_from(data, offset)
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


# A parsed item: (kind, operator, distance, text). kind is an ItemType, as an int.
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
    offset = 4
    items: list[_Item] = []
    for _ in range(read_count(data, "tsquery", "item")):
        if offset + 2 > len(data):
            raise ValueError("tsquery send data ends inside an item")
        kind, second = data[offset], data[offset + 1]
        offset += 2
        if kind == _QI_VAL:
            if offset >= len(data):
                raise ValueError("tsquery send data ends inside an operand")
            prefix = data[offset]
            text, offset = _cstring(data, offset + 1)
            if second > 0xF or prefix > 1:
                raise ValueError(f"tsquery send data: weight {second} / prefix {prefix}")
            items.append((_QI_VAL, 0, 0, _operand_text(second, prefix, text)))
        elif kind == _QI_OPR and second in _PRIORITY:
            distance = 0
            if second == _OP_PHRASE:
                (distance,) = INT2.unpack_from(data, offset)
                offset += 2
            items.append((_QI_OPR, second, distance, ""))
        else:
            raise ValueError(f"tsquery send data: item type {kind}, operator {second}")
    if offset != len(data):
        raise ValueError(f"tsquery send data has {len(data) - offset} trailing bytes")
    return items


def _child(node: _Node, parent: int, *, right_of_phrase: bool) -> str:
    """A subtree's text as infix() prints it below operator ``parent``."""
    text, operator = node
    if operator in (0, _OP_NOT):
        return text  # operands and NOT (the highest priority) are never wrapped
    if _PRIORITY[operator] < _PRIORITY[parent] or (operator == _OP_PHRASE and right_of_phrase):
        return "( " + text + " )"
    return text


def tsquery_from_binary(data: bytes) -> str:
    """Decode tsquerysend into tsqueryout's text."""
    items = _items(data)
    if not items:
        return ""
    stack: list[_Node] = []
    for kind, operator, distance, text in reversed(items):
        if kind == _QI_VAL:
            stack.append((text, 0))
            continue
        if operator == _OP_NOT:
            if not stack:
                raise ValueError("tsquery send data: NOT without an operand")
            stack.append(("!" + _child(stack.pop(), _OP_NOT, right_of_phrase=False), _OP_NOT))
            continue
        if len(stack) < 2:
            raise ValueError("tsquery send data: operator without two operands")
        right = stack.pop()  # read backwards, the left subtree was pushed first
        left = stack.pop()
        if operator == _OP_AND:
            sign = "&"
        elif operator == _OP_OR:
            sign = "|"
        else:
            sign = "<->" if distance == 1 else f"<{distance}>"
        phrase = operator == _OP_PHRASE
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

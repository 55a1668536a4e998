r"""The codec of one type, the fallback codec, and the array codec built around an element.

Shared by :mod:`capture.types.registry` (built-in and Type-message codecs) and
:mod:`capture.types.described` (codecs built from catalog facts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from capture.types.arrays import array_encoder, binary_array_decoder, text_array_decoder
from capture.types.values import RawBinary, UnrenderableBinaryError

NO_DECODER: Final = "walcast has no exact decoder for its binary send format"
"""The refusal of a type nothing more is known about (unknown OID, unlisted built-in)."""


@dataclass(frozen=True, slots=True)
class TypeCodec:
    """How to decode and render the values of one PostgreSQL type.

    ``name`` is ``pg_type.typname`` (``int4``; ``_int4`` for its array). ``category`` is
    ``pg_type.typcategory`` (``'N'`` numeric, ``'S'`` string, ``'B'`` bool, ``'D'``
    datetime, ``'T'`` timespan, ``'U'`` user/other, ``'A'`` array, ``'I'`` network,
    ``'V'`` bit string, ``'G'`` geometric, ``'R'`` range, ``'Z'`` internal ...).
    Invariants: ``from_text(t) == from_binary(b)`` when ``t`` and ``b`` are the text and
    send forms of the same datum, and ``to_text(from_text(t)) == t``.

    ``binary_refusal`` is None when binary values of the type are decoded exactly (or
    never arrive: a type without a send function is always sent as text), else why they
    cannot be: such a column is refused in binary mode, and its ``from_binary`` only ever
    yields values that ``to_text`` refuses to render.
    """

    oid: int
    name: str
    from_text: Callable[[bytes], Any]
    from_binary: Callable[[bytes], Any]
    to_text: Callable[[Any], str]
    category: str
    binary_refusal: str | None = None


def fallback_to_text(value: Any) -> str:
    """Render a fallback value: a ``str`` unchanged; raw binary data never.

    A :class:`~capture.types.values.RawBinary` (or bytes) is the send form of a type
    walcast cannot decode; rendering it as hex would emit bytes that are not the type's
    text, so it raises :class:`~capture.types.values.UnrenderableBinaryError`.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, RawBinary):
        raise UnrenderableBinaryError(
            f"a binary value of type OID {value.type_oid} ({len(value.data)} bytes) has no "
            "exact text form: walcast cannot decode that type's send format"
        )
    if isinstance(value, bytes | bytearray | memoryview):
        raise UnrenderableBinaryError(f"raw bytes ({len(value)}) have no exact text form")
    return str(value)


def raw_binary(oid: int) -> Callable[[bytes], Any]:
    """The binary decoder of a type without one: keep the bytes as ``RawBinary(oid, ...)``."""

    def from_binary(data: bytes) -> RawBinary:
        return RawBinary(oid, bytes(data))

    return from_binary


def no_send_decoder(name: str) -> Callable[[bytes], Any]:
    """The binary decoder of a type without a send function (pgoutput sends it as text).

    Binary bytes of such a type cannot arrive; if some do, they are refused, not guessed.
    """

    def from_binary(_data: bytes) -> Any:
        raise ValueError(
            f"type {name} has no send function, yet a binary value of it arrived "
            "(pgoutput sends such types as text)"
        )

    return from_binary


def text_from_binary(data: bytes) -> str:
    """Decode a send format that IS the text (textsend, enum_send): strict UTF-8."""
    return data.decode()


def fallback_codec(
    oid: int,
    name: str | None = None,
    category: str = "U",
    refusal: str | None = NO_DECODER,
) -> TypeCodec:
    """Build the codec of a type without a decoder: text as ``str``, binary as ``RawBinary``."""
    return TypeCodec(
        oid=oid,
        name=f"oid:{oid}" if name is None else name,
        from_text=bytes.decode,
        from_binary=raw_binary(oid),
        to_text=fallback_to_text,
        category=category,
        binary_refusal=refusal,
    )


def array_codec(
    oid: int,
    name: str,
    element: TypeCodec,
    lookup: Callable[[int], Callable[[bytes], Any]],
    delimiter: str = ",",
    fixed: str | None = None,
    refusal: str | None = None,
) -> TypeCodec:
    """Build the codec of an array type whose elements use ``element``.

    Binary element OIDs other than ``element.oid`` are resolved with ``lookup``; see
    :func:`~capture.types.arrays.binary_array_decoder` for ``fixed``. The array is refused
    in binary mode when ``refusal`` says so or its element type is.
    """
    if refusal is None and element.binary_refusal is not None:
        refusal = f"its elements are {element.name}: {element.binary_refusal}"
    return TypeCodec(
        oid=oid,
        name=name,
        from_text=text_array_decoder(element.from_text, delimiter.encode()),
        from_binary=binary_array_decoder(element.oid, element.from_binary, lookup, fixed),
        to_text=array_encoder(element.to_text, delimiter),
        category="A",
        binary_refusal=refusal,
    )

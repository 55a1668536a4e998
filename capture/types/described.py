"""Codecs built from catalog facts: the binary-mode decision for non-built-in types.

:class:`Describer` turns a closure of :class:`~capture.types.facts.TypeFacts` (a set of
types and every type they are built from) into codecs. It is the ONE place that decides
whether binary values of a non-built-in type are decoded or refused; built-in OIDs are
decided by the registry's own table, which it is given. The start-up check
(:mod:`capture.replication.binary_check`) and the running stream
(:class:`~capture.relcache.RelationCache`) both call it through
:meth:`capture.types.TypeRegistry.describe`.

Rules, by what the catalog says (output and send function identities, see
:func:`~capture.types.facts.function_identity`):

* a domain decodes as its base type (its send and output functions are the base's);
* a type without a send function is always sent as text by pgoutput: accepted, and its
  ``from_binary`` raises if binary bytes ever arrive; but an array, range or composite of
  it cannot be sent in binary at all (the server would fail with "no binary output
  function available"), so those are refused;
* ``array_out``/``array_send``: an array of the element's codec (``typdelim`` delimiter);
* ``record_out``/``record_send``: a composite, rendered as record_out does, each attribute
  by the codec of the OID the bytes carry (:mod:`capture.types.composites`);
* ``range_out``/``range_send`` and ``multirange_out``/``multirange_send``: ranges of the
  subtype's codec (:mod:`capture.types.ranges`);
* ``textout``/``textsend`` (citext and other text-like types) and ``enum_out``/``enum_send``
  (enums): the send bytes ARE the output text;
* extension types: only those in
  :data:`~capture.types.extensions.EXTENSION_DECODERS`, matched by owning extension and
  both function identities, never by name;
* anything else is refused (:data:`~capture.types.codec.NO_DECODER`). A container is
  refused when a type it is built from is.

Names follow pgoutput's Type messages (a type's own name, a domain by its base type's
name, a name shared with a built-in qualified by schema), and a name or category the
stream already registered for an OID is kept, so the formats see the same column types in
text and binary mode.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any, Final

from capture.types.codec import (
    NO_DECODER,
    TypeCodec,
    array_codec,
    fallback_codec,
    fallback_to_text,
    no_send_decoder,
    text_from_binary,
)
from capture.types.composites import record_decoder
from capture.types.extensions import EXTENSION_DECODERS
from capture.types.facts import TypeFacts
from capture.types.ranges import multirange_decoder, range_decoder

Render = Callable[[bytes], str]

_TEXT_IO: Final = frozenset({("textout", "textsend"), ("enum_out", "enum_send")})
"""(output, send) pairs whose send bytes are the output text, UTF-8 (client encoding)."""
_ARRAY: Final = ("array_out", "array_send")
_RECORD: Final = ("record_out", "record_send")
_RANGE: Final = ("range_out", "range_send")
_MULTIRANGE: Final = ("multirange_out", "multirange_send")


def render_with(codec: TypeCodec) -> Render:
    """Send bytes of ``codec``'s type -> its output text."""
    from_binary, to_text = codec.from_binary, codec.to_text

    def render(data: bytes) -> str:
        return to_text(from_binary(data))

    return render


class Describer:
    """Build the codecs of the non-built-in types in ``facts`` (see the module docstring).

    ``builtins``: the registry's built-in codecs by OID, which are never rebuilt;
    ``unsendable``: built-in OIDs without a send function; ``registered``: the codecs the
    stream has registered so far (for names and categories); ``element_lookup`` resolves
    the decoder of an array element OID at decode time, ``render_for`` the renderer of a
    composite attribute OID (raising for a type without an exact decoder).
    """

    def __init__(
        self,
        facts: Mapping[int, TypeFacts],
        *,
        builtins: Mapping[int, TypeCodec],
        unsendable: Collection[int],
        registered: Mapping[int, TypeCodec],
        element_lookup: Callable[[int], Callable[[bytes], Any]],
        render_for: Callable[[int], Render],
    ) -> None:
        self.facts = facts
        self.builtins = builtins
        self.builtin_names = frozenset(codec.name for codec in builtins.values())
        self.registered = registered
        self.element_lookup = element_lookup
        self.render_for = render_for
        self.unsendable: set[int] = set(unsendable)
        self.built: dict[int, TypeCodec] = {}
        self._building: set[int] = set()

    def build(self) -> dict[int, TypeCodec]:
        """Codecs of every non-built-in OID in the facts (and of what they reference)."""
        for oid in self.facts:
            self.codec(oid)
        return {oid: codec for oid, codec in self.built.items() if oid not in self.builtins}

    def codec(self, oid: int) -> TypeCodec:
        """The codec of ``oid``: built-in, already built, or built now from its facts."""
        found = self.builtins.get(oid) or self.built.get(oid)
        if found is not None:
            return found
        facts = self.facts.get(oid)
        if facts is None:
            refusal = f"the catalog does not describe type OID {oid}"
            return fallback_codec(oid, self._registered_name(oid), refusal=refusal)
        if oid in self._building:
            return fallback_codec(oid, facts.name, refusal="the type refers to itself")
        self._building.add(oid)
        try:
            codec = self._build(facts)
        finally:
            self._building.discard(oid)
        self.built[oid] = codec
        return codec

    # ------------------------------------------------------------------ helpers

    def _registered_name(self, oid: int) -> str | None:
        found = self.registered.get(oid)
        return found.name if found is not None else None

    def _name(self, facts: TypeFacts) -> str:
        registered = self._registered_name(facts.oid)
        if registered is not None:
            return registered
        if facts.name in self.builtin_names:
            return f"{facts.namespace}.{facts.name}"
        return facts.name

    def _category(self, facts: TypeFacts) -> str:
        found = self.registered.get(facts.oid)
        return found.category if found is not None else facts.category

    def _part(self, oid: int, what: str) -> tuple[TypeCodec, str | None]:
        """The codec of a type ``facts`` is built from, and why that makes it refused."""
        part = self.codec(oid)
        if oid in self.unsendable:
            return part, (
                f"its {what} type {part.name} has no send function, so the server cannot "
                "send it in binary"
            )
        if part.binary_refusal is not None:
            return part, f"its {what} type {part.name}: {part.binary_refusal}"
        return part, None

    def _simple(self, facts: TypeFacts, decoder: Callable[[bytes], Any]) -> TypeCodec:
        return TypeCodec(
            facts.oid, self._name(facts), bytes.decode, decoder, fallback_to_text,
            self._category(facts),
        )  # fmt: skip

    # ------------------------------------------------------------------ the rules

    def _build(self, facts: TypeFacts) -> TypeCodec:
        if facts.kind == "d":
            base = self.codec(facts.base)
            if facts.base in self.unsendable:
                self.unsendable.add(facts.oid)
            name = self._registered_name(facts.oid) or base.name
            return replace(base, oid=facts.oid, name=name)
        if not facts.send:
            self.unsendable.add(facts.oid)
            return TypeCodec(
                facts.oid, self._name(facts), bytes.decode, no_send_decoder(facts.name),
                fallback_to_text, self._category(facts),
            )  # fmt: skip
        io = (facts.output, facts.send)
        if io == _ARRAY:
            element, refusal = self._part(facts.element, "element")
            return array_codec(
                facts.oid, self._name(facts), element, self.element_lookup,
                facts.delimiter, refusal=refusal,
            )  # fmt: skip
        if io == _RECORD:
            refusal = None
            for attribute in facts.attributes:
                refusal = refusal or self._part(attribute, "attribute")[1]
            return replace(
                self._simple(facts, record_decoder(self.render_for)), binary_refusal=refusal
            )
        if io in (_RANGE, _MULTIRANGE):
            what = "range subtype" if io == _RANGE else "range"
            part, refusal = self._part(facts.subtype, what)
            if io == _RANGE:
                decoder = range_decoder(render_with(part))
            else:
                decoder = multirange_decoder(render_with(part))
            return replace(self._simple(facts, decoder), binary_refusal=refusal)
        if io in _TEXT_IO:
            return self._simple(facts, text_from_binary)
        extension = EXTENSION_DECODERS.get((facts.extension, facts.output, facts.send))
        if extension is not None:
            return self._simple(facts, extension)
        refusal = f"{NO_DECODER} (send function {facts.send})"
        return fallback_codec(facts.oid, self._name(facts), self._category(facts), refusal)

"""What the catalog says about a type: the input of the binary-mode decision.

A pgoutput Type message names a non-built-in type by namespace and name only, which does
not say how its binary send format looks (a name proves nothing, and an enum, a
composite and an extension type look alike). :class:`TypeFacts` carries what does: the
type's kind and its output and send functions, plus the types it is built from.
:func:`capture.replication.binary_check.describe_types` reads them from ``pg_type`` for a
set of OIDs and everything they reference; :meth:`capture.types.TypeRegistry.describe`
turns them into codecs (or refusals). The start-up check and the running stream both go
through that one method, so they decide alike.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib", ".sl")


def function_identity(language: str, library: str | None, symbol: str) -> str:
    """The identity of an I/O function: what it runs, not what it is called.

    ``language`` is ``pg_language.lanname``, ``library`` ``pg_proc.probin``, ``symbol``
    ``pg_proc.prosrc``. A built-in (``internal``) function is its C function's name
    (``textsend``: a CREATE FUNCTION ... LANGUAGE internal can only point at the server's
    own functions, so this is exact); a C function is ``library:symbol`` with the library's
    base name (``$libdir/hstore`` -> ``hstore:hstore_send``); anything else is
    ``language:symbol``, which matches no decoder.
    """
    if language == "internal":
        return symbol
    if language == "c" and library:
        name = posixpath.basename(library.replace("\\", "/"))
        for suffix in _LIBRARY_SUFFIXES:
            name = name.removesuffix(suffix)
        return f"{name}:{symbol}"
    return f"{language}:{symbol}"


@dataclass(frozen=True, slots=True)
class TypeFacts:
    """One ``pg_type`` row, as far as decoding its binary send format needs.

    ``kind`` is ``typtype`` (``b`` base, ``c`` composite, ``d`` domain, ``e`` enum, ``r``
    range, ``m`` multirange, ``p`` pseudo) and ``category`` ``typcategory``. ``output`` and
    ``send`` are :func:`function_identity` of ``typoutput`` / ``typsend``; ``send`` is
    ``""`` when the type has no send function (pgoutput then sends its values as text even
    in binary mode, and a container of it cannot be sent in binary at all). ``element``
    is ``typelem`` (arrays), ``delimiter`` the element type's ``typdelim``, ``base``
    ``typbasetype`` (domains), ``subtype`` the range's subtype (ranges) or the range type
    (multiranges), ``attributes`` the types of the live attributes in order (composites),
    ``extension`` the name of the extension that owns the type (``""`` when none).
    """

    oid: int
    namespace: str
    name: str
    kind: str
    category: str
    output: str
    send: str
    element: int = 0
    delimiter: str = ","
    base: int = 0
    subtype: int = 0
    attributes: tuple[int, ...] = ()
    extension: str = ""

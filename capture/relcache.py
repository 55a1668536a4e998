"""The relation and type cache: Relation/Type messages in, :class:`~capture.events.Table` out.

The decoder never resolves anything; the consumer feeds every Relation and Type message
here and asks for tables by relation OID. Each Relation message compiles the table's
per-column decoders once (see :class:`capture.events.Table`), so the row path does no
type lookups.

Invariants:

* A Type message is applied before the Relation that uses the type (the server sends
  them in that order), so the compiled decoders see the type's name.
* A later Relation message for the same OID replaces the table (its layout changed).
* In binary mode (``binary=True``) every column's type must decode exactly from its send
  format (see :mod:`capture.types.registry`): a Relation message with a column the
  registry refuses raises :class:`~capture.errors.BinaryTypeError` naming the table,
  column, type and WAL position, before any row of it is decoded, so nothing undecodable
  ever reaches an encoder. Non-built-in types are first described from the catalog
  (``type_resolver``), once per type: a Type message alone does not say how a type's
  send format looks. Text mode is unaffected (no check, no catalog query).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import structlog

from capture.catalog_numbers import message_numbers
from capture.errors import BinaryTypeError, UnknownRelationError
from capture.events import Column, Table
from capture.lsn import format_lsn
from capture.pgoutput.decoder import all_text_kinds
from capture.pgoutput.messages import Relation, ReplicaIdentity, Type
from capture.replication.catalog import CatalogColumn
from capture.types import TypeRegistry
from capture.types.facts import TypeFacts

log = structlog.get_logger("walcast.relations")

KeyResolver = Callable[[int, str, str], tuple[str, ...] | None]
"""(relation OID, schema, table) → primary-key column names, or None when unknown."""

ColumnResolver = Callable[[int], Mapping[str, CatalogColumn] | None]
"""Relation OID → column name → what the catalog says of it now (its number, its DEFAULT's
value for rows stored before an ADD COLUMN: :class:`~capture.replication.catalog.CatalogColumn`),
or None when the catalog cannot be asked."""

ElementResolver = Callable[[int], tuple[int, str, str] | None]
"""Array type OID → (element OID, namespace, name), the element named as a pgoutput Type
message names a type (a domain by its base type; ``""`` or ``pg_catalog`` for built-ins),
or None when the catalog does not know it. Raises a WalcastError (e.g.
ConnectionLostError) when the catalog cannot be asked."""

TypeResolver = Callable[[Sequence[int]], Mapping[int, TypeFacts]]
"""Type OIDs → catalog facts of them and of every type they are built from (see
:func:`capture.replication.binary_check.describe_types`); raises a WalcastError when the
catalog cannot be asked."""


class RelationCache:
    """Tables and types known from the stream so far.

    ``key_resolver`` (optional) looks up primary keys in the catalog for tables whose
    replica identity is FULL; it is called once per Relation message, never per row.
    ``column_resolver`` (optional) asks the catalog, once per Relation message, for the
    values rows stored before an ADD COLUMN read as (:attr:`capture.events.Table.missing_values`)
    and the columns' numbers (:attr:`capture.events.Table.column_numbers`).
    ``element_resolver`` (optional) looks up the element type of an array of a
    non-catalog type (a domain's array, whose binary elements carry the domain's OID that
    no Type message may have named); it is called once per such array type.
    ``binary`` says the stream asked for binary values: columns the registry cannot
    decode exactly are then refused (see the module docstring). ``type_resolver``
    (optional, used only in binary mode) describes non-built-in column types from the
    catalog; without it such types stay refused (except domains over built-ins).
    """

    def __init__(
        self,
        types: TypeRegistry | None = None,
        key_resolver: KeyResolver | None = None,
        element_resolver: ElementResolver | None = None,
        *,
        column_resolver: ColumnResolver | None = None,
        binary: bool = False,
        type_resolver: TypeResolver | None = None,
    ) -> None:
        self.types = types if types is not None else TypeRegistry()
        self.key_resolver = key_resolver
        self.column_resolver = column_resolver
        self.element_resolver = element_resolver
        self.binary = binary
        self.type_resolver = type_resolver
        self._tables: dict[int, Table] = {}
        self.tables_by_id = self._tables
        """Read-only view for hot paths: relation OID → Table (use :meth:`table` to fail)."""
        self.rows_by_id: dict[int, tuple[Table, bytes]] = {}
        """Read-only view for the row path: relation OID → (Table, the kinds of a tuple of
        it all sent as text, the decoder's own object: ``tuple.kinds is kinds`` says that
        the tuple has the table's column count and no NULL, unchanged or binary value)."""

    def apply_type(self, message: Type) -> None:
        """Record a Type message (enum, domain or other non-built-in type)."""
        self.types.register_type(message.type_oid, message.namespace, message.name)

    def apply_relation(self, message: Relation, *, lsn: int | None = None) -> Table:
        """Record a Relation message and return the compiled table.

        ``lsn`` is the WAL position of the message (named by a binary-mode refusal).
        """
        types = self.types
        if self.element_resolver is not None:
            for column in message.columns:
                if types.unresolved_array(column.type_oid):
                    found = self.element_resolver(column.type_oid)
                    if found is not None:
                        types.resolve_array_element(column.type_oid, *found)
        if self.binary:
            self._check_binary(message, lsn)
        codecs = [types.codec(c.type_oid) for c in message.columns]
        columns = tuple(
            Column(c.name, c.type_oid, codec.name, c.type_modifier, c.is_key)
            for c, codec in zip(message.columns, codecs, strict=True)
        )
        key_indexes = tuple(i for i, c in enumerate(columns) if c.is_key)
        schema = message.namespace or "pg_catalog"
        if message.replica_identity is ReplicaIdentity.FULL:
            resolved = (
                self.key_resolver(message.relation_id, schema, message.name)
                if self.key_resolver is not None
                else None
            )
            primary_key = resolved or ()
        else:
            primary_key = tuple(columns[i].name for i in key_indexes)
        missing, numbers = self._catalog_facts(message)
        table = Table(
            relation_id=message.relation_id,
            schema=schema,
            name=message.name,
            replica_identity=message.replica_identity,
            columns=columns,
            text_decoders=tuple(c.from_text for c in codecs),
            binary_decoders=tuple(c.from_binary for c in codecs),
            renderers=tuple(c.to_text for c in codecs),
            column_names=tuple(c.name for c in columns),
            key_indexes=key_indexes,
            primary_key=primary_key,
            missing_values=missing,
            column_numbers=numbers,
        )
        self._tables[message.relation_id] = table
        self.rows_by_id[message.relation_id] = (table, all_text_kinds(len(columns)))
        return table

    def _catalog_facts(self, message: Relation) -> tuple[dict[str, str | None], dict[str, int]]:
        """The Table's ``missing_values`` and ``column_numbers``, from the catalog of now.

        A column's missing value is its ``attmissingval``, or None (NULL) when it has no
        DEFAULT; a column with a DEFAULT whose value for the rows stored before the catalog
        does not hold, or found with another type (another column by that name now), has
        none.

        A column new since the table's previous Relation message in this cache, with a
        DEFAULT whose value for the rows stored before the catalog does not hold, gets one
        warning: those rows' values are in no change (a reload brings them).

        The catalog is read when the message is decoded, possibly after later DDL: the
        numbers are :func:`capture.catalog_numbers.message_numbers`' (given only where they
        must be the message's columns').
        """
        if self.column_resolver is None:
            return {}, {}
        found = self.column_resolver(message.relation_id) or {}
        table = f"{message.namespace or 'pg_catalog'}.{message.name}"
        previous = self._tables.get(message.relation_id)
        if previous is not None:
            old = set(previous.column_names)
            for column in message.columns:
                facts = found.get(column.name)
                if column.name in old or facts is None:
                    continue
                if facts.has_default and facts.missing is None:
                    log.warning(
                        "added_column_values_unknown",
                        table=table,
                        column=column.name,
                        detail="the column has a DEFAULT, and the catalog does not say what "
                        "the rows stored before the ADD read (a volatile DEFAULT or a table "
                        "rewrite since gave them values that are in no change; a DEFAULT set "
                        "after the ADD left them NULL)",
                        hint=f"reload the table: walcast snapshot --table {table}",
                    )
        missing: dict[str, str | None] = {
            c.name: facts.missing
            for c in message.columns
            if (facts := found.get(c.name)) is not None
            and facts.type_oid == c.type_oid
            and (facts.missing is not None or not facts.has_default)
        }
        numbers = message_numbers([(c.name, c.type_oid) for c in message.columns], found)
        return missing, numbers

    def _check_binary(self, message: Relation, lsn: int | None) -> None:
        """Describe the non-built-in column types, then refuse any the registry cannot decode."""
        types = self.types
        wanted = sorted({c.type_oid for c in message.columns if types.needs_facts(c.type_oid)})
        if wanted and self.type_resolver is not None:
            types.describe(self.type_resolver(wanted))
        for column in message.columns:
            refusal = types.binary_refusal(column.type_oid)
            if refusal is None:
                continue
            relation = f"{message.namespace or 'pg_catalog'}.{message.name}"
            name = types.name_of(column.type_oid)
            shown = name[1:] + "[]" if name.startswith("_") and len(name) > 1 else name
            where = ""
            if lsn is not None:
                where = f" (Relation message at WAL position {format_lsn(lsn)})"
            raise BinaryTypeError(
                f"--binary: column {column.name} of {relation} has type {shown}, which walcast "
                f"cannot decode from pgoutput's binary format: {refusal}{where}",
                relation=relation,
                column=column.name,
                type_name=shown,
                lsn=lsn,
            )

    def table(self, relation_id: int, *, lsn: int | None = None) -> Table:
        """The table for ``relation_id``; raises when no Relation message described it."""
        try:
            return self._tables[relation_id]
        except KeyError:
            where = f" at WAL position {format_lsn(lsn)}" if lsn is not None else ""
            raise UnknownRelationError(
                f"change for relation OID {relation_id}{where} arrived before any Relation "
                "message described it",
                hint="the stream is corrupt or was resumed mid-transaction; restart from the "
                "slot's confirmed position",
            ) from None

    def __contains__(self, relation_id: int) -> bool:
        return relation_id in self._tables

    def tables(self) -> list[Table]:
        """All tables seen so far."""
        return list(self._tables.values())

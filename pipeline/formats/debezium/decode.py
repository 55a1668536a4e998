r"""``debezium``: Debezium PostgreSQL change events (Kafka Connect ``JsonConverter``).

Reads the topics of a real Debezium PostgreSQL connector (3.x, ``plugin.name=pgoutput``)
and walcast's ``--format debezium`` output alike:

* **Envelope**: the value ``{"before", "after", "source", "op", "ts_ms", …}``, or the
  same as ``payload`` of ``{"schema", "payload"}`` (the converter's
  ``schemas.enable=true``). Parser option ``schemas``: ``auto`` (default: each message
  is read in the form it has; a Debezium value never has top-level ``schema`` and
  ``payload`` fields, so the forms cannot be confused), ``true`` or ``false`` to insist
  on one form: a message in the other form is then ``malformed`` with a detail that
  names the option (and a topic of them fails the job's quarantine-ratio check).
* **op**: ``c`` → insert, ``r`` (a load row) → insert, ``u`` → update, ``d`` → delete,
  ``t`` → truncate (no options: Debezium's event does not say CASCADE or RESTART
  IDENTITY). Tombstones (null value), transaction metadata records (``status``
  BEGIN/END), heartbeats (``{"ts_ms"}`` alone) and logical-decoding messages (``m``)
  carry no change. An update that changed the primary key arrives, as Debezium writes
  it, as a delete of the old key and a create of the new one (next bullet).
* **Key changes** (issue 36). The connector marks the halves with Kafka headers: the
  delete (and its tombstone) carries ``__debezium.newkey``, the create
  ``__debezium.oldkey`` (the old key in the default header converter's text,
  ``{"id":6}``, or JsonConverter's; walcast's ``--format debezium`` writes them too,
  :mod:`capture.formats.debezium.headers`). normalize pairs them by those headers alone,
  message by message (the halves may be in different partitions, even batches):

  - the create carrying ``__debezium.oldkey`` is the key change itself: one ``update``
    whose ``before`` is the old key (read from the header, decoded like the record's
    key columns), whose ``after`` is the create's row, placeholder columns left out and
    listed in ``unchanged_toast``. Materialize moves the old row to the new key and
    keeps its values of those columns (:mod:`pipeline.fold`), as for every other format;
  - the delete carrying ``__debezium.newkey`` carries **no change** (like its tombstone):
    the update above deletes the old key at its own position. Decision: kept as a delete,
    it would remove the old row before the move reads it whenever it sorts first (both
    halves share walcast's position; a real connector's are in two partitions, whose
    order against each other Kafka does not keep), and the new key would lose the
    unchanged TOAST values. The cost: a delete half whose create never arrives (the
    connector's ``skipped.operations`` holding ``c``, or a create quarantined for a bad
    value) leaves the old row in place; the quarantine shows the second case.

  Keys that cannot be paired so: a key column whose header text differs from the
  record's (a Connect ``Decimal``, a ``numeric(p,s)`` or ``money`` key under
  ``decimal_handling=precise``; Connect ``Date``/``Time``/``Timestamp`` under
  ``time_precision=connect``): both halves are read as without headers, a delete and a
  create. A create whose ``__debezium.oldkey`` does not hold every key column goes to
  the quarantine as ``unsupported`` (the header quoted).
* **Table**: ``source.schema``/``source.table``; ``source.db`` is the database.
* **Positions**: a Debezium event carries the change's own LSN (``source.lsn``) and the
  previous commit's (``source.sequence``), not its commit LSN. walcast's own output
  carries it in the ``walcast.commit_lsn`` header with the ``walcast.ordinal`` header:
  its changes are placed, and deduplicated, by that position (:mod:`pipeline.model`);
  the delete and create halves of a key change share the update's position
  (:attr:`~.base.Parser.splits_key_updates`). A real connector's records have neither
  header: ``commit_lsn`` and ``ordinal`` are null, so changes keep Kafka's order (per
  key: Debezium keys records by primary key). ``change_lsn`` = ``source.lsn``; ``xid`` =
  ``source.txId``; ``commit_time`` = ``source.ts_us`` (else ``ts_ms``).
* **Replays of a connector** (issue 31). Debezium delivers at least once: after a
  restart it sends again the events after its last committed offset. Their place is
  the connector's own position, ``(sequence[0], source.lsn)``: ``sequence[0]`` is the
  previous transaction's commit LSN (the same for every event of a transaction, growing
  with the commit order) and ``source.lsn`` the change's own WAL position (growing within
  the transaction). In one Kafka partition that pair strictly increases (a key change's
  create above its delete, :attr:`~.base.Parser.splits_key_updates`), so an event whose
  pair is not above every earlier one of its partition is a replay, quarantined as
  ``replay`` (:mod:`pipeline.sequencing`; the high-water mark crosses batches), for
  tables with and without a key. Only streamed events (``c``, ``u``, ``d``) are placed
  so: load rows share one position, the tables of one TRUNCATE one LSN; an event whose
  ``sequence`` has no first element (the first transaction after a start without
  offsets) is never taken for a replay. The pair only finds replays: it is not the
  commit LSN (the changes keep Kafka's order), and walcast's topics use walcast's
  headers instead.
* **Primary key**: the layout's, else the field names of the record's key (null key:
  none, the table is kept as a multiset of rows).
* **Values**: decoded to PostgreSQL's text by :mod:`.decode_values`, each by its kind,
  from the event's Connect schema when it has one, else from the table's layout record
  (walcast's layout topic) under the modes given by parser options ``decimal_handling``
  (``precise``), ``time_precision`` (``adaptive``), ``binary_handling`` (``bytes``),
  which must match the producer's. An event with neither a schema nor a layout for its
  table cannot be decoded (``AeI=`` may be text or a base64 numeric): its change goes to
  the quarantine as ``unknown_table``, never into the table with Debezium's encodings.
  A value that does not decode (a numeric past 38 digits) sends the change to the
  quarantine as ``unsupported``, the columns named.
* **Unchanged TOAST**: a value equal to the placeholder (parser option
  ``unavailable_value_placeholder``, default ``__debezium_unavailable_value``), or to
  its bytes as Debezium writes them for bytea (base64, hex) and int arrays (the bytes
  as numbers), is left out of the image and listed in ``unchanged_toast``: the row keeps
  its previous value. It is never stored. A create carrying the placeholder is the new
  key of a primary-key change whose row had unchanged TOAST values: with its
  ``__debezium.oldkey`` header it is that change (above); without it (a producer that
  writes no headers, or an unpairable key) it has no value to keep and goes to the
  quarantine as ``unsupported``, the columns named, rather than into the table with
  those columns null.
* Columns Debezium leaves out (``line``, ``box``, ``tsquery``, ``pg_lsn`` …) are not in
  the images; see :mod:`.decode_values` for every value Debezium changes on the way.
"""

# ruff: noqa: N812
# (PySpark idiom: `functions as F`)
from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import ClassVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.formats.base import (
    ERR_MALFORMED,
    ERR_UNKNOWN_TABLE,
    ERR_UNSUPPORTED,
    Parser,
    empty_names,
    join_layout,
    message,
    no_changes,
)
from pipeline.formats.debezium.decode_values import (
    BINARY_MODES,
    CONNECT_TEMPORAL,
    DECIMAL,
    DECIMAL_MODES,
    TIME_MODES,
    decoded_image,
    layout_kind,
    pg_type_of_kind,
    schema_kinds,
    undecoded,
)
from pipeline.layouts import column_types

PLACEHOLDER = "__debezium_unavailable_value"
SCHEMAS_MODES = ("auto", "true", "false")
_OPS = {"c": "insert", "r": "insert", "u": "update", "d": "delete", "t": "truncate"}

_COLUMN_SCHEMA = (
    "struct<type:string,name:string,field:string,parameters:map<string,string>,"
    "items:struct<type:string,name:string,parameters:map<string,string>>>"
)
_ENVELOPE_SCHEMA = (
    f"struct<type:string,name:string,fields:array<struct<field:string,type:string,"
    f"name:string,fields:array<{_COLUMN_SCHEMA}>>>>"
)
_SOURCE = (
    "struct<version:string,connector:string,name:string,ts_ms:long,snapshot:string,"
    "db:string,sequence:string,ts_us:long,schema:string,table:string,txId:long,lsn:long>"
)
_BODY_FIELDS = (
    f"before:map<string,string>,after:map<string,string>,source:{_SOURCE},op:string,"
    "ts_ms:long,status:string,id:string"
)
VALUE_SCHEMA = f"struct<schema:{_ENVELOPE_SCHEMA},payload:struct<{_BODY_FIELDS}>,{_BODY_FIELDS}>"
"""The Spark schema a value is read with: both forms (plain, and ``schema``/``payload``)."""


def placeholder_forms(placeholder: str) -> list[str]:
    """The texts the unchanged-TOAST placeholder takes in an image (see the docstring)."""
    raw = placeholder.encode()
    return [
        placeholder,
        base64.b64encode(raw).decode(),
        raw.hex(),
        raw.hex().upper(),
        json.dumps(list(raw), separators=(",", ":")),
        json.dumps([placeholder], separators=(",", ":")),
    ]


class DebeziumParser(Parser):
    """Debezium change events (plain or with Connect schemas) → normalized changes."""

    name: ClassVar[str] = "debezium"
    splits_key_updates: ClassVar[bool] = True
    option_names: ClassVar[tuple[str, ...]] = (
        "schemas",
        "decimal_handling",
        "time_precision",
        "binary_handling",
        "unavailable_value_placeholder",
    )

    def _checked_options(self) -> dict[str, str]:
        allowed = {
            "schemas": SCHEMAS_MODES,
            "decimal_handling": DECIMAL_MODES,
            "time_precision": TIME_MODES,
            "binary_handling": BINARY_MODES,
        }
        for key, valid in allowed.items():
            value = self.options.get(key, valid[0])
            if value not in valid:
                raise ValueError(f"debezium: {key} {value!r} is not {'|'.join(valid)}")
        return {k: self.options.get(k, v[0]) for k, v in allowed.items()}

    def _with_layout(self, df: DataFrame, layouts: DataFrame, options: dict[str, str]) -> DataFrame:
        """Add ``_layout`` (``types``, ``kinds``, ``primary_key``): built once per layout."""
        layout = F.struct(
            "primary_key",
            column_types(F.col("columns")).alias("types"),
            F.map_from_arrays(
                F.transform("columns", lambda c: c["name"]),
                F.transform(
                    "columns",
                    lambda c: layout_kind(
                        c["type"], F.coalesce(c["declared_type"], c["type"]), options
                    ),
                ),
            ).alias("kinds"),
        )
        return join_layout(df, layouts, "_schema", "_table", layout)

    def parse(self, records: DataFrame, layouts: DataFrame) -> DataFrame:
        """See the module docstring."""
        options = self._checked_options()
        placeholder = self.options.get("unavailable_value_placeholder", PLACEHOLDER)
        forms = F.array(*[F.lit(f) for f in placeholder_forms(placeholder)])
        j = F.col("j")
        enveloped = j["schema"].isNotNull() & j["payload"].isNotNull()

        def body(name: str) -> Column:
            return F.when(enveloped, j["payload"][name]).otherwise(j[name])

        parsed = records.withColumn(
            "j", F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
        ).select(
            "*",
            body("source")["schema"].alias("_schema"),
            body("source")["table"].alias("_table"),
        )
        df = self._with_layout(parsed, layouts, options)
        source, op_raw = body("source"), body("op")
        op = F.element_at(F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv]), op_raw)
        row_fields = F.element_at(
            F.filter(j["schema"]["fields"], lambda f: f["field"].isin("after", "before")), 1
        )["fields"]
        layout_types = F.col("_layout.types")
        df = df.withColumn(
            "_kinds",
            F.when(enveloped, schema_kinds(row_fields, layout_types)).otherwise(
                F.col("_layout.kinds")
            ),
        )
        kinds = F.col("_kinds")

        def kept(image: Column) -> Column:
            return F.map_filter(
                image, lambda _k, v: ~F.array_contains(forms, F.coalesce(v, F.lit("")))
            )

        def toasted(image: Column) -> Column:
            return F.coalesce(
                F.map_keys(F.map_filter(image, lambda _k, v: F.array_contains(forms, v))),
                empty_names(),
            )

        mode = options["binary_handling"]
        df = df.select(
            "*",
            kept(body("before")).alias("_raw_before"),
            kept(body("after")).alias("_raw_after"),
            toasted(body("after")).alias("_toast"),
        )
        # One decoding expression for the images and a key move's old key (the
        # __debezium.oldkey header): built and planned once, not three times.
        images = F.transform(
            F.array(F.col("_raw_before"), F.col("_raw_after"), _key_struct(F.col("header_oldkey"))),
            lambda image: decoded_image(image, kinds, mode),
        )
        df = df.withColumn("_images", images).select(
            "*",
            F.col("_images")[0].alias("_before"),
            F.col("_images")[1].alias("_after"),
            F.col("_images")[2].alias("_header_old_key"),
        )
        key_text = F.col("key").cast("string")
        key_names = F.map_keys(_key_struct(key_text))
        pk = F.coalesce(F.col("_layout.primary_key"), key_names, empty_names())
        # a key change's halves (module docstring): the create is the move, the delete goes
        pairable = (F.size(pk) > 0) & F.forall(
            pk,
            lambda c: F.coalesce(
                ~F.coalesce(F.element_at(kinds, c)["cname"], F.lit("")).isin(*_UNPAIRABLE),
                F.lit(False),  # noqa: FBT003
            ),
        )
        moved = (op_raw == "c") & F.col("header_oldkey").isNotNull() & pairable
        consumed = (op_raw == "d") & F.col("header_newkey").isNotNull() & pairable
        old_key = F.when(moved, F.col("_header_old_key"))
        df = df.withColumn("_old_key", old_key)
        old_key_read = (
            F.forall(pk, lambda c: F.element_at(F.col("_old_key"), c).isNotNull())
            & F.col("_old_key").isNotNull()
        )
        op = F.when(moved, F.lit("update")).otherwise(op)
        types = F.coalesce(
            layout_types,
            F.when(kinds.isNotNull(), F.transform_values(kinds, lambda _k, v: pg_type_of_kind(v))),
        )
        bad = F.array_union(
            undecoded(F.col("_raw_before"), F.col("_before")),
            undecoded(F.col("_raw_after"), F.col("_after")),
        )
        has_images = op.isin("insert", "update", "delete")
        change_error = (
            F.when(has_images & kinds.isNull(), F.lit(ERR_UNKNOWN_TABLE))
            .when(has_images & (F.size(bad) > 0), F.lit(ERR_UNSUPPORTED))
            .when(moved & ~old_key_read, F.lit(ERR_UNSUPPORTED))
            .when((op == "insert") & (F.size(F.col("_toast")) > 0), F.lit(ERR_UNSUPPORTED))
        )
        table_name = F.concat_ws(".", F.col("_schema"), F.col("_table"))
        change_detail = (
            F.when(
                moved & ~old_key_read & kinds.isNotNull() & (F.size(bad) == 0),
                F.concat(
                    F.lit("key change of "),
                    table_name,
                    F.lit(": the create's __debezium.oldkey header does not hold the old key ("),
                    F.array_join(pk, ", "),
                    F.lit("): "),
                    F.substring(F.col("header_oldkey"), 1, 200),
                ),
            )
            .when(
                has_images & kinds.isNull(),
                F.concat(
                    F.lit("no column types for "),
                    table_name,
                    F.lit(
                        ": the event has no Connect schema (the producer's schemas.enable "
                        "is false) and no layout record names the table"
                    ),
                ),
            )
            .when(
                has_images & (F.size(bad) > 0),
                F.concat(
                    F.lit("values that do not decode in "),
                    table_name,
                    F.lit(": "),
                    F.array_join(bad, ", "),
                ),
            )
            .otherwise(
                F.concat(
                    F.lit("create event of "),
                    table_name,
                    F.lit(" with unchanged-TOAST placeholders (values unknown): "),
                    F.array_join(F.col("_toast"), ", "),
                )
            )
        )
        micros = F.coalesce(source["ts_us"], source["ts_ms"] * F.lit(1000))
        the_change = self.table_change(
            op,
            database=source["db"],
            commit_time=F.timestamp_micros(micros),
            xid=source["txId"],
            change_lsn=source["lsn"],
            primary_key=pk,
            before=F.when(moved, F.col("_old_key")).when(
                op.isin("update", "delete"), F.col("_before")
            ),
            after=F.when(op.isin("insert", "update"), F.col("_after")),
            unchanged_toast=F.when(op == "update", F.col("_toast")).otherwise(empty_names()),
            changed_columns=F.when(op == "insert", F.map_keys(F.col("_after"))).otherwise(
                F.when(op == "truncate", empty_names())
            ),
            column_types=types,
            error=change_error,
            error_detail=F.when(change_error.isNotNull(), change_detail),
        )
        error, detail = _message_error(enveloped, op, op_raw, body, options["schemas"])
        control = (
            F.col("value").isNull()
            | body("status").isNotNull()
            | (op_raw == "m")
            | (op_raw.isNull() & source.isNull() & body("ts_ms").isNotNull())
        )
        changes = F.when(error.isNotNull() | control | consumed, no_changes()).otherwise(
            F.array(the_change)
        )
        # a connector's replays (module docstring): its position where walcast's is absent
        connector = F.col("header_lsn").isNull() & op_raw.isin("c", "u", "d")
        previous_commit = F.element_at(F.from_json(source["sequence"], "array<string>"), 1)
        return df.select(
            *message(
                error=error,
                error_detail=F.when(error.isNotNull(), detail),
                change_count=F.size(changes),
                changes=changes,
                commit_lsn_num=F.when(connector, previous_commit.cast("long")),
                first_ordinal=F.when(connector, source["lsn"]),
            )
        )


_UNPAIRABLE = (DECIMAL, *CONNECT_TEMPORAL)
"""Key kinds whose ``__debezium.oldkey`` text differs from the record's (module docstring)."""


def _key_struct(text: Column) -> Column:
    """A Debezium key's fields (``map<column, JSON text>``), with or without Connect schema.

    The Kafka key (JsonConverter) and the key-change headers (SimpleHeaderConverter's
    ``{"id":6}``, or JsonConverter's as a header converter) alike; strings in the
    SimpleHeaderConverter's text may hold raw control characters.
    """
    found = F.from_json(text, "map<string,string>", {"allowUnquotedControlChars": "true"})
    return F.when(
        F.map_contains_key(found, F.lit("payload")) & F.map_contains_key(found, F.lit("schema")),
        F.from_json(
            F.element_at(found, F.lit("payload")),
            "map<string,string>",
            {"allowUnquotedControlChars": "true"},
        ),
    ).otherwise(found)


def _message_error(
    enveloped: Column, op: Column, op_raw: Column, body: Callable[[str], Column], schemas: str
) -> tuple[Column, Column]:
    """``error`` and ``error_detail`` of a message that is not a readable event.

    ``body(field)`` is a field of the event, from ``payload`` in the schema form.
    """
    j = F.col("j")
    tombstone = F.col("value").isNull()
    if schemas == "false":
        wrong_form = enveloped
        form_detail = (
            "a {schema, payload} value (the producer's schemas.enable is true), but parser "
            "option schemas=false; set schemas=auto or schemas=true"
        )
    elif schemas == "true":
        wrong_form = ~enveloped
        form_detail = (
            "a value without {schema, payload} (the producer's schemas.enable is false), "
            "but parser option schemas=true; set schemas=auto or schemas=false"
        )
    else:
        wrong_form = F.lit(False)  # noqa: FBT003
        form_detail = ""
    is_control = (
        body("status").isNotNull()
        | (op_raw == "m")
        | (op_raw.isNull() & body("source").isNull() & body("ts_ms").isNotNull())
    )
    missing_image = ((op.isin("insert", "update")) & body("after").isNull()) | (
        (op == "delete") & body("before").isNull()
    )
    no_table = op.isNotNull() & (
        body("source")["table"].isNull() | body("source")["schema"].isNull()
    )
    error = (
        F.when(tombstone, F.lit(None).cast("string"))
        .when(j.isNull(), F.lit(ERR_MALFORMED))
        .when(wrong_form, F.lit(ERR_MALFORMED))
        .when(is_control, F.lit(None).cast("string"))
        .when(op_raw.isNull(), F.lit(ERR_MALFORMED))
        .when(op.isNull(), F.lit(ERR_UNSUPPORTED))
        .when(missing_image | no_table, F.lit(ERR_MALFORMED))
    )
    detail = (
        F.when(j.isNull(), F.lit("not a JSON object"))
        .when(wrong_form, F.lit(form_detail))
        .when(op_raw.isNull(), F.lit("not a Debezium change event (no op)"))
        .when(op.isNull(), F.concat(F.lit("Debezium op "), op_raw))
        .when(missing_image, F.concat(F.lit("op "), op_raw, F.lit(" without its row image")))
        .otherwise(F.lit("no source.schema/source.table"))
    )
    return error, detail

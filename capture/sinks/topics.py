"""Kafka topic names: templates rendered once, injectively, and checked for collisions.

A topic template (``walcast.{format}.{schema}.{table}``) takes ``{format}``, ``{database}``,
``{schema}`` and ``{table}``. Kafka allows only ``[A-Za-z0-9._-]`` in topic names, at most
249 characters, and refuses a topic whose name equals an existing one once ``.`` and ``_``
are taken as the same character.

Rendering rules (they make different tables give different topics):

* A name part (database, schema, table) made of ``[A-Za-z0-9_]`` only is used as it is:
  ``order_items`` stays ``order_items``.
* Any other character (``.``, ``-``, a space, any non-ASCII letter) is replaced by ``_`` and
  the part gets a suffix ``_`` + the first 8 hex digits of the SHA-1 of its UTF-8 name, so
  ``Sales Data`` becomes ``Sales_Data_5f1c2d3e`` and the four-letter Cyrillic or Greek names
  that once all became ``____`` stay apart. ``.`` and ``-`` inside a part are escaped too,
  so a part can never imitate a template separator.
* ``{format}`` is a format name (``dts-avro``) and is used as it is.
* A name longer than 249 characters is cut to 240 and suffixed with the hash of the whole.

Two tables can still collide under Kafka's ``.``/``_`` rule (``shop.order_items`` and
``shop_order.items`` with a ``.``-separated template). :class:`TopicNamer` checks every name
it renders against the others and raises a :class:`~capture.errors.ConfigError` naming both
tables, before anything is produced to either.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass, field
from typing import Final

from capture.errors import ConfigError

MAX_TOPIC_LENGTH: Final = 249
DEFAULT_TOPIC: Final = "walcast.{format}.{schema}.{table}"
"""walcast's topic template when the user sets none (``outputs.topic``)."""
DEFAULT_TRANSACTION_TOPIC: Final = "walcast.{format}"
"""walcast's template of messages of no table when the user sets none."""
TOPIC_FIELDS: Final = frozenset({"format", "database", "schema", "table"})
LEGAL_TOPIC: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SAFE_PART: Final = re.compile(r"^[A-Za-z0-9_]*$")
_UNSAFE_CHAR: Final = re.compile(r"[^A-Za-z0-9_]")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:8]


def name_part(text: str) -> str:
    """``text`` (a database, schema or table name) as an injective topic-name part."""
    if _SAFE_PART.match(text):
        return text
    return f"{_UNSAFE_CHAR.sub('_', text)}_{_digest(text)}"


def _bounded(name: str) -> str:
    if len(name) <= MAX_TOPIC_LENGTH:
        return name
    return f"{name[:240]}_{_digest(name)}"


def validate_template(text: str, setting: str) -> str:
    """``text`` if it is a topic template that renders legal names, else a ConfigError."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        raise ConfigError(f"{setting}: {text!r} is not a valid template: {exc}") from None
    unknown = names - TOPIC_FIELDS
    if unknown:
        raise ConfigError(
            f"{setting}: unknown placeholder(s) {sorted(unknown)}; use {sorted(TOPIC_FIELDS)}"
        )
    literal = re.sub(r"\{[a-z]*\}", "x", text)
    if not LEGAL_TOPIC.match(literal):
        raise ConfigError(
            f"{setting}: {text!r} does not make a legal Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)"
        )
    return text


def render(template: str, *, fmt: str, database: str, schema: str, table: str) -> str:
    """The topic ``template`` names for one table (``schema``/``table`` may be empty)."""
    name = template.format(
        format=fmt,
        database=name_part(database),
        schema=name_part(schema),
        table=name_part(table),
    )
    return _bounded(name)


def kafka_collision_key(topic: str) -> str:
    """The form under which Kafka compares topic names (``.`` and ``_`` are the same)."""
    return topic.replace(".", "_")


@dataclass(slots=True)
class TopicNamer:
    """Renders and remembers the topics of one output format; refuses collisions.

    ``claimed`` may be shared by several namers (one per output), so that a collision
    between formats is caught too.
    """

    fmt: str
    database: str
    template: str
    transaction_template: str
    claimed: dict[str, tuple[str, str, str | None, str | None]] = field(default_factory=dict)
    """Kafka collision key → (topic, format, schema, table) of its first user, shared by
    the namers of every output so that collisions between formats are caught too."""
    heartbeat_topic: str | None = None
    """The topic of heartbeat messages (a name, not a template); None: the transaction
    topic (see :func:`format_templates`)."""
    _cache: dict[tuple[str | None, str | None], str] = field(default_factory=dict)

    def message_topic(self, kind: str, schema: str | None, table: str | None) -> str:
        """The topic of one message: heartbeats to :attr:`heartbeat_topic` when set."""
        if kind == "heartbeat" and self.heartbeat_topic is not None:
            topic = self._cache.get(("", None))
            if topic is None:
                topic = self.heartbeat_topic
                self._claim(topic, topic, None, None)
                self._cache[("", None)] = topic
            return topic
        return self.topic(schema, table)

    def topic(self, schema: str | None, table: str | None) -> str:
        """The topic of a table's messages, or of messages of no table (both None)."""
        key = (schema, table)
        topic = self._cache.get(key)
        if topic is None:
            template = self.template if table is not None else self.transaction_template
            topic = render(
                template,
                fmt=self.fmt,
                database=self.database,
                schema=schema or "",
                table=table or "",
            )
            self._claim(topic, template, schema, table)
            self._cache[key] = topic
        return topic

    def _claim(self, topic: str, template: str, schema: str | None, table: str | None) -> None:
        collision = kafka_collision_key(topic)
        held = self.claimed.get(collision)
        if held is None:
            self.claimed[collision] = (topic, self.fmt, schema, table)
            return
        other_topic, other_fmt, other_schema, other_table = held
        owner = _owner(self.fmt, schema, table)
        other = _owner(other_fmt, other_schema, other_table)
        if other_topic != topic:
            raise ConfigError(
                f"the topics of {owner} ({topic!r}) and {other} ({other_topic!r}) are one "
                "topic to Kafka, which takes '.' and '_' as the same character",
                hint="use a template whose separators cannot appear in names, e.g. "
                "walcast-{format}-{schema}-{table}",
            )
        if other_fmt != self.fmt:
            raise ConfigError(
                f"{owner} and {other} would share topic {topic!r}",
                hint="give every format its own topic (put {format} in the templates)",
            )
        per_table = "{schema}" in template and "{table}" in template
        if per_table and (schema, table) != (other_schema, other_table):
            raise ConfigError(
                f"{owner} and {other} would share topic {topic!r}",
                hint="separate {schema} and {table} in the topic template, e.g. "
                "walcast.{format}.{schema}.{table}",
            )

    def check(self, tables: list[tuple[str, str]]) -> None:
        """Render every table's topic now, so a collision stops the start, not the stream."""
        for schema, table in tables:
            self.topic(schema, table)


def format_templates(
    template: str,
    transaction_template: str,
    *,
    default_topic: str | None,
    default_transaction_topic: str | None,
    heartbeat_topic: str | None,
) -> tuple[str, str, str | None]:
    """(topic template, transaction template, heartbeat topic) of one output.

    A format with its own naming (``debezium``: ``<prefix>.{schema}.{table}``,
    ``<prefix>.transaction``, ``__debezium-heartbeat.<prefix>``) replaces walcast's
    defaults, and only those: a template the user set (any other text) is kept, and then
    heartbeats go to the transaction topic as for every format. The user cannot tell the
    defaults from a template set to the same text; writing walcast's default explicitly
    therefore gives the format's naming too.
    """
    topic, transaction, heartbeat = template, transaction_template, None
    if default_topic is not None and template == DEFAULT_TOPIC:
        topic = validate_template(default_topic, "the format's topic")
    if default_transaction_topic is not None and transaction_template == DEFAULT_TRANSACTION_TOPIC:
        transaction = validate_template(default_transaction_topic, "the format's topic")
        heartbeat = heartbeat_topic
    return topic, transaction, heartbeat


def _owner(fmt: str, schema: str | None, table: str | None) -> str:
    if table is None:
        return f"the {fmt} messages of no table"
    return f"table {schema}.{table} in format {fmt}"

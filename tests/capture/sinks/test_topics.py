"""Topic names: injective rendering, and collisions refused with both tables named."""

from __future__ import annotations

import pytest

from capture.errors import ConfigError
from capture.sinks.topics import TopicNamer, name_part, render, validate_template

TEMPLATE = "walcast.{format}.{schema}.{table}"


def test_plain_names_are_kept() -> None:
    assert render(
        TEMPLATE, fmt="dts-avro", database="db", schema="public", table="order_items"
    ) == ("walcast.dts-avro.public.order_items")


def test_replaced_characters_add_a_hash_so_names_stay_apart() -> None:
    parts = {
        name_part(n) for n in ("Ünits", "Ånits", "ünits", "Sales Data", "Sales_Data", "a.b", "a-b")
    }
    assert len(parts) == 7
    assert name_part("Sales_Data") == "Sales_Data"
    assert name_part("Sales Data").startswith("Sales_Data_")
    greek = [name_part(n) for n in ("αβγδ", "δγβα", "ωωωω")]
    assert len(set(greek)) == 3
    assert all(p.startswith("____") for p in greek)


def test_a_dot_in_a_name_cannot_imitate_a_separator() -> None:
    first = render(TEMPLATE, fmt="json", database="d", schema="s.a", table="b")
    second = render(TEMPLATE, fmt="json", database="d", schema="s", table="a.b")
    assert first != second


def test_long_names_are_cut_with_a_hash() -> None:
    first = render(TEMPLATE, fmt="json", database="d", schema="s", table="x" * 300)
    second = render(TEMPLATE, fmt="json", database="d", schema="s", table="x" * 299 + "y")
    assert len(first) <= 249
    assert first != second


def test_kafka_collisions_name_both_tables() -> None:
    namer = TopicNamer("canal", "db", TEMPLATE, "walcast.{format}")
    namer.topic("shop", "order_items")
    with pytest.raises(ConfigError, match=r"shop_order\.items.*shop\.order_items") as info:
        namer.topic("shop_order", "items")
    assert "walcast-{format}-{schema}-{table}" in info.value.one_line()


def test_collisions_across_formats_are_caught() -> None:
    claimed: dict = {}
    TopicNamer("canal", "db", "cdc.{schema}.{table}", "cdc.tx", claimed=claimed).topic("s", "t")
    with pytest.raises(ConfigError, match="share topic"):
        TopicNamer("json", "db", "cdc.{schema}.{table}", "cdc.tx", claimed=claimed).topic("s", "t")


def test_one_topic_per_format_is_not_a_collision() -> None:
    namer = TopicNamer("canal", "db", "all.{format}", "all.{format}")
    assert namer.topic("a", "b") == namer.topic("c", "d") == namer.topic(None, None) == "all.canal"


def test_check_renders_every_table_up_front() -> None:
    namer = TopicNamer("json", "db", TEMPLATE, "walcast.{format}")
    with pytest.raises(ConfigError, match="one topic to Kafka"):
        namer.check([("shop", "order_items"), ("shop_order", "items")])


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("t.{nope}", "unknown placeholder"),
        ("t {table}", "legal Kafka topic"),
        ("t.{", "valid template"),
    ],
)
def test_bad_templates_name_the_setting(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"outputs\[0\]\.topic: .*{message}"):
        validate_template(template, "outputs[0].topic")

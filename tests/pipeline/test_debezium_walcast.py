"""walcast's own ``--format debezium`` output (the synthetic stream) → normalize → fold:
the tables equal the stream's final state, with ``debezium.schemas`` false (types from
the layout records) and true (types from the events' Connect schemas, no layouts).

The records carry walcast's Kafka headers, as ``walcast run`` writes them (issue 36: a
test without them never met the ordinal header without its commit LSN), and the stream's
last changes are sent again: they are replays (quarantined), the tables unchanged.

Interval values with months are compared as Debezium keeps them (a month is 30.4375
days: :mod:`pipeline.formats.debezium.decode_values`); every other value as PostgreSQL's text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pipeline import expected
from tests.pipeline.conftest import encoded, layouts, walcast_records

pytestmark = pytest.mark.integration

COUNT, SEED = 300, 26
RESENT = 12
"""The stream's last messages sent again (a restart's replay)."""
_PARTS = re.compile(r"(-?\d+) (year|mon|day)s?")


def debezium_interval(text: str) -> str:
    """PostgreSQL's interval text as Debezium's µs (30.4375-day months) then printed as
    days and time, the way the parser prints it."""
    micros = 0
    for number, unit in _PARTS.findall(text):
        days = {"year": 365.25, "mon": 30.4375, "day": 1}[unit]
        micros += int(int(number) * days * 86_400_000_000)
    clock = _PARTS.sub("", text).strip()
    if clock:
        sign = -1 if clock.startswith("-") else 1
        h, m, s = clock.lstrip("-").split(":")
        micros += sign * round((int(h) * 3600 + int(m) * 60 + float(s)) * 1_000_000)
    return micros_text(micros)


def micros_text(micros: int) -> str:
    day = 86_400_000_000
    sign = "-" if micros < 0 else ""
    days, rest = divmod(abs(micros), day)
    seconds, fraction = divmod(rest, 1_000_000)
    clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if fraction:
        clock += f".{fraction:06d}".rstrip("0")
    day_text = f"{sign}{days} {'day' if days == 1 and not sign else 'days'}"
    if days and not rest:
        return day_text
    if days:
        return f"{day_text} {sign}{clock}"
    return f"{sign}{clock}"


def _comparable(row: dict, types: dict[str, str]) -> tuple:
    """Sorted items; floats as numbers (Java prints ``1.0E10`` for PostgreSQL's
    ``10000000000``), intervals as Debezium keeps them."""

    def value(name: str, text: str | None) -> object:
        if text is None:
            return None
        if types.get(name) in expected.FLOAT_TYPES:
            return float(text)
        return text

    return tuple(sorted((k, value(k, v)) for k, v in row.items()))


def _state_rows(state, types: dict[str, str]) -> list[tuple]:
    def fix(row: dict) -> tuple:
        return _comparable(
            {
                k: debezium_interval(v) if types.get(k) == "interval" and v is not None else v
                for k, v in row.items()
            },
            types,
        )

    if hasattr(state, "elements"):  # Counter: a keyless table
        return sorted(fix(dict(k)) for k, n in state.items() for _ in range(n))
    return sorted(fix(v) for v in state.values())


@pytest.mark.parametrize("schemas", ["false", "true"])
def test_walcast_debezium_output_folds_to_the_final_state(
    schemas: str, spark, tmp_path: Path
) -> None:
    from capture.synthetic import build_tables, table_specs  # noqa: PLC0415
    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.materialize import apply_batch, read_table  # noqa: PLC0415
    from pipeline.normalize import normalize_frame  # noqa: PLC0415

    messages = encoded("debezium", COUNT, seed=SEED, **{"debezium.schemas": schemas})
    resent = [m for m in messages[-RESENT:] if m.kind == "change" and m.value is not None]
    known = layouts(spark) if schemas == "false" else layouts(spark).limit(0)
    result = normalize_frame(
        walcast_records(spark, messages + resent), parser_for("debezium"), known, persist=True
    )
    quarantined = result.quarantine.select("reason", "detail").collect()
    assert resent
    assert [r["reason"] for r in quarantined] == ["replay"] * len(resent), quarantined[:3]
    assert result.changes.where("commit_lsn_num IS NULL OR ordinal IS NULL").count() == 0
    root = str(tmp_path / "state")
    # As the pipeline does (normalize writes its table, materialize reads it), materialize
    # starts from stored changes, not from normalize's plan: that plan, copied into each
    # table's MERGE, cost minutes of planning per table (the test once timed out at 600 s).
    changes = result.changes.localCheckpoint()
    result.release()
    apply_batch(spark, changes, root, 0, known if schemas == "false" else None, typed=False)
    types = {
        t.qualified_name: {c.name: c.type_name for c in t.columns}
        for t in build_tables(table_specs(8))
    }
    for (schema, table), state in expected.final_state(COUNT, seed=SEED).items():
        rows = read_table(spark, root, schema, table).collect()
        column_types = types[f"{schema}.{table}"]
        got = sorted(
            _comparable(
                {k: v for k, v in r.asDict().items() if not k.startswith("_walcast")},
                column_types,
            )
            for r in rows
        )
        want = _state_rows(state, column_types)
        assert got == want, (schemas, table)


def test_a_connector_s_resent_events_are_replays_by_its_own_position(spark, tmp_path) -> None:
    """Records without walcast's headers (as a real connector writes them) and the stream's
    last events sent again (a connector's restart): the resent events are quarantined as
    ``replay`` by ``(sequence[0], source.lsn)``, and every table, keyed and keyless, equals
    the final state (a replay applied again would double a keyless table's rows).

    Each change gets its own WAL position (``ChangeEvent.lsn``), as PostgreSQL's stream
    gives it: the synthetic stream has none.
    """
    import dataclasses  # noqa: PLC0415

    from capture.events import ChangeEvent  # noqa: PLC0415
    from capture.formats import encoder_for, parse_settings  # noqa: PLC0415
    from capture.synthetic import build_tables, format_options, generate, table_specs  # noqa: PLC0415
    from capture.teststream import produce  # noqa: PLC0415
    from pipeline.formats import parser_for  # noqa: PLC0415
    from pipeline.materialize import apply_batch, read_table  # noqa: PLC0415
    from pipeline.normalize import normalize_frame  # noqa: PLC0415
    from tests.pipeline.conftest import records  # noqa: PLC0415

    def positioned(items):
        for item in items:
            # distinct and growing within a transaction: all the rule needs
            own = isinstance(item, ChangeEvent)
            yield dataclasses.replace(item, lsn=item.commit_lsn * 4 + item.ordinal) if own else item

    encoder = encoder_for("debezium", format_options(parse_settings("debezium", {})))
    messages: list = []
    produce(encoder, positioned(generate(COUNT, SEED, 8)), messages.append)
    resent = [m for m in messages[-RESENT:] if m.kind == "change" and m.value is not None]
    assert resent
    known = layouts(spark)
    plain = records(spark, [(m.key, m.value) for m in messages + resent])
    result = normalize_frame(plain, parser_for("debezium"), known, persist=True)
    quarantined = result.quarantine.select("reason").collect()
    assert [r["reason"] for r in quarantined] == ["replay"] * len(resent), quarantined[:3]
    root = str(tmp_path / "state")
    changes = result.changes.localCheckpoint()  # stored changes, as in the first test
    result.release()
    apply_batch(spark, changes, root, 0, known, typed=False)
    types = {
        t.qualified_name: {c.name: c.type_name for c in t.columns}
        for t in build_tables(table_specs(8))
    }
    keyless = 0
    for (schema, table), state in expected.final_state(COUNT, seed=SEED).items():
        rows = read_table(spark, root, schema, table).collect()
        column_types = types[f"{schema}.{table}"]
        got = sorted(
            _comparable(
                {k: v for k, v in r.asDict().items() if not k.startswith("_walcast")},
                column_types,
            )
            for r in rows
        )
        assert got == _state_rows(state, column_types), table
        keyless += hasattr(state, "elements")
    assert keyless

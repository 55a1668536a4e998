"""Parsers on static data (Spark batch mode): seed examples, generated streams, poison."""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
from pathlib import Path

import pytest

from capture.events import Op
from capture.formats.layout import layout_record
from capture.synthetic import build_tables, table_specs
from pipeline import sequencing
from pipeline.formats import FORMAT_NAMES, parser_for
from pipeline.layouts import parse_layouts
from pipeline.local_frames import local_rows
from pipeline.normalize import normalize_frame
from tests.pipeline import expected
from tests.pipeline.conftest import encoded, layouts, records, walcast_records

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parent.parent / "data" / "formats"


def utc(*parts: int) -> dt.datetime:
    """A naive datetime in UTC, as Spark returns timestamps to Python (TZ=UTC)."""
    return dt.datetime(*parts, tzinfo=dt.UTC).replace(tzinfo=None)


def seed(fmt: str, name: str) -> bytes:
    return json.dumps(json.loads((DATA / fmt / name).read_text())).encode()


def parse(spark, fmt: str, values, *, topic: str = "t", with_layouts: bool = True, **options):
    """Normalize static records; returns (changes, quarantine) as lists of dicts."""
    result = normalize_frame(
        records(spark, values, topic=topic),
        parser_for(fmt, options),
        layouts(spark) if with_layouts else layouts(spark).limit(0),
        persist=True,
    )
    changes = [
        r.asDict(recursive=True)
        for r in result.changes.orderBy("kafka_offset", "record_index").collect()
    ]
    quarantine = [
        r.asDict(recursive=True) for r in result.quarantine.orderBy("kafka_offset").collect()
    ]
    result.release()
    return changes, quarantine


# ------------------------------------------------------------------ seed examples


def test_canal_dts_examples(spark) -> None:
    values = [
        (None, seed("canal", "dts_delete_2022.json")),
        (None, seed("canal", "dts_delete_pre2022.json")),
        (None, seed("canal", "dts_ddl.json")),
    ]
    changes, quarantine = parse(spark, "canal", values)
    assert [c["op"] for c in changes] == ["delete", "delete"]
    first, second = changes
    assert (first["schema"], first["table"], first["primary_key"]) == (
        "dbname",
        "tablename",
        ["id"],
    )
    assert first["before"] == {"id": "500000287", "shipping_type": None}
    assert first["after"] is None
    assert first["commit_lsn"] is None
    assert first["ordinal"] is None
    assert first["commit_time"] == utc(2020, 9, 15, 9, 24, 54)
    assert first["column_types"] == {"id": "int8", "shipping_type": "varchar"}
    assert second["before"] == {"shipping_type": "aaa"}
    assert [(q["reason"], q["kafka_offset"]) for q in quarantine] == [("unsupported", 2)]
    assert quarantine[0]["kafka_value"] is not None


def test_canal_fields_of_the_wrong_json_type_are_quarantined(spark) -> None:
    good = json.loads(seed("canal", "dts_delete_2022.json"))
    values = [(None, json.dumps(good).encode())]
    for field, wrong in (("ts", "yesterday"), ("pkNames", "id"), ("isDdl", "yes")):
        values.append((None, json.dumps({**good, field: wrong}).encode()))
    update = {**good, "type": "UPDATE", "old": "id"}  # an UPDATE reads old: malformed
    values.append((None, json.dumps(update).encode()))
    values.append((None, json.dumps({**good, "old": "id"}).encode()))  # a DELETE does not
    changes, quarantine = parse(spark, "canal", values)
    assert len(changes) == 2  # the untouched message, and the DELETE with its unread old
    got = sorted((q["kafka_offset"], q["reason"], q["detail"]) for q in quarantine)
    assert got == [
        (1, "malformed", "wrong JSON type of ts"),
        (2, "malformed", "wrong JSON type of pkNames"),
        (3, "malformed", "wrong JSON type of isDdl"),
        (4, "malformed", "wrong JSON type of old"),
    ]


def test_dataworks_examples(spark) -> None:
    names = ["insert", "update_before", "update_after", "update_single", "delete", "heartbeat"]
    changes, quarantine = parse(
        spark, "dataworks", [(None, seed("dataworks", f"{n}.json")) for n in names]
    )
    assert quarantine == []
    assert [c["op"] for c in changes] == ["insert", "update", "update", "delete"]
    insert, split, single, delete = changes
    row = {"name": "name11", "job": "job11", "sex": "man", "#alibaba_rds_row_id#": "15"}
    assert (insert["database"], insert["schema"], insert["table"]) == (
        "pkset_test",
        "pkset_test",
        "pkset_test_no_pk",
    )
    assert insert["after"] == row
    assert insert["before"] is None
    assert split["before"] == row
    assert split["after"] == {**row, "sex": "woman"}
    assert split["changed_columns"] == ["sex"]
    assert single["before"] == row
    assert single["changed_columns"] == ["sex"]
    assert delete["before"] == {**row, "sex": "woman"}
    assert insert["column_types"]["#alibaba_rds_row_id#"] == "int8"


def test_qlik_community_example(spark) -> None:
    changes, quarantine = parse(
        spark, "qlik", [(b"2", seed("qlik", "community_update.json"))], topic="HR.kit"
    )
    assert quarantine == []
    (change,) = changes
    assert (change["schema"], change["table"], change["op"]) == ("HR", "kit", "update")
    assert change["before"] == {"ID": "2", "NAME": "ok", "tableName": "kit"}
    assert change["after"] == {"ID": "2", "NAME": "test Kafka", "tableName": "kit"}
    assert change["changed_columns"] == ["NAME"]  # mask 02: ordinal 2
    # no commit LSN, so no ordinal either: it orders nothing without one (pipeline/model.py)
    assert change["ordinal"] is None
    assert change["commit_lsn"] is None
    assert change["xid"] == 0x60008
    assert change["commit_time"] == utc(2023, 9, 11, 3, 23, 25)


@pytest.mark.parametrize(
    ("mask", "kept", "changed"),
    [
        ("FF01", "abcdefghi", "abcdefghi"),  # every column of nine: the image as it is
        ("ff", "abcdefgh", "abcdefgh"),  # the ninth column's bit is missing: clear
        ("9A01", "bdehi", "bdehi"),  # 0x9A = 1001 1010: columns 2, 4, 5, 8 (1-based)...
        ("0001", "i", "i"),  # ... and 0x01 in the second byte: column 9
        ("", "", ""),  # no bits
        ("F", "", ""),  # half a byte: no bits
        ("zzFF", "i", "i"),  # a byte that is not hex: all clear; the second sets column 9
        (None, "abcdefghi", ""),  # no mask: every column kept, none named
    ],
)
def test_qlik_masks_name_columns_in_little_endian_bit_order(
    spark, mask: str | None, kept: str, changed: str
) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    from pipeline.formats.qlik.decode import mask_bits, mask_names, masked  # noqa: PLC0415

    image = F.create_map(*[F.lit(x) for c in "abcdefghi" for x in (c, c.upper())])
    mask_col = F.lit(mask).cast("string")
    row = (
        spark.range(1)
        .select(mask_bits(mask_col).alias("bits"))
        .select(
            masked(image, mask_col, F.col("bits")).alias("kept"),
            mask_names(image, F.col("bits"), set_bits=True).alias("set"),
            mask_names(image, F.col("bits"), set_bits=False).alias("clear"),
        )
        .first()
    )
    assert row is not None
    assert row["kept"] == {c: c.upper() for c in kept}  # (a collected map has no order)
    assert "".join(row["set"]) == changed
    assert "".join(row["clear"]) == "".join(c for c in "abcdefghi" if c not in changed)


def test_shareplex_examples(spark) -> None:
    values = [(None, seed("shareplex", f"dts_{n}.json")) for n in ("insert", "update", "delete")]
    changes, quarantine = parse(spark, "shareplex", values)
    insert, update = changes
    assert (insert["schema"], insert["table"], insert["op"]) == ("CL_BIZ1", "MIO_LOG", "insert")
    assert insert["after"] == {"MIO_LOG_ID": "32539737"}
    assert insert["commit_lsn_num"] == 14589063118712
    assert insert["ordinal"] == 1
    assert update["op"] == "update"
    # data holds the changed column; the key's before values complete the row
    assert update["after"] == {
        "MIO_LOG_ID": "32537893",
        "POL_CODE": None,
        "PLNMIO_REC_ID": "31557806",
        "CNTR_NO": "1171201606",
        "CNTR_TYPE": None,
    }
    assert update["before"]["CNTR_NO"] == "1171201606syui26"
    assert update["changed_columns"] == ["CNTR_NO"]
    # the document abbreviates the delete's meta (no table): it cannot be placed
    assert [(q["reason"], q["kafka_offset"]) for q in quarantine] == [("malformed", 2)]


IBM_EXAMPLE = (
    '10,"IBM","2006030","182318000005","TEST","EMPLOYEE","ISRT",'
    '"0000:0000:0388:4642:0000","0000:0000:0000:0271:000c:0000:0000:0000",'
    '"2006-06-30-18.00.52","ASNQC910",0000,'
    ',,,,,,"John","Doe","MGR","SALES",120000,12000\n'
    '10,"IBM","2006030","182318003550","TEST","EMPLOYEE","REPL",'
    '"0000:0000:0388:4860:0000","0000:0000:0000:0271:3543:0000:0000:0000",'
    '"2006-06-30-18.05.57","ASNQCAP",0000,'
    '"Bill","Green","SALESREP","SALES",105000,10500,'
    '"Bill","Green","SALESREP","SALES",110000,11000\n'
)
IBM_INVALID = (
    '10,"IBM-INVALID-COLUMN-002A-NULL","2006030","182318000005","ASN","T1","ISRT",'
    '"0000:0000:0388:4642:0000","0000:0000:0000:0271:000c:0000:0000:0000",'
    '"2006-06-30-18.00.52","ASNQCAP",0000,,,,1,,\n'
)


def _layout(
    schema: str,
    table: str,
    columns: list[tuple[str, str, str]],
    key: list[str],
    *,
    replica_identity: str = "full",
) -> bytes:
    full = replica_identity == "full"
    return json.dumps(
        {
            "schema": schema,
            "table": table,
            "replica_identity": replica_identity,
            "primary_key": key,
            "columns": [
                {"position": i + 1, "name": n, "type": t, "key": full or n in key, "rendering": r}
                for i, (n, t, r) in enumerate(columns)
            ],
        }
    ).encode()


def test_ibm_seed_examples(spark) -> None:
    employee = [
        ("FIRSTNME", "varchar", "quoted"),
        ("LASTNAME", "varchar", "quoted"),
        ("POSITION", "varchar", "quoted"),
        ("DEPARTMENT", "varchar", "quoted"),
        ("SALARY", "int4", "bare"),
        ("COMMISSION", "int4", "bare"),
    ]
    t1 = [("ID", "int4", "bare"), ("A", "bpchar", "quoted"), ("B", "bpchar", "quoted")]
    lay = parse_layouts(
        records(
            spark,
            [
                (None, _layout("TEST", "EMPLOYEE", employee, ["FIRSTNME"])),
                (None, _layout("ASN", "T1", t1, ["ID"])),
            ],
        )
    )
    result = normalize_frame(
        records(spark, [(None, IBM_EXAMPLE.encode()), (None, IBM_INVALID.encode())]),
        parser_for("ibm"),
        lay,
    )
    changes = [
        r.asDict(recursive=True)
        for r in result.changes.orderBy("kafka_offset", "record_index").collect()
    ]
    assert result.quarantine.count() == 0
    insert, update, invalid = changes
    assert insert["after"] == {
        "FIRSTNME": "John",
        "LASTNAME": "Doe",
        "POSITION": "MGR",
        "DEPARTMENT": "SALES",
        "SALARY": "120000",
        "COMMISSION": "12000",
    }
    assert insert["before"] is None
    # IBM's own commit LSN ("0000:0000:0388:4642:0000", a DB2 log position) is not a
    # PostgreSQL LSN: no commit_lsn_num, so no ordinal either (issue 36's rule).
    assert insert["commit_lsn_num"] is None
    assert insert["ordinal"] is None
    assert update["before"]["SALARY"] == "105000"
    assert update["after"]["SALARY"] == "110000"
    assert sorted(update["changed_columns"]) == ["COMMISSION", "SALARY"]
    assert update["commit_time"] == utc(2006, 6, 30, 18, 5, 57)
    assert invalid["after"] == {"ID": "1", "B": None}
    assert invalid["unchanged_toast"] == ["A"]


def _ibm_record(table: str, op: str, ident: str, fields: str) -> str:
    return (
        f'10,"{ident}","2006030","182318000005","ASN","{table}","{op}",'
        '"0000:0000:0388:4642:0000","0000:0000:0000:0271:000c:0000:0000:0000",'
        f'"2006-06-30-18.00.52","ASNQCAP",0000,{fields}\n'
    )


def test_ibm_before_images_keep_only_known_values(spark) -> None:
    """Without REPLICA IDENTITY FULL an empty non-key before field is unknown (left
    out), ``""`` is a known empty string; an ``…nnnB`` INVALID column is left out of the
    before image only."""
    cols = [("ID", "int4", "bare"), ("A", "text", "quoted"), ("B", "text", "quoted")]
    lay = parse_layouts(
        records(
            spark,
            [
                (None, _layout("ASN", "KEYED", cols, ["ID"], replica_identity="default")),
                (None, _layout("ASN", "WHOLE", cols, ["ID"])),
            ],
        )
    )
    message = (
        _ibm_record("KEYED", "DLET", "IBM", "1,,,,,")
        + _ibm_record("KEYED", "REPL", "IBM", '2,"",,2,"x","y"')
        + _ibm_record("WHOLE", "REPL", "IBM-INVALID-COLUMN-003B-NULL", '3,"a",,3,"a","b"')
        + _ibm_record("WHOLE", "DLET", "IBM", '4,,"c",,,')
    )
    result = normalize_frame(records(spark, [(None, message.encode())]), parser_for("ibm"), lay)
    got = [r.asDict(recursive=True) for r in result.changes.orderBy("record_index").collect()]
    assert result.quarantine.count() == 0
    assert [(c["table"], c["op"]) for c in got] == [
        ("KEYED", "delete"),
        ("KEYED", "update"),
        ("WHOLE", "update"),
        ("WHOLE", "delete"),
    ]
    keyed_delete, keyed_update, whole_update, whole_delete = got
    assert keyed_delete["before"] == {"ID": "1"}
    assert keyed_delete["after"] is None
    assert keyed_update["before"] == {"ID": "2", "A": ""}
    assert keyed_update["after"] == {"ID": "2", "A": "x", "B": "y"}
    assert whole_update["before"] == {"ID": "3", "A": "a"}
    assert whole_update["after"] == {"ID": "3", "A": "a", "B": "b"}
    assert whole_update["changed_columns"] == ["B"]
    assert whole_delete["before"] == {"ID": "4", "A": None, "B": "c"}
    assert [c["column_types"] for c in got] == [{"ID": "int4", "A": "text", "B": "text"}] * 4


# ------------------------------------------------------------------ generated streams


def _compare(fmt: str, changes: list[dict], events) -> None:
    got = {(c["commit_lsn_num"], c["ordinal"]): c for c in changes}
    assert len(got) == len(changes), "positions must be unique"
    assert len(changes) == len(events)
    for e in events:
        c = got[(e.commit_lsn, e.ordinal)]
        types = {col.name: col.type_name for col in e.table.columns}
        where = f"{fmt} {e.table.name} {e.op} lsn={e.commit_lsn} ordinal={e.ordinal}"
        assert (c["schema"], c["table"], c["op"]) == (e.table.schema, e.table.name, e.op.value), (
            where
        )
        assert c["xid"] in (e.xid, None if fmt == "dataworks" else e.xid), (
            where
        )  # DataWorks has none
        assert c["commit_lsn"] == f"{e.commit_lsn >> 32:X}/{e.commit_lsn & 0xFFFFFFFF:X}", where
        assert c["primary_key"] == list(e.table.primary_key), where
        want_after = expected.image_text(e.after)
        if e.op is Op.DELETE:
            assert c["after"] is None, where
        elif fmt == "shareplex" and e.op is Op.UPDATE:
            assert set(c["after"]) <= set(want_after), where
            for k, v in c["after"].items():
                assert expected.same_value(want_after[k], v, types[k]), (where, k)
        else:
            assert set(c["after"]) == set(want_after), where
            for k, v in want_after.items():
                assert expected.same_value(v, c["after"][k], types[k]), (where, k, v, c["after"][k])
        if e.op is Op.DELETE or (
            e.op is Op.UPDATE and e.before is not None and not e.before.key_only
        ):
            want_before = expected.image_text(e.before)
            got_before = c["before"] or {}
            keys = set(want_before) if fmt != "shareplex" or e.op is Op.DELETE else set(got_before)
            assert set(got_before) >= keys, where
            for k in keys:
                assert expected.same_value(want_before[k], got_before[k], types[k]), (where, k)


# debezium writes a key change as two events at the update's position (no one-to-one
# match by position): its round trip from walcast's encoder, with walcast's headers, is
# checked in tests/pipeline/test_debezium_walcast.py (materialized, equal to the stream's
# final state) and through walcast run in tests/pipeline/test_end_to_end.py.
POSITIONED_FORMATS = tuple(f for f in FORMAT_NAMES if f != "debezium")


@pytest.mark.parametrize("fmt", POSITIONED_FORMATS)
def test_generated_stream_matches_the_source_changes(spark, fmt: str) -> None:
    """Each change at its source position, read with the Kafka headers walcast writes."""
    settings = {"canal.walcast_keys": "true"} if fmt == "canal" else {}
    if fmt == "ibm":
        settings["ibm.max_message_size"] = "4000"  # segmented transactions
    messages = encoded(fmt, 150, seed=11, **settings)
    result = normalize_frame(
        walcast_records(spark, messages), parser_for(fmt), layouts(spark), persist=True
    )
    changes = [r.asDict(recursive=True) for r in result.changes.collect()]
    quarantine = result.quarantine.collect()
    result.release()
    assert quarantine == []
    _compare(fmt, changes, expected.changes(150, seed=11))


def test_committed_stream_files(spark) -> None:
    """The stream files the encoder engineers committed (seed 7, 60 changes, 8 tables)."""
    ibm = (DATA / "ibm" / "stream-seed7-count60-tables8.txt").read_bytes()
    avro = [
        base64.b64decode(line)
        for line in (DATA / "dts-avro" / "stream-seed7-count60-tables8.b64").read_text().split()
    ]
    events = expected.changes(60, seed=7)
    changes, quarantine = parse(spark, "dts-avro", [(None, v) for v in avro])
    assert quarantine == []
    _compare("dts-avro", changes, events)
    # the IBM file is the messages back to back: as one message its records all parse
    changes, quarantine = parse(spark, "ibm", [(None, ibm)])
    assert quarantine == []
    assert len(changes) == len(events)
    assert {(c["table"], c["op"]) for c in changes} == {(e.table.name, e.op.value) for e in events}


# ------------------------------------------------------------------ poison and sequencing


def test_poison_messages_are_quarantined_and_the_rest_kept(spark) -> None:
    good = encoded("canal", 5, seed=3, **{"canal.walcast_keys": "true"})
    values = [(m.key, m.value) for m in good]
    values.insert(2, (b"k", good[0].value[:25]))  # truncated JSON
    values.insert(4, (b"k", b"\x00\xff not json"))
    changes, quarantine = parse(spark, "canal", values)
    assert len(changes) == 5
    assert [(q["reason"], q["kafka_offset"]) for q in quarantine] == [
        ("malformed", 2),
        ("malformed", 4),
    ]
    assert quarantine[0]["kafka_value"] == good[0].value[:25]

    avro = encoded("dts-avro", 3, seed=3)
    values = [(m.key, m.value) for m in avro] + [(b"k", b"\x02\x04garbage bytes")]
    changes, quarantine = parse(spark, "dts-avro", values)
    assert len(changes) == 3
    assert [q["reason"] for q in quarantine] == ["malformed"]

    ibm = encoded("ibm", 6, seed=3)
    values = [(m.key, m.value) for m in ibm]
    unknown = ibm[0].value.split(b"\n")[0].replace(b'"shop","', b'"shop","nope_', 1) + b"\n"
    values.append((b"k", unknown))  # a table without layout
    values.append((b"k", b'10,"IBM","unterminated\n'))
    changes, quarantine = parse(spark, "ibm", values)
    assert len(changes) == 6
    assert sorted(q["reason"] for q in quarantine) == ["malformed", "unknown_table"]
    _, all_unknown = parse(spark, "ibm", [(m.key, m.value) for m in ibm], with_layouts=False)
    assert {q["reason"] for q in all_unknown} == {"unknown_table"}
    assert len(all_unknown) == 6


@pytest.mark.parametrize("join", ["broadcast", "shuffle"])
def test_sequencing_state_carries_across_batches(spark, monkeypatch, join: str) -> None:
    """IBM segments and DataWorks split updates cut between batches; replays dropped.

    canal and IBM are sequenced over their positions only, and the flagged messages
    joined back: by broadcast, or (``shuffle``: above BROADCAST_FLAGS) by a shuffle join.
    """
    if join == "shuffle":
        monkeypatch.setattr(sequencing, "BROADCAST_FLAGS", 0)
    for fmt, settings in (
        ("ibm", {"ibm.max_message_size": "1500"}),
        ("dataworks", {}),
        ("canal", {"canal.walcast_keys": "true"}),
    ):
        messages = [(m.key, m.value) for m in encoded(fmt, 80, seed=5, **settings)]
        parser = parser_for(fmt)
        lay = layouts(spark)
        state = None
        seen: list[dict] = []
        replays = 0
        cuts = [0, len(messages) // 3 + 1, 2 * len(messages) // 3, len(messages)]
        for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
            batch = messages[lo:hi] + (messages[lo - 4 : lo] if i == 2 else [])  # a replay
            frame = records(spark, batch)
            frame = frame.withColumn("offset", frame["offset"] + lo)
            result = normalize_frame(frame, parser, lay, state, persist=True)
            seen += [
                r.asDict() for r in result.changes.select("commit_lsn_num", "ordinal").collect()
            ]
            reasons = [r["reason"] for r in result.quarantine.select("reason").collect()]
            assert set(reasons) <= {"replay"}, fmt
            replays += len(reasons)
            state = local_rows(spark, result.state.collect(), result.state.schema)
            result.release()
        want = {(e.commit_lsn, e.ordinal) for e in expected.changes(80, seed=5)}
        assert {(s["commit_lsn_num"], s["ordinal"]) for s in seen} == want, fmt
        assert len(seen) == len(want), fmt
        assert replays > 0, fmt


def test_changes_are_built_once(spark) -> None:
    """No filter re-evaluates the parser's change expressions (Spark infers one for a
    posexplode and pushes it below the projection that builds them)."""
    values = [(m.key, m.value) for m in encoded("canal", 3, seed=2)]
    result = normalize_frame(records(spark, values), parser_for("canal"), layouts(spark))
    plan = result.changes._jdf.queryExecution().optimizedPlan().toString()
    filters = [line for line in plan.splitlines() if "Filter " in line]
    assert filters
    assert not [f for f in filters if "named_struct" in f or "transform_values" in f]
    assert result.changes.count() == 3


def test_layout_topic_records_match_the_capture_side() -> None:
    table = build_tables(table_specs(1))[0]
    record = layout_record(table)
    assert {"schema", "table", "relation_id", "version", "columns"} <= set(record)
    assert {"name", "type", "key"} <= set(record["columns"][0])

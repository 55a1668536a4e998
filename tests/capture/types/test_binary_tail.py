"""``walcast tail --binary`` on the values that used to break it, in every output format.

* a numeric of 131,072 digits (``ndigits`` above Int16's range in numeric_send);
* an array of a domain over int4 when no published column has the domain type itself
  (its binary elements carry the domain's OID, which no Type message names).

Each format's output must carry the values as PostgreSQL prints them.
"""

from __future__ import annotations

import base64
import json
import uuid

import psycopg
import pytest

from capture.formats import FORMAT_NAMES
from tests.support import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.core]
BIG = "9" * 131072


@pytest.fixture(scope="module")
def stream(pg_dsn: str, pg_major: int):
    if pg_major < 14:
        pytest.skip("binary values need PostgreSQL 14 (the refusal: test_versions.py)")
    tag = uuid.uuid4().hex[:8]
    schema, pub = f"wc_bin_{tag}", f"wc_bin_pub_{tag}"
    slots = {fmt: f"wc_bin_{fmt.replace('-', '_')}_{tag}" for fmt in FORMAT_NAMES}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE DOMAIN {schema}.small AS integer CHECK (VALUE < 100)")
        conn.execute(
            f"CREATE TABLE {schema}.t (id integer PRIMARY KEY, n numeric, a {schema}.small[])"
        )
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE {schema}.t")
        for slot in slots.values():
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute(
            f"INSERT INTO {schema}.t VALUES (1, repeat('9', 131072)::numeric, '{{1,2}}'), "
            "(2, -0.5, '{}')"
        )
    yield pub, slots
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for slot in slots.values():
            sc.drop_slot(conn, slot)
        conn.execute(f"DROP PUBLICATION {pub}")
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_binary_values_reach_every_format(pg_dsn: str, stream, fmt: str) -> None:
    pub, slots = stream
    done = sc.walcast(
        "tail", "--dsn", pg_dsn, "--slot", slots[fmt], "--publication", pub, "--binary",
        "--format", fmt, "--max-events", "2", "--snapshot", "never", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    if fmt == "json":
        rows = [json.loads(line)["after"] for line in out.splitlines()]
        assert rows == [{"id": "1", "n": BIG, "a": "{1,2}"}, {"id": "2", "n": "-0.5", "a": "{}"}]
        return
    if fmt == "debezium":  # numeric is Debezium's VariableScaleDecimal: base64 unscaled bytes
        rows = [json.loads(line)["after"] for line in out.splitlines()]
        big = rows[0]["n"]
        unscaled = int.from_bytes(base64.b64decode(big["value"]), "big", signed=True)
        assert big["scale"] == 0
        assert unscaled == 10 ** len(BIG) - 1  # BIG is all nines
        # an array of a domain: its elements as the domain's text (what Debezium writes for a
        # domain array was not checked against the connector)
        assert [r["a"] for r in rows] == [["1", "2"], []]
        return
    if fmt == "dts-avro":
        out = "".join(base64.b64decode(line).decode("latin-1") for line in out.splitlines())
    assert BIG in out
    assert "\\x0" not in out  # no element left as raw binary
    assert "{1,2}" in out or "[1,2]" in out or "[1, 2]" in out

"""The session :func:`pipeline.session.build_session` starts, as the jobs and tests use it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration  # starts Spark


def _round_trips(spark, monkeypatch: pytest.MonkeyPatch) -> int:
    """The calls to the JVM that building one CASE chain of 20 columns makes."""
    from pyspark.sql import functions as F  # noqa: N812, PLC0415

    client = spark.sparkContext._gateway._gateway_client
    sent = []
    send = client.send_command

    def counted(*args, **kwargs):
        sent.append(1)
        return send(*args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    e = F.lit(0)
    for i in range(20):
        e = F.when(F.col(f"c{i}") == F.lit(i), e + 1).otherwise(e.cast("int"))
    monkeypatch.setattr(client, "send_command", send)
    return len(sent)


def test_column_expressions_are_built_without_python_call_sites(
    spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark's capture of each expression's Python call site is off (:mod:`pipeline.session`):
    with it, every ``F.col``, ``==`` or ``cast`` made four more calls to the JVM."""
    from pyspark.errors import utils  # noqa: PLC0415

    assert utils.is_debugging_enabled() is False
    without = _round_trips(spark, monkeypatch)
    utils._enable_debugging_cache = True  # what PySpark's default would have cached
    try:
        with_capture = _round_trips(spark, monkeypatch)
    finally:
        utils._enable_debugging_cache = False
    assert with_capture >= 3 * without, (without, with_capture)

"""Mutated real pgoutput traffic through the whole pipeline: only walcast errors come out.

See :mod:`bench.kit.fuzz`. ``WALCAST_FUZZ_SEED`` picks another seed (the
default is fixed so that a CI failure can be replayed); bench/fuzz_pipeline.py runs 1M+.
"""

from __future__ import annotations

import os

import pytest

from bench.kit.fuzz import (
    FORMAT_NAMES,
    Unit,
    _Encoders,
    cut_units,
    fuzz,
    load_sessions,
    run_episode,
    whole,
)
from capture.events import ChangeEvent

SESSIONS = load_sessions()
MUTATED_MESSAGES = 100_000


def test_the_recorded_traffic_covers_every_protocol_feature() -> None:
    types = {raw[0] for s in SESSIONS for _, raw in s.messages}
    # Begin Commit Relation Type Insert Update Delete Truncate Message, Stream Start/Stop/
    # Commit/Abort, Begin Prepare, Prepare, Commit/Rollback Prepared
    assert set(b"BCRYIUDTMSEcAbPKr") <= types
    assert {s.proto_version for s in SESSIONS} == {1, 2, 3}
    assert any(s.binary for s in SESSIONS)
    assert all(len(cut_units(s)) > 20 for s in SESSIONS)


@pytest.mark.parametrize("session", SESSIONS, ids=lambda s: s.name)
@pytest.mark.parametrize("hold", [False, True], ids=["pass-through", "held"])
@pytest.mark.parametrize("tail_path", [False, True], ids=["kafka", "tail"])
def test_clean_traffic_passes_every_stage_without_an_error(
    session, hold: bool, tail_path: bool
) -> None:
    unit: Unit = whole(session)
    encoders = _Encoders()
    chosen = encoders.all if hold else encoders.unsized
    seen: list[ChangeEvent] = []
    failure = run_episode(
        unit,
        [(e.lsn, e.raw) for e in unit.entries],
        chosen,
        tail_path=tail_path,
        hold=hold,
        observe=seen.append,
    )
    assert failure is None, failure
    assert len(chosen) == (len(FORMAT_NAMES) if hold else len(encoders.unsized))
    assert len(seen) > 1000


@pytest.mark.parametrize(
    "mutated",
    [
        # The contributor's loop: a twentieth of the run (its own seed: seed + 1).
        pytest.param(MUTATED_MESSAGES // 20, id="quick"),
        # CI's: the whole run (about 100 s of CPU).
        pytest.param(MUTATED_MESSAGES, id="full", marks=pytest.mark.slow),
    ],
)
def test_mutated_traffic_raises_only_walcast_errors(mutated: int) -> None:
    seed = int(os.environ.get("WALCAST_FUZZ_SEED", "20261124"))
    if mutated < MUTATED_MESSAGES:
        seed += 1  # not a prefix of the full run's messages
    stats = fuzz(SESSIONS, seed=seed, mutated_messages=mutated)
    print(f"seed {seed}: {stats.summary()}")  # shown with -s or on failure
    assert stats.mutated_messages >= mutated
    assert stats.walcast_errors.get("DecodeError", 0) > mutated // 10
    assert not stats.findings, f"seed {seed}: {stats.summary()}\n" + "\n".join(
        str(f) for f in stats.findings[:5]
    )

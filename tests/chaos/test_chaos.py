"""The short chaos round CI runs: two runs while the broker and every service are SIGKILLed and restarted.

Seeded (the same kill plan every time); about a minute and a half on two quiet cores (6.5 minutes on a
host loaded by other work, hence the generous limits). The soak is bench/chaos_bench.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import TARGETS, ChaosRound, ChaosSettings, start_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_runs_survive_kills_of_the_broker_and_every_service_and_lose_or_repeat_nothing(
    tmp_path: Path,
) -> None:
    stack = start_stack(tmp_path / "stack")
    try:
        settings = ChaosSettings(seed=11, runs=2, iterations=1, chaos_s=40.0, mean_gap_s=4.0, settle_s=400.0)
        report = ChaosRound(stack, settings, say=print).run()
    finally:
        stack.stop()
    assert set(report.kills_by_target()) == set(TARGETS), report.kills_by_target()
    assert report.violations == [], "\n".join(f"{v.reason}: {v.message}" for v in report.violations)
    assert report.settled
    assert report.tally.runs_final == len(report.submitted) == 2
    assert report.tally.candidates > 0
    assert (report.tally.candidates_lost, report.tally.duplicates) == (0, 0)

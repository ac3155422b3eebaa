"""The chaos harness's pure parts: the seeded kill plan and the invariant checks (no stack started)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from .invariants import BrokerState, DeadLetterView, RunLineage, check, tally
from .plan import BROKER, plan_kills

TARGETS = (BROKER, "store", "llm", "compiler", "executor", "evolver")


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    first = plan_kills(7, duration_s=60, targets=TARGETS, mean_gap_s=3)
    assert first == plan_kills(7, duration_s=60, targets=TARGETS, mean_gap_s=3)
    assert first != plan_kills(8, duration_s=60, targets=TARGETS, mean_gap_s=3)


def test_every_target_is_killed_once_before_any_is_killed_again() -> None:
    kills = plan_kills(3, duration_s=200, targets=TARGETS, mean_gap_s=2)
    assert len(kills) >= 2 * len(TARGETS)
    for start in range(0, len(kills) - len(TARGETS) + 1, len(TARGETS)):
        assert {k.target for k in kills[start : start + len(TARGETS)]} == set(TARGETS)


def test_kills_stay_inside_the_duration_and_never_overlap() -> None:
    kills = plan_kills(5, duration_s=50, targets=TARGETS, mean_gap_s=2, max_down_s=1.5)
    assert kills and all(0 < k.at_s < 50 and 0 <= k.down_s <= 1.5 for k in kills)
    for before, after in itertools.pairwise(kills):
        assert after.at_s >= before.at_s + before.down_s


def test_a_plan_without_targets_or_with_a_zero_gap_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="at least one target"):
        plan_kills(1, duration_s=10, targets=(), mean_gap_s=1)
    with pytest.raises(ValueError, match="mean_gap_s=0"):
        plan_kills(1, duration_s=10, targets=TARGETS, mean_gap_s=0)


def whole_run(run_id: str = "run-a") -> RunLineage:
    ids = [f"{run_id}-c0", f"{run_id}-c1", f"{run_id}-c2"]
    return RunLineage(
        run_id=run_id,
        status="finished",
        candidate_ids=ids,
        evaluated_ids=ids[:2],
        failed_build_ids=ids[2:],
        reported_generated=3,
        reported_resolved=3,
        evolver_archive={"1/0/2": ids[0]},
        rebuilt_archive={"1/0/2": ids[0]},
    )


def quiet_broker(run: RunLineage) -> BrokerState:
    return BrokerState(
        created={run.run_id: list(run.candidate_ids)},
        evaluation_events={c: 1 for c in run.evaluated_ids},
        work_messages=0,
        dead_letters=[],
    )


def reasons(run: RunLineage, broker: BrokerState, submitted: tuple[str, ...] = ("run-a",)) -> list[str]:
    return [v.reason for v in check(submitted, {run.run_id: run}, broker)]


def test_a_whole_lineage_and_a_quiet_broker_break_nothing() -> None:
    run = whole_run()
    assert reasons(run, quiet_broker(run)) == []
    figures = tally(["run-a"], {"run-a": run}, quiet_broker(run))
    assert (figures.runs_final, figures.runs_completed, figures.candidates) == (1, 1, 3)
    assert (figures.candidates_lost, figures.duplicates) == (0, 0)


def test_a_run_still_running_or_absent_is_not_final() -> None:
    run = replace(whole_run(), status="running")
    assert reasons(run, quiet_broker(run)) == ["run_not_final"]
    assert reasons(run, quiet_broker(run), ("run-a", "run-b")) == ["run_not_final", "run_not_final"]


def test_a_candidate_announced_but_missing_from_the_lineage_is_lost() -> None:
    run = whole_run()
    broker = replace(quiet_broker(run), created={"run-a": [*run.candidate_ids, "run-a-c3"]})
    assert reasons(run, broker) == ["candidate_lost"]
    assert tally(["run-a"], {"run-a": run}, broker).candidates_lost == 1


def test_fewer_candidates_than_the_evolver_counted_is_a_mismatch() -> None:
    run = replace(whole_run(), reported_generated=4)
    assert reasons(run, quiet_broker(run)) == ["candidate_count_mismatch"]


def test_a_candidate_without_evaluation_or_failed_build_is_missing_its_evaluation() -> None:
    run = replace(whole_run(), failed_build_ids=[], reported_resolved=2)
    assert reasons(run, quiet_broker(run)) == ["evaluation_missing"]
    assert tally(["run-a"], {"run-a": run}, quiet_broker(run)).candidates_lost == 1


def test_a_candidate_evaluated_twice_is_a_duplicate_in_the_lineage_or_in_the_history() -> None:
    run = whole_run()
    twice_recorded = replace(run, evaluated_ids=[*run.evaluated_ids, run.evaluated_ids[0]])
    assert "evaluation_duplicated" in reasons(twice_recorded, quiet_broker(run))
    twice_published = replace(quiet_broker(run), evaluation_events={run.evaluated_ids[0]: 2})
    assert reasons(run, twice_published) == ["evaluation_duplicated"]
    assert tally(["run-a"], {"run-a": run}, twice_published).duplicates == 1


def test_a_rebuilt_archive_that_differs_from_the_evolvers_is_a_mismatch() -> None:
    run = replace(whole_run(), rebuilt_archive={"1/0/2": "run-a-c1"})
    assert reasons(run, quiet_broker(run)) == ["archive_mismatch"]


def test_work_left_in_the_queues_and_dead_letters_without_reason_are_violations() -> None:
    run = whole_run()
    letters = [DeadLetterView("kf.compile.cpu.x86_64", "", "", "compiler")]
    broker = replace(quiet_broker(run), work_messages=2, dead_letters=letters)
    assert reasons(run, broker) == ["work_left", "dead_letter_without_reason"]


def test_an_event_the_store_dead_lettered_is_lineage_lost() -> None:
    run = whole_run()
    letters = [DeadLetterView("kf.events.candidate.created", "handler_error", "disk full", "store")]
    assert reasons(run, replace(quiet_broker(run), dead_letters=letters)) == ["lineage_event_dead_lettered"]

"""The timed-run schedule and the rules that check a runner's claims (pure; no process)."""

from __future__ import annotations

import itertools

import pytest

from kernelfoundry.evaluation import reasons, verification
from kernelfoundry.evaluation.reasons import EvaluationFailure


def test_schedule_never_repeats_a_set_and_meets_its_minimums() -> None:
    for _ in range(50):
        plan = verification.plan_calls(35, 3)
        assert len(plan) == 35
        assert all(a.input_set != b.input_set for a, b in itertools.pairwise(plan))
        assert sum(c.check for c in plan) >= verification.MIN_CHECKS
        assert sum(c.refresh for c in plan) >= verification.MIN_REFRESHES
        assert plan[-1].check and plan[-1].refresh
        assert all(0 <= c.input_set < 3 for c in plan)


def test_schedules_differ_between_evaluations() -> None:
    plans = {
        tuple((c.input_set, c.refresh, c.check) for c in verification.plan_calls(35, 3)) for _ in range(20)
    }
    assert len(plans) > 15


def test_a_schedule_needs_two_sets() -> None:
    with pytest.raises(ValueError):
        verification.plan_calls(10, 1)


def test_claim_above_the_round_trip_is_forged() -> None:
    verification.check_claim(900, 1000, 0)
    with pytest.raises(EvaluationFailure) as caught:
        verification.check_claim(1001, 1000, 7)
    assert caught.value.reason == reasons.TIMING_FORGED and "timed call 7" in caught.value.message


def test_batch_holds_the_target_of_claimed_work_within_what_the_judge_affords() -> None:
    assert verification.batch_calls(1_000_000, 1_200_000) == 50
    assert verification.batch_calls(1e9, 1e9) == verification.MIN_BATCH_CALLS
    assert verification.batch_calls(10, 100_000) == verification.MAX_BATCH_CALLS
    # a runner claiming 1 ns per call of 10 ms each cannot make the batch last longer than ~2 s
    assert verification.batch_calls(1, 10_000_000) == 200


def test_cross_check_accepts_honest_claims_and_rejects_understated_ones() -> None:
    nulls = [50_000] * 10
    honest = verification.cross_check([1_000_000] * 30, [20_050_000, 25_000_000], 20, nulls, 10_000)
    assert honest.estimate_ns == pytest.approx(1_000_000)
    with pytest.raises(EvaluationFailure) as caught:
        verification.cross_check([300_000] * 30, [20_050_000], 20, nulls, 10_000)
    assert caught.value.reason == reasons.TIMING_MISMATCH


def test_idle_cpu_over_the_allowance_is_background_work() -> None:
    verification.check_idle_cpu(500_000, 0, "`call`")
    verification.check_idle_cpu(2_000_000, 8_000_000, "`call`")
    with pytest.raises(EvaluationFailure) as caught:
        verification.check_idle_cpu(5_000_000, 1_000_000, "`call`")
    assert caught.value.reason == reasons.BACKGROUND_WORK


def test_the_main_thread_has_room_for_the_interpreter_after_a_reply_but_not_for_a_kernel() -> None:
    verification.check_idle_cpu(0, 0, "`call`", main_thread_ns=2_000_000)  # bookkeeping, a collection
    with pytest.raises(EvaluationFailure) as caught:
        verification.check_idle_cpu(0, 1_000_000, "`call`", main_thread_ns=40_000_000)
    assert caught.value.reason == reasons.BACKGROUND_WORK
    assert "main thread" in caught.value.message

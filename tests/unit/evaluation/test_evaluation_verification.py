"""The timed-run schedule and the rules that check a runner's claims (pure; no process)."""

from __future__ import annotations

import itertools

import pytest

from kernelfoundry.evaluation import reasons, verification
from kernelfoundry.evaluation.reasons import EvaluationFailure


def test_schedule_never_repeats_a_set_refreshes_every_call_and_meets_its_minimum_of_checks() -> None:
    for _ in range(50):
        plan = verification.plan_calls(35, 3)
        assert len(plan) == 35
        assert all(a.input_set != b.input_set for a, b in itertools.pairwise(plan))
        assert sum(c.check for c in plan) >= verification.MIN_CHECKS
        assert all(c.refresh for c in plan)  # no timed call sees contents the runner has seen
        assert plan[-1].check
        assert all(0 <= c.input_set < 3 for c in plan)
    assert all(c.check and c.refresh for c in verification.plan_calls(2, 2))


def checks_a_reused_set(plan: list[verification.PlannedCall]) -> bool:
    return any(c.check and c.input_set in {p.input_set for p in plan[:i]} for i, c in enumerate(plan))


@pytest.mark.parametrize(("calls", "sets"), [(3, 2), (3, 3), (4, 5), (6, 3), (6, 2), (35, 3)])
def test_every_schedule_checks_a_call_on_a_set_used_before(calls: int, sets: int) -> None:
    for _ in range(2000):  # short schedules once missed every reuse one time in three hundred
        plan = verification.plan_calls(calls, sets)
        assert checks_a_reused_set(plan), plan
        assert all(a.input_set != b.input_set for a, b in itertools.pairwise(plan))
        assert plan[-1].check and sum(c.check for c in plan) >= min(verification.MIN_CHECKS, calls)


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
    nulls = [50_000] * 9 + [900_000]  # the fastest null is subtracted, not a slow wake-up
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


def test_only_timed_calls_and_batches_have_their_idle_window_watched() -> None:
    for op in ("load", "bind", "idle", "fetch", "probe"):
        assert not verification.watches_idle(op, trial=False, suspect=True, probability=1.0)
    assert not verification.watches_idle("call", trial=True, suspect=True, probability=1.0)
    assert verification.watches_idle("call", trial=False, suspect=False, probability=1.0)


def test_a_batch_and_the_window_after_a_suspect_one_are_always_watched() -> None:
    assert verification.watches_idle("batch", trial=False, suspect=False, probability=0.0)
    assert verification.watches_idle("call", trial=False, suspect=True, probability=0.0)
    assert not verification.watches_idle("call", trial=False, suspect=False, probability=0.0)


def test_timed_windows_are_watched_at_the_given_rate() -> None:
    draws = 20_000
    watched = sum(verification.watches_idle("call", False, False, 0.25) for _ in range(draws))
    # six standard deviations (0.0031 each) either side: a false alarm once in ~10^9 runs
    assert abs(watched / draws - 0.25) < 0.019, watched


@pytest.mark.parametrize("calls", [2, 3, 13, 35, 105, 1000])
def test_a_schedule_watches_often_enough_to_see_work_after_every_call(calls: int) -> None:
    probability = verification.watch_probability(calls)
    assert verification.IDLE_WATCH_PROBABILITY <= probability <= 1.0
    # work after every call is missed only when none of the first calls - 1 windows is watched
    assert (1.0 - probability) ** (calls - 1) <= verification.IDLE_WATCH_MISS * 1.0001


def test_long_schedules_watch_a_quarter_of_their_windows_short_ones_more() -> None:
    assert verification.watch_probability(105) == verification.IDLE_WATCH_PROBABILITY
    assert 0.4 < verification.watch_probability(35) < 0.5
    assert verification.watch_probability(1) == 1.0


def test_the_main_thread_has_room_for_the_interpreter_after_a_reply_but_not_for_a_kernel() -> None:
    verification.check_idle_cpu(0, 0, "`call`", main_thread_ns=2_000_000)  # bookkeeping, a collection
    with pytest.raises(EvaluationFailure) as caught:
        verification.check_idle_cpu(0, 1_000_000, "`call`", main_thread_ns=40_000_000)
    assert caught.value.reason == reasons.BACKGROUND_WORK
    assert "main thread" in caught.value.message


MS = 1_000_000


def observed(
    wall_ms: float,
    waited_ms: float,
    outsiders_ms: float,
    busiest_ms: float = 4.0,
    runner_ms: float = 4.0,
    calls: int = 10,
    judge_waited_ms: float = 0.0,
) -> verification.BatchObservation:
    """A batch of `calls` calls; the CPU figures are per call, the others for the whole batch."""
    return verification.BatchObservation(
        wall_ns=int(wall_ms * MS),
        calls=calls,
        runner_waited_ns=int(waited_ms * MS),
        judge_waited_ns=int(judge_waited_ms * MS),
        outsiders_cpu_ns=int(outsiders_ms * MS),
        busiest_thread_cpu_ns=int(busiest_ms * calls * MS),
        runner_cpu_ns=int(runner_ms * calls * MS),
    )


def test_an_honest_kernel_preempted_by_other_processes_passes_the_second_measurement() -> None:
    # Measured on 2 cores with busy loops: 4 ms of CPU per call, claims of 8 ms, batches of 16 ms per
    # call of which 11 ms were spent waiting for a CPU while other processes ran.
    claims = [8 * MS] * 12
    nulls = [100_000] * 10
    with pytest.raises(EvaluationFailure):
        verification.cross_check(claims, [160 * MS] * 3, 10, nulls, 10_000)
    batches = [observed(160, 110, 300), observed(170, 118, 320), observed(190, 140, 350)]
    check = verification.contention_cross_check(claims, batches, nulls, 10_000, threads=2)
    assert check.estimate_ns == pytest.approx((160 - 0.1 - 110) / 10 * MS)
    assert "waiting for a CPU" in check.describe()


def test_a_second_measurement_that_agrees_plainly_passes_without_correction() -> None:
    check = verification.contention_cross_check(
        [8 * MS] * 12, [observed(90, 0, 0), observed(300, 0, 0)], [100_000], 10_000, threads=2
    )
    assert check.waited_ns == 0 and check.estimate_ns == pytest.approx((90 - 0.1) / 10 * MS)


def test_waiting_other_processes_cannot_explain_is_not_subtracted() -> None:
    # A quiet host (other processes used 2 ms) cannot explain 110 ms of waiting: a runner that keeps
    # its own threads waiting (a starved thread of its own) gains nothing.
    with pytest.raises(EvaluationFailure) as caught:
        verification.contention_cross_check(
            [8 * MS] * 12, [observed(160, 110, 2)] * 3, [100_000], 10_000, threads=2
        )
    assert caught.value.reason == reasons.TIMING_MISMATCH
    assert "measured again" in caught.value.message


def test_under_load_the_runner_cpu_time_must_still_fit_the_claim() -> None:
    claims = [1 * MS] * 12  # claims 1 ms per call
    # a single thread burning 4 ms of CPU per call cannot have finished within 1.5 ms
    with pytest.raises(EvaluationFailure) as caught:
        verification.contention_cross_check(
            claims, [observed(160, 150, 400, busiest_ms=4.0)] * 3, [100_000], 10_000, threads=2
        )
    assert "one runner thread alone" in caught.value.message
    # nor 8 threads with 1 ms each on the 2 threads it was given
    with pytest.raises(EvaluationFailure) as caught:
        verification.contention_cross_check(
            claims, [observed(160, 150, 400, busiest_ms=1.0, runner_ms=8.0)] * 3, [100_000], 10_000, 2
        )
    assert "together" in caught.value.message
    # the same work honestly spread over its 2 threads fits
    verification.contention_cross_check(
        claims, [observed(160, 150, 400, busiest_ms=1.0, runner_ms=2.0)] * 3, [100_000], 10_000, 2
    )


def test_the_judges_own_wait_for_the_reply_counts_as_explained_wait() -> None:
    batch = observed(160, 100, 300, judge_waited_ms=15)
    assert batch.explained_wait_ns == 115 * MS
    assert observed(160, 100, 30, judge_waited_ms=15).explained_wait_ns == 30 * MS

import math

import pytest

from kernelfoundry.domain.kernel import Tunable
from kernelfoundry.domain.sweeps import (
    FAILURE_MESSAGE_LIMIT,
    SWEEP_NEAR_BEST,
    SWEEP_TRIGGERS,
    BestSetting,
    CoordinateSweep,
    GridSweep,
    SweepBook,
    SweepCampaign,
    SweepError,
    SweepFailure,
    SweepJob,
    domain_size,
    known_point_result,
    plan_sweep,
    point_result,
    stale_sweep,
    sweep_points_per_generation,
    worth_sweeping,
)
from kernelfoundry.domain.tunables import parse_tunables

CODE = """
#include "kf_abi.h"
// @kf.tunable BLOCK_SIZE in [64, 128, 256, 512] default 256
//   @kf.tunable UNROLL in [1, 2, 4]
// @kf.tunable LAYOUT in ["row", "col"] default "col"
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
"""


def test_parse_tunables_reads_names_domains_and_defaults():
    assert parse_tunables(CODE) == (
        Tunable("BLOCK_SIZE", (64, 128, 256, 512), 256),
        Tunable("UNROLL", (1, 2, 4), 1),
        Tunable("LAYOUT", ("row", "col"), "col"),
    )


def run_sweep(plan, runtime, batch=8):
    while not plan.done:
        settings = plan.next_batch(batch)
        assert settings, "a sweep that is not done must hand out work"
        for params in settings:
            plan.report(params, runtime(params))
    return plan


def small_runtime(p):
    return 1.0 + abs(p["BLOCK_SIZE"] - 128) / 64 + (0.3 if p["UNROLL"] == 1 else 0.0)


def test_grid_sweep_over_a_small_domain_finds_the_best_point():
    tunables = parse_tunables(CODE)[:2]
    plan = plan_sweep(tunables)
    assert isinstance(plan, GridSweep)
    run_sweep(plan, small_runtime)
    best, runtime = plan.best()
    assert best["BLOCK_SIZE"] == 128 and best["UNROLL"] in (2, 4)
    assert runtime == 1.0
    assert plan.evaluations == domain_size(tunables) == 12


def large_tunables():
    return (
        Tunable("BM", tuple(range(8, 264, 8)), 64),
        Tunable("BN", tuple(range(8, 264, 8)), 64),
        Tunable("STAGES", (1, 2, 3, 4, 5, 6), 2),
    )


def large_runtime(p):
    # smooth bowl with an interaction between BM and BN, optimum near (136, 96, 4)
    bm, bn, st = p["BM"], p["BN"], p["STAGES"]
    return (
        1.0
        + ((bm - 136) / 100) ** 2
        + ((bn - 96) / 80) ** 2
        + 1.5 * (bm - 136) * (bn - 96) / 8000
        + 0.05 * (st - 4) ** 2
    )


def test_guided_sweep_over_a_large_domain_gets_near_the_optimum_with_far_fewer_evaluations():
    tunables = large_tunables()
    plan = plan_sweep(tunables)
    assert isinstance(plan, CoordinateSweep)
    run_sweep(plan, large_runtime, batch=16)
    optimum = min(
        large_runtime({"BM": a, "BN": b, "STAGES": s})
        for a in tunables[0].values
        for b in tunables[1].values
        for s in tunables[2].values
    )
    _, found = plan.best()
    assert found <= optimum * 1.03
    assert plan.evaluations * 15 < domain_size(tunables)


def test_sweep_hands_out_batches_without_repeats_and_waits_for_results():
    plan = GridSweep(parse_tunables(CODE))
    first = plan.next_batch(5)
    second = plan.next_batch(100)
    assert len(first) == 5 and len(first) + len(second) == 24
    keys = {tuple(sorted(p.items())) for p in first + second}
    assert len(keys) == 24
    assert first[0] == {"BLOCK_SIZE": 256, "UNROLL": 1, "LAYOUT": "col"}  # defaults first
    assert plan.next_batch(4) == []
    assert not plan.done


def test_failed_setting_is_never_the_best():
    plan = GridSweep((Tunable("X", (1, 2), 1),))
    for p in plan.next_batch(2):
        plan.report(p, SweepFailure("compile_error") if p["X"] == 1 else 5.0)
    assert plan.best() == ({"X": 2}, 5.0)
    plan2 = GridSweep((Tunable("X", (1,), 1),))
    plan2.report(plan2.next_batch(1)[0], math.inf)
    assert plan2.best() is None


def test_report_of_a_value_outside_the_domain_is_rejected():
    plan = GridSweep((Tunable("X", (1, 2), 1),))
    with pytest.raises(SweepError) as err:
        plan.report({"X": 3}, 1.0)
    assert err.value.reason == "invalid_params"


def test_sweep_book_keeps_the_fastest_kernel_and_setting_per_task_shape_and_device():
    book = SweepBook()
    assert book.offer("gemm", "large", "h200", "k1", {"BM": 64}, 2.0)
    assert not book.offer("gemm", "large", "h200", "k2", {"BM": 32}, 3.0)
    assert book.offer("gemm", "large", "h200", "k2", {"BM": 128}, 1.0)
    assert book.offer("gemm", "small", "h200", "k1", {"BM": 16}, 0.5)
    assert book.best("gemm", "large", "h200") == BestSetting("k2", {"BM": 128}, 1.0)
    assert book.best("gemm", "small", "h200").candidate_id == "k1"
    assert book.best("gemm", "large", "cpu") is None


def test_campaign_interleaves_sweeps_and_keeps_the_best_setting_per_shape():
    campaign = SweepCampaign("gemm")
    small = campaign.start("k1", (Tunable("B", (1, 2, 3), 1),), "small", "h200")
    large = campaign.start("k1", (Tunable("B", (1, 2, 3), 1),), "large", "h200")
    assert campaign.start("k1", (Tunable("B", (1, 2, 3), 1),), "small", "h200") == small  # idempotent
    batch = campaign.next_batch(4)
    assert [j.sweep_id for j in batch] == [small, large, small, large]
    optimum = {"small": 1, "large": 3}

    def measure(job):
        return (
            SweepFailure("timeout")
            if job.params["B"] == 2
            else 1.0 + abs(job.params["B"] - optimum[job.shape])
        )

    while batch:
        for job in batch:
            campaign.report(job, measure(job))
        batch = campaign.next_batch(3)
    assert campaign.active() == []
    assert campaign.best("small", "h200") == BestSetting("k1", {"B": 1}, 1.0)
    assert campaign.best("large", "h200") == BestSetting("k1", {"B": 3}, 1.0)
    with pytest.raises(SweepError):
        campaign.report(SweepJob("nope", "k9", "small", "h200", {"B": 1}), 1.0)


def test_with_a_priority_each_round_serves_the_fastest_kernels_sweep_first() -> None:
    campaign = SweepCampaign("gemm")
    slow = campaign.start("slow", (Tunable("B", (1, 2, 3), 1),), "all", "cpu")
    fast = campaign.start("fast", (Tunable("B", (1, 2, 3), 1),), "all", "cpu")
    speed = {"slow": 1.1, "fast": 2.0}
    assert [j.sweep_id for j in campaign.next_batch(1, priority=speed.__getitem__)] == [fast]
    rest = campaign.next_batch(5, priority=speed.__getitem__)  # a new batch starts again from the top
    assert [j.sweep_id for j in rest] == [fast, slow, fast, slow, slow]  # neither starves
    assert campaign.next_batch(5, priority=speed.__getitem__) == []  # both 3-point grids are spent


# -- the evolver's sweep policy -----------------------------------------------------------------------


def test_only_a_placed_kernel_with_tunables_is_swept_and_only_with_sweeps_on() -> None:
    tunables = (Tunable("BLOCK", (64, 128), 64),)
    assert all(worth_sweeping(label, tunables, True) for label in SWEEP_TRIGGERS)
    assert not worth_sweeping("neutral", tunables, True)
    assert not worth_sweeping("new_cell", (), True)
    assert not worth_sweeping("new_cell", tunables, False)


def test_a_sweep_point_of_a_kernel_no_longer_elite_or_far_behind_the_best_is_answered_at_once() -> None:
    elites = {"fast": 2.0, "slow": 2.0 * SWEEP_NEAR_BEST * 0.9}
    assert stale_sweep("fast", elites, best_speedup=2.0) is None
    behind = stale_sweep("slow", elites, best_speedup=2.0)
    assert behind is not None and "fell behind" in behind.message
    gone = stale_sweep("replaced", elites, best_speedup=2.0)
    assert gone is not None and gone.reason == "superseded" and "no longer elite" in gone.message


def test_a_point_result_is_the_runtime_of_a_timed_success_else_a_failure_with_a_short_message() -> None:
    assert point_result(False, 0.002, None, "") == 0.002
    failed = point_result(True, None, "wrong_result", "x" * 1000)
    assert isinstance(failed, SweepFailure) and failed.reason == "wrong_result"
    assert len(failed.message) == FAILURE_MESSAGE_LIMIT
    untimed = point_result(False, None, None, "")
    assert isinstance(untimed, SweepFailure) and untimed.reason == "failed"
    assert known_point_result(True, 4.0) == 0.004
    assert known_point_result(False, 4.0) == SweepFailure("duplicate", "this setting was already tried")
    assert sweep_points_per_generation(0) == 1 and sweep_points_per_generation(6) == 6

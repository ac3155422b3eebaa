"""How many input sets an evaluation holds: all where they fit, fewer (refreshed in place) where not."""

from __future__ import annotations

import pytest

from kernelfoundry.evaluation.set_plan import (
    MIN_TIMING_SETS,
    SETS_MEMORY_SHARE,
    WORKING_MEMORY_FACTOR,
    plan_sets,
    sets_budget,
    working_memory,
)

GB = 10**9


def test_every_set_is_held_where_they_fit_or_the_memory_is_unknown() -> None:
    for plan in (plan_sets(5, 3, GB, 2 * GB, 100 * GB, copies=2), plan_sets(5, 3, GB, GB, None, copies=2)):
        assert (plan.trial_sets, plan.timing_sets, plan.note, plan.shared, plan.held) == (5, 3, "", False, 8)


def test_a_kernelbench_sized_set_on_an_h200_holds_two_sets_the_trials_on_the_first_timing_set() -> None:
    """LeakyReLU at KernelBench's size: 6.4 GB of input, a 12.9 GB float64 reference, staged (the
    runner's copy too): 25.8 GB a set; 40% of 135 GB free holds two, fewer than a trial set and two
    timing sets, so the trials share the first timing set."""
    budget = sets_budget(135 * GB, None)
    assert budget == int(135 * GB * SETS_MEMORY_SHARE)
    plan = plan_sets(5, 3, int(6.44 * GB), int(12.9 * GB), budget, copies=2)
    assert (plan.trial_sets, plan.timing_sets, plan.shared, plan.held) == (1, MIN_TIMING_SETS, True, 2)
    assert "2 set(s) held instead of 5 trial and 3 timing sets, the trials on the first timing" in plan.note
    assert "2 copies of 6.44 GB of inputs" in plan.note


def test_average_pooling_2d_at_kernelbench_s_size_fits_an_h200_with_two_sets() -> None:
    """45_Average_Pooling_2D: a 17.2 GB input, staged, beside its 34 GB float64 copy. A trial set and two
    timing sets, each held by the judge and the runner, took 103 GB and the judge ran out of memory;
    two sets are 69 GB, and with the float64 copy they fit the 141 GB of an H200."""
    set_bytes, reference = int(17.18 * GB), int(0.28 * GB)
    budget = sets_budget(122 * GB, None, working_memory(int(0.3 * GB), 2 * set_bytes))
    plan = plan_sets(5, 3, set_bytes, reference, budget, copies=2)
    assert plan.shared and plan.held == 2
    assert plan.held * (2 * set_bytes + reference) + 2 * set_bytes < 141 * GB


def test_a_trial_set_and_two_timing_sets_are_held_apart_where_three_sets_fit() -> None:
    plan = plan_sets(5, 3, GB, 0, 3 * GB, copies=1)
    assert (plan.trial_sets, plan.timing_sets, plan.shared, plan.held) == (1, MIN_TIMING_SETS, False, 3)
    assert "1 trial and 2 timing set(s) held instead of 5 and 3" in plan.note


def test_the_sets_that_fit_are_split_between_trials_and_timing() -> None:
    plan = plan_sets(5, 3, 1 * GB, 0, 6 * GB, copies=1)  # six sets fit of the eight asked
    assert (plan.trial_sets, plan.timing_sets) == (3, 3)
    assert plan.trial_sets + plan.timing_sets <= 6
    tight = plan_sets(5, 3, 1 * GB, 0, 4 * GB, copies=1)
    assert (tight.trial_sets, tight.timing_sets) == (2, 2)


def test_two_sets_are_held_however_little_memory_there_is() -> None:
    plan = plan_sets(5, 3, 10 * GB, 10 * GB, 1, copies=2)
    assert (plan.trial_sets, plan.timing_sets, plan.shared, plan.held) == (1, MIN_TIMING_SETS, True, 2)


def test_a_configured_budget_replaces_the_share_of_free_memory() -> None:
    assert sets_budget(None, None) is None
    assert sets_budget(100, "4096") == 4096
    assert sets_budget(None, "4096") == 4096
    for bad in ("lots", "-1", "0"):
        with pytest.raises(ValueError, match="KF_EVALUATION_SETS_MEMORY_BYTES"):
            sets_budget(100, bad)


def test_an_evaluation_needs_a_trial_set_and_two_timing_sets() -> None:
    with pytest.raises(ValueError):
        plan_sets(0, 3, 1, 1, None, 1)
    with pytest.raises(ValueError):
        plan_sets(5, 1, 1, 1, None, 1)


def test_budgets_and_sizes_in_any_number_type_give_whole_sets() -> None:
    """roofline.bytes_of counts in floats: a plan from them still holds a whole number of sets."""
    plan = plan_sets(5, 3, 1.0 * GB, 0.0, 6.5 * GB, copies=1)
    assert (plan.trial_sets, plan.timing_sets) == (3, 3)
    assert all(isinstance(n, int) for n in (plan.trial_sets, plan.timing_sets))
    assert plan.lean and not plan_sets(5, 3, 1.0, 0.0, None, copies=1).lean


def test_the_forward_s_temporaries_are_kept_free_before_the_sets_share_is_taken() -> None:
    """A level-1 loss on the H200: 8 GB of inputs a set and an 8 GB difference tensor while it runs.
    The runner's candidate needs that working memory beside the held sets (its allocation failed there)."""
    free = 100 * 10**9
    assert sets_budget(free, None) == int(free * SETS_MEMORY_SHARE)
    working = working_memory(8 * 10**9, 0)
    assert working == WORKING_MEMORY_FACTOR * 8 * 10**9
    assert sets_budget(free, None, working) == int((free - working) * SETS_MEMORY_SHARE)
    assert sets_budget(10 * 10**9, None, working) == 0  # then the least plan holds
    assert plan_sets(5, 3, 8 * 10**9, 16 * 10**9, 0, copies=2).trial_sets == 1
    assert sets_budget(None, "123", working) == 123  # a configured budget is the budget


def test_the_float64_copies_of_the_inputs_are_kept_free_too() -> None:
    """A level-1 L1 norm on the H200: the float64 reference copies its 8.6 GB input to 17 GB while it
    runs, beside the held sets; uncounted, the judge ran out of memory in its first trial."""
    temporaries, wide = 8 * 10**9, 17 * 10**9
    assert working_memory(temporaries, wide) == WORKING_MEMORY_FACTOR * temporaries + wide
    free = 130 * 10**9
    assert sets_budget(free, None, working_memory(temporaries, wide)) < sets_budget(
        free, None, working_memory(temporaries, 0)
    )


def test_the_host_reports_no_temporaries_and_a_gpu_judge_measures_them() -> None:
    from kernelfoundry.evaluation.backends.base import JudgeDevice

    with JudgeDevice("cpu", flush=False).working_memory() as measured:
        pass
    assert measured == []  # unknown on the host: nothing is kept back


@pytest.mark.gpu
def test_a_cuda_judge_measures_the_temporaries_of_a_forward() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernelfoundry.evaluation.backends.cuda import CudaJudgeDevice

    device = CudaJudgeDevice("cuda:0", flush=False)
    device.setup()
    x = torch.randn(1 << 24, device="cuda")  # 64 MiB
    with device.working_memory() as measured:
        total = ((x * 2.0) + 1.0).sum()  # two 64 MiB temporaries, a scalar kept
    assert measured and measured[0] >= 64 << 20, measured
    del total

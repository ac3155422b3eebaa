"""The one definition of a run's speedup: fastest kernel by its own time over a pooled eager baseline."""

from __future__ import annotations

import pytest

from kernelfoundry.domain.speedup import (
    Measurement,
    fastest,
    kernel_speedup,
    pool_baseline,
    retime_id,
    retimed_candidate,
    run_speedup,
)


def test_the_pooled_baseline_is_the_median_and_an_outlier_stays_visible_without_moving_it() -> None:
    # the tanh task: 11 eager timings at 5.3-6.0 ms and one at 16.8 ms
    samples = [5.3, 5.4, 5.5, 5.6, 5.6, 5.7, 5.8, 5.8, 5.9, 6.0, 6.0, 16.8]
    pooled = pool_baseline(samples)
    assert pooled is not None
    assert pooled.median_ms == pytest.approx(5.75)
    assert pooled.outliers_ms == (16.8,)
    assert pooled.samples == 12
    assert 0 < pooled.spread_ms < 1.0


def test_unmeasured_samples_are_left_out_of_the_pool_and_an_empty_pool_is_none() -> None:
    assert pool_baseline([None, 0.0]) is None
    pooled = pool_baseline([None, 0.0, 4.0])
    assert pooled is not None and (pooled.median_ms, pooled.samples, pooled.spread_ms) == (4.0, 1, 0.0)


def test_the_fastest_kernel_is_chosen_by_its_own_time_not_by_its_ratio_to_a_noisy_eager_timing() -> None:
    lucky = Measurement("lucky", True, runtime_ms=2.2, baseline_ms=16.8)  # ratio 7.6x
    fast = Measurement("fast", True, runtime_ms=2.0, baseline_ms=8.0)  # ratio 4x
    wrong = Measurement("wrong", False, runtime_ms=0.5, baseline_ms=8.0)
    assert fastest([lucky, fast, wrong]) == fast
    figure = run_speedup([lucky, fast, wrong, Measurement("c", True, runtime_ms=3.0, baseline_ms=8.2)])
    assert figure is not None and figure.candidate_id == "fast"
    assert figure.speedup == pytest.approx(8.1 / 2.0)  # median of 16.8, 8.0, 8.0, 8.2
    assert figure.eager.outliers_ms == (16.8,)
    assert not figure.retimed


def test_ties_in_time_go_to_the_smaller_spread_then_the_id() -> None:
    a = Measurement("a", True, runtime_ms=2.0, runtime_spread_ms=0.2)
    b = Measurement("b", True, runtime_ms=2.0, runtime_spread_ms=0.1)
    c = Measurement("c", True, runtime_ms=2.0, runtime_spread_ms=0.1)
    assert fastest([a, c, b]) == b


def test_a_retime_supplies_the_kernel_time_and_its_eager_joins_the_pool() -> None:
    best = Measurement("best", True, runtime_ms=1.8, runtime_spread_ms=0.3, baseline_ms=8.0)
    other = Measurement("other", True, runtime_ms=2.5, baseline_ms=9.0)
    retime = Measurement(
        retime_id("best", "1"),
        True,
        runtime_ms=2.0,
        runtime_spread_ms=0.05,
        baseline_ms=8.6,
        compile_baseline_ms=4.0,
    )
    figure = run_speedup([best, other, retime])
    assert figure is not None and figure.retimed and figure.candidate_id == "best"
    assert figure.kernel_ms == 2.0 and figure.kernel_spread_ms == 0.05
    assert figure.speedup == pytest.approx(8.6 / 2.0)  # median of 8.0, 9.0, 8.6
    assert figure.side_by_side_eager_ms == 8.6
    assert figure.side_by_side_speedup == pytest.approx(4.3)
    assert figure.speedup_vs_compile == pytest.approx(2.0)


def test_a_retime_is_never_a_candidate_of_its_own_and_a_failed_retime_is_ignored() -> None:
    best = Measurement("best", True, runtime_ms=2.0, baseline_ms=8.0)
    failed_retime = Measurement(retime_id("best", "1"), False, baseline_ms=8.0)
    fast_retime_of_other = Measurement(retime_id("other", "1"), True, runtime_ms=0.1, baseline_ms=8.0)
    figure = run_speedup([best, failed_retime, fast_retime_of_other])
    assert figure is not None and figure.candidate_id == "best" and not figure.retimed
    assert figure.kernel_ms == 2.0


def test_no_correct_kernel_or_no_eager_timing_gives_no_figure() -> None:
    assert run_speedup([Measurement("a", False, baseline_ms=8.0)]) is None
    assert run_speedup([Measurement("a", True, runtime_ms=2.0)]) is None


def test_retime_ids_name_the_candidate_they_retime() -> None:
    assert retimed_candidate(retime_id("run-1-g0-r0-c1", "17")) == "run-1-g0-r0-c1"
    assert retimed_candidate("run-1-g0-r0-c1") is None


def test_a_kernel_speedup_is_over_the_pooled_eager_median() -> None:
    pooled = pool_baseline([8.0, 8.0, 30.0])
    assert kernel_speedup(2.0, pooled) == pytest.approx(4.0)
    assert kernel_speedup(None, pooled) is None
    assert kernel_speedup(2.0, None) is None

"""Tolerance policy, poisoning and the comparisons that classify a mismatch."""

from __future__ import annotations

import math

import torch

from kernelfoundry.evaluation import comparison
from kernelfoundry.tasks.model import Tolerance


def test_default_tolerances_follow_the_dtype() -> None:
    assert comparison.default_tolerance(torch.float32) == Tolerance(1e-4, 1e-4)
    assert comparison.default_tolerance(torch.float16) == Tolerance(1e-2, 1e-2)
    assert comparison.default_tolerance(torch.bfloat16) == Tolerance(1e-2, 1e-2)
    assert comparison.default_tolerance(torch.int32) == Tolerance(0.0, 0.0)


def test_tolerance_never_rejects_what_eager_achieves() -> None:
    tol, source = comparison.effective_tolerance(torch.float32, 3e-3, None, None)
    assert tol.atol == 6e-3 and "eager" in source
    tol, _ = comparison.effective_tolerance(torch.float32, 1e-7, None, None)
    assert tol.atol == 1e-4


def test_task_tolerance_replaces_the_policy_and_settings_replace_the_task() -> None:
    task = Tolerance(1e-2, 1e-3)
    override = Tolerance(1e-6, 1e-6)
    assert comparison.effective_tolerance(torch.float32, 0.0, task, None) == (task, "task")
    assert comparison.effective_tolerance(torch.float32, 0.0, task, override) == (override, "settings")


def test_poison_marks_every_element_as_unwritten() -> None:
    floats = torch.zeros(4)
    comparison.poison_(floats)
    assert torch.isnan(floats).all()
    ints = torch.zeros(3, dtype=torch.int32)
    comparison.poison_(ints)
    assert (ints == torch.iinfo(torch.int32).max).all()
    mask = comparison.unwritten_mask(floats, torch.ones(4))
    assert mask.all()


def test_unwritten_mask_accepts_nan_the_reference_also_has() -> None:
    out = torch.tensor([math.nan, 1.0, math.nan])
    ref = torch.tensor([math.nan, 1.0, 2.0], dtype=torch.float64)
    assert comparison.unwritten_mask(out, ref).tolist() == [False, False, True]


def test_compare_reports_the_worst_element() -> None:
    ref = torch.zeros(2, 3, dtype=torch.float64)
    out = torch.zeros(2, 3)
    out[1, 2] = 0.5
    result = comparison.compare(out, ref, Tolerance(1e-4, 1e-4))
    assert not result.ok
    assert result.worst_index == (1, 2)
    assert result.max_abs_error == 0.5
    assert result.mismatches == 1
    assert "index [1, 2]" in result.describe(Tolerance(1e-4, 1e-4))


def test_compare_accepts_values_within_atol_plus_rtol() -> None:
    ref = torch.tensor([100.0, 0.0], dtype=torch.float64)
    out = torch.tensor([100.009, 0.00009])
    assert comparison.compare(out, ref, Tolerance(1e-4, 1e-4)).ok


def test_nan_in_the_output_is_a_mismatch() -> None:
    result = comparison.compare(
        torch.tensor([math.nan]), torch.tensor([1.0], dtype=torch.float64), Tolerance(1, 1)
    )
    assert not result.ok


def test_constant_output_is_degenerate_only_when_the_reference_varies() -> None:
    ref = torch.randn(100, dtype=torch.float64) * 1e-6
    assert comparison.is_degenerate(torch.zeros(100), ref)
    assert not comparison.is_degenerate(ref.float(), ref)
    assert not comparison.is_degenerate(torch.ones(100), torch.ones(100, dtype=torch.float64))


def test_a_reference_varying_only_below_eagers_own_error_is_rounding_noise_not_a_signal() -> None:
    # a group norm over one element: float64 leaves ~1e-14 where the answer is 0, float32 writes 0
    noise = torch.randn(4096, dtype=torch.float64) * 1e-14
    eager_error = float(noise.abs().max())
    assert comparison.is_degenerate(torch.zeros(4096), noise)  # without the floor it looks like a signal
    assert not comparison.is_degenerate(torch.zeros(4096), noise, noise_floor=2 * eager_error)
    signal = torch.randn(4096, dtype=torch.float64)
    assert comparison.is_degenerate(torch.zeros(4096), signal, noise_floor=2 * eager_error)


def test_half_precision_level_result_is_recognised_for_float32_only() -> None:
    ref = torch.randn(1000, dtype=torch.float64)
    rounded = ref.to(torch.bfloat16).to(torch.float32)
    assert comparison.is_half_precision_level(rounded, ref, torch.float32)
    assert not comparison.is_half_precision_level(rounded + 1.0, ref, torch.float32)
    assert not comparison.is_half_precision_level(rounded, ref, torch.float16)


def test_bitwise_equal_sees_nan_payloads_and_single_bits() -> None:
    a = torch.tensor([math.nan, 1.0])
    assert comparison.bitwise_equal(a, a.clone())
    b = a.clone()
    b[1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert not comparison.bitwise_equal(a, b)
    assert comparison.bitwise_equal(torch.tensor(3.0), torch.tensor(3.0))


def test_max_abs_error_agrees_with_the_full_comparison_nans_and_infs_included() -> None:
    ref = torch.tensor([1.0, float("nan"), 3.0, float("inf"), -2.0], dtype=torch.float64)
    for out in (
        torch.tensor([1.5, float("nan"), 3.0, float("inf"), -2.0]),  # NaN matches NaN, inf matches inf
        torch.tensor([1.0, 0.0, 3.0, float("inf"), -2.0]),  # a number where NaN is expected
        torch.tensor([1.0, float("nan"), float("nan"), float("inf"), -2.25]),
    ):
        full = comparison.compare(out, ref, comparison.EXACT).max_abs_error
        assert comparison.max_abs_error(out, ref) == full
    assert comparison.max_abs_error(torch.empty(0), torch.empty(0, dtype=torch.float64)) == 0.0

"""The degenerate-output policy: which check judges an output, and the few outputs that are refused."""

from __future__ import annotations

import pytest
import torch

from kernelfoundry.tasks import degeneracy
from kernelfoundry.tasks.degeneracy import (
    change_between,
    default_tolerance,
    output_check,
    output_stats,
)
from kernelfoundry.tasks.model import TaskError, Tolerance
from kernelfoundry.tasks.summary import OutputCheck

FLOAT = default_tolerance("float32")


def check(
    first: torch.Tensor, second: torch.Tensor, tolerance: Tolerance = FLOAT, inputs_changed: bool = True
) -> OutputCheck:
    change = change_between(second, first, tolerance) if inputs_changed else None
    return output_check("out", output_stats(first), output_stats(second), change, tolerance)


def test_an_ordinary_output_is_judged_by_the_tolerance():
    assert check(torch.randn(8, 8), torch.randn(8, 8)).policy == "tolerance"


def test_a_softmax_over_many_columns_is_judged_relative_to_its_scale_not_refused():
    # KernelBench's softmax over 393,216 columns: every value below 1e-5, so zeros pass atol 1e-4.
    first, second = torch.softmax(torch.rand(2, 393_216), 1), torch.softmax(torch.rand(2, 393_216), 1)
    result = check(first, second)
    assert result.policy == "scale_aware"
    assert "zeros would pass" in result.reason


def test_a_mean_loss_that_barely_moves_with_the_inputs_is_judged_by_its_variation():
    first = torch.nn.functional.cross_entropy(torch.randn(4096, 10), torch.randint(0, 10, (4096,)))
    second = first + 3e-5  # two input sets, two means within the tolerance of each other
    result = check(first, second)
    assert result.policy == "variation"
    assert "between input sets" in result.reason


def test_a_nearly_constant_output_is_judged_by_its_variation():
    first = 5.0 + 1e-5 * torch.randn(64)
    second = 6.0 + 1e-5 * torch.randn(64)
    result = check(first, second)
    assert result.policy == "variation"
    assert "every element is 5" in result.reason


@pytest.mark.parametrize(
    ("first", "second", "words"),
    [
        (torch.zeros(8, 8), torch.zeros(8, 8), "exactly zero"),
        (torch.full((8,), 0.25), torch.full((8,), 0.25), "bit-for-bit the same"),
    ],
)
def test_an_output_that_ignores_its_inputs_is_accepted_as_input_independent(first, second, words):
    result = check(first, second)
    assert result.policy == "input_independent"
    assert words in result.reason and "accepted" in result.reason


def test_without_changed_inputs_an_unchanged_output_is_not_called_input_independent():
    value = torch.randn(8, 8)
    assert check(value, value.clone(), inputs_changed=False).policy == "tolerance"


@pytest.mark.parametrize(
    ("first", "words"),
    [
        (torch.tensor([1.0, float("nan")]), "NaN or Inf (1 of 4 elements"),
        (torch.tensor([1.0, float("inf")]), "NaN or Inf"),
        (torch.empty(0, 3), "is empty"),
    ],
)
def test_outputs_no_comparison_can_use_are_refused_with_the_cause(first, words):
    with pytest.raises(TaskError) as caught:
        check(first, torch.ones_like(first))
    assert caught.value.reason == "degenerate_output"
    assert words in caught.value.message


def test_integer_outputs_are_compared_exactly():
    counts = torch.randint(0, 5, (32,))
    assert check(counts, counts + 1, default_tolerance("int64")).policy == "tolerance"


def test_half_precision_outputs_are_judged_with_the_looser_half_tolerance():
    assert default_tolerance("bfloat16") == Tolerance(1e-2, 1e-2)
    assert default_tolerance("float32") == Tolerance(1e-4, 1e-4)
    assert default_tolerance("int64") == Tolerance(0.0, 0.0)


def test_statistics_taken_chunk_by_chunk_match_the_whole_tensor(monkeypatch):
    monkeypatch.setattr(degeneracy, "CHUNK_ELEMENTS", 7)
    value = torch.randn(10, 10)
    value[3, 4] = float("nan")
    stats = output_stats(value)
    finite = value[torch.isfinite(value)].double()
    assert stats.non_finite == 1 and stats.numel == 100
    assert stats.max_abs == pytest.approx(float(finite.abs().max()))
    assert (stats.minimum, stats.maximum) == (float(finite.min()), float(finite.max()))
    assert stats.mean == pytest.approx(float(finite.mean()))
    other = value.nan_to_num() + 0.5
    change = change_between(other, value.nan_to_num(), FLOAT)
    assert change.max_abs_difference == pytest.approx(0.5) and change.beyond_tolerance

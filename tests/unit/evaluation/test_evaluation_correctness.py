"""How one trial's outputs are judged and how a mismatch is classified (no unit, no child process)."""

from __future__ import annotations

import pytest
import torch

from kernelfoundry.evaluation import EvaluationFailure, correctness, reasons
from kernelfoundry.evaluation.correctness import TrialHistory, check_trial
from kernelfoundry.tasks.model import Tolerance

TOL = Tolerance(1e-4, 1e-4)


def reference(seed: int = 0) -> torch.Tensor:
    return torch.randn(256, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def reason_of(history: TrialHistory, seed_index: int, out: torch.Tensor, ref: torch.Tensor) -> str | None:
    try:
        check_trial(history, seed_index, [out], [ref.float()], [ref], TOL)
    except EvaluationFailure as failure:
        return failure.reason
    return None


def test_exact_result_passes_and_records_errors() -> None:
    history = TrialHistory(0, "s")
    ref = reference()
    assert reason_of(history, 0, ref.float(), ref) is None
    assert 0 < history.max_abs_error < 1e-6


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda out: out.reshape(16, 16), reasons.WRONG_SHAPE),
        (lambda out: out.double(), reasons.WRONG_DTYPE),
        (lambda out: out.index_fill(0, torch.tensor([3]), float("nan")), reasons.OUTPUT_NOT_WRITTEN),
        (lambda out: torch.zeros_like(out), reasons.DEGENERATE_OUTPUT),
        (lambda out: out.bfloat16().float(), reasons.PRECISION_DOWNGRADE),
        (lambda out: out + 1.0, reasons.WRONG_RESULT),
    ],
)
def test_mismatch_is_classified(mutate: object, reason: str) -> None:
    ref = reference()
    assert reason_of(TrialHistory(0, "s"), 0, mutate(ref.float()), ref) == reason  # type: ignore[operator]


def test_replaying_the_previous_trial_is_stale() -> None:
    history = TrialHistory(0, "s", previous_reference=[reference(1)], passed_seeds=[0])
    assert reason_of(history, 1, reference(1).float(), reference(2)) == reasons.STALE_OUTPUT


def test_failing_after_the_first_seed_passed() -> None:
    history = TrialHistory(0, "s", previous_reference=[reference(1)], passed_seeds=[0])
    assert reason_of(history, 1, reference(2).float() + 1.0, reference(2)) == reasons.CORRECT_ONLY_FIRST_SEED


def test_failing_on_the_second_shape_first_seed() -> None:
    history = TrialHistory(1, "big")
    assert reason_of(history, 0, reference().float() + 1.0, reference()) == reasons.CORRECT_ONLY_FIRST_SHAPE


def test_near_constant_output_is_fine_when_eager_is_near_constant_too() -> None:
    ref = 1.0 + reference() * 1e-12  # variation below float32 resolution
    flat = TrialHistory(0, "s", eager_degenerate=[True])
    assert reason_of(flat, 0, ref.float(), ref) is None


def test_variation_below_the_dtype_resolution_is_never_called_degenerate() -> None:
    ref = 1.0 + reference() * 1e-12  # a correct float32 output cannot show this variation
    assert reason_of(TrialHistory(0, "s"), 0, ref.float(), ref) is None


def softmax_reference(columns: int = 393_216) -> torch.Tensor:
    logits = torch.rand(2, columns, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    return torch.softmax(logits, dim=-1)  # every value far below KernelBench's atol of 1e-4


def test_small_magnitude_output_cannot_hide_reduced_precision_behind_atol() -> None:
    ref = softmax_reference()
    assert float(ref.max()) < 1e-5
    assert reason_of(TrialHistory(0, "s"), 0, ref.float(), ref) is None
    bf16 = ref.to(torch.bfloat16).float()
    assert reason_of(TrialHistory(0, "s"), 0, bf16, ref) == reasons.PRECISION_DOWNGRADE
    half = ref.to(torch.float16).float()  # subnormal in float16: coarse steps at this magnitude
    assert reason_of(TrialHistory(0, "s"), 0, half, ref) is not None


def test_zeros_or_a_constant_fail_a_small_magnitude_output() -> None:
    ref = softmax_reference()
    assert reason_of(TrialHistory(0, "s"), 0, torch.zeros_like(ref).float(), ref) == reasons.DEGENERATE_OUTPUT
    constant = torch.full_like(ref, float(ref.mean())).float()
    assert reason_of(TrialHistory(0, "s"), 0, constant, ref) == reasons.DEGENERATE_OUTPUT


def test_tiny_mean_loss_passes_when_correct_and_fails_in_low_precision() -> None:
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ref = x.mean().reshape(1)  # about 1e-3: below atol, the result of heavy cancellation
    naive = torch.zeros((), dtype=torch.float32)
    for chunk in x.float().split(4096):  # a different float32 summation order than eager's
        naive += chunk.sum()
    correct = (naive / x.numel()).reshape(1)
    history = TrialHistory(0, "s", error_floor=2 * abs(float(x.float().mean()) - float(ref)))
    assert reason_of(history, 0, correct, ref) is None
    low = x.to(torch.bfloat16).float().mean().to(torch.bfloat16).float().reshape(1)
    assert reason_of(TrialHistory(0, "s"), 0, low, ref) is not None
    assert reason_of(TrialHistory(0, "s"), 0, torch.zeros(1), ref) is not None


def test_the_previous_answer_is_kept_as_an_evenly_spaced_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ANSWER_SAMPLE_ELEMENTS an output's previous answer is every k-th element, a copy (so the
    whole reference can go), and a replay of it is still named stale from those positions."""
    monkeypatch.setattr(correctness, "ANSWER_SAMPLE_ELEMENTS", 64)
    previous = reference(1)  # 256 elements: every 4th kept
    history = TrialHistory(0, "s", passed_seeds=[0])
    history.remember([previous])
    kept = history.previous_reference
    assert kept is not None and kept[0].shape == (64,)
    assert torch.equal(kept[0], previous[::4])
    assert kept[0].untyped_storage().data_ptr() != previous.untyped_storage().data_ptr()
    assert reason_of(history, 1, previous.float(), reference(2)) == reasons.STALE_OUTPUT
    # wrong at the sampled positions as well as elsewhere: not the previous answer
    assert reason_of(history, 1, reference(2).float() + 1.0, reference(2)) == reasons.CORRECT_ONLY_FIRST_SEED


def test_small_outputs_keep_the_whole_previous_answer() -> None:
    history = TrialHistory(0, "s")
    history.remember([reference(1).reshape(16, 16)])
    kept = history.previous_reference
    assert kept is not None and torch.equal(kept[0], reference(1))

"""Correctness of one trial: output layout, unwritten elements, values, and what a mismatch means.

A mismatch is classified from the most specific explanation to the least: degenerate (near-constant)
output, the previous trial's answer replayed (stale), a float32 result only within half-precision
tolerance (precision downgrade), right for the first seed or shape only, and otherwise wrong_result.
Takes tensors; never calls a unit and never times anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.evaluation import comparison, reasons
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.tasks.model import Tolerance

# The previous trial's answer is kept for the stale-output check, which only names a failure, as at most
# this many evenly spaced elements of each output (answer_sample): kept whole, a level-1 output's float64
# reference was gigabytes held beside the sets or copied to the host after every trial (on the H200, 125
# of 139 s of three level-1 evaluations' trials went on that copy).
ANSWER_SAMPLE_ELEMENTS = 1 << 22


def answer_sample(tensor: Any) -> Any:
    """Every k-th element of the flattened tensor, k the least stride that leaves at most
    ANSWER_SAMPLE_ELEMENTS (k = 1: all of it, flattened); the same positions for any tensor of its size.
    A sample is a copy, so the whole tensor need not be kept for it."""
    import torch

    flat = tensor.detach().reshape(-1)
    stride = max(1, -(-flat.numel() // ANSWER_SAMPLE_ELEMENTS))
    return flat if stride == 1 else flat[::stride].clone(memory_format=torch.contiguous_format)


@dataclass
class TrialHistory:
    """What earlier trials of one shape established."""

    shape_index: int
    shape_name: str
    # answer_sample of each output of the previous trial's reference (remember)
    previous_reference: list[Any] | None = None
    passed_seeds: list[int] = field(default_factory=list)
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    # Per output of the current trial: eager itself is near-constant against the reference (then a
    # near-constant candidate is not degenerate, only as coarse as the dtype allows).
    eager_degenerate: list[bool] = field(default_factory=list)
    # Twice the largest error eager itself made against the reference in any trial so far: the
    # scale-aware comparison never asks a candidate to beat it.
    error_floor: float = 0.0
    # The largest error of the proxy reference (the model in its own dtype, TF32 off) against the
    # high-precision reference in any trial so far; None before the first (engine.py: proxy checks).
    proxy_error: float | None = None

    def remember(self, reference: list[Any]) -> None:
        """The trial's reference, sampled, for the next trial's stale-output check."""
        self.previous_reference = [answer_sample(r) for r in reference]


def check_trial(
    history: TrialHistory,
    seed_index: int,
    outputs: list[Any],
    expected: list[Any],
    reference: list[Any],
    tolerance: Tolerance,
) -> None:
    """Outputs of one call against the eager outputs (layout) and the high-precision reference (values)."""
    if len(outputs) != len(expected):
        raise EvaluationFailure(
            reasons.WRONG_SHAPE,
            f"candidate returned {len(outputs)} outputs, the reference {len(expected)}",
        )
    for i, (out, exp, ref) in enumerate(zip(outputs, expected, reference, strict=True)):
        if tuple(out.shape) != tuple(exp.shape):
            raise EvaluationFailure(
                reasons.WRONG_SHAPE,
                f"output {i} has shape {tuple(out.shape)}, expected {tuple(exp.shape)}",
            )
        if out.dtype != exp.dtype:
            raise EvaluationFailure(
                reasons.WRONG_DTYPE, f"output {i} has dtype {out.dtype}, expected {exp.dtype}"
            )
        unwritten = comparison.unwritten(out, ref)
        if unwritten.count:
            raise EvaluationFailure(
                reasons.OUTPUT_NOT_WRITTEN,
                f"output {i}: {unwritten.count} of {out.numel()} elements still hold the poison after the "
                f"call (first at index {list(unwritten.first)})",
            )
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        judge_values(history, seed_index, i, out, ref, tolerance)


def judge_values(
    history: TrialHistory, seed_index: int, i: int, out: Any, ref: Any, tolerance: Tolerance
) -> None:
    """Values of output `i`; a mismatch is classified from the most specific reason to `wrong_result`."""
    result = comparison.compare(out, ref, tolerance, history.error_floor)
    history.max_abs_error = max(history.max_abs_error, result.max_abs_error)
    history.max_rel_error = max(history.max_rel_error, result.max_rel_error)
    eager_flat = i < len(history.eager_degenerate) and history.eager_degenerate[i]
    degenerate = not eager_flat and comparison.is_degenerate(out, ref, history.error_floor)
    if result.ok and not degenerate:
        return
    detail = f"output {i}: {result.describe(tolerance)}"
    if degenerate:
        raise EvaluationFailure(
            reasons.DEGENERATE_OUTPUT,
            f"output {i} is (near) constant while the reference varies; {detail}",
        )
    if _replays_previous(history, i, out, tolerance):
        raise EvaluationFailure(
            reasons.STALE_OUTPUT,
            f"output {i} equals the previous trial's result, not this trial's; {detail}",
        )
    out_dtype = str(out.dtype).replace("torch.", "")
    if comparison.is_half_precision_level(out, ref, out.dtype):
        raise EvaluationFailure(
            reasons.PRECISION_DOWNGRADE,
            f"output {i} is {out_dtype} but only within float16/bfloat16 tolerance "
            f"(atol=rtol={comparison.HALF_TOLERANCE.atol}); {detail}",
        )
    if seed_index > 0 and 0 in history.passed_seeds:
        raise EvaluationFailure(
            reasons.CORRECT_ONLY_FIRST_SEED,
            f"correct for the first seed, wrong for seed #{seed_index}; {detail}",
        )
    if history.shape_index > 0 and seed_index == 0:
        raise EvaluationFailure(
            reasons.CORRECT_ONLY_FIRST_SHAPE,
            f"correct for the first shape, wrong for shape `{history.shape_name}`; {detail}",
        )
    raise EvaluationFailure(reasons.WRONG_RESULT, detail)


def _replays_previous(history: TrialHistory, i: int, out: Any, tolerance: Tolerance) -> bool:
    """Output `i` holds the previous trial's answer (compared at its sampled positions)."""
    previous = history.previous_reference
    if previous is None or i >= len(previous):
        return False
    replayed = answer_sample(out)
    return (
        replayed.shape == previous[i].shape
        and comparison.compare(replayed, previous[i], tolerance, history.error_floor).ok
    )

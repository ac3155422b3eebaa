"""The degenerate-output policy: which check tells a right answer from a trivial one, or why none can.

KernelBench judges an output with |out - ref| <= atol + rtol·|ref|. Where that cannot tell the right
answer from zeros (every value within atol of zero: a softmax over 393,216 columns) or from a constant (a
mean loss, an output that barely moves when the inputs change), the task is still legitimate: validation
records which stricter check decides (kernelfoundry.tasks.summary: `scale_aware`, `variation`) and the
evaluator applies it. An output that is bit-for-bit the same for two input sets (exactly zero, often: some
KernelBench chains cancel out) is accepted as `input_independent`, since KernelBench scores it. Only
outputs that no comparison can use are refused (`degenerate_output`): empty, or holding NaN/Inf (NaN is
what an unwritten output is poisoned with).

Statistics are taken on the output's own device, in chunks widened to float64, so a multi-GB output needs
neither a host copy nor a float64 copy of itself. Pure functions of tensors, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelfoundry.tasks.model import TaskError, Tolerance
from kernelfoundry.tasks.summary import (
    OUTPUT_CHECK_INPUT_INDEPENDENT,
    OUTPUT_CHECK_SCALE_AWARE,
    OUTPUT_CHECK_TOLERANCE,
    OUTPUT_CHECK_VARIATION,
    OutputCheck,
)

CHUNK_ELEMENTS = 1 << 24  # 128 MiB of float64 per chunk on the output's device
_HALF_TYPES = ("float16", "bfloat16")


def default_tolerance(dtype_name: str) -> Tolerance:
    """KernelBench's policy: 1e-2 for half types, 1e-4 for other floats; exact for integers and bools."""
    if dtype_name in _HALF_TYPES:
        return Tolerance(atol=1e-2, rtol=1e-2)
    if dtype_name.startswith(("float", "complex")):
        return Tolerance(atol=1e-4, rtol=1e-4)
    return Tolerance(atol=0.0, rtol=0.0)


@dataclass(frozen=True)
class OutputStats:
    numel: int
    non_finite: int  # NaN or Inf elements
    max_abs: float
    minimum: float
    maximum: float
    mean: float

    @property
    def spread(self) -> float:
        return self.maximum - self.minimum


@dataclass(frozen=True)
class Change:
    """How one output differs between two input sets."""

    max_abs_difference: float
    beyond_tolerance: bool  # some element differs by more than atol + rtol·|second|


def _chunks(tensor: Any) -> Any:
    import torch

    flat = tensor.detach().reshape(-1)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        yield flat[start : start + CHUNK_ELEMENTS].to(torch.float64)


def output_stats(tensor: Any) -> OutputStats:
    """Element count, non-finite count, max |v|, min, max and mean (finite elements), chunk by chunk."""
    import torch

    non_finite = 0
    max_abs, minimum, maximum, total, finite = 0.0, float("inf"), float("-inf"), 0.0, 0
    for chunk in _chunks(tensor):
        mask = torch.isfinite(chunk)
        count = int(mask.sum())
        non_finite += chunk.numel() - count
        if count == 0:
            continue
        values = chunk[mask] if count < chunk.numel() else chunk
        max_abs = max(max_abs, float(values.abs().max()))
        minimum = min(minimum, float(values.min()))
        maximum = max(maximum, float(values.max()))
        total += float(values.sum())
        finite += count
    if finite == 0:
        minimum = maximum = 0.0
    return OutputStats(tensor.numel(), non_finite, max_abs, minimum, maximum, total / max(finite, 1))


def change_between(first: Any, second: Any, tolerance: Tolerance) -> Change:
    """The largest element difference between two runs of one output, and whether the tolerance sees it."""
    largest, beyond = 0.0, False
    for a, b in zip(_chunks(first), _chunks(second), strict=True):
        difference = (a - b).abs_()
        largest = max(largest, float(difference.max()) if difference.numel() else 0.0)
        if not beyond:
            beyond = bool((difference > tolerance.atol + tolerance.rtol * b.abs()).any())
    return Change(largest, beyond)


def output_check(
    label: str,
    first: OutputStats,
    second: OutputStats,
    change: Change | None,
    tolerance: Tolerance,
) -> OutputCheck:
    """Which check judges this output, from its statistics for two input sets; TaskError if none can.

    `change` is None when the inputs did not change between the two runs (only scalars as inputs).
    """
    if first.numel == 0:
        raise TaskError("degenerate_output", f"{label} is empty: there is nothing to compute")
    bad = first.non_finite + second.non_finite
    if bad:
        raise TaskError(
            "degenerate_output",
            f"{label} contains NaN or Inf ({bad} of {2 * first.numel} elements over two input sets): "
            "no comparison can judge a kernel against it",
        )
    if change is not None and change.max_abs_difference == 0.0:
        what = "exactly zero" if first.max_abs == 0.0 else "bit-for-bit the same"
        return OutputCheck(
            OUTPUT_CHECK_INPUT_INDEPENDENT,
            f"{label} is {what} for two different input sets: it does not depend on the inputs, so a "
            "kernel that writes that constant is right (KernelBench scores such tasks; accepted)",
        )
    largest = max(first.max_abs, second.max_abs)
    if largest <= tolerance.atol:
        return OutputCheck(
            OUTPUT_CHECK_SCALE_AWARE,
            f"{label}: max |value| {largest:.3g} <= atol {tolerance.atol:g}, so zeros would pass the "
            "tolerance; judged relative to the output's scale",
        )
    if first.numel > 1 and first.spread <= tolerance.atol + tolerance.rtol * abs(first.mean):
        return OutputCheck(
            OUTPUT_CHECK_VARIATION,
            f"{label}: every element is {first.mean:.6g} within {first.spread:.3g}, so that constant would "
            "pass the tolerance; the candidate's variation must match the reference's",
        )
    if change is not None and not change.beyond_tolerance:
        return OutputCheck(
            OUTPUT_CHECK_VARIATION,
            f"{label}: changes by at most {change.max_abs_difference:.3g} between input sets, within the "
            "tolerance, so a stored answer would pass; the candidate's change must match the reference's",
        )
    return OutputCheck(
        OUTPUT_CHECK_TOLERANCE,
        f"{label}: atol {tolerance.atol:g}, rtol {tolerance.rtol:g} tell it from zeros and constants",
    )

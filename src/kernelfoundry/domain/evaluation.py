"""What the engine is told about a child: the candidate that was generated and how its evaluation went.

Plain data handed to the evolution engine by the evolver service (which decodes them from `evaluated`
events) and replayed from lineage on resume. The one rule that lives here: a failed, timed-out or
incorrect evaluation never carries a positive fitness, whatever speedup figure came with it.

This module must never perform I/O, read a clock or import transport or torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import TunableValue

SEED_OPERATOR = "seed"
REPAIR_OPERATOR = "repair"


@dataclass(frozen=True)
class CandidateInfo:
    """A generated child, as the engine needs it (the source itself stays in lineage)."""

    candidate_id: str
    parent_id: str | None
    descriptors: Descriptors  # decided by the static analysis, see descriptors.classify
    generation: int = 0
    island: int = 0
    operator: str = SEED_OPERATOR
    prompt_variant_id: str | None = None
    reported: Descriptors | None = None  # the generator's self-report, kept beside the analysis
    repair_of: str | None = None  # id of the failed candidate this one repairs
    params: Mapping[str, TunableValue] = field(default_factory=dict)
    shape: str = "default"

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id,
            "parent_id": self.parent_id,
            "descriptors": list(self.descriptors.cell),
            "generation": self.generation,
            "island": self.island,
            "operator": self.operator,
            "prompt_variant_id": self.prompt_variant_id,
            "reported": list(self.reported.cell) if self.reported is not None else None,
            "repair_of": self.repair_of,
            "params": dict(self.params),
            "shape": self.shape,
        }


@dataclass(frozen=True)
class Mismatch:
    """The largest difference between candidate and reference output."""

    abs_error: float
    index: tuple[int, ...] = ()
    expected: float | None = None
    actual: float | None = None
    output: int = 0  # which output tensor

    def describe(self) -> str:
        where = f"output {self.output}" + (f" at index {list(self.index)}" if self.index else "")
        values = ""
        if self.expected is not None and self.actual is not None:
            values = f" (expected {self.expected:.6g}, got {self.actual:.6g})"
        return f"largest mismatch |diff| = {self.abs_error:.3g} in {where}{values}"


@dataclass(frozen=True)
class EvaluationInfo:
    """How a candidate's evaluation went; `failure_reason` is a reason code such as `compile_error`."""

    candidate_id: str
    correct: bool
    speedup: float | None = None  # reference time / candidate time; aggregated over shapes upstream
    runtime_s: float | None = None
    failure_reason: str | None = None
    message: str = ""
    mismatch: Mismatch | None = None

    @property
    def reason(self) -> str | None:
        """Why this evaluation counts as failed, or None when it succeeded."""
        if self.failure_reason:
            return self.failure_reason
        if not self.correct:
            return "wrong_result"
        if self.speedup is None or not math.isfinite(self.speedup) or self.speedup <= 0:
            return "no_timing"
        return None

    @property
    def failed(self) -> bool:
        return self.reason is not None

    @property
    def fitness(self) -> float:
        """Speedup when the evaluation succeeded; 0.0 otherwise (never positive for a failure)."""
        if self.failed:
            return 0.0
        assert self.speedup is not None
        return float(self.speedup)

    def to_dict(self) -> dict[str, Any]:
        mismatch = None
        if self.mismatch is not None:
            m = self.mismatch
            mismatch = {
                "abs_error": m.abs_error,
                "index": list(m.index),
                "expected": m.expected,
                "actual": m.actual,
                "output": m.output,
            }
        return {
            "candidate_id": self.candidate_id,
            "correct": self.correct,
            "speedup": self.speedup,
            "runtime_s": self.runtime_s,
            "failure_reason": self.failure_reason,
            "message": self.message,
            "mismatch": mismatch,
        }

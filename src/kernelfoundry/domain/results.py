"""What the evolver keeps of a run: its settings and each candidate's evaluation result, as plain data.

The codec (kernelfoundry.codec) decodes them from the wire (an `EvaluationFinished` event, a stored
`EvaluationRecord`, a `RunConfig`); the evolver's working state holds these, never protobuf messages. From
a result the evolver derives what the engine ranks (`info()`, an EvaluationInfo) and what the run's
speedup is computed from (`measurement()`, kernelfoundry.domain.speedup).

This module must never perform I/O, read a clock or import transport.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.domain.evaluation import EvaluationInfo, Mismatch
from kernelfoundry.domain.speedup import Measurement

COMPILE_ERROR = "compile_error"
BUILD_LOG_TAIL = 4000  # characters of a failed build's log kept as the failure's message


@dataclass(frozen=True)
class RunConfig:
    """A run's settings as submitted (after the deployment's defaults were applied)."""

    hardware: str
    generator: str = ""
    iterations: int = 0
    population: int = 0
    islands: int = 0
    sweeps: bool = False
    seed: int = 0

    @property
    def backend(self) -> str:
        """The backend part of the hardware token: `cpu` of `cpu.x86_64`, `cuda` of `cuda.h200`."""
        return self.hardware.split(".", 1)[0]


@dataclass(frozen=True)
class ShapeTiming:
    """One input shape's median times, in milliseconds (0: not measured)."""

    shape: str
    runtime_ms: float = 0.0
    baseline_ms: float = 0.0
    compile_baseline_ms: float = 0.0


@dataclass(frozen=True)
class EvaluationResult:
    """How a candidate's evaluation went, with its timings in milliseconds (0: not measured)."""

    candidate_id: str
    correct: bool
    reason: str = ""  # a failure reason code; empty when correct
    message: str = ""
    runtime_ms: float = 0.0
    runtime_spread_ms: float = 0.0
    baseline_ms: float = 0.0
    compile_baseline_ms: float = 0.0
    speedup: float = 0.0  # eager over kernel time of this evaluation alone; 0 when it failed
    max_abs_error: float = 0.0
    shapes: tuple[ShapeTiming, ...] = ()
    screened: bool = False  # the times come from a screening measurement only (not timed in full)
    roofline_fraction: float = 0.0  # the roofline floor over the kernel's time; 0: not measured
    bound: str = ""  # what bounds the floor: "memory" or "compute"

    def measurement(self) -> Measurement:
        """The timings as the speedup definition reads them."""
        return Measurement(
            candidate_id=self.candidate_id,
            correct=self.correct,
            runtime_ms=self.runtime_ms or None,
            runtime_spread_ms=self.runtime_spread_ms or None,
            baseline_ms=self.baseline_ms or None,
            compile_baseline_ms=self.compile_baseline_ms or None,
        )

    def info(self) -> EvaluationInfo:
        """The result as the engine ranks it (the evolver replaces the speedup by the run's pooled one)."""
        return EvaluationInfo(
            candidate_id=self.candidate_id,
            correct=self.correct,
            speedup=self.speedup if self.correct and self.speedup > 0 else None,
            runtime_s=self.runtime_ms / 1000.0 if self.runtime_ms else None,
            failure_reason=self.reason or None,
            message=self.message,
            mismatch=Mismatch(abs_error=self.max_abs_error)
            if not self.correct and self.max_abs_error
            else None,
        )


def build_failure(candidate_id: str, reason: str, log: str) -> EvaluationInfo:
    """A candidate whose build failed, as the engine ranks it: failed, with the log's tail as message."""
    return EvaluationInfo(
        candidate_id=candidate_id,
        correct=False,
        failure_reason=reason or COMPILE_ERROR,
        message=log[-BUILD_LOG_TAIL:],
    )

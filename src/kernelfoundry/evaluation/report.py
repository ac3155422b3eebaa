"""The outcome of one evaluation, JSON-able: correctness, errors, timings, speedups, counters.

Pure data. A failed evaluation never carries a speedup (the constructors guarantee it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class ShapeReport:
    """Timings of one shape variant, in milliseconds (None: not measured)."""

    shape: str
    runtime_ms: float | None = None
    runtime_spread_ms: float | None = None
    baseline_ms: float | None = None
    compile_baseline_ms: float | None = None
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    baseline_age_s: float | None = None  # 0: timed during this evaluation; else reused, this old
    floor_ms: float | None = None  # the roofline floor of this shape on the judge's device (roofline.py)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShapeReport:
        return cls(**{f.name: data.get(f.name) for f in fields(cls) if f.name in data})


@dataclass
class EvaluationReport:
    """What the executor publishes. `reason` is None exactly when the candidate is correct.

    runtime_ms is the median over timed runs (summed over shapes when a task has several), and
    runtime_spread_ms the interquartile range (p75 - p25) of the same runs. Counters: trials (correctness
    calls), timed_runs, warmup_runs, input_sets, kernel_launches. phases_ms: the judge's wall time per
    step (runner_start, inputs, trials (its steps also shown apart: trial_inputs, trial_reference,
    trial_eager, trial_proxy, trial_first_call, trial_call, trial_check, trial_keep), next_runner_start,
    trials_wait and timing_wait (a timing lock's waits for other work, outside the other steps),
    timed_runs (its refresh and checks also shown apart), cross_check, baselines; fetch: a staged device's
    outputs brought to the judge, inside trials and checks; idle_window and process_watch: the judge's
    watch of the runner between commands (the wait and CPU-time reads after timed replies, the scan for
    processes it started), inside the steps); the worker's duration_s adds the judge round trip and any
    judge start.
    """

    compiled: bool
    correct: bool
    reason: str | None = None
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    precision: str = ""
    tolerance_atol: float | None = None
    tolerance_rtol: float | None = None
    runtime_ms: float | None = None
    runtime_spread_ms: float | None = None
    baseline_ms: float | None = None
    baseline_age_s: float | None = None  # the oldest shape's baselines (0: all timed in this evaluation)
    compile_baseline_ms: float | None = None
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    per_shape: list[ShapeReport] = field(default_factory=list)
    device: str = ""
    device_name: str = ""
    failed_trial: dict[str, Any] | None = None
    counters: dict[str, int] = field(default_factory=dict)
    screened: bool = False  # runtime from the screening measurement only (screening.py)
    floor_ms: float | None = None  # the roofline floor, summed over shapes (roofline.py)
    roofline_fraction: float | None = None  # floor_ms / runtime_ms: 1.0 is the floor
    bound: str = ""  # "memory" or "compute": which term of the floor is the larger
    phases_ms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.correct:
            self.speedup = None
            self.speedup_vs_compile = None
            for shape in self.per_shape:
                shape.speedup = None
                shape.speedup_vs_compile = None

    @classmethod
    def failure(cls, reason: str, message: str, *, compiled: bool = True, **extra: Any) -> EvaluationReport:
        return cls(compiled=compiled, correct=False, reason=reason, message=message, **extra)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvaluationReport:
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["per_shape"] = [ShapeReport.from_dict(s) for s in data.get("per_shape", [])]
        return cls(**values)

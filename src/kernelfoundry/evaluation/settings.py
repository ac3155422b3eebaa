"""What an evaluation is asked to do: the request (task, kernel, artifact, device) and its settings.

Pure data (a request crosses into the judge process as JSON: wire.py). Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.tasks.model import Task, Tolerance

MIN_CORRECTNESS_TRIALS = 5
MIN_INPUT_SETS = 3
MIN_CUDA_TIMED_RUNS = 100


@dataclass(frozen=True)
class EvaluationSettings:
    """How hard to check and how long to time.

    `timed_runs=None` means the backend's default (100 on CUDA, 30 on CPU). `cpu_threads=None` means
    every core the process may use. `measure_torch_compile=None` means on for CUDA, off for CPU (CPU
    torch.compile needs a C++ compiler and takes tens of seconds). `tolerance` overrides both the
    task's tolerance and the dtype policy. `timing_lock_dir` names the folder of a host-wide lock
    (kernelfoundry.stack.quiet_host) that keeps builds off the cores while the runs are timed.
    `baseline_max_age_s=None` means the backend's reuse of baselines (CUDA: timed again once older
    than 300 s; CPU: 0, timed beside every candidate, since a shared host's load drifts in seconds).
    `screen_above_ms` > 0 screens the candidate first (kernelfoundry.evaluation.screening).
    """

    correctness_trials: int = MIN_CORRECTNESS_TRIALS
    warmup_runs: int = 5
    timed_runs: int | None = None
    input_sets: int = MIN_INPUT_SETS
    flush_cache: bool = True
    deadline_s: float = 300.0
    cpu_threads: int | None = None
    measure_torch_compile: bool | None = None
    timing_lock_dir: str = ""
    measure_baselines: bool = True
    tolerance: Tolerance | None = None
    baseline_max_age_s: float | None = None
    screen_above_ms: float = 0.0  # screening.py: the kernel time to come near; 0: full protocol only
    screen_margin: float | None = None  # None: the backend's (CUDA 0.3, CPU 1.0)
    # checked timed calls first compared with the model in its own dtype (TF32 off), the float64
    # reference computed only when that cannot decide (comparison.passes_by_proxy)
    proxy_checks: bool = True
    # staged devices: the judge lends the runner device memory for the outputs (device_share.py), so a
    # fetch is a copy inside the device instead of two over the host link; off, or where the device
    # cannot lend, outputs come through page-locked host memory
    lend_outputs: bool = True

    def __post_init__(self) -> None:
        if self.correctness_trials < MIN_CORRECTNESS_TRIALS:
            raise ValueError(f"correctness_trials must be >= {MIN_CORRECTNESS_TRIALS}")
        if self.input_sets < MIN_INPUT_SETS:
            raise ValueError(f"input_sets must be >= {MIN_INPUT_SETS}")
        if self.timed_runs is not None and self.timed_runs < 1:
            raise ValueError("timed_runs must be >= 1")
        if self.warmup_runs < 0 or self.deadline_s <= 0:
            raise ValueError("warmup_runs must be >= 0 and deadline_s > 0")
        if self.baseline_max_age_s is not None and self.baseline_max_age_s < 0:
            raise ValueError("baseline_max_age_s must be >= 0")
        if self.screen_above_ms < 0 or (self.screen_margin is not None and self.screen_margin < 0):
            raise ValueError("screen_above_ms and screen_margin must be >= 0")

    def runs_for(self, backend: str) -> int:
        if self.timed_runs is not None:
            return self.timed_runs
        from kernelfoundry.evaluation.backends import backend_named

        return backend_named(backend).default_timed_runs

    def compile_baseline_for(self, backend: str) -> bool:
        if self.measure_torch_compile is not None:
            return self.measure_torch_compile
        from kernelfoundry.evaluation.backends import backend_named

        return backend_named(backend).compile_baseline_by_default

    def baseline_reuse_for(self, backend: str) -> float:
        if self.baseline_max_age_s is not None:
            return self.baseline_max_age_s
        from kernelfoundry.evaluation.backends import backend_named

        return backend_named(backend).baseline_reuse_s

    def screen_margin_for(self, backend: str) -> float:
        if self.screen_margin is not None:
            return self.screen_margin
        from kernelfoundry.evaluation.backends import backend_named

        return backend_named(backend).screen_margin

    def with_deadline(self, deadline_s: float) -> EvaluationSettings:
        return replace(self, deadline_s=deadline_s)


@dataclass(frozen=True)
class EvaluationRequest:
    """One candidate to evaluate on one device ("cpu" or "cuda:N")."""

    task: Task
    kernel: KernelSource
    artifact: Path
    device: str = "cpu"
    settings: EvaluationSettings = field(default_factory=EvaluationSettings)

    @property
    def backend(self) -> str:
        from kernelfoundry.evaluation.backends import backend_for_device

        return backend_for_device(self.device).name

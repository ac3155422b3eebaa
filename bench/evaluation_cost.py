"""Evaluation cost per candidate: wall time of one evaluation through the product's worker, and where it goes.

Builds honest candidates with the real toolchain and evaluates each REPEATS times through one warm
EvaluationWorker (the executor's path) with the default EvaluationSettings, then once through
`evaluate_once` (a fresh worker: the `kernelfoundry evaluate` path). Prints a table of median
`duration_s` per candidate, then the median of each phase of the judge's own account (`phases_ms`:
runner start, inputs, trials, timed runs with their refresh and checks, cross-check, baselines), and
on CUDA the fraction of the evaluations' wall time the GPU was busy (nvidia-smi sampled every 50 ms).
Writes it as JSON:

    .venv/bin/python bench/evaluation_cost.py --out bench/results/evaluation_cost.json [--label after]
    python3 bench/evaluation_cost.py --backend cuda --task level1_gelu level2_elementwise_chain \
        --out bench/results/evaluation_cost_cuda.json

`--task NAME ...` takes suite tasks (tasks/NAME.py) with the proposer's first seed that builds, on
either backend, instead of the fixed CPU cases.

`--case N` runs one case and appends its row to the label's list (to alternate two source trees case
by case on a busy host, where load drifts over minutes).

Fixed CPU cases: the fused elementwise chain of tasks/level2_elementwise_chain.py at its CPU size (512 x 8192
float32), the small fused multiply-add fixture (4096 floats: fixed costs dominate), and the same with
Python glue. Never checks correctness beyond asserting each candidate is judged correct.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

sys.path.insert(0, str(ROOT / "bench"))

from gpu_busy import GpuBusy  # noqa: E402

from kernelfoundry.domain.kernel import KernelSource  # noqa: E402
from kernelfoundry.evaluation import (  # noqa: E402
    EvaluationRequest,
    EvaluationSettings,
    EvaluationWorker,
    evaluate_once,
)
from kernelfoundry.tasks.loading import load_task  # noqa: E402
from kernelfoundry.tasks.shapes import shapes_for_backend  # noqa: E402
from kernelfoundry.toolchains import BuildTarget, build  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "kernels"
REPEATS = 5

CHAIN_KERNEL = r"""
#include <math.h>
#include <stdint.h>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 1 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* x = KF_DATA(const float, &in[0]);
  const float scale = 1.7f, bias = 0.1f;  // the task's init inputs
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * scale + bias;
    v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    y[i] = tanhf(v) * 0.5f + x[i];
  }
  return KF_OK;
}
"""


def cases() -> list[tuple[str, Any, KernelSource]]:
    chain = shapes_for_backend(load_task(ROOT / "tasks" / "level2_elementwise_chain.py"), "cpu")
    fma = load_task(FIXTURES / "tasks" / "fused_mul_add.py")
    fma_code = (FIXTURES / "cpu" / "good_fma.cpp").read_text()
    glue = (FIXTURES / "glue" / "good_fma.py").read_text()
    return [
        ("elementwise_chain 512x8192", chain, KernelSource("cpp", CHAIN_KERNEL)),
        ("fused_mul_add 4096", fma, KernelSource("cpp", fma_code)),
        ("fused_mul_add 4096 + glue", fma, KernelSource("cpp", fma_code, glue=glue)),
    ]


def suite_cases(names: list[str], backend: str, work: Path) -> list[tuple[str, Any, KernelSource, Path]]:
    """Suite tasks with the proposer's first seed that builds (as bench/evaluator_ab.py picks it)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from evaluator_ab import first_built_seed

    chosen = []
    for name in names:
        task = shapes_for_backend(load_task(ROOT / "tasks" / f"{name}.py"), backend)
        seed = first_built_seed(task, backend, work / name)
        if seed is None:
            print(f"{name}: no seed of the proposer built; left out", file=sys.stderr)
            continue
        chosen.append((name, task, seed[0], seed[1]))
    return chosen


def fixed_cases(work: Path) -> list[tuple[str, Any, KernelSource, Path]]:
    chosen = []
    for name, task, source in cases():
        built = build(source, BuildTarget("cpu", "x86_64"), None, out_dir=work / name[:8])
        assert built.ok and built.artifact is not None, built.log
        chosen.append((name, task, source, built.artifact))
    return chosen


def measure(
    worker: EvaluationWorker, name: str, request: EvaluationRequest, repeats: int, device: str
) -> dict[str, Any]:
    worker.evaluate(request)  # warm: the first evaluation of a process imports more
    reports = []
    busy = GpuBusy(device) if device.startswith("cuda") else None
    with busy if busy is not None else contextlib.nullcontext():
        for _ in range(repeats):
            report = worker.evaluate(request)
            assert report.correct, f"{name}: {report.reason}: {report.message}"
            reports.append(report)
    phases = sorted({phase for r in reports for phase in r.phases_ms})
    started = time.monotonic()
    once = evaluate_once(request)
    cold_s = time.monotonic() - started
    assert once.correct, f"{name}: {once.reason}: {once.message}"
    durations = [r.duration_s for r in reports]
    return {
        "case": name,
        "warm_median_s": statistics.median(durations),
        "warm_min_s": min(durations),
        "warm_max_s": max(durations),
        "evaluate_once_s": cold_s,
        "runtime_ms": statistics.median(r.runtime_ms or 0.0 for r in reports),
        "baseline_ms": reports[-1].baseline_ms,
        "phases_ms": {p: statistics.median(r.phases_ms.get(p, 0.0) for r in reports) for p in phases},
        "gpu_busy_fraction": busy.busy_fraction if busy is not None else None,
    }


def print_table(label: str, repeats: int, rows: list[dict[str, Any]]) -> None:
    print(f"evaluation cost per candidate ({label}; {repeats} warm evaluations each)")
    print(
        f"{'case':32} {'warm median s':>14} {'min':>7} {'max':>7} {'evaluate_once s':>16} {'runtime ms':>11}"
        f" {'GPU busy':>9}"
    )
    for row in rows:
        busy = row.get("gpu_busy_fraction")
        print(
            f"{row['case']:32} {row['warm_median_s']:14.3f} {row['warm_min_s']:7.3f} "
            f"{row['warm_max_s']:7.3f} {row['evaluate_once_s']:16.2f} {row['runtime_ms']:11.4f}"
            f" {'-' if busy is None else f'{busy:.0%}':>9}"
        )
    phases = sorted({p for row in rows for p in row.get("phases_ms", {})})
    if phases:
        print(
            "\nmedian judge time per phase, ms (refresh and checks are part of timed_runs; idle_window and"
            " process_watch, the judge's watch of the runner between commands, of the steps they fall in)"
        )
        print(f"{'case':32} " + " ".join(f"{p[:12]:>12}" for p in phases))
        for row in rows:
            print(f"{row['case']:32} " + " ".join(f"{row['phases_ms'].get(p, 0.0):12.1f}" for p in phases))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "evaluation_cost.json")
    parser.add_argument("--label", default="current")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--case", type=int, default=None, help="run only this fixed case (0-based)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--task", nargs="*", default=None, help="suite tasks (tasks/NAME.py) instead")
    args = parser.parse_args()
    device = "cuda:0" if args.backend == "cuda" else "cpu"
    threads = 2 if args.backend == "cpu" else None
    settings = EvaluationSettings(cpu_threads=threads)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="kf-eval-cost-") as work,
        EvaluationWorker(device, cpu_threads=threads) as worker,
    ):
        if args.task:
            chosen = suite_cases(args.task, args.backend, Path(work))
        else:
            if args.backend != "cpu":
                parser.error("the fixed cases are CPU kernels: name suite tasks with --task for CUDA")
            chosen = fixed_cases(Path(work))
            chosen = chosen if args.case is None else [chosen[args.case]]
        for name, task, source, artifact in chosen:
            request = EvaluationRequest(task, source, artifact, device, settings)
            rows.append(measure(worker, name, request, args.repeats, device))
    print_table(args.label, args.repeats, rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    existing: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    existing[args.label] = [*existing.get(args.label, []), *rows] if args.case is not None else rows
    existing.setdefault("commits", {})[args.label] = measured_commit()
    args.out.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def measured_commit() -> str:
    import os

    if os.environ.get("KF_BENCH_COMMIT"):
        return os.environ["KF_BENCH_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src", "services"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())

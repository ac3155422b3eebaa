"""Evaluation cost per candidate on the CPU: wall time of one evaluation through the product's worker.

Builds three honest CPU candidates with the real g++ toolchain and evaluates each REPEATS times through
one warm EvaluationWorker (the executor's path) with the default EvaluationSettings, then once through
`evaluate_once` (a fresh worker: the `kernelfoundry evaluate` path). Prints a table of median
`duration_s` per candidate and writes it as JSON:

    .venv/bin/python bench/evaluation_cost.py --out bench/results/evaluation_cost.json [--label after]

`--case N` runs one case and appends its row to the label's list (to alternate two source trees case
by case on a busy host, where load drifts over minutes).

Cases: the fused elementwise chain of tasks/level2_elementwise_chain.py at its CPU size (512 x 8192
float32), the small fused multiply-add fixture (4096 floats: fixed costs dominate), and the same with
Python glue. Never checks correctness beyond asserting each candidate is judged correct.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "evaluation_cost.json")
    parser.add_argument("--label", default="current")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--case", type=int, default=None, help="run only this case (0-based)")
    args = parser.parse_args()
    settings = EvaluationSettings(cpu_threads=2)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="kf-eval-cost-") as work,
        EvaluationWorker("cpu", cpu_threads=2) as worker,
    ):
        chosen = cases() if args.case is None else [cases()[args.case]]
        for name, task, source in chosen:
            built = build(source, BuildTarget("cpu", "x86_64"), None, out_dir=Path(work) / name[:8])
            assert built.ok and built.artifact is not None, built.log
            request = EvaluationRequest(task, source, built.artifact, "cpu", settings)
            worker.evaluate(request)  # warm: the first evaluation of a process imports more
            durations, runtimes = [], []
            for _ in range(args.repeats):
                report = worker.evaluate(request)
                assert report.correct, f"{name}: {report.reason}: {report.message}"
                durations.append(report.duration_s)
                runtimes.append(report.runtime_ms or 0.0)
            started = time.monotonic()
            once = evaluate_once(request)
            cold_s = time.monotonic() - started
            assert once.correct, f"{name}: {once.reason}: {once.message}"
            rows.append(
                {
                    "case": name,
                    "warm_median_s": statistics.median(durations),
                    "warm_min_s": min(durations),
                    "warm_max_s": max(durations),
                    "evaluate_once_s": cold_s,
                    "runtime_ms": statistics.median(runtimes),
                    "baseline_ms": report.baseline_ms,
                }
            )
    print(f"evaluation cost per candidate ({args.label}; {args.repeats} warm evaluations each)")
    print(
        f"{'case':32} {'warm median s':>14} {'min':>7} {'max':>7} {'evaluate_once s':>16} {'runtime ms':>11}"
    )
    for row in rows:
        print(
            f"{row['case']:32} {row['warm_median_s']:14.3f} {row['warm_min_s']:7.3f} "
            f"{row['warm_max_s']:7.3f} {row['evaluate_once_s']:16.2f} {row['runtime_ms']:11.4f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    existing: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    existing[args.label] = [*existing.get(args.label, []), *rows] if args.case is not None else rows
    args.out.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

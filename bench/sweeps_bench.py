"""Does sweeping tunables find better kernels for the same budget?

Runs the whole system on one machine (embedded JetStream, the five services as processes) on the CPU:
the same task, seed and budget twice, once with parameter sweeps and once without, submitted together so
both runs share the machine's conditions. The budget is either generations (`--budget iterations`: the
same number of generator requests, the costly part with an LLM; sweep points are extra compile/execute
jobs in parallel) or evaluations (`--budget evaluations`: sweep points take slots from mutations).
Then both best kernels are re-timed side by side in one evaluation process (alternating, several rounds)
so the final ratio is not an artefact of when each was timed.

    .venv/bin/python bench/sweeps_bench.py [--task tasks/level1_softmax.py] [--budget iterations --amount 4]

Prints a table and writes bench/results/sweeps_bench.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.codec import kernel_from_proto
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, EvaluationWorker
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import Budget, Task
from kernelfoundry.tasks.shapes import shapes_for_backend
from kernelfoundry.toolchains import BuildCache, BuildTarget, build
from kernelfoundry.v1 import run_pb2

ROOT = Path(__file__).resolve().parents[1]


def run_pair(
    task: Task, budget: str, amount: int, population: int, seed: int, state: Path
) -> dict[str, run_pb2.RunProgress]:
    stack = Stack(state_dir=state, hardware=[cpu_target()], extra_env={"KF_LOG_FORMAT": "json"})
    stack.start()
    client = KernelFoundryClient(stack.grpc_address)
    try:
        iterations = amount if budget == "iterations" else 1000
        evaluations = amount if budget == "evaluations" else None
        budgeted = replace(task, budget=Budget(iterations=iterations, evaluations=evaluations))
        ids = {}
        for label, sweeps in (("no sweeps", False), ("sweeps", True)):
            config = run_pb2.RunConfig(
                hardware=cpu_target().execute,
                iterations=iterations,
                population=population,
                sweeps=sweeps,
                seed=seed,
            )
            ids[label] = client.submit(budgeted, config)
        results = {}
        for label, run_id in ids.items():
            while (progress := client.get_run(run_id)).status == run_pb2.RUN_STATUS_RUNNING:
                time.sleep(1.0)
            results[label] = progress
        return results
    finally:
        client.close()
        stack.stop()


def retime(task: Task, results: dict[str, run_pb2.RunProgress], rounds: int) -> dict[str, list[float]]:
    """Median runtime of each run's best kernel, re-measured alternately in one evaluation process."""
    target = BuildTarget.parse(cpu_target().build)
    worker = EvaluationWorker("cpu")
    times: dict[str, list[float]] = {label: [] for label in results}
    with tempfile.TemporaryDirectory() as tmp:
        cache = BuildCache(Path(tmp))
        artifacts = {}
        for label, progress in results.items():
            if not progress.best.candidate_id:
                continue
            source = kernel_from_proto(progress.best.source)
            built = build(source, target, cache)
            assert built.ok and built.artifact is not None, built.log
            artifacts[label] = (source, built.artifact)
        try:
            for _ in range(rounds):
                for label, (source, artifact) in artifacts.items():
                    report = worker.evaluate(
                        EvaluationRequest(
                            task=task,
                            kernel=source,
                            artifact=artifact,
                            device="cpu",
                            settings=EvaluationSettings(),
                        )
                    )
                    if report.correct and report.runtime_ms:
                        times[label].append(report.runtime_ms)
        finally:
            worker.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=ROOT / "tasks" / "level1_softmax.py")
    parser.add_argument("--budget", choices=("iterations", "evaluations"), default="iterations")
    parser.add_argument("--amount", type=int, default=4, help="generations or evaluations per run")
    parser.add_argument("--population", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sweeps_bench.json")
    args = parser.parse_args()
    task = shapes_for_backend(load_task(args.task), "cpu")
    with tempfile.TemporaryDirectory(prefix="kf-sweeps-bench-") as tmp:
        results = run_pair(task, args.budget, args.amount, args.population, args.seed, Path(tmp))
    times = retime(task, results, args.rounds)
    rows = []
    for label, progress in results.items():
        median = statistics.median(times[label]) if times[label] else None
        rows.append(
            {
                "variant": label,
                "run_id": progress.run_id,
                "status": run_pb2.RunStatus.Name(progress.status),
                "evaluations": progress.candidates_correct + progress.candidates_failed,
                "correct": progress.candidates_correct,
                "best_candidate": progress.best.candidate_id,
                "best_params": dict(progress.best.source.params),
                "best_speedup_in_run": round(progress.best_speedup, 3),
                "best_runtime_ms_in_run": progress.best.runtime_ms,
                "eager_ms_in_run": progress.best.baseline_ms,
                "retimed_median_ms": median,
                "retimed_runs": times[label],
            }
        )
    by_label = {r["variant"]: r for r in rows}
    a, b = by_label.get("no sweeps"), by_label.get("sweeps")
    ratio = None
    if a and b and a["retimed_median_ms"] and b["retimed_median_ms"]:
        ratio = a["retimed_median_ms"] / b["retimed_median_ms"]
    table = Table(title=f"Parameter sweeps on {task.name} (CPU, {args.amount} {args.budget} each)")
    for column in (
        "variant",
        "evaluations",
        "correct",
        "best speedup (in run)",
        "re-timed median ms",
        "best params",
    ):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["variant"],
            str(r["evaluations"]),
            str(r["correct"]),
            f"{r['best_speedup_in_run']:.2f}x",
            f"{r['retimed_median_ms']:.4f}" if r["retimed_median_ms"] else "-",
            json.dumps(r["best_params"]),
        )
    console = Console()
    console.print(table)
    if ratio is not None:
        console.print(
            f"best kernel with sweeps is {ratio:.2f}x the speed of the best without (re-timed side by side)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "task": task.name,
                "shapes": [{"name": s.name, "overrides": dict(s.overrides)} for s in task.shapes],
                "budget": {"kind": args.budget, "amount": args.amount},
                "population": args.population,
                "seed": args.seed,
                "rows": rows,
                "sweeps_speedup_over_no_sweeps": ratio,
                "machine": "2-core CPU, shared with the services during the runs",
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()

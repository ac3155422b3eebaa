"""The evaluator of two revisions side by side: the same built kernels, judged and timed by each in turn.

Answers two questions about an evaluator change with one run on one machine: do honest kernels keep their
speedups (the ratio of the new figure to the base figure per task, which should sit at 1 within noise), and
what does an evaluation cost now (wall time per evaluation, new over base).

For every task (default: the suite in tasks/), the working tree's proposer writes its seeds, the first that
builds is built once, and both evaluators evaluate that artifact alternately, `--rounds` times each: the
working tree's `EvaluationWorker` in this process, and the base revision's `EvaluationWorker` in a child
process whose `sys.path` starts at the base revision's `src` (from `--base-src`, or exported from git with
`--base`). Both workers stay warm across tasks, as the executor's does. Prints a table and writes JSON:

    .venv/bin/python bench/evaluator_ab.py --backend cpu --base e115c86 --rounds 3 \
        --out bench/results/evaluator_ab_cpu.json

The base child speaks JSON lines on its own stdin/stdout; it only ever evaluates kernels this script built.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernelfoundry.domain.kernel import KernelSource  # noqa: E402
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, EvaluationWorker  # noqa: E402
from kernelfoundry.generators.base import GenerationRequest  # noqa: E402
from kernelfoundry.generators.heuristic import HeuristicGenerator  # noqa: E402
from kernelfoundry.tasks.loading import load_task  # noqa: E402
from kernelfoundry.tasks.shapes import shapes_for_backend  # noqa: E402
from kernelfoundry.toolchains import BuildTarget, build  # noqa: E402

SEEDS_TRIED = 6

_BASE_WORKER = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, EvaluationWorker
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.shapes import shapes_for_backend
device, threads = sys.argv[2], (int(sys.argv[3]) or None)
out = sys.stdout
sys.stdout = sys.stderr
with EvaluationWorker(device, cpu_threads=threads) as worker:
    for line in sys.stdin:
        ask = json.loads(line)
        task = shapes_for_backend(load_task(Path(ask["task"])), ask["backend"])
        source = KernelSource(ask["language"], ask["code"], glue=ask["glue"], entry_point=ask["entry_point"])
        settings = EvaluationSettings(cpu_threads=threads)
        report = worker.evaluate(EvaluationRequest(task, source, Path(ask["artifact"]), device, settings))
        out.write(json.dumps(report.to_dict()) + "\n")
        out.flush()
"""


def export_base(revision: str, into: Path) -> Path:
    """The base revision's `src` folder, exported from git (no worktree, nothing generated needed)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


class BaseEvaluator:
    """The base revision's worker in a child process, asked one evaluation at a time."""

    def __init__(self, base_src: Path, device: str, threads: int | None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BASE_WORKER, str(base_src), device, str(threads or 0)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def evaluate(self, ask: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(ask) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the base evaluator exited")
        report: dict[str, Any] = json.loads(line)
        return report

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def first_built_seed(task: Any, backend: str, work: Path) -> tuple[KernelSource, Path] | None:
    arch = "x86_64" if backend == "cpu" else "sm90"
    request = GenerationRequest("ab", task, backend, count=SEEDS_TRIED)
    for index, candidate in enumerate(HeuristicGenerator().generate_sync(request).candidates):
        built = build(candidate.source, BuildTarget(backend, arch), None, out_dir=work / f"seed{index}")  # type: ignore[arg-type]
        if built.ok and built.artifact is not None:
            return candidate.source, built.artifact
    return None


def figures(report: dict[str, Any]) -> dict[str, Any]:
    kept = {
        key: report.get(key)
        for key in ("correct", "reason", "runtime_ms", "baseline_ms", "speedup", "duration_s")
    }
    if report.get("phases_ms"):  # where the judge's time went (this tree's evaluator only)
        kept["phases_ms"] = report["phases_ms"]
    if report.get("reason"):
        kept["message"] = str(report.get("message") or "")[:2000]
    return kept


def median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rows if row.get(key) is not None]
    return statistics.median(values) if values else None


def compare_task(
    path: Path, backend: str, device: str, threads: int | None, rounds: int, base: BaseEvaluator, work: Path
) -> dict[str, Any]:
    task = shapes_for_backend(load_task(path), backend)
    seed = first_built_seed(task, backend, work / path.stem)
    if seed is None:
        return {"task": path.stem, "error": "no seed built"}
    source, artifact = seed
    ask = {
        "task": str(path),
        "backend": backend,
        "language": source.language,
        "code": source.code,
        "glue": source.glue,
        "entry_point": source.entry_point,
        "artifact": str(artifact),
    }
    request = EvaluationRequest(task, source, artifact, device, EvaluationSettings(cpu_threads=threads))
    new_rows: list[dict[str, Any]] = []
    base_rows: list[dict[str, Any]] = []
    with EvaluationWorker(device, cpu_threads=threads) as worker:
        worker.evaluate(request)  # warm both before anything counts
        base.evaluate(ask)
        for _ in range(rounds):
            new_rows.append(figures(worker.evaluate(request).to_dict()))
            base_rows.append(figures(base.evaluate(ask)))
    row: dict[str, Any] = {"task": path.stem, "new": new_rows, "base": base_rows}
    for side, rows in (("new", new_rows), ("base", base_rows)):
        row[f"{side}_correct"] = all(r["correct"] for r in rows)
        for key in ("speedup", "runtime_ms", "baseline_ms", "duration_s"):
            row[f"{side}_{key}"] = median_of(rows, key)
    if row["new_speedup"] and row["base_speedup"]:
        row["speedup_ratio"] = row["new_speedup"] / row["base_speedup"]
    if row["new_duration_s"] and row["base_duration_s"]:
        row["cost_ratio"] = row["new_duration_s"] / row["base_duration_s"]
    return row


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


HEADER = ("task", "base x", "new x", "new/base", "base s", "new s", "cost")
COLUMNS = (
    ("base_speedup", "8.2f"),
    ("new_speedup", "8.2f"),
    ("speedup_ratio", "9.3f"),
    ("base_duration_s", "8.2f"),
    ("new_duration_s", "8.2f"),
    ("cost_ratio", "6.2f"),
)


def cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return format(value, fmt) if value is not None else "-"


def verdicts(row: dict[str, Any]) -> str:
    return " / ".join(f"{side} {'ok' if row[f'{side}_correct'] else 'FAIL'}" for side in ("base", "new"))


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["speedup_ratio"] for r in rows if "speedup_ratio" in r]
    return {
        "speedup_ratio_geomean": geomean(ratios),
        "speedup_ratio_min": min(ratios, default=None),
        "speedup_ratio_max": max(ratios, default=None),
        "cost_ratio_geomean": geomean([r.get("cost_ratio", 0) for r in rows]),
        "both_correct": sum(1 for r in rows if r.get("base_correct") and r.get("new_correct")),
        "tasks": len(rows),
    }


def print_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    widths = (40, 8, 8, 9, 8, 8, 6)
    print(
        " ".join(
            f"{name:{'<' if i == 0 else '>'}{w}}"
            for i, (name, w) in enumerate(zip(HEADER, widths, strict=True))
        )
    )
    for row in rows:
        if "error" in row:
            print(f"{row['task']:40} {row['error']}")
            continue
        cells = " ".join(f"{cell(row, key, fmt)}" for key, fmt in COLUMNS)
        print(f"{row['task']:40} {cells}  {verdicts(row)}")
    summary = summarise(rows)
    shown = {k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in summary.items()}
    print(
        f"summary: new/base speedup geomean {shown['speedup_ratio_geomean']}, range "
        f"{shown['speedup_ratio_min']}..{shown['speedup_ratio_max']}; evaluation cost new/base geomean "
        f"{shown['cost_ratio_geomean']}; both correct on {shown['both_correct']} of {shown['tasks']}"
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--device", default=None, help="default: cpu, or cuda:0")
    parser.add_argument("--base", default="e115c86", help="git revision of the base evaluator")
    parser.add_argument("--base-src", type=Path, default=None, help="folder of the base src")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    parser.add_argument("--only", nargs="*", default=None, help="task names (file stems) to run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "evaluator_ab.json")
    args = parser.parse_args()
    device = args.device or ("cpu" if args.backend == "cpu" else "cuda:0")
    threads = args.threads or None
    paths = sorted((ROOT / "tasks").glob("*.py"))
    if args.only:
        paths = [p for p in paths if p.stem in set(args.only)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kf-eval-ab-") as tmp:
        work = Path(tmp)
        base_src = args.base_src or export_base(args.base, work)
        base = BaseEvaluator(base_src.resolve(), device, threads)
        rows = []
        try:
            for path in paths:
                rows.append(compare_task(path, args.backend, device, threads, args.rounds, base, work))
                print(f"  {path.stem}: done ({time.monotonic() - started:.0f} s)", flush=True)
                write_results(args, device, rows, summarise(rows), started, partial=True)
        finally:
            base.close()
    summary = print_table(rows)
    write_results(args, device, rows, summary, started, partial=False)
    print(f"wrote {args.out}")
    return 0


def measured_commit() -> str:
    """KF_BENCH_COMMIT where the tree travelled without git (the device carry), else HEAD."""
    if os.environ.get("KF_BENCH_COMMIT"):
        return os.environ["KF_BENCH_COMMIT"]
    return (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )


def write_results(
    args: argparse.Namespace,
    device: str,
    rows: list[dict[str, Any]],
    summary: dict[str, Any],
    started: float,
    partial: bool,
) -> None:
    """Written after every task too, so that a run cut off by a time limit keeps what it measured."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "commit": measured_commit(),
        "base": str(args.base_src or args.base),
        "backend": args.backend,
        "device": device,
        "rounds": args.rounds,
        "partial": partial,
        "summary": summary,
        "rows": rows,
        "wall_s": time.monotonic() - started,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())

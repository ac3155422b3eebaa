"""Merge suite-benchmark results of several runs on the same device into one table.

Device time comes in short calls, so a suite is often measured in parts (and a task re-measured after a
change). Every row already holds its own figures (the best kernel with eager and torch.compile timed
beside it by the evaluator), so rows from different runs can stand in one table; each row keeps the run
it came from, that run's commit and its measured bandwidth and peak. A task in several inputs takes its
row from the last input that has it. Runs of different harnesses are never merged.

    python bench/merge_suite.py RUN1.json RUN2.json ... --out bench/results/suite_cuda

Writes <out>.json and <out>.txt (the table, the summary and the inputs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_bench import HEADER, row_line, summarise


def merge(runs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    harnesses = {run.get("harness") for _, run in runs}
    if len(harnesses) > 1:
        raise ValueError(f"runs of different harnesses cannot share a table: {sorted(map(str, harnesses))}")
    rows: dict[str, dict[str, Any]] = {}
    for label, run in runs:
        for row in run["rows"]:
            rows[row["task"]] = {
                **row,
                "run": label,
                "commit": run.get("commit"),
                "limits": run.get("limits", {}),
            }
    ordered = sorted(rows.values(), key=lambda r: (not r["task"].startswith("level2"), r["task"]))
    first = runs[-1][1]
    meta = {k: first.get(k) for k in ("backend", "device", "torch", "budget", "runs", "harness")}
    return {**meta, "inputs": [label for label, _ in runs], "summary": summarise(ordered), "rows": ordered}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="suite_<backend>.json files, oldest first")
    ap.add_argument("--label", action="append", default=[], help="a name per input (default: the path)")
    ap.add_argument("--out", type=Path, required=True, help="output path without suffix")
    args = ap.parse_args()
    labels = args.label + [str(p) for p in args.inputs[len(args.label) :]]
    merged = merge([(label, json.loads(p.read_text())) for label, p in zip(labels, args.inputs, strict=True)])
    lines = [
        f"device {merged['device']}, torch {merged['torch']}, harness {merged['harness']},"
        f" budget {merged['budget']}, runs {merged['runs']} (merged from {len(args.inputs)} runs)",
        HEADER,
        *(row_line(r) + f"  [{r['run']}]" for r in merged["rows"]),
        json.dumps(merged["summary"]),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(merged, indent=1, default=str))
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

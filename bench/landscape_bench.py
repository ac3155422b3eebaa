"""Landscape benchmark: guided vs uniform parent selection on synthetic fitness landscapes, and guided vs
grid parameter sweeps, all through the pure evolution engine (no compiler, no device).

    python bench/landscape_bench.py [--seeds 30] [--max-evaluations 1500] [--json PATH]

Prints a table and writes the figures as JSON. Every run is seeded, so the figures are reproducible.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from kernelfoundry.domain.engine import EngineConfig
from kernelfoundry.domain.kernel import Tunable
from kernelfoundry.domain.landscapes import Landscape, simulate
from kernelfoundry.domain.sweeps import GridSweep, SweepPlan, domain_size, plan_sweep


def selection_figures(seeds: int, max_evaluations: int) -> list[dict[str, Any]]:
    rows = []
    for landscape in (Landscape.ridge(), Landscape.rugged(), Landscape.deceptive()):
        for selection in ("guided", "uniform"):
            results = [
                simulate(landscape, EngineConfig(selection=selection), seed, max_evaluations)
                for seed in range(seeds)
            ]
            evaluations = [r.evaluations for r in results]
            rows.append(
                {
                    "landscape": landscape.name,
                    "selection": selection,
                    "seeds": seeds,
                    "reached_best": sum(r.reached_best for r in results),
                    "mean_evaluations_to_best": statistics.fmean(evaluations),
                    "median_evaluations_to_best": statistics.median(evaluations),
                    "mean_cells_filled": statistics.fmean(r.cells_filled for r in results),
                }
            )
    return rows


def _runtime(p: dict[str, Any]) -> float:
    bm, bn, st = p["BM"], p["BN"], p["STAGES"]
    return (
        1.0
        + ((bm - 136) / 100) ** 2
        + ((bn - 96) / 80) ** 2
        + 1.5 * (bm - 136) * (bn - 96) / 8000
        + 0.05 * (st - 4) ** 2
    )


def _run(plan: SweepPlan, batch: int) -> SweepPlan:
    while not plan.done:
        for params in plan.next_batch(batch):
            plan.report(params, _runtime(params))
    return plan


def sweep_figures() -> list[dict[str, Any]]:
    tunables = (
        Tunable("BM", tuple(range(8, 264, 8)), 64),
        Tunable("BN", tuple(range(8, 264, 8)), 64),
        Tunable("STAGES", (1, 2, 3, 4, 5, 6), 2),
    )
    rows = []
    for name, plan in (("grid", GridSweep(tunables)), ("guided", plan_sweep(tunables))):
        _run(plan, batch=16)
        found = plan.best()
        assert found is not None
        rows.append(
            {
                "sweep": name,
                "domain_size": domain_size(tunables),
                "evaluations": plan.evaluations,
                "best_runtime": found[1],
                "best_params": found[0],
            }
        )
    optimum = min(r["best_runtime"] for r in rows if r["sweep"] == "grid")
    for r in rows:
        r["gap_to_optimum"] = r["best_runtime"] / optimum - 1
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--max-evaluations", type=int, default=1500)
    parser.add_argument("--json", type=Path, default=Path("bench/results/landscape.json"))
    args = parser.parse_args()

    selection = selection_figures(args.seeds, args.max_evaluations)
    sweeps = sweep_figures()
    print(f"{'landscape':<10} {'selection':<8} {'reached':>8} {'mean evals':>11} {'median':>7} {'cells':>6}")
    for r in selection:
        print(
            f"{r['landscape']:<10} {r['selection']:<8} {r['reached_best']:>5}/{r['seeds']:<2} "
            f"{r['mean_evaluations_to_best']:>11.1f} {r['median_evaluations_to_best']:>7.1f} "
            f"{r['mean_cells_filled']:>6.1f}"
        )
    print()
    print(f"{'sweep':<7} {'domain':>7} {'evals':>6} {'best runtime':>13} {'gap':>7}")
    for r in sweeps:
        print(
            f"{r['sweep']:<7} {r['domain_size']:>7} {r['evaluations']:>6} {r['best_runtime']:>13.5f} "
            f"{100 * r['gap_to_optimum']:>6.2f}%"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"selection": selection, "sweeps": sweeps, "max_evaluations": args.max_evaluations}, indent=2
        )
    )
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()

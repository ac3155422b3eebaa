"""Chaos soak: rounds of concurrent runs through the embedded stack while the broker and every service are
SIGKILLed at random moments and restarted, each round checked against the invariants of tests/chaos.

    python bench/chaos_bench.py [--minutes 10] [--seed 1] [--runs 2] [--waves 2] [--iterations 2]
                                [--chaos-s 60] [--mean-gap-s 2.0] [--out bench/results/chaos_bench.json]

One stack (loopback only) lives through the whole soak, so its JetStream files, lineage and consumers carry
every earlier kill into the next round. A round submits `--waves` waves of `--runs` runs (the later ones
while processes die), plays a seeded kill plan for `--chaos-s` seconds (one process down at a time, for up
to a second; `--targets` names what to kill, a name given twice killed twice as often), restarts anything
down, waits for the runs to end and the queues to drain, and checks: every run final, every candidate once
in the lineage with its evaluation, no evaluation twice, the archive rebuilt from the lineage equal to the
evolver's, no work left in the queues, dead letters with their reason. Rounds start while time is left.
Prints a table and writes JSON with the commit it measured; exits 1 when any invariant broke.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from chaos.harness import TARGETS, ChaosReport, ChaosRound, ChaosSettings, start_stack  # noqa: E402
from provenance import machine, measured_commit  # noqa: E402


def round_row(index: int, report: ChaosReport) -> dict[str, Any]:
    return {
        "round": index,
        "seed": report.seed,
        "kills": len(report.kills),
        "kills_by_target": report.kills_by_target(),
        "runs": len(report.submitted),
        "runs_final": report.tally.runs_final,
        "runs_completed": report.tally.runs_completed,
        "candidates": report.tally.candidates,
        "candidates_lost": report.tally.candidates_lost,
        "duplicates": report.tally.duplicates,
        "dead_letters": report.dead_letters,
        "settled": report.settled,
        "violations": [f"{v.reason}: {v.message}" for v in report.violations],
        "wall_s": round(report.wall_s, 1),
        "statuses": report.statuses,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="start rounds while this much time is left"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=2, help="runs per submission wave")
    parser.add_argument(
        "--waves", type=int, default=2, help="submission waves per round, spread over the kills"
    )
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--chaos-s", type=float, default=60.0, help="kill phase of each round")
    parser.add_argument("--mean-gap-s", type=float, default=2.0, help="mean time between kills")
    parser.add_argument("--settle-s", type=float, default=300.0)
    parser.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help="what to kill, comma-separated; a name given twice is killed twice as often",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos_bench.json")
    args = parser.parse_args()

    started = time.monotonic()
    budget_s = args.minutes * 60.0
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kf-chaos-soak-") as state:
        stack = start_stack(Path(state) / "stack")
        try:
            index = 0
            while time.monotonic() - started < budget_s:
                settings = ChaosSettings(
                    seed=args.seed * 1000 + index,
                    runs=args.runs,
                    waves=args.waves,
                    iterations=args.iterations,
                    chaos_s=args.chaos_s,
                    mean_gap_s=args.mean_gap_s,
                    settle_s=args.settle_s,
                    targets=tuple(t.strip() for t in args.targets.split(",") if t.strip()),
                )
                report = ChaosRound(stack, settings, say=lambda line: print(f"  {line}", flush=True)).run()
                rows.append(round_row(index, report))
                print_row(rows[-1])
                index += 1
        finally:
            stack.stop()
    totals = summarise(rows)
    print_table(rows, totals)
    result = {
        "commit": measured_commit(),
        "machine": machine(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "wall_s": round(time.monotonic() - started, 1),
        "totals": totals,
        "rounds": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 1 if totals["violations"] else 0


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_target: Counter[str] = Counter()
    for row in rows:
        by_target.update(row["kills_by_target"])
    violations = sorted({v for row in rows for v in row["violations"]})
    return {
        "rounds": len(rows),
        "kills_survived": sum(r["kills"] for r in rows),
        "kills_by_target": dict(sorted(by_target.items())),
        "runs": sum(r["runs"] for r in rows),
        "runs_final": sum(r["runs_final"] for r in rows),
        "runs_completed": sum(r["runs_completed"] for r in rows),
        "candidates": sum(r["candidates"] for r in rows),
        "candidates_lost": sum(r["candidates_lost"] for r in rows),
        "duplicates": sum(r["duplicates"] for r in rows),
        "rounds_settled": sum(1 for r in rows if r["settled"]),
        "violations": violations,
    }


def print_row(row: dict[str, Any]) -> None:
    print(
        f"round {row['round']}: {row['kills']} kills {row['kills_by_target']}, "
        f"{row['runs_final']}/{row['runs']} runs final ({row['runs_completed']} completed), "
        f"{row['candidates']} candidates, {row['candidates_lost']} lost, {row['duplicates']} duplicated, "
        f"{len(row['violations'])} violations, {row['wall_s']} s",
        flush=True,
    )
    for violation in row["violations"]:
        print(f"    VIOLATION {violation}", flush=True)


def print_table(rows: list[dict[str, Any]], totals: dict[str, Any]) -> None:
    header = (
        "round",
        "kills",
        "runs final",
        "completed",
        "candidates",
        "lost",
        "duplicated",
        "violations",
        "s",
    )
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        cells = (
            r["round"],
            r["kills"],
            f"{r['runs_final']}/{r['runs']}",
            r["runs_completed"],
            r["candidates"],
            r["candidates_lost"],
            r["duplicates"],
            len(r["violations"]),
            r["wall_s"],
        )
        print("| " + " | ".join(str(c) for c in cells) + " |")
    cells = (
        "total",
        totals["kills_survived"],
        f"{totals['runs_final']}/{totals['runs']}",
        totals["runs_completed"],
        totals["candidates"],
        totals["candidates_lost"],
        totals["duplicates"],
        len(totals["violations"]),
        "",
    )
    print("| " + " | ".join(str(c) for c in cells) + " |")
    print(f"kills by target: {totals['kills_by_target']}")


if __name__ == "__main__":
    sys.exit(main())

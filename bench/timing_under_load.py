"""Honest CPU kernels under artificial load: how often the timing cross-check refuses them.

Starts `--load` busy Python loops (each spins one core forever, like `stress -c N`) beside whatever
else runs on the host, then evaluates the honest controls of the adversarial suite
(tests/fixtures/attacks: an OpenMP multiply-add, a serial 192^3 matmul of milliseconds per call, a
parameter, small outputs, a chatty unit and a glue candidate) `--rounds` times each through one warm
EvaluationWorker with the suite's settings (2 threads, 12 timed runs). Prints, per control, how many
evaluations were correct, how many were refused and why, and how many needed the cross-check's second
measurement (the `timing_remeasured` counter); writes the rows and every refusal's message as JSON:

    .venv/bin/python bench/timing_under_load.py --load 4 --rounds 10

The load average of the host before and after is recorded: the figures only mean something beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "adversarial"))
sys.path.insert(0, str(ROOT / "bench"))

from attacks import ATTACKS, FAST, Arsenal, read_attack  # noqa: E402
from provenance import measured_commit  # noqa: E402

from kernelfoundry.evaluation import EvaluationWorker  # noqa: E402
from kernelfoundry.toolchains import BuildCache  # noqa: E402

CONTROLS = (
    "cpu/control_fma.cpp",
    "cpu/control_matmul.cpp",
    "cpu/control_scale_params.cpp",
    "cpu/control_small_fma.cpp",
    "cpu/control_chatty.cpp",
    "glue/control_glue.py",
)


def spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=4, help="busy loops started beside the evaluations")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds per evaluation")
    parser.add_argument("--controls", nargs="*", default=list(CONTROLS), help="fixtures under attacks/")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "timing_under_load.json")
    args = parser.parse_args()
    settings = replace(FAST, deadline_s=args.deadline)
    loops = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.load)]
    load_before = os.getloadavg()
    for loop in loops:
        loop.start()
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="kf-timing-load-") as work:
            arsenal = Arsenal(BuildCache(Path(work)), {"@PORT@": "9", "@SERVICE_DIR@": work})
            with EvaluationWorker("cpu", cpu_threads=2) as worker:
                for name in args.controls:
                    control = read_attack(ATTACKS / name)
                    request = arsenal.request(control, settings)
                    verdicts: Counter[str] = Counter()
                    remeasured = 0
                    refusals: list[str] = []
                    for _ in range(args.rounds):
                        report = worker.evaluate(request)
                        verdicts[report.reason or "correct"] += 1
                        remeasured += int(report.counters.get("timing_remeasured", 0) > 0)
                        if not report.correct:
                            refusals.append(f"{report.reason}: {report.message}"[:600])
                    rows.append(
                        {
                            "control": name,
                            "evaluations": args.rounds,
                            "correct": verdicts["correct"],
                            "verdicts": dict(verdicts),
                            "remeasured": remeasured,
                            "refusals": refusals,
                        }
                    )
                    print(f"{name}: {dict(verdicts)}, second measurement in {remeasured}", flush=True)
    finally:
        for loop in loops:
            loop.terminate()
    load_after = os.getloadavg()
    measured = measured_commit()
    print(f"\nhonest controls under {args.load} busy loops ({args.rounds} evaluations each, {measured[:10]})")
    print(f"{'control':32} {'correct':>8} {'refused':>8} {'re-measured':>12}")
    for row in rows:
        refused = row["evaluations"] - row["correct"]
        print(f"{row['control']:32} {row['correct']:8d} {refused:8d} {row['remeasured']:12d}")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    result = {
        "commit": measured,
        "busy_loops": args.load,
        "cores": len(os.sched_getaffinity(0)),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "duration_s": time.monotonic() - started,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

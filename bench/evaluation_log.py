"""Where an executor's time went: its "evaluation finished" log lines, summed.

The executor logs one JSON line per judged candidate (services/executor/handlers.py): whether it was
correct, `busy_s` (the judge's wall time for it), the kernel's `runtime_ms`, the judge's `phases_ms`
(phases nest: the checks run inside the timed calls and the screen, a staged device's output `fetch`
inside the trials and the checks) and its `counters` (calls made). A
bench that ran the embedded stack reads them from `<state>/logs/executor-*.log` and reports, over its
wall time: evaluations, the executor's busy share, the judge's time per candidate, the phases, and the
candidates' own kernel time (runtime x the calls that ran the kernel: trials, warm-up, timed and screen
calls), a lower bound of the device time they used.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FINISHED = "evaluation finished"
KERNEL_CALLS = ("trials", "warmup_runs", "timed_runs", "screen_runs")


def finished_evaluations(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The "evaluation finished" events among log lines (other lines and non-JSON lines skipped)."""
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == FINISHED:
            events.append(event)
    return events


def executor_events(state_dir: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for path in sorted((state_dir / "logs").glob("executor-*.log")):
        with path.open(errors="replace") as f:
            events.extend(finished_evaluations(f))
    return events


def kernel_seconds(event: dict[str, Any]) -> float:
    """The candidate's kernel time in its evaluation: runtime x the calls that ran it (0 if unknown)."""
    runtime_ms = event.get("runtime_ms") or 0.0
    counters = event.get("counters") or {}
    return runtime_ms * sum(int(counters.get(name, 0)) for name in KERNEL_CALLS) / 1e3


def breakdown(events: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """Totals over the events of one bench invocation that lasted `wall_s` seconds."""
    if not events:
        return {"evaluations": 0}
    busy = [float(e.get("busy_s") or 0.0) for e in events]
    phases: dict[str, float] = {}
    for event in events:
        for name, ms in (event.get("phases_ms") or {}).items():
            phases[name] = phases.get(name, 0.0) + ms / 1e3
    kernel_s = sum(kernel_seconds(e) for e in events)
    return {
        "evaluations": len(events),
        "correct": sum(1 for e in events if e.get("correct")),
        "executor_busy_s": round(sum(busy), 1),
        "executor_busy_fraction": round(sum(busy) / wall_s, 3) if wall_s > 0 else None,
        "judge_s_median": round(statistics.median(busy), 3),
        "judge_s_max": round(max(busy), 3),
        "kernel_s": round(kernel_s, 2),
        "overhead_per_kernel_second": round((sum(busy) - kernel_s) / kernel_s, 1) if kernel_s > 0 else None,
        "phases_s": {k: round(v, 1) for k, v in sorted(phases.items(), key=lambda kv: -kv[1])},
    }

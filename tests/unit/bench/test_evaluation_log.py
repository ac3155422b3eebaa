"""The executor log's per-candidate lines, summed into where the time went."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from evaluation_log import breakdown, executor_events, finished_evaluations, kernel_seconds


def event(busy_s: float, runtime_ms: float | None, **phases_ms: float) -> dict[str, object]:
    return {
        "event": "evaluation finished",
        "correct": runtime_ms is not None,
        "busy_s": busy_s,
        "runtime_ms": runtime_ms,
        "phases_ms": phases_ms,
        "counters": {"trials": 5, "warmup_runs": 10, "timed_runs": 100, "screen_runs": 0, "input_sets": 3},
    }


def test_only_the_finished_lines_are_read_from_a_log_with_other_lines() -> None:
    lines = [
        json.dumps({"event": "evaluation started"}),
        "not json",
        json.dumps(event(2.0, 1.0, trials=500.0)),
        "[]",
    ]
    assert [e["busy_s"] for e in finished_evaluations(lines)] == [2.0]


def test_the_kernel_time_is_its_runtime_times_the_calls_that_ran_it() -> None:
    assert kernel_seconds(event(2.0, 2.0)) == pytest.approx(2.0 * 115 / 1e3)
    assert kernel_seconds(event(2.0, None)) == 0.0


def test_the_breakdown_sums_phases_busy_time_and_overhead_over_the_wall_time() -> None:
    events = [event(4.0, 10.0, timed_runs=3000.0, checks=1000.0), event(2.0, None, trials=1500.0)]
    summary = breakdown(events, wall_s=10.0)
    assert summary["evaluations"] == 2 and summary["correct"] == 1
    assert summary["executor_busy_s"] == 6.0 and summary["executor_busy_fraction"] == 0.6
    assert summary["judge_s_median"] == 3.0 and summary["judge_s_max"] == 4.0
    assert summary["kernel_s"] == 1.15
    assert summary["overhead_per_kernel_second"] == round((6.0 - 1.15) / 1.15, 1)
    assert list(summary["phases_s"]) == ["timed_runs", "trials", "checks"]
    assert breakdown([], 10.0) == {"evaluations": 0}


def test_every_executor_log_of_a_stack_state_folder_is_read(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "executor-cuda.h200-0.log").write_text(json.dumps(event(1.0, 1.0)) + "\n")
    (logs / "executor-cpu.x86_64.log").write_text(json.dumps(event(3.0, 1.0)) + "\n")
    (logs / "evolver.log").write_text(json.dumps(event(9.0, 1.0)) + "\n")
    assert sorted(e["busy_s"] for e in executor_events(tmp_path)) == [1.0, 3.0]

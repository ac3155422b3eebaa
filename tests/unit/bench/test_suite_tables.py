"""The suite benchmark's tables: which roofline floor binds, the summary line, merging runs made in parts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from merge_suite import merge
from suite_bench import bound, bound_of, row_line, summarise

LIMITS = {"bandwidth_Bps": 4e12, "peak_flops": 50e12}


def test_the_larger_floor_binds() -> None:
    assert bound(4e9, 0.0, LIMITS) == "memory"  # 1 ms of traffic, no FLOPs
    assert bound(4e6, 1e11, LIMITS) == "compute"  # 1 us of traffic, 2 ms of FLOPs


def test_rows_written_before_the_bound_was_recorded_derive_it_from_their_runs_limits() -> None:
    assert bound_of({"bound": "compute"}) == "compute"
    assert bound_of({"bytes": 4e9, "flops": 0.0, "limits": LIMITS}) == "memory"
    assert bound_of({"task": "no figures"}) == "-"


def test_summary_takes_level2_geomean_the_slowest_task_and_the_worst_memory_bound_floor() -> None:
    rows = [
        {"task": "level2_a", "speedup_vs_eager": 2.0, "floor_fraction": 0.9, "bound": "memory"},
        {"task": "level2_b", "speedup_vs_eager": 0.5, "floor_fraction": 0.3, "bound": "compute"},
        {"task": "level1_c", "speedup_vs_eager": 1.5, "floor_fraction": 0.7, "bound": "memory"},
        {"task": "level1_d", "error": "no correct kernel"},
    ]
    summary = summarise(rows)
    assert summary["geomean_speedup_level2"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert summary["min_speedup"] == 0.5
    assert summary["min_floor_fraction_memory_bound"] == 0.7  # compute-bound rows do not count
    assert (summary["tasks_correct"], summary["tasks"]) == (0, 4)  # no row has best_ms


def test_a_task_takes_its_row_from_the_last_run_that_has_it() -> None:
    first = {
        "rows": [{"task": "level1_x", "best_ms": 2.0}, {"task": "level2_y", "best_ms": 5.0}],
        "limits": LIMITS,
    }
    second = {"rows": [{"task": "level1_x", "best_ms": 1.0}], "limits": LIMITS, "device": "H200"}
    merged = merge([("a", first), ("b", second)])
    assert [(r["task"], r["run"], r["best_ms"]) for r in merged["rows"]] == [
        ("level2_y", "a", 5.0),
        ("level1_x", "b", 1.0),
    ]
    assert "level1_x" in row_line(merged["rows"][1]) and merged["device"] == "H200"


def test_merged_rows_keep_their_runs_commit_and_harnesses_are_never_mixed() -> None:
    engine = {"harness": "engine", "commit": "aaa", "rows": [{"task": "level1_x", "best_ms": 2.0}]}
    later = {"harness": "engine", "commit": "bbb", "rows": [{"task": "level2_y", "best_ms": 1.0}]}
    merged = merge([("a", engine), ("b", later)])
    assert {r["task"]: r["commit"] for r in merged["rows"]} == {"level1_x": "aaa", "level2_y": "bbb"}
    stack = {"harness": "stack", "commit": "ccc", "rows": [{"task": "level1_x", "best_ms": 1.5}]}
    with pytest.raises(ValueError, match="different harnesses"):
        merge([("a", engine), ("c", stack)])

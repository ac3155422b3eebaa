"""The KernelBench bench's bookkeeping: chunks, the resumable results file, and the per-level report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from gpu_busy import GpuBusy, parse_samples
from kernelbench import (
    append_row,
    chunk_of,
    complete_row,
    level_files,
    level_summary,
    parse_chunk,
    read_rows,
    report_text,
    run_deadline,
    sample_of,
    select,
    submission_order,
    throughput,
    worth_submitting,
)


def test_chunks_cover_every_task_exactly_once() -> None:
    items = list(range(88))
    parts = [chunk_of(items, k, 8) for k in range(1, 9)]
    assert [x for part in parts for x in part] == items
    assert {len(part) for part in parts} == {11}
    assert chunk_of(list(range(5)), 3, 3) == [3, 4]


def test_a_sample_takes_every_nth_task_across_both_levels(tmp_path: Path) -> None:
    assert sample_of(list(range(10)), 2, 4) == [1, 5, 9]
    for level in ("1", "2"):
        (tmp_path / f"level{level}").mkdir()
        for n in range(1, 5):
            (tmp_path / f"level{level}" / f"{n}_Op.py").write_text("")
    picked = select(tmp_path, ("1", "2"), None, None, sample="1/3")
    assert [f"{p.parent.name}/{p.stem}" for p in picked] == ["level1/1_Op", "level1/4_Op", "level2/3_Op"]


def test_throughput_counts_the_ended_runs_evaluations_per_hour_and_the_gpu_samples() -> None:
    args = SimpleNamespace(backend="cuda", parallel_runs=8, budget=16)
    busy = GpuBusy("cuda:0")
    busy.samples = parse_samples("0\n30\n 75\n100\nN/A\n")
    ran = [{"evaluations": 16}, {"evaluations": 8, "cancelled": True}, {}]
    record = throughput(ran, 120.0, busy, args, "abc")
    assert record["evaluations"] == 24 and record["runs_ended"] == 2 and record["runs_cancelled"] == 1
    assert record["evaluations_per_hour"] == 720.0
    assert record["gpu_busy_fraction"] == 0.75 and record["gpu_above_50_fraction"] == 0.5
    assert record["gpu_mean_utilisation"] == 51.25
    on_cpu = throughput([], 10.0, None, SimpleNamespace(backend="cpu", parallel_runs=1, budget=4), "abc")
    assert on_cpu["gpu_busy_fraction"] is None and on_cpu["evaluations_per_hour"] == 0.0


def test_a_run_is_submitted_only_while_a_typical_run_can_still_end_before_the_deadline() -> None:
    """Runs cancelled at the deadline were device time spent on no row (three or four a call on the H200):
    a task is held back for the next chunk once less time is left than a run took here (the median)."""
    assert worth_submitting(500.0, 510.0, [])  # nothing ended yet: nothing to go by
    assert worth_submitting(300.0, 510.0, [120.0, 200.0, 90.0])
    assert not worth_submitting(400.0, 510.0, [120.0, 200.0, 90.0])
    assert worth_submitting(390.0, 510.0, [120.0, 200.0, 90.0])


def test_tasks_are_submitted_cheapest_first_and_those_without_a_floor_last() -> None:
    prepared = [
        ("conv3d", {"floor_ms": 4.0}),
        ("broken", {"baseline_error": "OutOfMemoryError"}),
        ("loss", {"floor_ms": 0.2}),
        ("conv2d", {"floor_ms": 1.5}),
        ("unknown", {}),
    ]
    assert [t for t, _ in submission_order(prepared)] == ["loss", "conv2d", "conv3d", "broken", "unknown"]


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "1/0"])
def test_a_malformed_chunk_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="K/N"):
        parse_chunk(text)


def test_tasks_are_ordered_by_problem_number_and_selected_by_name(tmp_path: Path) -> None:
    for name in ("10_B.py", "2_A.py", "1_C.py"):
        (tmp_path / "level1").mkdir(exist_ok=True)
        (tmp_path / "level1" / name).write_text("")
    assert [p.stem for p in level_files(tmp_path, "1")] == ["1_C", "2_A", "10_B"]
    assert [p.stem for p in select(tmp_path, ["1"], None, ["2_A"])] == ["2_A"]
    assert [p.stem for p in select(tmp_path, ["1"], "2/2", None)] == ["2_A", "10_B"]
    # levelL/stem, and the short levelL/N by problem number (1 is not 10)
    assert [p.stem for p in select(tmp_path, ["1"], None, ["level1/10_B", "level1/1"])] == ["1_C", "10_B"]
    # a name that selects nothing is an error, not a silently smaller run
    with pytest.raises(ValueError, match="level1/3, 2_B"):
        select(tmp_path, ["1"], None, ["2_A", "level1/3", "2_B"])


def test_the_results_file_is_appended_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    append_row(results, {"task": "level1/1_A", "correct": False})
    append_row(results, {"task": "level1/2_B", "correct": True})
    append_row(results, {"task": "level1/1_A", "correct": True})  # measured again: the last row wins
    with results.open("a") as sink:
        sink.write('{"task": "level1/3_C", "cor')  # a command killed mid-write
    rows = {r["task"]: r for r in read_rows([results, tmp_path / "absent.jsonl"])}
    assert set(rows) == {"level1/1_A", "level1/2_B"}
    assert rows["level1/1_A"]["correct"] is True


def test_speedups_come_from_the_executor_times_and_a_run_without_a_kernel_has_none() -> None:
    found = {"best_ms": 1.0, "eager_ms": 2.0, "compile_ms": 1.5}
    row = complete_row({"task": "level1/1_A", "floor_ms": 0.5}, found)
    assert row["correct"] is True
    assert (row["speedup_vs_eager"], row["speedup_vs_compile"], row["floor_fraction"]) == (2.0, 1.5, 0.5)
    empty = complete_row({"task": "level1/2_B"}, {"best_ms": None, "status": "RUN_STATUS_FAILED"})
    assert empty["correct"] is False and "speedup_vs_eager" not in empty


def rows() -> list[dict]:
    return [
        {"task": "level1/1_A", "accepted": True, "correct": True, "speedup_vs_eager": 2.0,
         "speedup_vs_compile": 0.5, "bound": "memory", "floor_fraction": 0.9},
        {"task": "level1/2_B", "accepted": True, "correct": True, "speedup_vs_eager": 0.5,
         "speedup_vs_compile": 2.0, "bound": "compute", "floor_fraction": 0.1},
        {"task": "level1/3_C", "accepted": True, "correct": False},
        {"task": "level1/4_D", "accepted": False, "correct": False, "refusal": "resource_limit: too big"},
    ]  # fmt: skip


def test_a_level_reports_acceptance_correctness_fast1_geomeans_and_the_memory_floor() -> None:
    summary = level_summary(rows())
    assert (summary["tasks"], summary["accepted"], summary["correct"]) == (4, 3, 2)
    assert summary["fast_1_eager"] == 0.25 and summary["fast_1_compile"] == 0.25
    assert math.isclose(summary["geomean_eager"], 1.0) and math.isclose(summary["geomean_compile"], 1.0)
    assert summary["memory_bound"] == 1
    assert (summary["floor_fraction_min"], summary["floor_fraction_at_least_80"]) == (0.9, 1)


def test_the_report_names_the_commits_the_levels_and_every_refusal() -> None:
    text = report_text([{**r, "commit": "abc123"} for r in rows()], "cpu", {"1": 88})
    assert "commits measured: abc123" in text
    assert "4/88" in text
    assert "REFUSED resource_limit: too big" in text
    json.dumps(level_summary(rows()))  # the JSON form holds plain numbers


def test_without_torch_compile_timings_fast1_over_compile_is_not_reported_as_zero() -> None:
    untimed = [{k: v for k, v in row.items() if k != "speedup_vs_compile"} for row in rows()]
    assert level_summary(untimed)["fast_1_compile"] is None
    assert level_summary(untimed)["geomean_compile"] is None


def test_a_cpu_run_has_no_deadline_a_cuda_chunk_the_accelerators_command_limit() -> None:
    assert run_deadline("cpu") == math.inf
    assert 0 < run_deadline("cuda") < 600  # the accelerator machine's limit a command


def test_the_side_by_side_re_time_is_reported_beside_the_run_figure() -> None:
    timed = [{**r, "side_by_side_speedup": 4.0} if r["task"] == "level1/1_A" else r for r in rows()]
    summary = level_summary(timed)
    assert summary["side_by_side_timed"] == 1 and math.isclose(summary["geomean_eager_side_by_side"], 4.0)
    text = report_text(timed, "cpu", {"1": 88})
    assert "geo eager side by side (the best kernel re-timed beside eager): 4.00 over 1 tasks" in text
    assert level_summary(rows())["geomean_eager_side_by_side"] is None

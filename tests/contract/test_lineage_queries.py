"""Contract: every lineage query answers the same on every backend."""

from __future__ import annotations

import pytest
from lineage_sample import Sample, minutes

from kernelfoundry.lineage import BestKernel, FailureCount, LineageRepository, UsageTotal


async def test_get_run_returns_its_configuration(stored: LineageRepository, sample: Sample) -> None:
    assert await stored.get_run("run-a") == sample.runs[0]
    assert await stored.get_run("run-missing") is None


async def test_list_runs_newest_first_with_filters(stored: LineageRepository) -> None:
    assert [r.run_id for r in await stored.list_runs()] == ["run-b", "run-c", "run-a"]
    assert [r.run_id for r in await stored.list_runs(task_name="matmul")] == ["run-b", "run-a"]
    assert [r.run_id for r in await stored.list_runs(limit=1)] == ["run-b"]
    assert await stored.list_runs(limit=0) == []
    assert len(await stored.list_runs(limit=None)) == 3
    await stored.update_run_status("run-a", "failed", finished_at=minutes(100))
    assert [r.run_id for r in await stored.list_runs(status="failed")] == ["run-a"]


async def test_candidates_of_a_run_come_in_replay_order(stored: LineageRepository, sample: Sample) -> None:
    candidates = await stored.candidates_of_run("run-a")
    assert [c.candidate_id for c in candidates] == ["c1", "c2", "c3", "c4", "c5"]
    assert candidates == [c for c in sample.candidates if c.run_id == "run-a"]
    assert await stored.candidates_of_run("run-missing") == []


async def test_evaluations_and_builds_of_a_run_come_in_time_order(stored: LineageRepository) -> None:
    evaluations = await stored.evaluations_of_run("run-a")
    assert [(e.candidate_id, e.hardware) for e in evaluations] == [
        ("c1", "h200"),
        ("c2", "h200"),
        ("c4", "h200"),
        ("c5", "h200"),
        ("c5", "a100"),
    ]
    builds = await stored.builds_of_run("run-a")
    assert [b.candidate_id for b in builds] == ["c1", "c2", "c3", "c4", "c5"]


async def test_lineage_tree_has_ancestors_and_descendants_at_shortest_depth(
    stored: LineageRepository,
) -> None:
    tree = await stored.lineage("c4")
    assert tree.root.candidate_id == "c4"
    assert tree.root.parent_ids == ("c2", "c3")
    assert [(n.candidate_id, n.depth) for n in tree.ancestors] == [("c2", 1), ("c3", 1), ("c1", 2)]
    assert [(n.candidate_id, n.depth) for n in tree.descendants] == [("c5", 1)]

    from_root = await stored.lineage("c1")
    assert from_root.ancestors == ()
    # c4 is reachable through c2 and through c3 but is listed once, at depth 2
    assert [(n.candidate_id, n.depth) for n in from_root.descendants] == [
        ("c2", 1),
        ("c3", 1),
        ("c4", 2),
        ("c5", 3),
    ]
    assert from_root.descendants[2].parent_ids == ("c2", "c3")
    assert from_root.descendants[3].iteration == 3


async def test_lineage_stops_at_max_depth(stored: LineageRepository) -> None:
    tree = await stored.lineage("c1", max_depth=1)
    assert [n.candidate_id for n in tree.descendants] == ["c2", "c3"]
    assert (await stored.lineage("c5", max_depth=2)).ancestors[-1].candidate_id == "c3"


async def test_lineage_of_an_unknown_candidate_is_none(stored: LineageRepository) -> None:
    assert await stored.lineage("nope") is None


async def test_best_kernel_per_task_and_hardware_across_runs(stored: LineageRepository) -> None:
    assert await stored.best_kernels() == [
        BestKernel("matmul", "a100", "c5", "run-a", 1.7, pytest.approx(2.0 / 1.7)),
        BestKernel("matmul", "h200", "b1", "run-b", 3.0, pytest.approx(2.0 / 3.0)),
    ]
    assert [b.candidate_id for b in await stored.best_kernels(hardware="h200")] == ["b1"]
    assert await stored.best_kernels(task_name="softmax") == []


async def test_best_kernel_ties_go_to_the_lower_runtime(stored: LineageRepository, sample: Sample) -> None:
    from dataclasses import replace

    twin = replace(sample.evaluations[5], candidate_id="b9", runtime_ms=0.5)
    await stored.save_evaluation(twin)
    best = await stored.best_kernels(task_name="matmul", hardware="h200")
    assert [(b.candidate_id, b.runtime_ms) for b in best] == [("b9", 0.5)]


async def test_snapshots_over_time_window_in_iteration_order(
    stored: LineageRepository, sample: Sample
) -> None:
    assert await stored.snapshots("run-a") == list(sample.snapshots)
    # two updates of iteration 3: the end-of-iteration one and c5's, both kept, in time order
    assert [(s.iteration, s.candidate_id) for s in await stored.snapshots("run-a")][-2:] == [
        (3, ""),
        (3, "c5"),
    ]
    window = await stored.snapshots("run-a", since=minutes(11), until=minutes(12))
    assert [s.iteration for s in window] == [1, 2]
    assert window[1].cells[2] == {"cell": [1, 0, 2], "candidate_id": "c3", "speedup": 3.0}


async def test_failures_grouped_by_reason_per_run_and_overall(stored: LineageRepository) -> None:
    assert await stored.failures() == [
        FailureCount("build", "compile_error", 2),
        FailureCount("evaluation", "output_mismatch", 1),
        FailureCount("evaluation", "timeout", 1),
    ]
    assert await stored.failures(run_id="run-b") == [FailureCount("evaluation", "timeout", 1)]


async def test_usage_totals_per_generator_and_per_run(stored: LineageRepository) -> None:
    assert await stored.usage_totals(run_id="run-a") == [
        UsageTotal("heuristic", 1, 0, 0, 0.0),
        UsageTotal("openai", 2, 300, 120, pytest.approx(0.75)),
    ]
    assert await stored.usage_totals() == [
        UsageTotal("heuristic", 1, 0, 0, 0.0),
        UsageTotal("openai", 3, 310, 125, pytest.approx(0.875)),
    ]
    assert await stored.usage_totals(group_by="run") == [
        UsageTotal("run-a", 3, 300, 120, pytest.approx(0.75)),
        UsageTotal("run-b", 1, 10, 5, pytest.approx(0.125)),
    ]

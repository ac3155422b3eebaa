"""The run report's figures, built from lineage records (kernelfoundry.report.model): no I/O, no plots."""

from __future__ import annotations

import dataclasses
import math

import pytest
import report_records as sample

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.speedup import retime_id
from kernelfoundry.report.model import NOT_EVALUATED, build_report, parent_chain


def report():  # type: ignore[no-untyped-def]
    return build_report(
        sample.run(), sample.candidates(), sample.builds(), sample.evaluations(), sample.snapshots()
    )


def test_the_run_figure_is_the_re_timed_fastest_kernel_over_the_pooled_eager_median() -> None:
    figure = report().baselines.figure
    assert figure is not None
    assert figure.candidate_id == sample.BEST and figure.retimed
    assert figure.kernel_ms == sample.RETIMED_MS
    assert figure.speedup == pytest.approx(sample.EAGER_MS / sample.RETIMED_MS)
    assert report().best_speedup == figure.speedup


def test_torch_compile_is_pooled_beside_eager_and_the_best_kernel_is_compared_with_both() -> None:
    baselines = report().baselines
    assert baselines.eager is not None and baselines.compiled is not None
    assert baselines.eager.median_ms == sample.EAGER_MS
    assert baselines.compiled.median_ms == sample.COMPILE_MS
    assert baselines.compiled.samples == len(sample.evaluations())
    assert baselines.speedup_vs_compile == pytest.approx(sample.COMPILE_MS / sample.RETIMED_MS)


def test_without_torch_compile_timings_the_compile_comparison_is_absent() -> None:
    evaluations = [dataclasses.replace(e, compile_baseline_ms=None) for e in sample.evaluations()]
    baselines = build_report(sample.run(), sample.candidates(), sample.builds(), evaluations, []).baselines
    assert baselines.compiled is None and baselines.speedup_vs_compile is None
    assert baselines.figure is not None


def test_the_curve_has_every_evaluation_but_re_times_in_order_with_the_best_so_far() -> None:
    curve = report().curve
    assert [p.candidate_id for p in curve] == ["s1", "m1", "m2", "w1"]
    assert [p.index for p in curve] == [1, 2, 3, 4]
    assert [p.iteration for p in curve] == [0, 1, 2, 2]
    assert curve[1].speedup == pytest.approx(sample.EAGER_MS / 5.0)
    assert curve[3].speedup is None and curve[3].reason == "output_mismatch"
    speedups = [p.speedup for p in curve]
    for i, point in enumerate(curve):
        assert point.best_so_far == max(s for s in speedups[: i + 1] if s is not None)


def test_the_archive_is_the_last_snapshot_and_coverage_is_counted_per_iteration() -> None:
    built = report()
    assert {c.candidate_id: c.descriptors for c in built.archive} == {
        "s1": Descriptors(0, 0, 0),
        "m1": Descriptors(1, 0, 0),
        "m2": Descriptors(2, 1, 1),
    }
    assert [(p.iteration, p.cells_filled) for p in built.coverage] == [(0, 1), (1, 2), (2, 3)]
    assert built.coverage[-1].best_speedup == pytest.approx(sample.EAGER_MS / 2.4)


def test_archive_cells_are_shown_over_the_run_s_pooled_eager_median_like_every_other_figure() -> None:
    last = sample.snapshots()[-1]
    stale = {**last.cells[-1], "speedup": 9.0}  # m2, figured against the pool as it stood then
    unknown = {"memory": 3, "algorithm": 3, "parallelism": 3, "candidate_id": "gone", "speedup": 1.5}
    snapshot = dataclasses.replace(last, cells=(*last.cells[:-1], stale, unknown))
    built = build_report(sample.run(), sample.candidates(), sample.builds(), sample.evaluations(), [snapshot])
    by_id = {c.candidate_id: c for c in built.archive}
    assert by_id["m2"].speedup == pytest.approx(sample.EAGER_MS / 2.4)
    assert by_id["m2"].runtime_ms == 2.4
    assert by_id["gone"].speedup == 1.5 and by_id["gone"].runtime_ms is None  # nothing to recompute from
    broken = dataclasses.replace(snapshot, cells=({**unknown, "speedup": math.nan},))
    assert build_report(sample.run(), [], [], sample.evaluations(), [broken]).archive == ()
    assert built.coverage[-1].best_speedup == pytest.approx(sample.EAGER_MS / 2.4)


def test_the_lineage_runs_from_the_best_kernel_back_to_its_seed_with_operators_and_outcomes() -> None:
    chain = report().lineage
    assert [s.candidate_id for s in chain] == ["m2", "m1", "s1"]
    assert [s.operator for s in chain] == ["tiling", "vectorize", ""]
    assert [s.outcome for s in chain] == ["correct"] * 3
    assert chain[0].descriptors == Descriptors(2, 1, 1)
    assert chain[0].runtime_ms == 2.4 and chain[1].speedup == pytest.approx(2.0)


def test_a_parent_chain_stops_at_a_cycle_and_at_a_parent_the_run_does_not_hold() -> None:
    by_id = {c.candidate_id: c for c in sample.candidates()}
    by_id["s1"] = dataclasses.replace(by_id["s1"], parent_ids=("m2",))  # m2 -> m1 -> s1 -> m2
    assert [s.candidate_id for s in parent_chain("m2", by_id, {}, {}, {})] == ["m2", "m1", "s1"]
    by_id["m1"] = dataclasses.replace(by_id["m1"], parent_ids=("elsewhere",))
    chain = parent_chain("m2", by_id, {}, {}, {})
    assert [s.candidate_id for s in chain] == ["m2", "m1"]
    assert chain[0].outcome == NOT_EVALUATED


def test_failures_are_counted_by_stage_and_reason_most_frequent_first() -> None:
    evaluations = [*sample.evaluations(), dataclasses.replace(sample.evaluations()[3], candidate_id="w2")]
    built = build_report(sample.run(), sample.candidates(), sample.builds(), evaluations, [])
    assert [(f.stage, f.reason, f.count) for f in built.failures] == [
        ("evaluation", "output_mismatch", 2),
        ("build", "compile_error", 1),
    ]
    assert built.counts.builds_failed == 1 and built.counts.evaluations_correct == 4


def test_the_best_source_is_the_best_candidate_s_code_and_the_settings_leave_out_the_task() -> None:
    built = report()
    assert built.best is not None
    assert built.best.candidate_id == sample.BEST and built.best.code == sample.BEST_CODE
    assert built.best.params == {"BLOCK": 64}
    assert built.run.settings == {"iterations": 2, "population": 2}


def test_a_run_without_a_correct_kernel_has_no_figure_lineage_or_source() -> None:
    wrong = [
        dataclasses.replace(e, correct=False, runtime_ms=None, reason="timeout")
        for e in sample.evaluations()
        if e.candidate_id != retime_id(sample.BEST, "t1")
    ]
    built = build_report(sample.run("cancelled"), sample.candidates(), sample.builds(), wrong, [])
    assert built.baselines.figure is None and built.best_speedup is None
    assert built.lineage == () and built.best is None and built.archive == ()
    assert all(p.speedup is None and p.best_so_far is None for p in built.curve)
    assert built.failures[0].reason == "timeout"

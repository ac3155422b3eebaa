"""Correct CPU units are accepted, timed against eager, and reported with their counters."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path

from evaluation_fixtures import FAST, FMA_TWO_SHAPES, Units, task

from kernelfoundry.evaluation import EvaluationReport, EvaluationWorker, evaluate_once
from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.tasks.model import Tolerance


def test_good_unit_is_correct_on_every_shape_and_timed(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("good_fma", FMA_TWO_SHAPES))
    assert report.correct, report.message
    assert report.reason is None
    assert [s.shape for s in report.per_shape] == ["n4096", "n10000"]
    assert report.counters["trials"] >= 5 * 2
    assert report.counters["timed_runs"] == 5 * 2
    assert report.counters["input_sets"] == 3 * 2
    assert report.runtime_ms and report.baseline_ms and report.speedup
    assert report.speedup == report.baseline_ms / report.runtime_ms
    assert report.max_abs_error is not None and report.max_abs_error < 1e-4
    assert "float64 reference, compared in float32" in report.precision
    assert report.compile_baseline_ms is None  # off by default on CPU
    # a*b+a moves 3 float32 tensors per shape (12 bytes an element) and is memory-bound
    assert report.bound == "memory" and report.floor_ms and report.roofline_fraction
    assert all(s.floor_ms for s in report.per_shape)
    assert report.floor_ms == sum(s.floor_ms or 0.0 for s in report.per_shape)
    assert report.roofline_fraction == report.floor_ms / report.runtime_ms
    assert EvaluationReport.from_dict(report.to_dict()) == report


def test_scalars_and_parameters_reach_the_unit(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("good_scale", task("scale")))
    assert report.correct, report.message


def test_reduction_passes_within_eager_tolerance(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("good_row_sum", task("row_sum")))
    assert report.correct, report.message


def test_task_tolerance_loosens_the_judgement(units: Units, worker: EvaluationWorker) -> None:
    loose = replace(task("fused_mul_add"), tolerance=Tolerance(atol=0.05, rtol=0.05))
    assert worker.evaluate(units.request("bf16_rounding", loose)).correct


def test_settings_tolerance_overrides_the_task(units: Units, worker: EvaluationWorker) -> None:
    loose = replace(task("fused_mul_add"), tolerance=Tolerance(atol=0.05, rtol=0.05))
    strict = replace(FAST, tolerance=Tolerance(atol=1e-4, rtol=1e-4))
    assert (
        worker.evaluate(units.request("bf16_rounding", loose, settings=strict)).reason
        == "precision_downgrade"
    )


def test_evaluate_once_uses_a_fresh_process(units: Units) -> None:
    report = evaluate_once(units.request("good_fma"))
    assert report.correct, report.message


def test_request_for_another_device_is_refused(units: Units, worker: EvaluationWorker) -> None:
    request = replace(units.request("good_fma"), device="cuda:0")
    assert worker.evaluate(request).reason == "bad_request"


def _held_back(
    units: Units, worker: EvaluationWorker, lock: contextlib.AbstractContextManager[object], tmp_path: Path
) -> EvaluationReport:
    """good_fma evaluated with `tmp_path` as its timing lock while `lock` (on the same folder) is held:
    still unfinished after 3 s, finished within a minute of the lock's release."""
    request = units.request("good_fma", settings=replace(FAST, timing_lock_dir=str(tmp_path)))
    done: list[EvaluationReport] = []
    with lock:
        evaluation = threading.Thread(target=lambda: done.append(worker.evaluate(request)))
        evaluation.start()
        evaluation.join(3.0)
        assert not done
        released = time.monotonic()
    evaluation.join(60)
    assert done and done[0].correct, done[0].message if done else ""
    assert time.monotonic() - released < 60
    return done[0]


def test_timed_runs_wait_for_the_build_in_flight_on_this_host(
    units: Units, worker: EvaluationWorker, tmp_path: Path
) -> None:
    """With a timing lock folder, a CPU evaluation checks correctness at once but times only after the
    build holding the host has finished (kernelfoundry.stack.quiet_host)."""
    report = _held_back(units, worker, QuietHost(tmp_path).sharing(), tmp_path)
    assert (report.runtime_ms or 0) > 0
    # the waits are phases of their own, outside the trials and the timed runs
    assert {"trials_wait", "timing_wait"} <= set(report.phases_ms)


def test_an_evaluations_trials_wait_while_another_evaluation_times(
    units: Units, worker: EvaluationWorker, tmp_path: Path
) -> None:
    """Evaluations sharing a timing lock (a GPU executor's slots): no trial starts while another
    evaluation holds the lock to time, and the evaluation goes on once it is released."""
    report = _held_back(units, worker, QuietHost(tmp_path).timing(), tmp_path)
    assert report.counters["trials"] > 0


def test_baselines_are_reused_while_young_enough_and_say_their_age(
    units: Units, worker: EvaluationWorker
) -> None:
    """CPU times them beside every candidate by default; allowed an age, the next candidate of the
    same task and shape reuses them, and its report says how old they are."""
    beside = units.request("good_fma")
    first = worker.evaluate(beside)
    again = worker.evaluate(beside)
    assert first.correct and again.correct, (first.message, again.message)
    assert first.baseline_age_s == 0.0 and again.baseline_age_s == 0.0
    reusing = replace(beside, settings=replace(beside.settings, baseline_max_age_s=600.0))
    timed = worker.evaluate(reusing)
    reused = worker.evaluate(reusing)
    assert timed.correct and reused.correct, (timed.message, reused.message)
    assert reused.baseline_ms == timed.baseline_ms and reused.baseline_age_s and reused.baseline_age_s > 0
    assert any("reused from" in note for note in reused.notes), reused.notes


def test_a_far_slower_candidate_is_screened_out(units: Units, worker: EvaluationWorker) -> None:
    """A short verified screen first; the full protocol only for a candidate that can matter."""
    request = units.request("good_fma")
    hopeless = worker.evaluate(replace(request, settings=replace(request.settings, screen_above_ms=1e-6)))
    assert hopeless.correct and hopeless.screened, hopeless.message
    assert hopeless.counters["screen_runs"] == 10 and hopeless.counters["timed_runs"] == 0
    assert hopeless.counters["checked_timed_runs"] >= 3  # the screen's calls are verified too
    assert hopeless.runtime_ms and hopeless.speedup and "screen" in hopeless.phases_ms
    assert any("screened out" in note for note in hopeless.notes), hopeless.notes
    promising = worker.evaluate(replace(request, settings=replace(request.settings, screen_above_ms=1e6)))
    assert promising.correct and not promising.screened, promising.message
    assert promising.counters["screen_runs"] == 10 and promising.counters["timed_runs"] > 0


def test_checked_timed_calls_are_decided_on_the_proxy_reference_unless_turned_off(
    units: Units, worker: EvaluationWorker
) -> None:
    """The model in float32 decides the checked timed calls of an accurate unit (the float64 reference is
    computed for the trials only); with proxy checks off every checked call takes the float64 one."""
    on = worker.evaluate(units.request("good_fma"))
    assert on.correct, on.message
    assert on.counters["checked_timed_runs"] >= 3
    assert on.counters["proxy_checks"] == on.counters["checked_timed_runs"]
    assert on.counters["proxy_escalations"] == 0
    off = worker.evaluate(units.request("good_fma", settings=replace(FAST, proxy_checks=False)))
    assert off.correct, off.message
    assert off.counters["proxy_checks"] == off.counters["proxy_escalations"] == 0
    assert off.counters["checked_timed_runs"] >= 3

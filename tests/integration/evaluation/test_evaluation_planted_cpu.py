"""Every planted CPU unit is rejected with the reason it announces, by one worker that keeps serving."""

from __future__ import annotations

from pathlib import Path

import pytest
from evaluation_fixtures import (
    CPU_UNITS,
    FMA,
    FMA_TWO_SHAPES,
    Units,
    accepted_reasons,
    expected_reason,
    with_deadline,
)

from kernelfoundry.evaluation import EvaluationWorker, reasons

PLANTED = sorted(
    p
    for p in CPU_UNITS.glob("*.cpp")
    if expected_reason(p) not in {"ok", "compile_error"} and p.stem != "good_fma"
)


@pytest.mark.parametrize("unit", PLANTED, ids=lambda p: p.stem)
def test_planted_unit_is_rejected_with_its_reason(unit: Path, units: Units, worker: EvaluationWorker) -> None:
    expected = expected_reason(unit)
    the_task = FMA_TWO_SHAPES if expected == reasons.CORRECT_ONLY_FIRST_SHAPE else FMA
    settings = with_deadline(3.0) if expected == reasons.TIMEOUT else with_deadline(60.0)
    report = worker.evaluate(units.request(unit.stem, the_task, settings=settings))
    assert report.reason in accepted_reasons(unit), report.message
    assert not report.correct
    assert report.speedup is None and report.runtime_ms is None
    assert report.message


@pytest.mark.parametrize("bad", ["segfault", "infinite_loop", "returns_error"])
def test_worker_serves_a_good_kernel_after_a_failure(
    bad: str, units: Units, worker: EvaluationWorker
) -> None:
    first = worker.evaluate(units.request(bad, settings=with_deadline(3.0)))
    assert not first.correct
    good = worker.evaluate(units.request("good_fma"))
    assert good.correct, good.message
    assert good.speedup is not None


def test_crash_names_the_signal_and_costs_only_the_runner(units: Units, worker: EvaluationWorker) -> None:
    worker.evaluate(units.request("good_fma"))
    judge = worker.child_pid
    report = worker.evaluate(units.request("segfault"))
    assert report.reason == reasons.CRASH
    assert "SIGSEGV" in report.message
    assert worker.evaluate(units.request("good_fma")).correct
    assert worker.child_pid == judge  # the candidate ran in a runner; the judge never loaded it


def test_writing_an_input_faults_in_the_runner_and_is_reported_as_such(
    units: Units, worker: EvaluationWorker
) -> None:
    report = worker.evaluate(units.request("modifies_input"))
    assert report.reason == reasons.INPUT_MODIFIED, report.message
    assert "wrote into input set" in report.message and "read-only" in report.message
    assert worker.evaluate(units.request("good_fma")).correct  # the runner went, the judge serves on


def test_hang_costs_only_the_runner(units: Units, worker: EvaluationWorker) -> None:
    worker.evaluate(units.request("good_fma"))
    judge = worker.child_pid
    assert (
        worker.evaluate(units.request("infinite_loop", settings=with_deadline(3.0))).reason == reasons.TIMEOUT
    )
    assert worker.child_pid == judge


def test_ordinary_failures_keep_the_same_process(units: Units, worker: EvaluationWorker) -> None:
    worker.evaluate(units.request("good_fma"))
    before = worker.child_pid
    assert worker.evaluate(units.request("wrong_sign")).reason == reasons.WRONG_RESULT
    assert worker.evaluate(units.request("good_fma")).correct
    assert worker.child_pid == before


def test_failed_trial_is_reported(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("first_shape_only", FMA_TWO_SHAPES))
    assert report.failed_trial is not None
    assert report.failed_trial["shape"] == "n10000"
    assert "n10000" in report.message

"""The judge's staged path (the one a GPU takes) in CI, with a runner whose CPU memory is staged
(staged_cpu_runner.py): input sets drawn by the runner from the judge's seeds, timed calls refreshed by
seed, host staging where get_inputs() does not draw reproducibly, and the same verdicts as ever."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from evaluation_fixtures import FMA, Units

from kernelfoundry.evaluation import EvaluationReport, EvaluationRequest, reasons
from kernelfoundry.evaluation.backends.cpu import CPU
from kernelfoundry.evaluation.engine import Evaluation
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.runner_client import RunnerProcess

STAGED_RUNNER = (sys.executable, str(Path(__file__).resolve().parent / "staged_cpu_runner.py"))
UNSEEDED = replace(
    FMA,
    reference_source=FMA.reference_source.replace(
        "return [torch.randn(N), torch.randn(N)]",
        "import numpy\n\n    drawn = numpy.random.randn(N).astype('float32')\n"
        "    return [torch.from_numpy(drawn), torch.randn(N)]",
    ),
)


def staged(request: EvaluationRequest) -> EvaluationReport:
    evaluation = Evaluation(request, lambda: RunnerProcess(CPU, "cpu", program=STAGED_RUNNER))
    evaluation.staged = True  # the judge's side of a staged device; its runner stages for real
    try:
        return evaluation.run()
    except EvaluationFailure as failure:
        return evaluation.failure_report(failure)
    finally:
        evaluation.close()


def test_an_honest_unit_is_correct_on_sets_the_runner_draws_itself(units: Units) -> None:
    report = staged(units.request("good_fma"))
    assert report.correct, report.message
    assert any("drawn on the device by the runner" in note for note in report.notes), report.notes
    counters = report.counters
    assert counters["refreshed_timed_runs"] == counters["timed_runs"] + counters["warmup_runs"]
    assert counters["checked_timed_runs"] >= 3
    assert report.phases_ms["refresh"] >= 0 and report.phases_ms["timed_runs"] > 0
    # every trial and checked call brought the runner's outputs over: a phase of its own, inside those
    phases = report.phases_ms
    assert 0 < phases["fetch"] < phases["trials"] + phases["checks"] + phases.get("screen", 0.0)
    # the judge's watch between commands, inside the steps: the idle window after each timed reply and
    # the scan for processes after every reply
    steps = sum(phases[name] for name in ("runner_start", "inputs", "trials", "timed_runs", "cross_check"))
    assert 0 < phases["idle_window"] < steps and 0 < phases["process_watch"] < steps
    # the trials' own steps, each inside them: together no more than the trials took
    trial_steps = [p for p in phases if p.startswith("trial_")]
    assert {
        "trial_inputs",
        "trial_reference",
        "trial_eager",
        "trial_first_call",
        "trial_call",
        "trial_check",
    } <= set(trial_steps)
    assert all(phases[p] > 0 for p in trial_steps)
    assert sum(phases[p] for p in trial_steps) <= phases["trials"]


def test_sets_get_inputs_cannot_redraw_are_staged_through_the_host(units: Units) -> None:
    assert UNSEEDED.reference_source != FMA.reference_source
    report = staged(units.request("good_fma", UNSEEDED))
    assert report.correct, report.message
    assert any("staged through the host" in note for note in report.notes), report.notes


def test_a_pointer_cache_meets_fresh_values_drawn_into_the_same_memory(units: Units) -> None:
    report = staged(units.request("pointer_cache"))
    assert report.reason in (reasons.CACHED_RESULT, reasons.TIMED_RUN_WRONG), report.message


def test_a_unit_that_changes_its_drawn_inputs_is_caught(units: Units) -> None:
    report = staged(units.request("modifies_input"))
    assert report.reason == reasons.INPUT_MODIFIED, report.message  # the runner compares with a redraw

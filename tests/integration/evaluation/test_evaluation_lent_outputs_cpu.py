"""Outputs fetched through device memory the judge lends the runner (device_share.py), in CI: the staged
CPU runner maps a memfd the judge lends as a CUDA runner maps the judge's cuMemCreate memory. Every
fetch goes through it, the verdicts are the ones of the host path, a runner that cannot map it falls
back to the host path with a note, and the judge releases what it lent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from evaluation_fixtures import CPU_UNITS, Units, accepted_reasons
from staged_cpu_runner import COMPUTE_AT_FETCH, OOM_PLACING, REFUSE_BORROW, HostLentMemory

from kernelfoundry.evaluation import EvaluationReport, EvaluationRequest, reasons
from kernelfoundry.evaluation.backends.cpu import CPU
from kernelfoundry.evaluation.engine import Evaluation
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.evaluation.runner_client import RunnerProcess

RUNNER = str(Path(__file__).resolve().parent / "staged_cpu_runner.py")


def lent_run(request: EvaluationRequest, *flags: str) -> tuple[EvaluationReport, list[HostLentMemory]]:
    program = (sys.executable, RUNNER, *flags)
    evaluation = Evaluation(request, lambda: RunnerProcess(CPU, "cpu", program=program))
    evaluation.staged = True  # the judge's side of a staged device; its runner stages for real
    lent: list[HostLentMemory] = []

    def lend(nbytes: int) -> HostLentMemory:
        lent.append(HostLentMemory(nbytes))
        return lent[-1]

    evaluation.device.lend = lend  # type: ignore[method-assign]
    try:
        return evaluation.run(), lent
    except EvaluationFailure as failure:
        return evaluation.failure_report(failure), lent
    finally:
        evaluation.close()


def test_every_fetch_of_an_honest_unit_goes_through_the_lent_memory(units: Units) -> None:
    report, lent = lent_run(units.request("good_fma"))
    assert report.correct, report.message
    counters = report.counters
    assert counters["device_fetches"] >= counters["trials"] + counters["checked_timed_runs"]
    assert lent and all(memory.closed for memory in lent)  # released with the evaluation
    assert not any("fetched through the host" in note for note in report.notes), report.notes


@pytest.mark.parametrize("unit", ["wrong_sign", "unwritten_half", "replays_previous", "first_call_only"])
def test_planted_units_read_through_lent_memory_are_caught_as_ever(units: Units, unit: str) -> None:
    report, _ = lent_run(units.request(unit))
    assert not report.correct
    # a fetch that copies nothing shows the poison the judge left, never an earlier call's outputs
    assert report.reason in accepted_reasons(CPU_UNITS / f"{unit}.cpp") | {reasons.TIMED_RUN_WRONG}, (
        report.reason,
        report.message,
    )


def test_a_runner_that_cannot_map_the_lent_memory_is_fetched_through_the_host(units: Units) -> None:
    report, lent = lent_run(units.request("good_fma"), REFUSE_BORROW)
    assert report.correct, report.message
    assert report.counters["device_fetches"] == 0
    assert any(
        "could not map the device memory lent" in note and "status 801" in note for note in report.notes
    ), report.notes
    assert lent and all(memory.closed for memory in lent)


def test_a_runner_out_of_memory_placing_buffers_is_no_verdict_on_the_candidate(units: Units) -> None:
    """Before the candidate's code runs, an allocation that fails is memory held elsewhere on the device:
    runner_out_of_memory, which the executor delivers again later, not the candidate's glue_error."""
    report, lent = lent_run(units.request("good_fma"), REFUSE_BORROW, OOM_PLACING)
    assert report.reason == reasons.RUNNER_OUT_OF_MEMORY, report.message
    assert "placing the shape's buffers on the device ran out of memory" in report.message
    assert reasons.RUNNER_OUT_OF_MEMORY in reasons.MEMORY_REASONS
    assert all(memory.closed for memory in lent)


def test_a_runner_that_computes_only_when_outputs_are_asked_for_is_caught(units: Units) -> None:
    """Lent memory is read without asking the runner, so it never learns which timed call is checked:
    one that does a call's work only at `fetch` shows the judge's poison in a checked call."""
    report, _ = lent_run(units.request("good_fma"), COMPUTE_AT_FETCH)
    assert report.reason in (reasons.OUTPUT_NOT_WRITTEN, reasons.TIMED_RUN_WRONG), report.message
    assert "timed call" in report.message

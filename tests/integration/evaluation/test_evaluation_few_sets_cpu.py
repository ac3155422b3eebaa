"""An evaluation that may hold only two input sets, the trials on the first timing set
(KF_EVALUATION_SETS_MEMORY_BYTES, as a KernelBench-sized task on a full GPU would): every trial still gets
fresh values (the held set refreshed with a new seed), the good unit is correct and timed, and the units
that cheat across sets are caught."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from evaluation_fixtures import CPU_UNITS, Units, accepted_reasons

from kernelfoundry.evaluation import EvaluationWorker


@pytest.fixture(scope="module")
def few_sets_worker() -> Iterator[EvaluationWorker]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KF_EVALUATION_SETS_MEMORY_BYTES", "1")
        with EvaluationWorker("cpu", cpu_threads=2) as worker:
            yield worker


def test_the_good_unit_is_correct_and_timed_with_the_fewest_sets(
    units: Units, few_sets_worker: EvaluationWorker
) -> None:
    report = few_sets_worker.evaluate(units.request("good_fma"))
    assert report.correct, report.message
    assert report.runtime_ms is not None and report.runtime_ms > 0
    notes = " ".join(report.notes)
    assert "2 set(s) held instead of" in notes and "the trials on the first timing set" in notes, notes


@pytest.mark.parametrize(
    "name", ["replays_previous", "first_call_only", "pointer_cache", "wrong_sign", "unwritten_half"]
)
def test_units_that_cheat_across_sets_are_caught_with_the_fewest_sets(
    name: str, units: Units, few_sets_worker: EvaluationWorker
) -> None:
    report = few_sets_worker.evaluate(units.request(name))
    assert not report.correct
    assert report.reason in accepted_reasons(CPU_UNITS / f"{name}.cpp"), report.message

"""The judge keeps a task's trial seeds and their reference outputs across candidates (trial_cache.py):
the second candidate of a task reuses every trial's reference, is judged the same, and a unit that cheats
is still caught after a good one filled the cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from evaluation_fixtures import CPU_UNITS, Units, accepted_reasons

from kernelfoundry.evaluation import EvaluationWorker


@pytest.fixture()
def fresh_worker() -> Iterator[EvaluationWorker]:
    """A judge of its own: its cache starts empty."""
    with EvaluationWorker("cpu", cpu_threads=2) as worker:
        yield worker


def test_the_second_candidate_of_a_task_reuses_every_trial_reference(
    units: Units, fresh_worker: EvaluationWorker
) -> None:
    first = fresh_worker.evaluate(units.request("good_fma"))
    second = fresh_worker.evaluate(units.request("good_fma"))
    assert first.correct and second.correct, (first.message, second.message)
    assert first.counters["kept_references"] == 0
    assert second.counters["kept_references"] == second.counters["trials"] > 0
    assert second.max_abs_error == first.max_abs_error  # the same trial values, the same answers
    assert second.precision == first.precision and second.precision.startswith("float64 reference")


@pytest.mark.parametrize("name", ["replays_previous", "first_call_only", "pointer_cache", "wrong_sign"])
def test_units_that_cheat_are_caught_on_kept_references(
    name: str, units: Units, fresh_worker: EvaluationWorker
) -> None:
    assert fresh_worker.evaluate(units.request("good_fma")).correct
    report = fresh_worker.evaluate(units.request(name))
    assert not report.correct
    assert report.reason in accepted_reasons(CPU_UNITS / f"{name}.cpp"), report.message


def test_a_cache_of_no_bytes_keeps_nothing(units: Units, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EVALUATION_TRIAL_CACHE_BYTES", "0")
    with EvaluationWorker("cpu", cpu_threads=2) as worker:
        worker.evaluate(units.request("good_fma"))
        again = worker.evaluate(units.request("good_fma"))
    assert again.correct and again.counters["kept_references"] == 0

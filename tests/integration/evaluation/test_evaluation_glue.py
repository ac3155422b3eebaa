"""Candidates with Python glue: launched through `kf`, weights copied, outputs checked, checks enforced."""

from __future__ import annotations

import pytest
from evaluation_fixtures import FIXTURES, Units, task

from kernelfoundry.evaluation import EvaluationWorker

GLUES = FIXTURES / "glue"


def glue(name: str) -> str:
    return (GLUES / f"{name}.py").read_text()


def test_glue_launching_the_unit_is_correct(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("good_fma", glue=glue("good_fma")))
    assert report.correct, report.message
    assert report.counters["kernel_launches"] >= 5


def test_glue_gets_the_reference_weights_by_name(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("good_scale", task("scale"), glue=glue("good_scale")))
    assert report.correct, report.message


@pytest.mark.parametrize(
    "name", ["never_launches", "wrong_dtype", "wrong_shape", "reference_fallback", "raises"]
)
def test_bad_glue_is_rejected_with_its_reason(name: str, units: Units, worker: EvaluationWorker) -> None:
    expected = glue(name).splitlines()[0].split("expect:", 1)[1].split()[0]
    report = worker.evaluate(units.request("good_fma", glue=glue(name)))
    assert report.reason == expected, report.message


def test_unit_writing_only_part_of_a_glue_output_is_caught(units: Units, worker: EvaluationWorker) -> None:
    report = worker.evaluate(units.request("unwritten_half", glue=glue("good_fma")))
    assert report.reason == "output_not_written", report.message

"""Report serialisation, the no-speedup-on-failure rule, and settings validation."""

from __future__ import annotations

import json

import pytest

from kernelfoundry.evaluation import EvaluationReport, EvaluationSettings, ShapeReport


def test_report_round_trips_through_json() -> None:
    report = EvaluationReport(
        compiled=True,
        correct=True,
        runtime_ms=1.0,
        baseline_ms=2.0,
        speedup=2.0,
        per_shape=[ShapeReport("s", runtime_ms=1.0, baseline_ms=2.0, speedup=2.0)],
        counters={"trials": 5},
    )
    assert EvaluationReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_failed_report_never_carries_a_speedup() -> None:
    report = EvaluationReport(
        compiled=True,
        correct=False,
        reason="wrong_result",
        speedup=3.0,
        speedup_vs_compile=2.0,
        per_shape=[ShapeReport("s", speedup=3.0, speedup_vs_compile=2.0)],
    )
    assert report.speedup is None and report.speedup_vs_compile is None
    assert report.per_shape[0].speedup is None
    assert EvaluationReport.failure("timeout", "too slow").speedup is None


def test_settings_refuse_fewer_than_five_trials_or_three_input_sets() -> None:
    with pytest.raises(ValueError):
        EvaluationSettings(correctness_trials=4)
    with pytest.raises(ValueError):
        EvaluationSettings(input_sets=2)
    with pytest.raises(ValueError):
        EvaluationSettings(deadline_s=0)


def test_settings_defaults_depend_on_the_backend() -> None:
    settings = EvaluationSettings()
    assert settings.runs_for("cuda") == 100
    assert settings.runs_for("cpu") == 30
    assert settings.compile_baseline_for("cuda") and not settings.compile_baseline_for("cpu")
    assert EvaluationSettings(timed_runs=7).runs_for("cuda") == 7
    assert EvaluationSettings(measure_torch_compile=True).compile_baseline_for("cpu")

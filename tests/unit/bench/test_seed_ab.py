"""The seed A/B's row: both seeds judged by the evaluator, each seed's median over its evaluations."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from seed_ab import ab_row

from kernelfoundry.evaluation import EvaluationReport


def timed(runtime_ms: float, eager_ms: float) -> EvaluationReport:
    return EvaluationReport(compiled=True, correct=True, runtime_ms=runtime_ms, baseline_ms=eager_ms)


def test_each_seed_is_its_median_evaluation_and_the_ratio_is_base_over_new() -> None:
    reports = {
        "base": [timed(3.0, 5.0), timed(3.4, 5.2), timed(2.9, 4.8)],
        "new": [timed(2.0, 5.1), timed(2.6, 5.0), timed(2.4, 4.9)],
    }
    row = ab_row({"task": "t"}, reports)
    assert (row["base_ms"], row["new_ms"]) == (3.0, 2.4)
    assert row["speedup"] == pytest.approx(3.0 / 2.4)
    assert row["eager_ms"] == 5.0  # median of the six eager timings
    assert row["new_evaluations_ms"] == [2.0, 2.6, 2.4] and "error" not in row


def test_a_seed_the_evaluator_refuses_is_the_rows_error_and_no_ratio_is_given() -> None:
    refused = EvaluationReport.failure("output_mismatch", "max abs error 0.5")
    row = ab_row({"task": "t"}, {"base": [timed(3.0, 5.0)], "new": [timed(2.0, 5.0), refused]})
    assert row["error"] == "new: output_mismatch: max abs error 0.5"
    assert "speedup" not in row and "base_ms" not in row

import pytest

from kernelfoundry.domain.archive import Placement
from kernelfoundry.domain.evaluation import EvaluationInfo
from kernelfoundry.domain.outcomes import OutcomeCounts, OutcomeKind, classify_outcome


@pytest.mark.parametrize(
    ("evaluation", "reason"),
    [
        (EvaluationInfo("x", True, speedup=7.0, failure_reason="timeout"), "timeout"),
        (EvaluationInfo("x", False, speedup=7.0), "wrong_result"),
        (EvaluationInfo("x", True, speedup=None), "no_timing"),
        (EvaluationInfo("x", True, speedup=float("nan")), "no_timing"),
        (EvaluationInfo("x", False, failure_reason="compile_error"), "compile_error"),
    ],
)
def test_failed_or_timed_out_evaluation_never_carries_positive_fitness(evaluation, reason):
    assert evaluation.fitness == 0.0
    outcome = classify_outcome(evaluation, Placement.REJECTED, parent_fitness=2.0)
    assert outcome.kind is OutcomeKind.FAILED
    assert outcome.label == f"failed:{reason}"
    assert outcome.fitness <= 0.0


@pytest.mark.parametrize(
    ("speedup", "placement", "label"),
    [
        (3.0, Placement.NEW_CELL, "new_cell"),
        (3.0, Placement.ELITE_REPLACED, "elite_replaced"),
        (2.5, Placement.NOT_BETTER, "improvement"),
        (2.01, Placement.NOT_BETTER, "neutral"),
        (1.5, Placement.NOT_BETTER, "regression"),
    ],
)
def test_outcome_is_classified_against_placement_then_parent(speedup, placement, label):
    outcome = classify_outcome(EvaluationInfo("x", True, speedup=speedup), placement, parent_fitness=2.0)
    assert outcome.label == label


def test_outcome_counts_merge_and_serialise():
    a, b = OutcomeCounts(), OutcomeCounts()
    a.add(classify_outcome(EvaluationInfo("x", False, failure_reason="timeout"), Placement.REJECTED, 1.0))
    a.add("improvement")
    b.add("improvement")
    b.add("new_cell")
    merged = a.merge(b)
    assert merged.to_dict() == {"failed:timeout": 1, "improvement": 2, "new_cell": 1}
    assert merged.total == 4 and merged.failed == 1
    assert a.to_dict() == {"failed:timeout": 1, "improvement": 1}  # merge does not mutate

from kernelfoundry.domain.budgets import BudgetTracker
from kernelfoundry.domain.evaluation import EvaluationInfo, Mismatch
from kernelfoundry.domain.repair import RepairPolicy
from kernelfoundry.tasks.model import Budget


def test_compile_error_gets_a_repair_attempt_until_the_limit():
    policy = RepairPolicy(max_attempts=2)
    failed = EvaluationInfo(
        "c1", False, failure_reason="compile_error", message="k.cu(4): error: x undefined"
    )
    assert policy.allows(failed, attempts_so_far=0)
    assert policy.allows(failed, attempts_so_far=1)
    assert not policy.allows(failed, attempts_so_far=2)
    request = policy.request("c1", "p1", failed, attempts_so_far=1)
    assert request.attempt == 2 and request.parent_id == "p1" and request.reason == "compile_error"
    assert "k.cu(4): error: x undefined" in request.feedback


def test_timeouts_and_successes_are_not_repaired():
    policy = RepairPolicy()
    assert not policy.allows(EvaluationInfo("c", True, failure_reason="timeout"), 0)
    assert not policy.allows(EvaluationInfo("c", True, speedup=2.0), 0)
    assert policy.request("c", None, EvaluationInfo("c", True, failure_reason="timeout"), 0) is None


def test_wrong_result_feedback_names_the_largest_mismatch():
    evaluation = EvaluationInfo(
        "c", False, mismatch=Mismatch(0.25, index=(3, 7), expected=1.0, actual=1.25, output=0)
    )
    text = RepairPolicy().feedback(evaluation)
    assert "`wrong_result`" in text
    assert "|diff| = 0.25 in output 0 at index [3, 7] (expected 1, got 1.25)" in text


def test_long_compile_logs_keep_the_error_lines_first():
    log = "\n".join([f"note: instantiated from {i}" for i in range(50)] + ["k.cu(9): error: bad cast"])
    text = RepairPolicy(max_log_lines=5).feedback(
        EvaluationInfo("c", False, failure_reason="compile_error", message=log)
    )
    assert text.splitlines()[1] == "k.cu(9): error: bad cast"
    assert len(text.splitlines()) == 1 + 5 + 1


def test_budget_stops_on_each_limit_with_its_reason():
    t = BudgetTracker(Budget(iterations=2, wall_time_s=None, evaluations=None), started_at=100.0)
    t.generation_started()
    assert not t.check(100.0)
    t.generation_started()
    assert t.check(100.0).reason == "iterations"

    t = BudgetTracker(Budget(iterations=None, wall_time_s=60.0), started_at=100.0)
    assert not t.check(159.0) and t.check(160.0).reason == "wall_time"

    t = BudgetTracker(Budget(iterations=None, evaluations=3), started_at=0.0)
    for f in (1.0, 0.0, 2.0):
        t.evaluation_finished(f)
    assert t.check(0.0).reason == "evaluations"


def test_patience_counts_generations_without_a_new_best():
    t = BudgetTracker(Budget(iterations=None, patience=2), started_at=0.0)
    t.generation_started()
    assert t.evaluation_finished(1.5)  # new best
    t.generation_started()
    assert t.stale_generations == 0
    assert not t.evaluation_finished(1.0)
    t.generation_started()
    assert t.stale_generations == 1 and not t.check(0.0)
    t.generation_started()
    assert t.check(0.0).reason == "patience"


def test_generations_that_bring_nothing_new_stop_the_search_after_three_in_a_row():
    t = BudgetTracker(Budget(iterations=None), started_at=0.0)
    t.generation_ended(0)
    t.generation_ended(0)
    t.generation_ended(2)  # a new candidate: the count starts again
    t.generation_ended(0)
    t.generation_ended(0)
    assert not t.check(0.0)
    t.generation_ended(0)
    assert t.check(0.0).reason == "nothing_new"

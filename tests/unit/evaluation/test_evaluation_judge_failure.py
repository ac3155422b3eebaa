"""Which of the judge's failures are its own allocations failing (reasons.is_out_of_memory)."""

from __future__ import annotations

import pytest
import torch

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.reasons import EvaluationFailure


def raised_from(cause: BaseException, reason: str) -> EvaluationFailure:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise EvaluationFailure(reason, f"reference forward failed: {exc}") from exc
    except EvaluationFailure as failure:
        return failure


@pytest.mark.parametrize(
    "cause",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes"),
    ],
)
def test_an_allocation_that_failed_is_the_judge_s_memory(cause: BaseException) -> None:
    for reason in (reasons.REFERENCE_ERROR, reasons.WORKER_ERROR):
        failure = reasons.judge_failure(raised_from(cause, reason))
        assert failure.reason == reasons.JUDGE_OUT_OF_MEMORY
        assert failure.message.startswith("the judge ran out of memory: reference forward failed")


def test_a_cause_two_steps_down_is_found() -> None:
    from kernelfoundry.tasks.model import TaskError

    try:
        try:
            raise MemoryError()
        except MemoryError as exc:
            raise TaskError("bad_inputs", "get_inputs() raised MemoryError") from exc
    except TaskError as task_error:
        failure = raised_from(task_error, reasons.REFERENCE_ERROR)
    assert reasons.judge_failure(failure).reason == reasons.JUDGE_OUT_OF_MEMORY


def test_other_failures_and_the_candidate_s_reasons_stay_as_they_are() -> None:
    bug = raised_from(ValueError("shapes do not match"), reasons.REFERENCE_ERROR)
    assert reasons.judge_failure(bug) is bug
    candidate = raised_from(MemoryError(), reasons.KERNEL_ERROR)  # the runner's, never the judge's
    assert reasons.judge_failure(candidate) is candidate
    assert not reasons.is_out_of_memory(RuntimeError("index out of range"))
    assert not reasons.is_out_of_memory(None)

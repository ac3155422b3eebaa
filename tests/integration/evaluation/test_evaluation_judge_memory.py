"""A judge that runs out of memory itself (its reference, eager or input draws) says so with its own
reason, judge_out_of_memory, which the executor takes as no verdict on the candidate; the task's own
failures stay reference_error."""

from __future__ import annotations

from dataclasses import replace

import pytest
from evaluation_fixtures import FMA, Units

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.backends.cpu import CPU
from kernelfoundry.evaluation.engine import run_evaluation
from kernelfoundry.evaluation.runner_client import RunnerProcess

FORWARD = "        return a * b + a"
GET_INPUTS = "    return [torch.randn(N), torch.randn(N)]"
CUDA_OOM = 'torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")'
CPU_OOM = 'RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can\'t allocate memory")'


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        (FORWARD, f"        raise {CUDA_OOM}", reasons.JUDGE_OUT_OF_MEMORY),
        (FORWARD, f"        raise {CPU_OOM}", reasons.JUDGE_OUT_OF_MEMORY),
        (GET_INPUTS, "    raise MemoryError()", reasons.JUDGE_OUT_OF_MEMORY),
        (FORWARD, '        raise ValueError("the task is wrong")', reasons.REFERENCE_ERROR),
    ],
    ids=["cuda_oom_in_forward", "cpu_allocator_in_forward", "memory_error_in_get_inputs", "task_bug"],
)
def test_the_judge_s_own_allocation_failure_is_no_reference_error(
    units: Units, old: str, new: str, reason: str
) -> None:
    assert old in FMA.reference_source
    failing = replace(FMA, reference_source=FMA.reference_source.replace(old, new))
    report, broken = run_evaluation(units.request("good_fma", failing), lambda: RunnerProcess(CPU, "cpu"))
    assert report.reason == reason, report.message
    assert not report.correct and not broken
    if reason == reasons.JUDGE_OUT_OF_MEMORY:
        assert "the judge ran out of memory" in report.message
        assert reason in reasons.RECYCLING_REASONS  # a fresh judge gives back what this one cached

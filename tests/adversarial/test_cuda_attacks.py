"""Every CUDA attack of tests/fixtures/attacks/cuda is caught with its reason by one worker that keeps
serving (after each, the honest CUDA control must pass on the same worker). Needs a GPU and nvcc:

    .venv/bin/python -m pytest -q -m gpu tests/adversarial/test_cuda_attacks.py
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace

import pytest
from attacks import ATTACKS, FAST, SHORT_DEADLINE, Arsenal, Attack, catalogue, read_attack
from test_cpu_attacks import assert_verdict

from kernelfoundry.evaluation import EvaluationWorker, reasons

pytestmark = pytest.mark.gpu

CUDA_ATTACKS = catalogue("cuda")
CONTROL = read_attack(ATTACKS / "cuda" / "control_fma.cu")
CUDA_FAST = replace(FAST, timed_runs=30, cpu_threads=None)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and shutil.which("nvcc") is not None


@pytest.fixture(scope="module")
def worker() -> Iterator[EvaluationWorker]:
    if not cuda_available():
        pytest.skip("needs a CUDA device and nvcc")
    with EvaluationWorker("cuda:0") as shared:
        yield shared


@pytest.mark.parametrize("attack", CUDA_ATTACKS, ids=lambda a: a.name)
def test_cuda_attack_is_caught_and_the_worker_keeps_serving(
    attack: Attack, arsenal: Arsenal, worker: EvaluationWorker
) -> None:
    settings = replace(SHORT_DEADLINE, cpu_threads=None) if attack.expect == reasons.TIMEOUT else CUDA_FAST
    assert_verdict(worker.evaluate(arsenal.request(attack, settings)), attack)
    control = worker.evaluate(arsenal.request(CONTROL, CUDA_FAST))
    assert control.correct, f"after {attack.name}: {control.reason}: {control.message}"

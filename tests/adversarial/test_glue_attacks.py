"""Every glue attack of tests/fixtures/attacks/glue is caught with its reason by one worker that keeps
serving (after each, the honest glue control must pass on the same worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from attacks import ATTACKS, FAST, Arsenal, Attack, catalogue, read_attack
from test_cpu_attacks import assert_control_passes, assert_verdict

from kernelfoundry.evaluation import EvaluationWorker

GLUE_ATTACKS = catalogue("glue")
CONTROL = read_attack(ATTACKS / "glue" / "control_glue.py")


@pytest.fixture(scope="module")
def worker() -> Iterator[EvaluationWorker]:
    with EvaluationWorker("cpu", cpu_threads=2) as shared:
        yield shared


@pytest.mark.parametrize("attack", GLUE_ATTACKS, ids=lambda a: a.name)
def test_glue_attack_is_caught_and_the_worker_keeps_serving(
    attack: Attack, arsenal: Arsenal, worker: EvaluationWorker
) -> None:
    assert_verdict(worker.evaluate(arsenal.request(attack, FAST)), attack)
    assert_control_passes(worker, arsenal, CONTROL, attack)

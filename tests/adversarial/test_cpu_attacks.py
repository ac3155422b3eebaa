"""Every CPU attack of tests/fixtures/attacks/cpu is caught with its reason by one worker that keeps serving.

After each attack the same EvaluationWorker evaluates the honest control `control_fma` and must find
it correct: an attack may cost its own evaluation, never the worker.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from attacks import ATTACKS, FAST, SHORT_DEADLINE, WITH_BASELINE, Arsenal, Attack, catalogue, read_attack

from kernelfoundry.evaluation import EvaluationReport, EvaluationWorker, reasons

CPU_ATTACKS = catalogue("cpu")
# Open holes (docs/evaluation.md, "Adversarial suite"): the evaluator catches these only sometimes, so
# their tests may pass or fail without failing the suite; the hole stays listed until it is closed.
KNOWN_HOLES = {
    "content_hash_cache": "timed calls reuse input contents the runner has seen: a cache keyed by a hash "
    "of the inputs is caught by the timing cross-check only sometimes",
}


def _params(attacks: list[Attack]) -> list[object]:
    return [
        pytest.param(a, marks=pytest.mark.xfail(reason=KNOWN_HOLES[a.name], strict=False))
        if a.name in KNOWN_HOLES
        else a
        for a in attacks
    ]


CONTROL = read_attack(ATTACKS / "cpu" / "control_fma.cpp")


@pytest.fixture(scope="module")
def worker() -> Iterator[EvaluationWorker]:
    with EvaluationWorker("cpu", cpu_threads=2) as shared:
        yield shared


def settings_for(attack: Attack):
    if attack.expect == reasons.TIMEOUT:
        return SHORT_DEADLINE
    if "thread settings" in attack.attack_class:
        return WITH_BASELINE
    return FAST


def assert_verdict(report: EvaluationReport, attack: Attack) -> None:
    if attack.expect == "ok":
        assert report.correct, f"{attack.name}: {report.reason}: {report.message}"
        assert report.reason is None
        return
    assert report.reason == attack.expect, f"{attack.name}: got {report.reason}: {report.message}"
    assert not report.correct
    assert report.speedup is None and report.runtime_ms is None
    assert report.message


def assert_control_passes(worker: EvaluationWorker, arsenal: Arsenal, control: Attack, after: Attack) -> None:
    """The honest control is correct on the same worker. On a loaded host the judge's outside timing
    cross-check can refuse an honest kernel (`timing_mismatch`, load noise, not the attack: the control
    runs in a fresh runner); such a refusal is re-evaluated, at most twice. Any other reason fails."""
    for _ in range(3):
        report = worker.evaluate(arsenal.request(control, FAST))
        if report.reason != reasons.TIMING_MISMATCH:
            break
    assert report.correct, f"after {after.name}: {report.reason}: {report.message}"


@pytest.mark.parametrize("attack", _params(CPU_ATTACKS), ids=lambda a: a.name)
def test_attack_is_caught_and_the_worker_keeps_serving(
    attack: Attack, arsenal: Arsenal, worker: EvaluationWorker, listener: socket.socket
) -> None:
    report = worker.evaluate(arsenal.request(attack, settings_for(attack)))
    assert_verdict(report, attack)
    if attack.name == "open_socket":
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected to the service's listener
    assert_control_passes(worker, arsenal, CONTROL, attack)


def test_no_attack_left_a_file_outside_its_scratch_folder(service_dir: Path) -> None:
    for leftover in ("/tmp/kf-attack-escaped", "/tmp/kf-pwned", "/tmp/kf-glue-escaped"):
        assert not os.path.exists(leftover), leftover
    assert list(service_dir.iterdir()) == []

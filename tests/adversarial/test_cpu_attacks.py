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
    assert report.reason in attack.accepted, f"{attack.name}: got {report.reason}: {report.message}"
    assert not report.correct
    assert report.speedup is None and report.runtime_ms is None
    assert report.message


def assert_control_passes(worker: EvaluationWorker, arsenal: Arsenal, control: Attack, after: Attack) -> None:
    """The honest control is correct on the same worker, the first time (on a busy host the timing
    cross-check measures again before it refuses, and discounts what other processes explain)."""
    report = worker.evaluate(arsenal.request(control, FAST))
    assert report.correct, f"after {after.name}: {report.reason}: {report.message}"


@pytest.mark.parametrize("attack", CPU_ATTACKS, ids=lambda a: a.name)
def test_attack_is_caught_and_the_worker_keeps_serving(
    attack: Attack, arsenal: Arsenal, worker: EvaluationWorker, listener: socket.socket
) -> None:
    report = worker.evaluate(arsenal.request(attack, settings_for(attack)))
    assert_verdict(report, attack)
    if attack.name == "open_socket":
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected to the service's listener
    assert_control_passes(worker, arsenal, CONTROL, attack)


def test_a_content_cache_is_timed_with_its_whole_work(arsenal: Arsenal, worker: EvaluationWorker) -> None:
    """Every timed call gets fresh input contents, so a cache keyed by a hash of the inputs never hits
    there: the caching unit's runtime is the honest product's, not the hash's (about N = 192 times less)."""
    cache = worker.evaluate(arsenal.request(read_attack(ATTACKS / "cpu" / "content_hash_cache.cpp"), FAST))
    honest = worker.evaluate(arsenal.request(read_attack(ATTACKS / "cpu" / "control_matmul.cpp"), FAST))
    assert cache.correct and honest.correct, (cache.message, honest.message)
    counters = cache.counters
    assert counters["refreshed_timed_runs"] == counters["timed_runs"] + counters["warmup_runs"]
    assert cache.runtime_ms is not None and honest.runtime_ms is not None
    # A hit costs a hash of 2 x 192^2 floats, a miss the 192^3 product as well: even on a busy host
    # the two medians stay far closer than the factor of ~100 a hit would show.
    assert cache.runtime_ms > honest.runtime_ms / 4, (cache.runtime_ms, honest.runtime_ms)


def test_no_attack_left_a_file_outside_its_scratch_folder(service_dir: Path) -> None:
    for leftover in ("/tmp/kf-attack-escaped", "/tmp/kf-pwned", "/tmp/kf-glue-escaped"):
        assert not os.path.exists(leftover), leftover
    assert list(service_dir.iterdir()) == []

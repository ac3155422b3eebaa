"""The sealed evaluation: hostile runners and units are caught with their own reasons, and the judge
never holds candidate code. Hostile runners (fake_runner.py) are the real runner with one behaviour
changed; they are driven by the judge's engine in this process, like the judge process does."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from evaluation_fixtures import FAST, FMA, Units, task

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationWorker, reasons
from kernelfoundry.evaluation.backends import backend_for_device
from kernelfoundry.evaluation.engine import run_evaluation
from kernelfoundry.evaluation.runner_client import RunnerProcess
from kernelfoundry.tasks.model import ShapeVariant
from kernelfoundry.toolchains import BuildTarget, build

HERE = Path(__file__).resolve().parent
ATTACKS = HERE / "attacks"
# About a millisecond per call: large enough that a forged claim is far below the judge's estimate.
FMA_1M = task("fused_mul_add", ShapeVariant("n1m", {"N": 1 << 20}))


def judge(request: EvaluationRequest, fake: str = "") -> str | None:
    program = (sys.executable, str(HERE / "fake_runner.py"), fake) if fake else ()
    report, _ = run_evaluation(request, lambda: RunnerProcess(backend_for_device("cpu"), "cpu", program))
    assert not report.correct or report.reason is None
    return report.reason if not report.correct else None


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("forge_high", reasons.TIMING_FORGED),
        ("oversized", reasons.RUNNER_PROTOCOL_VIOLATION),
        ("not_json", reasons.RUNNER_PROTOCOL_VIOLATION),
        ("wrong_nonce", reasons.RUNNER_PROTOCOL_VIOLATION),
        ("extra_message", reasons.RUNNER_PROTOCOL_VIOLATION),
        ("unknown_field", reasons.RUNNER_PROTOCOL_VIOLATION),
        ("busy_after_reply", reasons.BACKGROUND_WORK),
        ("child_process", reasons.BACKGROUND_PROCESS),
    ],
)
def test_hostile_runner_is_caught(mode: str, reason: str, units: Units) -> None:
    assert judge(units.request("good_fma"), mode) == reason


def test_daemon_reparented_to_the_judge_is_caught(units: Units) -> None:
    """Only a subreaper sees a double-forked daemon: the judge process is one (judge.harden)."""
    with EvaluationWorker("cpu", cpu_threads=2) as sealed:
        source = KernelSource("cpp", (ATTACKS / "fork_daemon.cpp").read_text())
        request = EvaluationRequest(FMA, source, units_artifact(units, "fork_daemon"), "cpu", FAST)
        assert sealed.evaluate(request).reason == reasons.BACKGROUND_PROCESS


def units_artifact(units: Units, name: str) -> Path:
    result = build(
        KernelSource("cpp", (ATTACKS / f"{name}.cpp").read_text()), BuildTarget("cpu", "x86_64"), units.cache
    )
    assert result.ok and result.artifact is not None, result.log
    return result.artifact


def test_forged_low_claims_fail_the_cross_check(units: Units) -> None:
    assert judge(units.request("good_fma", FMA_1M), "forge_low") == reasons.TIMING_MISMATCH


def test_honest_runner_passes_the_same_checks(units: Units) -> None:
    assert judge(units.request("good_fma", FMA_1M)) is None


@pytest.fixture(scope="module")
def attack_units(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[KernelSource, Path]]]:
    out = tmp_path_factory.mktemp("attacks")
    built = {}
    for path in sorted(ATTACKS.glob("*.cpp")):
        source = KernelSource("cpp", path.read_text())
        result = build(source, BuildTarget("cpu", "x86_64"), None, out_dir=out / path.stem)
        assert result.ok and result.artifact is not None, result.log
        built[path.stem] = (source, result.artifact)
    yield built


@pytest.mark.parametrize("name", sorted(p.stem for p in ATTACKS.glob("*.cpp")))
def test_attacking_unit_is_caught_by_a_worker_that_keeps_serving(
    name: str, attack_units: dict[str, tuple[KernelSource, Path]], units: Units, worker: EvaluationWorker
) -> None:
    source, artifact = attack_units[name]
    expected = source.code.splitlines()[0].split("expect:", 1)[1].split()[0]
    report = worker.evaluate(EvaluationRequest(FMA, source, artifact, "cpu", FAST))
    assert report.reason == expected, report.message
    assert worker.evaluate(units.request("good_fma")).correct


def test_judge_is_hardened_and_never_maps_a_unit(units: Units, worker: EvaluationWorker) -> None:
    assert worker.evaluate(units.request("good_fma")).correct
    assert {"not dumpable", "child subreaper"} <= set(worker.judge_protections)
    judge_pid = worker.child_pid
    maps = Path(f"/proc/{judge_pid}/maps").read_text()
    artifact = units.artifact("good_fma")
    assert artifact.name not in maps and "kf-unit-" not in maps


def test_judge_releases_its_shared_memory_after_each_evaluation(units: Units) -> None:
    """A worker of its own: the session's shared worker retires its judge every
    MAX_EVALUATIONS_PER_CHILD evaluations, which made the judge's pid vanish here depending on how many
    tests ran before."""

    def memfds(worker: EvaluationWorker) -> int:
        found = 0
        for fd in Path(f"/proc/{worker.child_pid}/fd").iterdir():
            try:
                found += "memfd:" in str(fd.readlink())
            except FileNotFoundError:  # closed meanwhile (the judge starts the next runner)
                continue
        return found

    with EvaluationWorker("cpu", cpu_threads=2) as worker:
        assert worker.evaluate(units.request("good_fma")).correct
        assert memfds(worker) == 0
        assert worker.evaluate(units.request("wrong_sign")).reason == reasons.WRONG_RESULT
        assert memfds(worker) == 0


def test_runner_pool_starts_one_ahead_and_never_hands_out_a_runner_twice() -> None:
    from kernelfoundry.evaluation.judge import RunnerPool

    pool = RunnerPool("cpu")
    pool.prepare()
    first = pool.take()
    pool.prepare()
    second = pool.take()
    try:
        assert first is not second and first.pid != second.pid
        first.wait_ready()  # started ahead: torch imported, the greeting waits on the channel
        assert first.alive()
        assert first.scratch.is_dir() and first.scratch != second.scratch
    finally:
        first.close()
        second.close()
        pool.close()
    assert not first.scratch.exists()


def test_taking_a_runner_starts_the_next_and_settle_waits_for_its_start() -> None:
    """The next candidate's runner starts while this one's trials run; before timing, the pool waits
    until it has started, so no process start competes with a timed call."""
    from kernelfoundry.evaluation.judge import RunnerPool

    pool = RunnerPool("cpu")
    taken = pool.take()
    try:
        (spare,) = pool.idle
        assert spare is not taken and spare.alive()
        assert not spare.ready
        pool.settle()
        assert spare.ready and pool.idle == (spare,)
        assert pool.take() is spare
    finally:
        taken.close()
        spare.close()
        pool.close()


def test_a_deeper_pool_hands_out_the_oldest_runner_and_tops_itself_up() -> None:
    """GPU backends keep several runners ahead (a start there outlasts a whole evaluation): each take
    hands out the runner started longest ago and starts its replacement at once."""
    from kernelfoundry.evaluation.judge import RunnerPool

    pool = RunnerPool("cpu", ahead=3)
    pool.prepare()
    started = pool.idle
    taken = []
    try:
        assert len(started) == 3 and len({r.pid for r in started}) == 3
        taken.append(pool.take())
        assert taken[0] is started[0]
        assert pool.idle[:2] == started[1:] and len(pool.idle) == 3
        started[1].close()  # a runner that died while idle is never handed out
        taken.append(pool.take())
        assert taken[1] is started[2] and len(pool.idle) == 3
        pool.settle()
        assert all(r.ready for r in pool.idle)
    finally:
        for runner in taken:
            runner.close()
        pool.close()
    assert all(not r.alive() for r in (*started, *taken))


def test_a_worker_retires_its_judge_after_its_evaluations(units: Units) -> None:
    with EvaluationWorker("cpu", cpu_threads=2, max_evaluations_per_child=2) as worker:
        assert worker.evaluate(units.request("good_fma")).correct
        first = worker.child_pid
        assert first is not None
        assert worker.evaluate(units.request("good_fma")).correct
        assert worker.child_pid is None  # retired after its second evaluation
        assert worker.evaluate(units.request("good_fma")).correct
        assert worker.child_pid not in (None, first) and worker.children_started == 2

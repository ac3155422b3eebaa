"""The sealed evaluation on a GPU (skipped without one): staged buffers, glue, forged claims, and a
candidate's device failure costing only its runner."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from evaluation_fixtures import FIXTURES, task, with_deadline

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationWorker, reasons
from kernelfoundry.evaluation.backends import backend_for_device
from kernelfoundry.evaluation.engine import run_evaluation
from kernelfoundry.evaluation.runner_client import RunnerProcess
from kernelfoundry.tasks.model import ShapeVariant

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
HERE = Path(__file__).resolve().parent
FMA_16M = task("fused_mul_add", ShapeVariant("n16m", {"N": 1 << 24}))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[KernelSource, Path]]:
    from kernelfoundry.toolchains import BuildTarget, build

    out = tmp_path_factory.mktemp("cuda-units")
    units = {}
    for name in ("good_fma", "out_of_bounds"):
        source = KernelSource("cuda", (FIXTURES / "cuda" / f"{name}.cu").read_text())
        result = build(source, BuildTarget("cuda", "sm90"), None, out_dir=out / name)
        assert result.ok and result.artifact is not None, result.log
        units[name] = (source, result.artifact)
    return units


@pytest.fixture(scope="module")
def cuda_worker() -> Iterator[EvaluationWorker]:
    with EvaluationWorker("cuda:0") as shared:
        yield shared


def test_good_unit_is_correct_and_timed_through_staged_buffers(
    built: dict[str, tuple[KernelSource, Path]], cuda_worker: EvaluationWorker
) -> None:
    source, artifact = built["good_fma"]
    report = cuda_worker.evaluate(EvaluationRequest(FMA_16M, source, artifact, "cuda:0", with_deadline(120)))
    assert report.correct, report.message
    assert report.runtime_ms and report.baseline_ms and report.counters["checked_timed_runs"] >= 3
    assert any("drawn on the device by the runner" in note for note in report.notes), report.notes
    assert {"runner_start", "inputs", "trials", "timed_runs", "cross_check", "baselines"} <= set(
        report.phases_ms
    )
    # every fetch went through the memory the judge lent (device_share.py), none over the host
    counters = report.counters
    assert counters["device_fetches"] >= counters["trials"] + counters["checked_timed_runs"], counters
    assert not any("fetched through the host" in note for note in report.notes), report.notes


def test_outputs_come_through_the_host_when_lending_is_off(
    built: dict[str, tuple[KernelSource, Path]], cuda_worker: EvaluationWorker
) -> None:
    source, artifact = built["good_fma"]
    settings = replace(with_deadline(120), lend_outputs=False)
    report = cuda_worker.evaluate(EvaluationRequest(FMA_16M, source, artifact, "cuda:0", settings))
    assert report.correct, report.message
    assert report.counters["device_fetches"] == 0


def test_inputs_drawn_outside_torchs_generator_are_staged_through_the_host(
    built: dict[str, tuple[KernelSource, Path]], cuda_worker: EvaluationWorker
) -> None:
    """get_inputs() that draws with numpy cannot be drawn again from a seed: the sets are staged."""
    source, artifact = built["good_fma"]
    unseeded = FMA_16M.reference_source.replace(
        "return [torch.randn(N), torch.randn(N)]",
        "import numpy\n    drawn = numpy.random.randn(N).astype('float32')\n"
        "    return [torch.from_numpy(drawn), torch.randn(N)]",
    )
    assert unseeded != FMA_16M.reference_source
    task = replace(FMA_16M, reference_source=unseeded)
    report = cuda_worker.evaluate(EvaluationRequest(task, source, artifact, "cuda:0", with_deadline(120)))
    assert report.correct, report.message
    assert any("staged through the host" in note for note in report.notes), report.notes


def test_glue_runs_in_the_runner_on_the_device(
    built: dict[str, tuple[KernelSource, Path]], cuda_worker: EvaluationWorker
) -> None:
    source, artifact = built["good_fma"]
    glue = (FIXTURES / "glue" / "good_fma.py").read_text()
    with_glue = KernelSource("cuda", source.code, glue=glue)
    report = cuda_worker.evaluate(
        EvaluationRequest(FMA_16M, with_glue, artifact, "cuda:0", with_deadline(120))
    )
    assert report.correct, report.message
    assert report.counters["device_fetches"] > 0, report.counters


def test_illegal_address_costs_only_the_runner(
    built: dict[str, tuple[KernelSource, Path]], cuda_worker: EvaluationWorker
) -> None:
    bad, bad_artifact = built["out_of_bounds"]
    good, good_artifact = built["good_fma"]
    judge = cuda_worker.child_pid
    report = cuda_worker.evaluate(EvaluationRequest(FMA_16M, bad, bad_artifact, "cuda:0", with_deadline(60)))
    assert report.reason in (reasons.ILLEGAL_ADDRESS, reasons.CRASH), report.message
    after = cuda_worker.evaluate(
        EvaluationRequest(FMA_16M, good, good_artifact, "cuda:0", with_deadline(120))
    )
    assert after.correct, after.message
    assert cuda_worker.child_pid == judge


def test_forged_low_claims_fail_the_cross_check_on_the_gpu(
    built: dict[str, tuple[KernelSource, Path]],
) -> None:
    source, artifact = built["good_fma"]
    program = (sys.executable, str(HERE / "fake_runner.py"), "forge_low")
    request = EvaluationRequest(FMA_16M, source, artifact, "cuda:0", with_deadline(120))
    report, _ = run_evaluation(
        request, lambda: RunnerProcess(backend_for_device("cuda:0"), "cuda:0", program)
    )
    assert report.reason == reasons.TIMING_MISMATCH, report.message

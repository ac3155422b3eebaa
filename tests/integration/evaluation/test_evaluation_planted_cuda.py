"""The planted CUDA units on a real GPU (skipped without one; bench/gpu_check.py runs them on the H200)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from evaluation_fixtures import FIXTURES, accepted_reasons, expected_reason, task, with_deadline

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationWorker

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA_UNITS = sorted((FIXTURES / "cuda").glob("*.cu"))


@pytest.fixture(scope="module")
def cuda_worker() -> Iterator[EvaluationWorker]:
    with EvaluationWorker("cuda:0") as shared:
        yield shared


@pytest.mark.parametrize("unit", CUDA_UNITS, ids=lambda p: p.stem)
def test_planted_cuda_unit_gets_its_reason(unit: Path, cuda_worker: EvaluationWorker, tmp_path: Path) -> None:
    from kernelfoundry.toolchains import BuildTarget, build

    source = KernelSource("cuda", unit.read_text())
    built = build(source, BuildTarget("cuda", "sm90"), None, out_dir=tmp_path)
    assert built.ok, built.log
    the_task = task("row_sum" if unit.stem.startswith("row_sum") else "fused_mul_add")
    expected = expected_reason(unit)
    settings = with_deadline(15.0 if expected == "timeout" else 120.0)
    report = cuda_worker.evaluate(EvaluationRequest(the_task, source, built.artifact, "cuda:0", settings))
    shown = json.dumps(report.to_dict(), default=str)
    if expected == "ok":
        assert report.reason is None, shown
    else:
        assert report.reason in accepted_reasons(unit), shown

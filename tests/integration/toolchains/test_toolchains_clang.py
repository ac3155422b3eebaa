"""The cpu_clang backend end to end: clang++ builds a unit (a planted one and a heuristic seed that
includes <omp.h>), and the product's evaluator (EvaluationWorker) judges it correct and times it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, EvaluationWorker
from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.toolchains import BuildCache, BuildTarget, build
from kernelfoundry.toolchains.clang import ClangToolchain

pytestmark = pytest.mark.skipif(ClangToolchain().version() is None, reason="clang++ is not installed")

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"
TARGET = BuildTarget("cpu_clang", "x86_64")
FAST = EvaluationSettings(warmup_runs=1, timed_runs=5, deadline_s=120.0, cpu_threads=2)


@pytest.fixture(scope="module")
def worker():
    with EvaluationWorker("cpu", cpu_threads=2) as shared:
        yield shared


def built(source: KernelSource, cache: BuildCache) -> Path:
    result = build(source, TARGET, cache)
    assert result.ok and result.artifact is not None, result.log
    assert result.toolchain.startswith("clang++ ") and "-fopenmp=libgomp" in result.flags
    return result.artifact


def test_a_planted_unit_built_by_clang_is_judged_correct_and_timed(worker, tmp_path):
    source = KernelSource("cpp", (FIXTURES / "cpu" / "good_fma.cpp").read_text())
    task = Task("fused_mul_add", (FIXTURES / "tasks" / "fused_mul_add.py").read_text())
    report = worker.evaluate(
        EvaluationRequest(task, source, built(source, BuildCache(tmp_path)), "cpu", FAST)
    )
    assert report.correct, report.message
    assert report.runtime_ms and report.runtime_ms > 0 and report.speedup and report.speedup > 0


def test_a_heuristic_seed_built_by_clang_runs_on_gccs_openmp_runtime(worker, tmp_path):
    task = load_task(ROOT / "tasks" / "level1_relu.py")
    task = Task(
        task.name, task.reference_source, shapes=(ShapeVariant("small", {"batch_size": 16, "dim": 4096}),)
    )
    seeds = HeuristicGenerator().generate_sync(GenerationRequest("clang", task, "cpu", count=1)).candidates
    assert seeds and "#include <omp.h>" in seeds[0].source.code
    artifact = built(seeds[0].source, BuildCache(tmp_path))
    linked = subprocess.run(["ldd", str(artifact)], capture_output=True, text=True).stdout
    assert "libgomp" in linked and "libomp.so" not in linked
    report = worker.evaluate(EvaluationRequest(task, seeds[0].source, artifact, "cpu", FAST))
    assert report.correct, report.message
    assert report.runtime_ms and report.runtime_ms > 0

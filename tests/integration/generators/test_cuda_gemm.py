"""The CUDA GEMM family (cuda_gemm.py) builds with nvcc for sm_90 at every tunable combination, and on a
GPU matches the reference on awkward shapes (M, N, K not multiples of the tiles, K not a multiple of 4)."""

from __future__ import annotations

import itertools
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import ShapeVariant, Task

TASKS = Path(__file__).resolve().parents[3] / "tasks"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

GEMM_TASKS = ("level2_gemm_scale_gelu", "level2_gemm_sigmoid_sum")
COMBOS = [{"BM": bm, "BN": bn, "BK": bk} for bm, bn, bk in itertools.product((64, 128), (64, 128), (8, 16))]
AWKWARD = [
    {"batch_size": 37, "in_features": 30, "out_features": 70},  # K % 4 != 0: scalar loads, ragged tiles
    {"batch_size": 130, "in_features": 36, "out_features": 132},  # float4 loads and stores, 2 x 2+ tiles
    {"batch_size": 300, "in_features": 104, "out_features": 201},  # float4 loads, N odd: scalar stores
    {"batch_size": 3, "in_features": 1, "out_features": 5},  # one partial k slice, one small tile
]


def task(name: str, shape: dict[str, int]) -> Task:
    return Task(name, (TASKS / f"{name}.py").read_text(), shapes=(ShapeVariant("odd", shape),))


def gemm_source(t: Task) -> KernelSource:
    found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16)).candidates
    (gemm,) = [c for c in found if parse_variant(c.source.code).gemm]
    return gemm.source


def with_params(source: KernelSource, params: dict[str, int]) -> KernelSource:
    return KernelSource(
        source.language, source.code, source.entry_point, source.glue, source.tunables, params
    )


def test_every_tunable_combination_builds_for_sm90(tmp_path: Path) -> None:
    from kernelfoundry.toolchains import BuildCache, BuildTarget, build

    declared = {}
    units = []
    for name in GEMM_TASKS:
        source = gemm_source(task(name, AWKWARD[0]))
        declared[name] = {t.name: t.values for t in source.tunables}
        units += [with_params(source, combo) for combo in COMBOS]
    for values in declared.values():  # COMBOS is every combination the unit declares
        assert values == {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16)}
    target, cache = BuildTarget("cuda", "sm90"), BuildCache(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        built = list(pool.map(lambda s: build(s, target, cache), units))
    failed = [(dict(u.params), b.reason, b.log) for u, b in zip(units, built, strict=True) if not b.ok]
    assert not failed, failed


@pytest.mark.parametrize("shape", AWKWARD, ids=lambda s: "x".join(str(v) for v in s.values()))
@pytest.mark.parametrize("name", GEMM_TASKS)
def test_gemm_units_are_correct_on_awkward_shapes_at_every_tiling(
    name: str, shape: dict[str, int], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, EvaluationWorker
    from kernelfoundry.toolchains import BuildCache, BuildTarget, build

    t = task(name, shape)
    units = [with_params(gemm_source(t), combo) for combo in COMBOS]
    target, cache = BuildTarget("cuda", "sm90"), BuildCache(tmp_path)
    settings = EvaluationSettings(measure_torch_compile=False)
    worker = EvaluationWorker("cuda:0")
    try:
        with ThreadPoolExecutor(4) as pool:
            built = list(pool.map(lambda s: build(s, target, cache), units))
        failures = []
        for unit, b in zip(units, built, strict=True):
            assert b.ok and b.artifact is not None, b.log
            report = worker.evaluate(
                EvaluationRequest(
                    task=t, kernel=unit, artifact=b.artifact, device="cuda:0", settings=settings
                )
            )
            if not report.correct:
                failures.append(f"{dict(unit.params)}: {report.reason} {report.message}")
        assert not failures, failures
    finally:
        worker.close()

"""The CUDA GEMM family (cuda_gemm.py) builds with nvcc for sm_90 at every tunable combination, and on a
GPU matches the reference on awkward shapes (M, N, K not multiples of the tiles, K not a multiple of 4):
linears with a tail, and matmuls with either operand given transposed, a triangle kept, A of rank 3, a
tail."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import ShapeVariant, Task
from tests.integration.generators.cuda_judge import built_units_and_worker, with_params

TASKS = Path(__file__).resolve().parents[3] / "tasks"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

GEMM_TASKS = ("level2_gemm_scale_gelu", "level2_gemm_sigmoid_sum")
COMBOS = [{"BM": bm, "BN": bn, "BK": bk} for bm, bn, bk in itertools.product((64, 128), (64, 128), (8, 16))]
TC_COMBOS = [{"BK": bk, "KF_MIN_BLOCKS": b} for bk, b in itertools.product((8, 16), (1, 2))]
AWKWARD = [
    {"batch_size": 37, "in_features": 30, "out_features": 70},  # K % 4 != 0: scalar loads, ragged tiles
    {"batch_size": 130, "in_features": 36, "out_features": 132},  # float4 loads and stores, 2 x 2+ tiles
    {"batch_size": 300, "in_features": 104, "out_features": 201},  # float4 loads, N odd: scalar stores
    {"batch_size": 3, "in_features": 1, "out_features": 5},  # one partial k slice, one small tile
]


# Matmul graphs: `{expr}` of the forward inputs A and B (shapes from A_SHAPE / B_SHAPE over M, K, N).
_MATMUL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return {expr}


M = 1
K = 1
N = 1


def get_inputs():
    return [torch.{draw}({a}), torch.{draw}({b})]


def get_init_inputs():
    return []
"""
MATMULS = {  # name: (expression, A's shape, B's shape)
    "nn": ("torch.matmul(A, B)", "M, K", "K, N"),
    "tn": ("torch.matmul(A.T, B)", "K, M", "K, N"),
    "nt": ("torch.matmul(A, B.T)", "M, K", "N, K"),
    "tt": ("A.T @ B.T", "K, M", "N, K"),
    "triu": ("torch.triu(torch.matmul(A, B))", "M, K", "K, N"),
    "tril_below": ("torch.tril(A @ B, diagonal=-3)", "M, K", "K, N"),
    "rank3": ("torch.matmul(A, B)", "3, M, K", "K, N"),
    "relu_tail": ("torch.relu(A @ B) * 0.5", "M, K", "K, N"),
    "sum_tail": ("torch.sum(torch.sigmoid(A @ B), dim=1)", "M, K", "K, N"),
}
MATMUL_SHAPES = [
    {"M": 37, "K": 30, "N": 70},  # no float4 runs anywhere, ragged tiles
    {"M": 132, "K": 36, "N": 136},  # float4 along every operand's contiguous dim
    {"M": 130, "K": 1, "N": 5},  # one partial k slice
    {"M": 37, "K": 6004, "N": 70},  # one tile over a long K: a bare matmul splits K across blocks
]


def matmul_task(name: str, shape: dict[str, int]) -> Task:
    """A long K draws from [0, 1), as KernelBench's matmuls do: over thousands of terms of both signs a
    float32 sum in any order but cuBLAS's can leave more than twice eager's error on outputs near zero,
    and the check here is of the split's indexing, not of summation order."""
    expr, a, b = MATMULS[name]
    draw = "rand" if shape["K"] >= 2048 else "randn"
    source = _MATMUL.format(expr=expr, a=a, b=b, draw=draw)
    return Task(f"matmul_{name}", source, shapes=(ShapeVariant("odd", shape),))


def task(name: str, shape: dict[str, int]) -> Task:
    return Task(name, (TASKS / f"{name}.py").read_text(), shapes=(ShapeVariant("odd", shape),))


def gemm_source(t: Task, tensor_cores: bool = False) -> KernelSource:
    """The task's SIMT GEMM unit, or its 3xTF32 tensor-core unit."""
    found = HeuristicGenerator().generate_sync(GenerationRequest("g", t, "cuda", count=16)).candidates
    variants = [(c, parse_variant(c.source.code)) for c in found]
    (gemm,) = [c for c, v in variants if v is not None and v.gemm and v.tensor_cores == tensor_cores]
    return gemm.source


def test_every_tunable_combination_builds_for_sm90(tmp_path: Path) -> None:
    from kernelfoundry.toolchains import BuildCache, BuildTarget, build

    declared = {}
    units = []
    for name in GEMM_TASKS:
        source = gemm_source(task(name, AWKWARD[0]))
        declared[name] = {t.name: t.values for t in source.tunables}
        units += [with_params(source, combo) for combo in COMBOS]
    for name in MATMULS:
        source = gemm_source(matmul_task(name, MATMUL_SHAPES[0]))
        declared[name] = {t.name: t.values for t in source.tunables}
        units += [with_params(source, combo) for combo in (COMBOS[0], COMBOS[-1])]
    for values in declared.values():  # COMBOS is every combination the unit declares
        assert values == {"BM": (64, 128), "BN": (64, 128), "BK": (8, 16)}
    for name in GEMM_TASKS:
        source = gemm_source(task(name, AWKWARD[0]), tensor_cores=True)
        assert {t.name: t.values for t in source.tunables} == {"BK": (8, 16), "KF_MIN_BLOCKS": (1, 2)}
        units += [with_params(source, combo) for combo in TC_COMBOS]
    for name in MATMULS:
        units.append(with_params(gemm_source(matmul_task(name, MATMUL_SHAPES[0]), tensor_cores=True), {}))
    target, cache = BuildTarget("cuda", "sm90"), BuildCache(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        built = list(pool.map(lambda s: build(s, target, cache), units))
    failed = [(dict(u.params), b.reason, b.log) for u, b in zip(units, built, strict=True) if not b.ok]
    assert not failed, failed


# every operand whose rows are no float4 runs staged padded (the launcher's rule: where the product
# dwarfs the copy), at the shapes where some are: K or N not a multiple of 4
STAGED = {"KF_STAGE_RATIO": 0}
STAGED_SHAPES = [MATMUL_SHAPES[0], MATMUL_SHAPES[2]]


def gpu_cases() -> list[tuple[Task, list[dict[str, int]], bool]]:
    """Every (task, tilings, tensor cores) the GPU tests of the tilings judge."""
    cases = []
    for name in GEMM_TASKS:
        for shape in AWKWARD:
            cases += [(task(name, shape), COMBOS, False), (task(name, shape), TC_COMBOS, True)]
    for name in MATMULS:
        for shape in MATMUL_SHAPES:
            cases += [(matmul_task(name, shape), [COMBOS[-1]], False), (matmul_task(name, shape), [{}], True)]
    return cases


def staged_tasks(name: str) -> list[Task]:
    return [task(name, AWKWARD[0])] if name in GEMM_TASKS else [matmul_task(name, s) for s in STAGED_SHAPES]


@pytest.fixture(scope="module")
def gpu_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """Every unit the GPU tests judge, built once, and one evaluation worker for them all."""

    def units() -> list[KernelSource]:
        return [with_params(gemm_source(t, tc), combo) for t, combos, tc in gpu_cases() for combo in combos]

    yield from built_units_and_worker(tmp_path_factory, units, "gemm-builds")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", AWKWARD, ids=lambda s: "x".join(str(v) for v in s.values()))
@pytest.mark.parametrize("name", GEMM_TASKS)
def test_gemm_units_are_correct_on_awkward_shapes_at_every_tiling(
    name: str, shape: dict[str, int], gpu_judge: tuple[Any, Any]
) -> None:
    check_on_gpu(task(name, shape), COMBOS, gpu_judge)
    check_on_gpu(task(name, shape), TC_COMBOS, gpu_judge, tensor_cores=True)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=lambda s: "x".join(str(v) for v in s.values()))
@pytest.mark.parametrize("name", list(MATMULS))
def test_matmul_units_are_correct_on_awkward_shapes(
    name: str, shape: dict[str, int], gpu_judge: tuple[Any, Any]
) -> None:
    check_on_gpu(matmul_task(name, shape), [COMBOS[-1]], gpu_judge)
    check_on_gpu(matmul_task(name, shape), [{}], gpu_judge, tensor_cores=True)


@pytest.fixture(scope="module")
def staged_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """The staged units alone (a session selecting only their test builds no tiling)."""

    def units() -> list[KernelSource]:
        every = [t for name in (*GEMM_TASKS, *MATMULS) for t in staged_tasks(name)]
        return [with_params(gemm_source(t, tc), STAGED) for t in every for tc in (False, True)]

    yield from built_units_and_worker(tmp_path_factory, units, "gemm-staged-builds")


@pytest.mark.gpu
@pytest.mark.parametrize("name", [*GEMM_TASKS, *MATMULS])
def test_staged_operand_rows_are_correct_on_the_gpu(name: str, staged_judge: tuple[Any, Any]) -> None:
    for t in staged_tasks(name):
        for tc in (False, True):
            check_on_gpu(t, [STAGED], staged_judge, tensor_cores=tc)


def check_on_gpu(
    t: Task, combos: list[dict[str, int]], gpu_judge: tuple[Any, Any], tensor_cores: bool = False
) -> None:
    """Every tiling in `combos` of the task's GEMM unit (SIMT, or 3xTF32 on tensor cores) is judged
    correct by the product's evaluator, at KernelBench's float32 tolerance."""
    from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings
    from kernelfoundry.toolchains import BuildTarget, build

    cache, worker = gpu_judge
    # correctness is the point: every trial and check, few timed calls, no baselines
    settings = EvaluationSettings(
        measure_torch_compile=False, measure_baselines=False, timed_runs=10, warmup_runs=1
    )
    failures = []
    for combo in combos:
        unit = with_params(gemm_source(t, tensor_cores), combo)
        b = build(unit, BuildTarget("cuda", "sm90"), cache)  # a cache hit
        assert b.ok and b.artifact is not None, b.log
        request = EvaluationRequest(
            task=t, kernel=unit, artifact=b.artifact, device="cuda:0", settings=settings
        )
        report = worker.evaluate(request)
        if not report.correct:
            failures.append(
                f"{'tensor cores ' if tensor_cores else ''}{combo}: {report.reason} {report.message}"
            )
    assert not failures, failures

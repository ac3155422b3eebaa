"""The proposer's CUDA units compile with nvcc for sm_90 (running them needs a GPU: see bench/)."""

from __future__ import annotations

import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator, parse_variant
from kernelfoundry.tasks.model import ShapeVariant, Task

sys.path.insert(0, str(Path(__file__).parent))
from native import build_unit

TASKS = Path(__file__).resolve().parents[3] / "tasks"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def seeds(name: str, **shape: int) -> list:
    task = Task(name, (TASKS / f"{name}.py").read_text(), shapes=(ShapeVariant("tiny", shape),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("t", task, "cuda", count=8))
    assert not result.error, result.message
    return list(result.candidates)


def test_cuda_seeds_cover_every_reduction_strategy_and_compile(tmp_path: Path) -> None:
    rowop = seeds("level2_softmax_scale_residual", batch_size=2, dim=16)
    reduce = seeds("level1_sum_reduction", batch_size=2, dim1=3, dim2=4)
    glue = seeds("level2_conv_batchnorm_relu", batch_size=1, height=8, width=8)
    cells = {c.strategy.cell for c in rowop + reduce}
    assert {p for (_, _, p) in cells} >= {1, 2, 3}  # barriers, warp shuffles, atomics
    assert any(c.strategy.memory == 2 for c in rowop)  # rows held in registers
    assert any(c.strategy.algorithm == 2 for c in rowop)  # online softmax
    units = rowop + reduce + glue
    for c in units:
        assert c.source.language == "cuda"
        assert "<<<" in c.source.code and ", st>>>" in c.source.code  # launched on the given stream
    # nvcc is slow: build the most intricate unit of each kind (registers + online softmax, atomics, glue)
    chosen = [
        next(c for c in rowop if c.strategy.memory == 2),
        next(c for c in reduce if c.strategy.parallelism == 3),
        glue[1],
    ]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda c: build_unit(c.source, tmp_path), chosen))


def test_warp_per_row_seeds_dispatch_short_rows_to_one_warp_each_and_compile(tmp_path: Path) -> None:
    rowop = seeds("level1_layernorm", batch_size=2, seq_len=3, hidden=65)
    reduce = seeds("level1_max_reduction", batch_size=2, dim1=5, dim2=67)
    chosen = []
    for units in (rowop, reduce):
        warp = next(c for c in units if parse_variant(c.source.code).row_warps)
        code = warp.source.code
        assert "R <= WARP_ROW_MAX" in code and "kf_warp_reduce<" in code
        assert "WARP_ROW_MAX" in {t.name for t in warp.source.tunables}
        chosen.append(warp)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda c: build_unit(c.source, tmp_path), chosen))

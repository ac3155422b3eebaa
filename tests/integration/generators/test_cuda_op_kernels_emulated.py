"""The op-kernel families' CUDA kernels (opkernels_cuda.py) run under the CPU emulation of
cuda_emulation.py and match torch on the CPU: their index arithmetic, barriers, warp shuffles and
tie-breaking are checked without a GPU (test_cuda_op_kernels.py checks the same cases on a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import build_emulated, emulation_ready, rewrite_launches
from native import Unit
from test_cuda_op_kernels import CASES, Launcher, first_candidate

from kernelfoundry.tasks.reference import instantiate

# Every case of test_cuda_op_kernels.CASES but one whose 300 blocks of barriers take 40 s to emulate
EMULATED = sorted(set(CASES) - {"cumsum_rows_float4"})

pytestmark = pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")


def test_launches_become_emulated_calls_with_their_template_arguments() -> None:
    source = (
        "  if (v) k_rows<true><<<(unsigned)(n < 8 ? n : 8), 256, 0, st>>>(p, f(a));\n"
        "  k_cols<<<dim3(gx, gy), dim3(32, 8), 0, st>>>(p);\n"
    )
    assert rewrite_launches(source) == (
        "  if (v) emu_launch(dim3((unsigned)(n < 8 ? n : 8)), dim3(256), [&] { k_rows<true>(p, f(a)); });\n"
        "  emu_launch(dim3(dim3(gx, gy)), dim3(dim3(32, 8)), [&] { k_cols(p); });\n"
    )


def run_emulated(name: str, out: Path, params: dict[str, int] | None = None) -> tuple[Any, Any]:
    import torch
    from torch import nn

    task, kernel = first_candidate(name, CASES[name])
    unit = Unit(build_emulated(kernel.code, out, params))
    reference = instantiate(task, task.shapes[0], seed=1, device="cpu")
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        if kernel.glue:
            glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher(unit)}
            exec(compile(kernel.glue, "<glue>", "exec"), glue)
            candidate = glue["ModelNew"]()
            candidate.load_state_dict(reference.model.state_dict())
            got = candidate(*reference.inputs)
        else:
            got = torch.empty_like(expected)
            assert unit.call(kernel.entry_point, list(reference.inputs), [got]) == 0
    return got, expected


@pytest.mark.parametrize("case", EMULATED)
def test_family_kernel_matches_torch_under_emulation(case: str, tmp_path: Path) -> None:
    import torch

    got, expected = run_emulated(case, tmp_path)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype == torch.int64:
        assert torch.equal(got, expected)
    else:
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)


# 1-D windows: the separable tiles by default, the row-vector kernel at the tunable's other value (rows
# of a multiple of four columns; the thread-per-output kernel otherwise)
ONE_D = ["max_pool1d_dilated_padded_tiles", "avg_pool1d_strided_padded_tiles", "avg_pool1d_exclude_pad_tiles"]


@pytest.mark.parametrize("case", ONE_D)
def test_a_1d_pooling_offers_the_row_vector_kernel_as_a_tunable(case: str, tmp_path: Path) -> None:
    import torch

    _, kernel = first_candidate(case, CASES[case])
    assert {t.name: t.values for t in kernel.tunables}["KF_TILED_KF_OP0"] == (1, 0)
    assert "_vpool<int><<<" in kernel.code and "_spool<<<" in kernel.code
    got, expected = run_emulated(case, tmp_path, {"KF_TILED_KF_OP0": 0})
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)


# 1-D windows of stride 1: the tiles' run path (interior tiles only: the middle tile of these rows)
RUNS = ["max_pool1d_dilated_rows_of_several_tiles", "avg_pool1d_rows_of_several_tiles"]


@pytest.mark.parametrize("case", RUNS)
def test_a_1d_pooling_of_stride_1_offers_the_tiles_run_path_as_a_tunable(case: str, tmp_path: Path) -> None:
    """Runs of outputs a thread, their columns read once into registers, the outputs staged in shared
    memory (the default): the interior tile's outputs match torch, and the edge tiles' (the output loop)
    too; and at the tunable's other value, the output loop everywhere."""
    import torch

    _, kernel = first_candidate(case, CASES[case])
    assert {t.name: t.values for t in kernel.tunables}["KF_POOL_RUNS_KF_OP0"] == (1, 0)
    for runs in (1, 0):
        got, expected = run_emulated(case, tmp_path, {"KF_POOL_RUNS_KF_OP0": runs})
        torch.testing.assert_close(
            got, expected, rtol=1e-4, atol=1e-3, msg=lambda m, r=runs: f"runs {r}: {m}"
        )


# strides 1: the 4 x 4 patch kernel by default, the one-column kernel at the tunable's other value
WIDE_DEPTHWISE = [
    "depthwise2d_3x3",
    "depthwise2d_dilated_rows",
    "depthwise2d_3x7_wide",
    "depthwise2d_float4_rows",
]


@pytest.mark.parametrize("case", WIDE_DEPTHWISE)
def test_a_depthwise_conv_of_strides_1_offers_the_one_column_kernel_as_a_tunable(
    case: str, tmp_path: Path
) -> None:
    import torch

    _, kernel = first_candidate(case, CASES[case])
    assert {t.name: t.values for t in kernel.tunables} == {"KF_DW_COLS_KF_OP0": (4, 1)}
    assert "_dww<<<" in kernel.code and "_dw<<<" in kernel.code
    got, expected = run_emulated(case, tmp_path, {"KF_DW_COLS_KF_OP0": 1})
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)

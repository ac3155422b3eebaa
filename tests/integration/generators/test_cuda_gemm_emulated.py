"""The CUDA GEMM family's units (cuda_gemm.py: the SIMT kernel and the 3xTF32 tensor-core one) run under
the CPU emulation of cuda_emulation.py, its `mma.sync` and TF32 rounding included, and match torch on
the CPU at KernelBench's float32 tolerance on the awkward shapes test_cuda_gemm.py judges on a GPU:
ragged tiles, K not a multiple of 4 (scalar loads), one partial k slice, a long K split across blocks."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import build_emulated, emulate_ptx, emulated_output, emulation_ready
from test_cuda_gemm import (
    AWKWARD,
    COMBOS,
    GEMM_TASKS,
    MATMUL_SHAPES,
    MATMULS,
    STAGED,
    STAGED_SHAPES,
    TC_COMBOS,
    gemm_source,
    matmul_task,
    task,
)

from kernelfoundry.generators.heuristic.cuda_gemm_tc import TC_HELPERS
from kernelfoundry.tasks.model import Task
from tests.integration.generators.cuda_judge import with_params

pytestmark = pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")

# The long-K shape's tensor-core unit takes ~17 s of barriers to emulate: one matmul runs it
LONG_K = MATMUL_SHAPES[3]


def test_inline_ptx_becomes_calls_of_its_emulation() -> None:
    source = """
  extern __shared__ __align__(16) float kf_smem[];
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(big) : "f"(x));
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group %0;" ::"n"(KF_STAGES - 2));
"""
    assert (
        emulate_ptx(source)
        == """
  float* const kf_smem = reinterpret_cast<float*>(emu_dynamic_smem);
  big = emu_cvt_rna_tf32(x);
  emu_mma_m16n8k8_tf32(c0, c1, c2, c3, a[0], a[1], a[2], a[3], b0, b1);
  emu_cp_async(d, src, 4, ok ? 4 : 0);
  (void)0;
  (void)0;
"""
    )


def test_the_split_rounds_as_cvt_rna_tf32_where_the_tensor_cores_read_it(tmp_path: Path) -> None:
    # kf_split_tf32 adds half a TF32 unit to the bits and leaves the truncation to the MMA (which reads
    # an operand's 19 high bits, as the emulated MMA does): the operand it hands over must read as
    # cvt.rna.tf32 of x (big) and of x - big (small), ties away from zero included
    import ctypes

    import numpy as np

    code = (
        "#include <cuda_runtime.h>\n"
        + TC_HELPERS.split("/* c (16 x 8")[0].replace("static_assert", "// static_assert")
        + """
extern "C" __attribute__((visibility("default"))) void split_all(const float* x, uint32_t* out, int n) {
  for (int i = 0; i < n; ++i) {
    uint32_t big, small;
    kf_split_tf32(x[i], big, small);
    out[4 * i] = big & 0xffffe000u;
    out[4 * i + 1] = small & 0xffffe000u;
    out[4 * i + 2] = emu_cvt_rna_tf32(x[i]);
    out[4 * i + 3] = emu_cvt_rna_tf32(x[i] - __uint_as_float(emu_cvt_rna_tf32(x[i])));
  }
}
"""
    )
    lib = ctypes.CDLL(str(build_emulated(code, tmp_path, {"KF_MIN_BLOCKS": 1})))
    rng = np.random.default_rng(3)
    ties = np.array([0x3F801000, 0xBF801000, 0x3F800FFF, 0x3F803000, 0x00001000, 0x7F7FF000], np.uint32)
    x = np.concatenate(
        [rng.standard_normal(4000, np.float32) * 10.0 ** rng.integers(-30, 30, 4000), ties.view(np.float32)]
    ).astype(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-40, -3e-39, np.inf, -np.inf])])
    out = np.zeros(4 * len(x), np.uint32)
    lib.split_all(
        x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(len(x))
    )
    got = out.reshape(-1, 4)
    np.testing.assert_array_equal(got[:, 0], got[:, 2])  # big
    finite = np.isfinite(x)
    np.testing.assert_array_equal(got[finite, 1], got[finite, 3])  # small


def test_inline_ptx_without_an_emulation_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="ldmatrix"):
        emulate_ptx(
            'asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(p));'
        )


def check(t: Task, units: list[tuple[bool, dict[str, int]]], out: Path) -> None:
    import torch

    sources = [with_params(gemm_source(t, tc), combo) for tc, combo in units]
    with ThreadPoolExecutor(2) as pool:  # g++ takes most of the time
        results = list(pool.map(lambda s: emulated_output(t, s, out), sources))
    for (tc, combo), (got, expected) in zip(units, results, strict=True):
        label = f"{t.name} {'3xTF32' if tc else 'SIMT'} {combo}"
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m, x=label: f"{x}: {m}")


@pytest.mark.parametrize("shape", AWKWARD, ids=lambda s: "x".join(str(v) for v in s.values()))
@pytest.mark.parametrize("name", GEMM_TASKS)
def test_linear_units_match_torch_at_every_tensor_core_tiling(
    name: str, shape: dict[str, int], tmp_path: Path
) -> None:
    units = [(False, COMBOS[0]), (False, COMBOS[-1]), *((True, combo) for combo in TC_COMBOS)]
    check(task(name, shape), units, tmp_path)


@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=lambda s: "x".join(str(v) for v in s.values()))
@pytest.mark.parametrize("name", list(MATMULS))
def test_matmul_units_match_torch(name: str, shape: dict[str, int], tmp_path: Path) -> None:
    if shape == LONG_K and name != "nn":
        pytest.skip("the long K's split is the same for every matmul layout: `nn` runs it")
    check(matmul_task(name, shape), [(False, COMBOS[-1]), (True, {})], tmp_path)


@pytest.mark.parametrize("shape", [AWKWARD[0], AWKWARD[3], *STAGED_SHAPES], ids=str)
def test_operand_rows_that_are_no_float4_runs_are_staged_padded(
    shape: dict[str, int], tmp_path: Path
) -> None:
    """KF_STAGE_RATIO 0 stages every operand whose contiguous dim is no multiple of 4 (the launcher
    does so where the product dwarfs the copy): the float4 tile loads then read the padded rows, their
    zeros past K (and past M or N) adding nothing."""
    staged = STAGED
    if "M" in shape:
        for name in ("nn", "tn", "nt", "tt", "rank3", "sum_tail"):
            check(matmul_task(name, shape), [(False, staged), (True, staged)], tmp_path)
    else:
        for name in GEMM_TASKS:
            check(task(name, shape), [(False, {**COMBOS[0], **staged}), (True, staged)], tmp_path)

"""The CPU emulation's Hopper warpgroup MMA (cuda_emulation.py): `wgmma.mma_async` m64nNk8 TF32 with both
operands K-major in the dynamic shared array under the 128-byte swizzle, read through their descriptors.
A hand-written unit fills the array by cp.async (shared addresses with arithmetic on them), issues four
k8 steps a warpgroup (the descriptors' start advanced 32 bytes a step, scale-d 0 on the first) and
writes each thread's accumulators where the fragment layout puts them: the product matches numpy's over
TF32-truncated operands for N = 64, 128 and 256, with one warpgroup and with two (each its own A rows).
Operands stored unswizzled read as the swizzle permutes them, and a descriptor of another swizzle mode or
one that reaches past the dynamic array stops the process."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cuda_emulation import build_emulated, emulate_ptx, emulation_ready

pytestmark = pytest.mark.skipif(not emulation_ready(), reason="needs g++ with C++20 <barrier>")

K = 32  # floats a row: 128 bytes, the swizzle's row; four k8 steps


def wgmma_statement(n: int) -> str:
    """The m64nNk8 TF32 asm statement as a kernel issues it: its template split over several literals,
    the N / 2 accumulators `acc[c][e]` read-write."""
    half = n // 2
    registers = ", ".join(f"%{r}" for r in range(half))
    outputs = ", ".join(f'"+f"(acc[{r // 4}][{r % 4}])' for r in range(half))
    return (
        "asm volatile(\n"
        '      "{\\n"\n'
        '      ".reg .pred p;\\n"\n'
        f'      "setp.ne.b32 p, %{half + 2}, 0;\\n"\n'
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 "\n'
        f'      "{{{registers}}}, "\n'
        f'      "%{half}, %{half + 1}, p, 1, 1;\\n"\n'
        '      "}\\n"\n'
        f"      : {outputs}\n"
        '      : "l"(desc_a), "l"(desc_b), "r"(scale_d));'
    )


def unit(n: int) -> str:
    """One block of 128 threads a warpgroup: warpgroup g's D rows 64 g .. 64 g + 63 = its A rows times
    B^T (K = 32). KF_SWIZZLED 0 stores the rows unswizzled (wrong), KF_SWIZZLE_MODE sets the
    descriptors' mode and KF_B_SHIFT moves B's descriptor on by that many 16-byte units."""
    return f"""
#include <cuda_runtime.h>
#include <cstdint>
#ifndef KF_SWIZZLED
#define KF_SWIZZLED 1
#endif
#ifndef KF_SWIZZLE_MODE
#define KF_SWIZZLE_MODE 1
#endif
#ifndef KF_B_SHIFT
#define KF_B_SHIFT 0
#endif
#define KF_N {n}
#define KF_K {K}

__device__ __forceinline__ void kf_wgmma(float (&acc)[KF_N / 8][4], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {{
  {wgmma_statement(n)}
}}

/* a K-major operand under the 128-byte swizzle: start >> 4, LBO 1 (unused), SBO 1024 >> 4, the mode */
__device__ __forceinline__ uint64_t kf_desc(unsigned addr) {{
  return (uint64_t)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)KF_SWIZZLE_MODE << 62);
}}

__global__ void kf_wgmma_gemm(const float* __restrict__ A, const float* __restrict__ B,
                              float* __restrict__ D, int groups) {{
  extern __shared__ __align__(1024) float kf_smem[];
  const unsigned base = ((unsigned)__cvta_generic_to_shared(kf_smem) + 1023) & ~1023u;
  /* A's 64 groups rows, then B's N: row r 128 bytes at base + 128 r, its 16-byte chunk q at q ^ (r % 8) */
  for (int c = threadIdx.x; c < (64 * groups + KF_N) * 8; c += blockDim.x) {{
    const int r = c / 8, q = c % 8, at = KF_SWIZZLED ? q ^ (r % 8) : q;
    const float* src = r < 64 * groups ? A + r * KF_K + 4 * q : B + (r - 64 * groups) * KF_K + 4 * q;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(base + 128 * r + 16 * at),
                 "l"(src), "r"(16));
  }}
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group %0;" ::"n"(0));
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;");
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  float acc[KF_N / 8][4];
  for (int c = 0; c < KF_N / 8; ++c)
    for (int e = 0; e < 4; ++e) acc[c][e] = NAN;  /* scale-d 0 on the first step: never read */
  const uint64_t desc_a = kf_desc(base + 8192 * wg);
  const uint64_t desc_b = kf_desc(base + 8192 * groups) + KF_B_SHIFT;
  for (int s = 0; s < KF_K / 8; ++s) {{  /* 32 bytes a k8 step: 2 in the start's 16-byte units */
    asm volatile("wgmma.fence.sync.aligned;");
    kf_wgmma(acc, desc_a + 2 * s, desc_b + 2 * s, s > 0);
    asm volatile("wgmma.commit_group.sync.aligned;");
  }}
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(0));
  for (int c = 0; c < KF_N / 8; ++c)
    for (int e = 0; e < 4; ++e) {{
      const int row = 64 * wg + 16 * warp + lane / 4 + 8 * (e / 2), col = 8 * c + 2 * (lane % 4) + e % 2;
      D[row * KF_N + col] = acc[c][e];
    }}
}}

extern "C" __attribute__((visibility("default"))) void kf_run(const float* A, const float* B, float* D,
                                                              int groups) {{
  const int smem = 8192 * groups + 128 * KF_N + 1024;  /* 1024 bytes to round the base up with */
  kf_wgmma_gemm<<<1, 128 * groups, smem>>>(A, B, D, groups);
}}
"""


def operands(n: int, groups: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((64 * groups, K), np.float32), rng.standard_normal((n, K), np.float32)


def run(lib: Path, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np.full((a.shape[0], b.shape[0]), np.nan, np.float32)
    pointer = ctypes.c_void_p
    ctypes.CDLL(str(lib)).kf_run(
        a.ctypes.data_as(pointer), b.ctypes.data_as(pointer), d.ctypes.data_as(pointer), a.shape[0] // 64
    )
    return d


def tf32(x: np.ndarray) -> np.ndarray:
    """x with its low 13 mantissa bits cleared, as the tensor cores read a TF32 operand."""
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return tf32(a).astype(np.float64) @ tf32(b).astype(np.float64).T


def test_wgmma_statements_become_calls_of_their_emulation() -> None:
    source = f"""
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  {wgmma_statement(64)}
  asm volatile("wgmma.commit_group.sync.aligned;");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(0));
  asm volatile("fence.proxy.async.shared::cta;");
"""
    accumulators = ", ".join(f"acc[{r // 4}][{r % 4}]" for r in range(32))
    assert (
        emulate_ptx(source)
        == f"""
  (void)0;
  emu_wgmma_m64k8_tf32<64>(desc_a, desc_b, scale_d, {accumulators});
  (void)0;
  (void)0;
  (void)0;
"""
    )


@pytest.mark.parametrize(
    "change",
    [
        ("%31}", "%30}"),  # one register short of N / 2
        ("%32, %33, p", "%33, %32, p"),  # the descriptors' operands swapped
        ('"+f"(acc[0][0])', '"=f"(acc[0][0])'),  # an accumulator write-only: scale-d 1 reads it
        ("p, 1, 1;", "p, 1, -1;"),  # B negated
    ],
    ids=["registers", "descriptors", "write-only", "negated"],
)
def test_a_wgmma_the_emulation_does_not_model_is_refused(change: tuple[str, str]) -> None:
    statement = wgmma_statement(64)
    assert change[0] in statement
    with pytest.raises(ValueError, match="wgmma"):
        emulate_ptx(statement.replace(*change))


@pytest.mark.parametrize("n", [64, 128, 256])
def test_wgmma_matches_numpy_over_tf32_operands(n: int, tmp_path: Path) -> None:
    lib = build_emulated(unit(n), tmp_path)
    for groups in (1, 2):  # one block of 128 threads, and of 256: two warpgroups, each its own A rows
        a, b = operands(n, groups, seed=n + groups)
        got = run(lib, a, b)
        np.testing.assert_allclose(got, product(a, b), rtol=1e-5, atol=1e-5, err_msg=f"{groups} warpgroups")
        # the operands' low mantissa bits are ignored (the untruncated product is further away)
        exact = a.astype(np.float64) @ b.astype(np.float64).T
        assert np.abs(got - exact).max() > 100 * np.abs(got - product(a, b)).max()


def test_operands_stored_unswizzled_read_as_the_swizzle_permutes_them(tmp_path: Path) -> None:
    """Row r's 16-byte chunk q stored at q (not q ^ (r % 8)): wgmma reads chunk q ^ (r % 8) in its
    place, rows with r % 8 == 0 alone as they are, and the product is another one."""
    n = 64
    lib = build_emulated(unit(n), tmp_path, {"KF_SWIZZLED": 0})
    a, b = operands(n, 2, seed=5)
    got = run(lib, a, b)

    def as_read(x: np.ndarray) -> np.ndarray:
        chunks = x.reshape(x.shape[0], 8, 4)
        rows = np.arange(x.shape[0])[:, None]
        return chunks[rows, np.arange(8)[None, :] ^ (rows % 8)].reshape(x.shape)

    assert not np.allclose(got, product(a, b), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got, product(as_read(a), as_read(b)), rtol=1e-5, atol=1e-5)


CALL = """
import ctypes, sys
n = int(sys.argv[2])
a, b, d = (ctypes.c_float * (64 * 32))(), (ctypes.c_float * (n * 32))(), (ctypes.c_float * (64 * n))()
ctypes.CDLL(sys.argv[1]).kf_run(a, b, d, 1)
print("returned")
"""


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"KF_SWIZZLE_MODE": 0}, "only the 128-byte swizzle"),
        ({"KF_B_SHIFT": 1024}, "wgmma operand outside the dynamic shared array"),  # 16 KiB past B
    ],
    ids=["swizzle-mode-0", "past-the-array"],
)
def test_a_descriptor_the_emulation_cannot_read_stops_the_process(
    params: dict[str, int], message: str, tmp_path: Path
) -> None:
    n = 64
    lib = build_emulated(unit(n), tmp_path, params)
    proc = subprocess.run(
        [sys.executable, "-c", CALL, str(lib), str(n)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "returned" not in proc.stdout, proc.stdout
    assert message in proc.stderr, proc.stderr[-2000:]

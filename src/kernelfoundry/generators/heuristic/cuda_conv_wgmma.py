"""The channels-last TF32 conv's Hopper main loop: warpgroup MMAs (`wgmma`) on swizzled shared stages.

cuda_conv.py's implicit GEMM issues `mma.sync` m16n8k8: each warp reads its fragments out of shared memory
into registers (ldmatrix) before every product, and Hopper runs that instruction at about half the rate
of its warpgroup MMA. On the H100, cuDNN's TF32 convolutions are sm90 warpgroup kernels; ours took
1.5-2.9x their time (bench/results/h100_2026-12-06/). This path keeps the unit's operand path (the
channels-last input and filters, the same 16-byte cp.async gathers, the same epilogue) and replaces the
product: a block's two warpgroups (256 threads) each multiply a 64-row slab of the tile with
`wgmma.mma_async ... m64nNk8.f32.tf32.tf32`, both operands read by the tensor cores straight from shared
memory through matrix descriptors, no fragment reads and no register copies of the operands.

Shared layout: a stage holds the filters' slice (BM rows) then the pixels' (BN rows), each row the 32
k values of the slice (BK is 32: one 128-byte row), K-major as wgmma's TF32 operands must be, in the
128-byte swizzle: row r's 16-byte chunk q is stored at chunk q ^ (r % 8), 8-row groups 1024 bytes apart
(the descriptor's stride offset), the stages 1024-byte aligned. The gathers write each 16-byte run at its
swizzled place (KF_A_AT / KF_B_AT), so the swizzle costs one XOR an address; it spreads a warp's copies
and the tensor cores' reads over the banks. A k8 step's descriptor is the slab's start advanced by 32
bytes within the row (the swizzle applies to the advanced address, as the hardware computes it).

Pipeline: KF_STAGES stages (3 or 4; 2 is taken as 3), slices gathered KF_STAGES - 2 ahead, one warpgroup
MMA group in flight: iteration s waits for slice s's copies, fences them to the async proxy, meets the
block at the barrier, issues the gathers of slice s + KF_STAGES - 2 (into the stage read by iteration
s - 2, whose MMAs every warpgroup has waited for before this barrier), then the four k8 MMAs of slice s,
and waits until at most this group is pending.

Tiles: BM 128 (two slabs of 64 rows, each warpgroup its own, the whole BN wide) or 64 (both warpgroups
on the same 64 rows, BN / 2 columns each; BM 32 runs as 64); KF_WG_BN 128 or 256 pixels (tunable).
The accumulators sit as mma.sync m16n8's c0..c3 repeated over the N / 8 column tiles, so the epilogue
is the unit's own with this layout (WG_LAYOUT).

`wgmma` needs sm_90a (the toolchain builds cap-9.0 targets for it); built for another architecture
the unit stops with a named #error. Pure string building.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.cuda_gemm import TileLayout

WG_LAYOUT = TileLayout(
    row="m0 + wm * 64 + (warp & 3) * 16 + i * 8 + g",
    col="n0 + wn * KF_WG_N + (j >> 1) * 8 + tig * 2 + (j & 1)",
    run=2,
    run_col="n0 + wn * KF_WG_N + q * 8 + tig * 2",
    row_lanes=(1, 2),
    leader="tig == 0",
)
"""Where a thread's accumulators acc[i][j] sit: warpgroup (wm, wn)'s slab, the warp's 16 rows of it, rows g
and g + 8 (i), columns 8 (j / 2) + 2 tig + j % 2."""

WIDTHS = (64, 128, 256)


def wgmma_call(n: int) -> str:
    """kf_wgmma for an m64nNk8 product: the thread's N / 2 accumulators bound in the instruction's
    register order (register r = 4 c + 2 i + j holds row i, column 2 c + j of acc)."""
    regs = n // 2
    names = ", ".join(f"%{r}" for r in range(regs))
    operands = [f'"+f"(d[{(r // 2) % 2}][{2 * (r // 4) + r % 2}])' for r in range(regs)]
    lines = [
        "__device__ __forceinline__ void kf_wgmma(float (&d)[2][KF_TN], uint64_t da, uint64_t db, int acc) {",
        '  asm volatile("{\\n.reg .pred p;\\n"',
        f'               "setp.ne.b32 p, %{regs + 2}, 0;\\n"',
        f'               "wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{{names}}}, "',
        f'               "%{regs}, %{regs + 1}, p, 1, 1;\\n}}\\n"',
    ]
    for start in range(0, regs, 8):
        chunk = ", ".join(operands[start : start + 8])
        lead = "               : " if start == 0 else "                 "
        lines.append(f"{lead}{chunk}{',' if start + 8 < regs else ''}")
    lines.append('               : "l"(da), "l"(db), "r"(acc));')
    lines.append("}")
    return "\n".join(lines)


def wg_helpers() -> str:
    """The path's geometry (replacing the mma.sync tiling's BN, KF_TM, KF_TN), its stage addressing, the
    descriptors, the fences and the MMA of each width."""
    calls = "\n".join(
        f"{'#if' if k == 0 else '#elif'} KF_WG_N == {n}\n{wgmma_call(n)}" for k, n in enumerate(WIDTHS)
    )
    return (
        r"""
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "KF_WGMMA 1 needs sm_90a (Hopper's warpgroup MMA): build for sm90a, or set KF_WGMMA 0"
#endif
#ifndef KF_WG_BN
#define KF_WG_BN 128
#endif
static_assert(KF_WG_BN == 128 || KF_WG_BN == 256, "KF_WG_BN must be 128 or 256");
#if BM == 32  /* a warpgroup's slab is 64 rows: BM 32 runs as 64 */
#undef BM
#define BM 64
#endif
#undef BK
#define BK 32  /* one 128-byte swizzled row a stage row */
#undef BN
#define BN KF_WG_BN
#define KF_WG_STAGES (KF_STAGES < 3 ? 3 : KF_STAGES)
#define KF_WG_N (BM == 128 ? BN : BN / 2)  /* a warpgroup's columns: the MMA's N */
/* two blocks an SM where the accumulators leave room (at 128 x 256 a thread holds 128 of them) */
#define KF_WG_MIN_BLOCKS (KF_WG_N == 256 ? 1 : KF_MIN_BLOCKS)
#undef KF_TM
#define KF_TM 2
#undef KF_TN
#define KF_TN (KF_WG_N / 4)
#define KF_STAGE_FLOATS ((BM + BN) * 32)
#define KF_SMEM_FLOATS (KF_WG_STAGES * KF_STAGE_FLOATS + 256)  /* + 1024 bytes: the stages' alignment */
/* a 16-byte run's place: row r's chunk k / 4 at chunk (k / 4) ^ (r % 8) (the 128-byte swizzle) */
#define KF_SWZ(r, k) ((r) * 32 + ((((k) >> 2) ^ ((r) & 7)) << 2) + ((k) & 3))
#define KF_A_AT(st, r, k) (kf_stages + (st) * KF_STAGE_FLOATS + KF_SWZ(r, k))
#define KF_B_AT(st, p, k) (kf_stages + (st) * KF_STAGE_FLOATS + BM * 32 + KF_SWZ(p, k))

/* a K-major operand's descriptor at shared byte address `at`: 128-byte swizzle (mode 1, bits 62-63),
   8-row groups 1024 bytes apart (stride offset, bits 32-45), leading offset unused (1), start >> 4 */
__device__ __forceinline__ uint64_t kf_wg_desc(unsigned at) {
  return (uint64_t)((at & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}
__device__ __forceinline__ void kf_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void kf_wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void kf_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(PENDING) : "memory");
}
/* the generic proxy's writes (cp.async's) made visible to the tensor cores' (async proxy) reads */
__device__ __forceinline__ void kf_async_fence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
"""
        + calls
        + "\n#endif\n"
    )


WG_OPEN = r"""
/* One BM x BN tile of a group's out = filters x im2col (then bias and the tail) per block of two
   warpgroups (256 threads): warpgroup w multiplies rows wm * 64 + [0, 64) by columns wn * KF_WG_N + [0,
   KF_WG_N) with wgmma, both operands in the swizzled stages. X: the filters, W: the input. */
__global__ void __launch_bounds__(256, KF_WG_MIN_BLOCKS)
    kf_conv(int M, int N, int K, const float* __restrict__ X, const float* __restrict__ W,
            const float* __restrict__ bias, float* __restrict__ out, int vec_out, int a_vec,
            const kf_conv_args geo) {
  extern __shared__ __align__(1024) float kf_smem[];
  const unsigned kf_smem_at = (unsigned)__cvta_generic_to_shared(kf_smem);
  const unsigned kf_base = (kf_smem_at + 1023u) & ~1023u;  /* the stages' 1024-byte aligned start */
  float* const kf_stages = kf_smem + (kf_base - kf_smem_at) / 4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;  /* the accumulators' row group and thread in group */
  const int wm = BM == 128 ? warp >> 2 : 0, wn = BM == 128 ? 0 : warp >> 2;  /* the warpgroup's slab */
  const int m0 = blockIdx.y * BM;
  @N0@
  float acc[KF_TM][KF_TN];
  #pragma unroll
  for (int i = 0; i < KF_TM; ++i) {
    #pragma unroll
    for (int j = 0; j < KF_TN; ++j) acc[i][j] = 0.0f;
  }
"""

WG_MAIN_LOOP = r"""
  /* slice s lives in stage s % KF_WG_STAGES; the first KF_WG_STAGES - 2 are in flight before the loop */
  const int slices = (K + BK - 1) / BK;
  #pragma unroll
  for (int s = 0; s < KF_WG_STAGES - 2; ++s) {
    if (s < slices) {
      load_a(s, s * BK);
      load_b(s, s * BK);
    }
    asm volatile("cp.async.commit_group;");
  }
  const unsigned a_at = kf_base + wm * 64 * 128, b_at = kf_base + BM * 128 + wn * KF_WG_N * 128;
  for (int s = 0; s < slices; ++s) {
    asm volatile("cp.async.wait_group %0;" ::"n"(KF_WG_STAGES - 3));
    kf_async_fence();
    __syncthreads();
    const int next = s + KF_WG_STAGES - 2;
    if (next < slices) {  /* into the stage of slice s - 2: its MMAs were waited for before the barrier */
      load_a(next % KF_WG_STAGES, next * BK);
      load_b(next % KF_WG_STAGES, next * BK);
    }
    asm volatile("cp.async.commit_group;");  /* an empty group past the end keeps the count */
    const unsigned stage = (unsigned)(s % KF_WG_STAGES) * (KF_STAGE_FLOATS * 4);
    kf_wg_fence();
    #pragma unroll
    for (int k8 = 0; k8 < BK / 8; ++k8)
      kf_wgmma(acc, kf_wg_desc(a_at + stage + 32 * k8), kf_wg_desc(b_at + stage + 32 * k8), 1);
    kf_wg_commit();
    kf_wg_wait<1>();
  }
  kf_wg_wait<0>();
"""

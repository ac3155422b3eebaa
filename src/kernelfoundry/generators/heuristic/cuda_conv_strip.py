"""The warpgroup conv's row-strip main loop: one input strip a (kd, kh, channel slice), read by every tap
of the kernel's last axis.

The warpgroup kernel (cuda_conv_wgmma.py) gathers each k slice of the im2col matrix anew: a conv of KW
taps along its last axis copies every input pixel KW times into shared memory (and as many bounds checks
and address computations), and on the H100 the MMA warps' gathers, not the tensor cores, set the pace of
the 64-channel convs (level1/62 and 80: 5 x 9 taps of 32 channels; 65: 3 x 7 of 64). Where the block's
pixels are BN neighbours of one output row and consecutive output pixels read consecutive input pixels
(a forward conv of stride 1 along its last axis, or a transposed conv of stride 1), tap kw's im2col
rows are the same input strip shifted by kw * DW rows (a transposed conv: by (KW - 1 - kw) * DW). A
stage then holds that strip once (BN + (KW - 1) * DW pixels of 32 channels, rounded up to 32 rows) and
the filters of the KW taps (KW x BM rows of the same 32 channels); the KW x 4 k8 MMAs of the stage read
B through a descriptor started kw * DW rows into the strip.

Shared layout: every row is 128 bytes (32 channels) under the 128-byte swizzle, as the warpgroup
kernel's; the filter rows of tap kw from row kw * BM, the strip after the KW x BM filter rows. A
descriptor started a whole number of rows into a 1024-byte-aligned swizzled region reads row r of the
operand at the strip's row (start + r) with its chunks swizzled by that row's address bits, which is how
the rows were stored.

Grid: x enumerates (output row, BN-wide tile of it); the epilogue stores a tile's pixels up to the row's
end (`n_end`). Pipeline: KF_SS stages (as many as fit in shared memory, 2 to 4), slices KF_SS - 1 ahead;
a slice's MMAs are issued, then the next slice's copies, then the MMAs are waited for (so the copies
overlap them and the next barrier frees the stage they read).

Applies (`strip_applies`) to the channels-last TF32 unit's warpgroup kernel where a forward conv has
stride 1 along its last axis or a transposed conv stride 1 on every axis (not phased), its last axis
has 2 or more taps and two stages fit at 64 output channels a block; at a BM where they do not, the
unit keeps the per-slice gathers (KF_STRIP 0). Pure string building.
"""

from __future__ import annotations

import re

from kernelfoundry.generators.heuristic import cuda_conv_phases as phases
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan

SMEM_LIMIT = 232448  # bytes of dynamic shared memory a Hopper block may take
STAGE_ALIGN = 1024  # the swizzled stages' alignment, paid once


def strip_rows(width: int, taps: int, dilation: int) -> int:
    """The strip's rows: a tile's `width` pixels and the taps' reach past them, in passes of 32 rows."""
    rows = width + (taps - 1) * dilation
    return (rows + 31) // 32 * 32


def stage_bytes(rows: int, width: int, taps: int, dilation: int) -> int:
    """One stage: the KW taps' `rows` filter rows each, then the strip; 128 bytes a row."""
    return (taps * rows + strip_rows(width, taps, dilation)) * 128


def strip_applies(plan: ConvPlan) -> bool:
    """Whether the row-strip main loop applies: consecutive output pixels of a row read consecutive input
    pixels at every tap (a forward conv of stride 1 along the last axis, a transposed one of stride 1),
    the last axis has 2+ taps, and two stages fit at BM 64 and the widest tile."""
    if phases.phased(plan):
        return False
    if plan.transposed and any(s != 1 for s in plan.stride):
        return False
    if plan.stride[2] != 1 or plan.kernel[2] < 2:
        return False
    return 2 * stage_bytes(64, 256, plan.kernel[2], plan.dilation[2]) + STAGE_ALIGN <= SMEM_LIMIT


def strip_defines() -> str:
    """After the warpgroup kernel's definitions (its BM, BN, swizzle and descriptors): whether the strip
    runs at this BM and tile width, its stages and their addressing."""
    return rf"""
/* the row strip (cuda_conv_strip.py): KF_WG_STRIP asks for it; it runs where two stages fit */
#ifndef KF_WG_STRIP
#define KF_WG_STRIP 0
#endif
#define KF_SROWS ((BN + (KF_KW - 1) * KF_DW + 31) / 32 * 32)  /* the strip's rows */
#define KF_SSTAGE_FLOATS ((KF_KW * BM + KF_SROWS) * 32)
#define KF_SS_FIT (({SMEM_LIMIT} - {STAGE_ALIGN}) / (KF_SSTAGE_FLOATS * 4))
#if KF_WG_STRIP && KF_SS_FIT >= 2
#define KF_STRIP 1
#define KF_SS (KF_SS_FIT < 4 ? KF_SS_FIT : 4)
#undef KF_WG_MIN_BLOCKS
#define KF_WG_MIN_BLOCKS 1  /* the stages take more than half an SM's shared memory */
#undef KF_SMEM_FLOATS
#define KF_SMEM_FLOATS (KF_SS * KF_SSTAGE_FLOATS + 256)
#define KF_CSLICES ((KF_CIG + 31) / 32)  /* 32-channel slices of a group's channels */
/* tap kw's filter row r, and strip row s, of a stage: 128-byte rows under the swizzle */
#define KF_SA_AT(st, kw, r, k) (kf_stages + (st) * KF_SSTAGE_FLOATS + KF_SWZ((kw) * BM + (r), k))
#define KF_SB_AT(st, s, k) (kf_stages + (st) * KF_SSTAGE_FLOATS + KF_KW * BM * 32 + KF_SWZ(s, k))
#else
#define KF_STRIP 0
#endif
"""


# The block's output row and tile (x enumerates them), its first flat pixel and its row's end
FIRST_TILE = """const int wtiles = (geo.OW + BN - 1) / BN;
  const int orow = blockIdx.x / wtiles, ow0 = blockIdx.x % wtiles * BN;  /* output row (od, oh), tile */
  const int n0 = orow * geo.OW + ow0, n_end = orow * geo.OW + geo.OW;  /* flat pixels: N < 2^31 */"""


def _prologue(plan: ConvPlan) -> str:
    """The block's image, group and planes (as the gathering kernel's), the thread's 16-byte run of a
    slice's 32 channels and its first strip row, and the input row and column the strip starts at."""
    if plan.transposed:  # tap t reads input o + P - t * D (stride 1): the strip starts at the last tap's
        first = "const int id0 = od + KF_PD, ih0 = oh + KF_PH, iw0 = ow0 + KF_PW - (KF_KW - 1) * KF_DW;"
    else:
        first = "const int id0 = od * KF_SD - KF_PD, ih0 = oh * KF_SH - KF_PH, iw0 = ow0 - KF_PW;"
    return rf"""
  const int64_t image = blockIdx.z / KF_GROUPS, group = blockIdx.z % KF_GROUPS;
  W += image * (int64_t)geo.ID * geo.IH * geo.IW * geo.CI + group * KF_CIG;  /* the group's channels */
  X += group * (int64_t)M * K;  /* its filters: M output channels x K = taps x KF_CIG */
  out += (image * KF_GROUPS + group) * (int64_t)M * N;  /* its output: M channels of P pixels */
  const int cbase = (int)(group * M);  /* its first output channel: bias and tail operands */
  const int run = (tid & 7) * 4, srow = tid >> 3;  /* the thread's 4 channels of a slice, strip row */
  const int od = orow / geo.OH, oh = orow % geo.OH;
  {first}
"""


def _loads(plan: ConvPlan) -> str:
    """`load_slice(st, t)`: slice t = (kd, kh, channel slice) into stage st: the KW taps' filter rows (16
    bytes a copy, zeros past M or the group's channels) and the strip of input row (id, ih) from column
    iw0 (zeros outside the input)."""
    sign = "-" if plan.transposed else "+"
    return rf"""  auto load_slice = [&](int st, int t) {{
    const int cs = t % KF_CSLICES, kh = t / KF_CSLICES % KF_KH, kd = t / (KF_CSLICES * KF_KH);
    const int c = cs * 32 + run;  /* the thread's 4 channels (KF_CIG % 4 == 0: all in or all out) */
    const bool cok = c < KF_CIG;
    const int64_t taps0 = (int64_t)((kd * KF_KH + kh) * KF_KW) * KF_CIG + c;  /* tap (kd, kh, 0) */
    #pragma unroll
    for (int l = 0; l < KF_KW * BM / 32; ++l) {{
      const int e = srow + 32 * l, kw = e / BM, r = e % BM, gm = m0 + r;
      const bool ok = cok && gm < M;
      kf_cp16(KF_SA_AT(st, kw, r, run), ok ? X + (int64_t)gm * K + taps0 + kw * KF_CIG : X, ok);
    }}
    const int id = id0 {sign} kd * KF_DD, ih = ih0 {sign} kh * KF_DH;
    const bool rok = cok && (unsigned)id < (unsigned)geo.ID && (unsigned)ih < (unsigned)geo.IH;
    const int64_t row = rok ? ((int64_t)id * geo.IH + ih) * geo.IW : 0;
    #pragma unroll
    for (int u = 0; u < KF_SROWS / 32; ++u) {{
      const int s = srow + 32 * u, iw = iw0 + s;
      const bool ok = rok && (unsigned)iw < (unsigned)geo.IW;
      kf_cp16_l1(KF_SB_AT(st, s, run), ok ? W + (row + iw) * geo.CI + c : W, ok);
    }}
  }};
"""


def _main_loop(plan: ConvPlan) -> str:
    """The slices through KF_SS stages: each iteration's MMAs, KF_KW taps x 4 k8 steps, read B at the
    tap's row of the strip."""
    shift = "(KF_KW - 1 - kw)" if plan.transposed else "kw"
    return rf"""
  /* slice t lives in stage t % KF_SS; the first KF_SS - 1 are in flight before the loop */
  const int slices = KF_KD * KF_KH * KF_CSLICES;
  #pragma unroll
  for (int t = 0; t < KF_SS - 1; ++t) {{
    if (t < slices) load_slice(t, t);
    asm volatile("cp.async.commit_group;");
  }}
  const unsigned a_at = kf_base + wm * 64 * 128;
  const unsigned b_at = kf_base + KF_KW * BM * 128 + wn * KF_WG_N * 128;
  for (int t = 0; t < slices; ++t) {{
    /* slice t's copies landed (this thread's, then everyone's at the barrier), made visible to the
       tensor cores; the barrier also follows every warpgroup's wait for slice t - 1's MMAs */
    asm volatile("cp.async.wait_group %0;" ::"n"(KF_SS - 2));
    kf_async_fence();
    __syncthreads();
    const unsigned stage = (unsigned)(t % KF_SS) * (KF_SSTAGE_FLOATS * 4);
    kf_wg_fence();
    #pragma unroll
    for (int kw = 0; kw < KF_KW; ++kw) {{
      const unsigned a = a_at + stage + kw * BM * 128, b = b_at + stage + {shift} * KF_DW * 128;
      #pragma unroll
      for (int k8 = 0; k8 < 4; ++k8) kf_wgmma(acc, kf_wg_desc(a + 32 * k8), kf_wg_desc(b + 32 * k8), 1);
    }}
    kf_wg_commit();
    const int next = t + KF_SS - 1;  /* into the stage of slice t - 1, whose MMAs are done */
    if (next < slices) load_slice(next % KF_SS, next);
    asm volatile("cp.async.commit_group;");  /* an empty group past the end keeps the count */
    kf_wg_wait<0>();
  }}
"""


def strip_kernel(kernel_open: str, plan: ConvPlan) -> str:
    """The strip kernel's opening, prologue, loads and main loop (`kernel_open`: the warpgroup kernel's
    opening with its @N0@ placeholder); the epilogue is the warpgroup kernel's, bounded by `row_bounded`."""
    return kernel_open.replace("@N0@", FIRST_TILE) + _prologue(plan) + _loads(plan) + _main_loop(plan)


def row_bounded(epilogue: list[str]) -> list[str]:
    """The epilogue storing a tile's pixels up to its row's end: `c < N` bounds become `c < n_end` (the
    row stride `r * N` stays)."""
    return [re.sub(r"\b(c(?: \+ u)?) < N\b", r"\1 < n_end", line) for line in epilogue]

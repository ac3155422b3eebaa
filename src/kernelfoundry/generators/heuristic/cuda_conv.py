"""CUDA implicit-GEMM convolution on tensor cores, the tail fused into its stores.

The CUDA counterpart of cpu_conv.py, for the same plans (`conv_plan`): one Conv1d /
Conv2d / Conv3d or transposed conv, any stride, padding, dilation and groups, bare or followed by one
pointwise step over per-channel operands and constants. Per image and group, the conv is the product out
(M x P) = W (M x K) * B (K x P) with M = CO / G, P = OD * OH * OW output pixels, K = CI / G * KD * KH * KW
and B the im2col matrix, which is never built. The kernel is the tensor-core GEMM's (cuda_gemm_tc.py: its
warp layout, 3xTF32 or one TF32 product, its MMA step) with its own operand path: K streams through
KF_STAGES shared-memory stages filled by cp.async (KF_STAGES - 1 slices in flight while one is
multiplied, no register staging). A's slice is the filters (KF_A_SRC: a forward conv's (CO, CI / G, taps)
weight is k-contiguous, copied 16 bytes at a time where K % 4 == 0; a transposed one's (CI, CO / G, taps)
is not), B's is gathered: a thread owns BN / 32 output pixels (n0 + lane + 32 u) for the whole K loop, their
first input positions decoded once; each k row it copies is decoded into (ci, kd, kh, kw) once, by
division by the baked tap counts, for its BN / 32 pixels; a tap in the padding (or, transposed, at a
position the stride does not divide) copies zeros. A warp's 32 copies of a k row are 32 neighbouring
pixels, so a stride-1 conv's gather coalesces. The grid's z is (image, group).

Output rows are channels: the epilogue adds the bias (per row), applies the tail with the per-channel
operands indexed by the row, and stores each row's pixels contiguously (float2 runs where P % 4 == 0).

The channels-last operand path (`channels_last` variant, where a group's input channels are a multiple
of 4): the unit first copies the input to NHWC and the filters to (CO, taps, CI / G) in stream-ordered
scratch, and orders K as (tap, channel). A k slice then holds 16-byte runs of one pixel's channels at
one tap: B is copied 16 bytes at a time (one decode and one bounds check per run, not per element) into
pixel-major stages, A as a k-contiguous matrix. cuDNN's own TF32 kernels read NHWC too (it converts the
input and the output around them); this path converts the input only, the epilogue writing NCHW rows.

Precision: torch runs float32 convolutions through cuDNN with TF32 allowed (its default), so eager's own
error, and with it the judge's tolerance floor, is TF32's. The `tf32` variant multiplies once in TF32
(KF_TF32_TERMS 1: the MMA rate cuDNN gets); the other runs 3xTF32 at float32 accuracy. On the
channels-last path the one-product variant rounds both operands to TF32 in their conversions
(KF_PREROUNDED), so its fragment reads skip the rounding: on the H100, level1/56's conv issued 1.9x
cuDNN's instructions at the same rate (Nsight Compute), two integer operations a fragment register
among them.
Tunables: BM (32, 64 or 128 output channels a block: the default wastes no rows where a group has at
most 32 or 64), BK (8, 16 or 32: the K slice a stage), KF_STAGES (2 to 4), KF_MIN_BLOCKS, KF_WN (n8
tiles a warp: 8, a 64-pixel-wide warp and BN 256, by default, so each fragment read from shared memory
feeds twice the MMAs it did at 4; one block an SM at BM 128, whose warps then hold 128 accumulators a
thread) and, on the channels-last path with one TF32 product, KF_WIDE_FRAGS (1: a thread reads its
fragments of a k16 16 bytes at a time, TC_STEP_K16, its stage rows unpadded; 0, the default: 4 bytes at
a time, which measured faster on 8 of 11 level-1 convs on the H100).
Pure string building.
"""

from __future__ import annotations

import math

from kernelfoundry.generators.heuristic import cuda_conv_phases as phases
from kernelfoundry.generators.heuristic import cuda_conv_span as spans
from kernelfoundry.generators.heuristic import cuda_conv_strip as strips
from kernelfoundry.generators.heuristic import cuda_conv_wgmma as wgmma
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan, conv_plan
from kernelfoundry.generators.heuristic.cuda import ALLOC
from kernelfoundry.generators.heuristic.cuda_gemm import TC_LAYOUT, TileLayout, store_row
from kernelfoundry.generators.heuristic.cuda_gemm_tc import TC_HELPERS, TC_STEP, TC_STEP_K16, TC_STEP_LDSM
from kernelfoundry.generators.heuristic.graph import Graph, Ref
from kernelfoundry.generators.heuristic.plan import Leaf
from kernelfoundry.generators.heuristic.prelude import PRELUDE
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant

_AXES = ("D", "H", "W")


def cuda_conv_plan(graph: Graph) -> ConvPlan | None:
    """The conv plan when the CUDA conv family applies (the CPU family's plans), else None."""
    return conv_plan(graph)


def cuda_conv_applies(graph: Graph) -> bool:
    return cuda_conv_plan(graph) is not None


def channels_last_operands_apply(graph: Graph, plan: ConvPlan) -> bool:
    """Whether the channels-last operand path applies: a group's input channels fill 16-byte runs."""
    groups_channels = int(graph.shapes[plan.x][1]) // plan.groups
    return groups_channels > 0 and groups_channels % 4 == 0


def nchw_leads(graph: Graph, plan: ConvPlan) -> bool:
    """Whether the NCHW seeds come before the channels-last ones: where the NHWC copy of the input would
    cost more than it saves. A 1x1 conv of stride 1 reads each k row's pixels contiguously in NCHW
    already, and the copy would add the input's bytes twice to a memory-bound conv. A 1-D conv whose
    input holds more values than its output (strided: level1/76, stride 3) would spend more on the copy
    than on the conv's own reads and writes; there the NCL gather ran 9.66 ms on the H100 against 16.36
    for the channels-last seed and eager's 12.39, while on 67, 64 and 74 (inputs of half to one output)
    the channels-last seed led (bench/results/h100_2026-12-07/)."""
    pointwise = plan.kernel == (1, 1, 1) and plan.stride == (1, 1, 1) and not plan.transposed
    values_in = math.prod(int(d) for d in graph.shapes[plan.x])
    larger = values_in > math.prod(int(d) for d in plan.conv.shape)
    return pointwise or (plan.dims == 1 and (larger or span_by_default(plan)))


def span_by_default(plan: ConvPlan) -> bool:
    """Whether the NCL unit reads the input span by default (cuda_conv_span.py): where a block holds at
    most 64 output channels, and at 128 for forward 1-D convs of an odd number of taps (channel-major
    filter rows, 16-byte copies). On the H100 the span beat the gather by 34% on level1/74 (64
    channels); at 128 channels, with the channel-major filters (bench/results/h100_2026-12-07b/), 67
    2.78 against 3.49 ms (the channels-last seed 2.89, eager 2.86) and 76 tied (9.57 against 9.59),
    while the pointwise 87 lost (6.38 against 5.70) and the transposed 64 with 4-byte filter copies had
    lost 2% (7.27 against 7.10)."""
    if not spans.span_applies(plan):
        return False
    if _block_rows(plan) < 128:
        return True
    return plan.dims == 1 and spans.filters_by_channel(plan) and plan.kernel[2] > 1


def _block_rows(plan: ConvPlan) -> int:
    """BM's default: the fewest of 32, 64 and 128 output channels a block that hold a group's (no wasted
    rows where a group has at most 32 or 64)."""
    rows = int(plan.conv.shape[1]) // plan.groups
    return 32 if rows <= 32 else 64 if rows <= 64 else 128


# The warpgroup MMAs' default (cuda_conv_wgmma.py) where a group's K (its input channels times the taps
# a pixel reads) reaches this and it has at least 64 output channels: on the H100 they ran level1/56,
# 55, 62, 65, 80 and 57 (K 576-2240, 64-128 channels) 12-37% faster than the mma.sync kernel, and lost
# 4-32% on 67 and 64 (K 192 and 384: a few slices, the pipeline's fill and the epilogue dominate) and tied
# on 78 and 71 (32 channels: half of each 64-row slab is padding), bench/results/h100_2026-12-06c/.
WARPGROUP_MIN_K = 512


def warpgroups_by_default(graph: Graph, plan: ConvPlan) -> bool:
    """Whether the channels-last TF32 unit multiplies by warpgroup MMAs unless swept otherwise: a group's
    K at least WARPGROUP_MIN_K (a transposed conv's taps spread over its stride's phases) and at least 64
    output channels."""
    channels = int(graph.shapes[plan.x][1]) // plan.groups
    taps = math.prod(plan.kernel)
    if plan.transposed:
        taps = max(1, taps // math.prod(plan.stride))
    return channels * taps >= WARPGROUP_MIN_K and _block_rows(plan) >= 64


# The row strip's default (cuda_conv_strip.py) where its tiles of 256 pixels fill at least this share of
# an output row's: on the H100 the conv kernel 44% faster on level1/62 and 80 (rows of 504 and 496 pixels,
# 1.49 ms against cuDNN's 1.86), 16% on 65 (518: three tiles, 67% filled), and with the warpgroup MMAs 23%
# faster than the mma.sync kernel on 67 (a 1-D conv of K 192); 2% slower on 69 (260: 51% filled),
# bench/results/h100_2026-12-06d/.
STRIP_MIN_FILL = 0.6
STRIP_MIN_CHANNELS = 32  # a group's output channels, at least


def strip_by_default(plan: ConvPlan) -> bool:
    """Whether the warpgroup kernel reads a row strip unless swept otherwise (where it applies): 32+
    output channels a group and an output row that 256-pixel tiles fill to STRIP_MIN_FILL. It brings the
    warpgroup MMAs with it, whatever the group's K. At 32 channels (BM 32, run as 64: half of each slab
    padding) it still won on the H100: level1/71's conv 1.22 -> 1.07 ms, 78's 2.42 -> 1.48 ms
    (bench/results/h100_2026-12-06e/)."""
    if not strips.strip_applies(plan) or int(plan.conv.shape[1]) // plan.groups < STRIP_MIN_CHANNELS:
        return False
    width = int(plan.conv.shape[-1])
    tiles = -(-width // 256)
    return width >= STRIP_MIN_FILL * tiles * 256


def _geometry_defines(plan: ConvPlan) -> list[str]:
    lines = []
    for axis, k, s, p, d in zip(_AXES, plan.kernel, plan.stride, plan.padding, plan.dilation, strict=True):
        lines.append(f"#define KF_K{axis} {k}")
        lines.append(f"#define KF_S{axis} {s}")
        lines.append(f"#define KF_P{axis} {p}")
        lines.append(f"#define KF_D{axis} {d}")
    lines.append("#define KF_TAPS (KF_KD * KF_KH * KF_KW)")
    lines.append(f"#define KF_GROUPS {plan.groups}")
    return lines


def _pixel_positions(plan: ConvPlan, count: str, pixel: str) -> str:
    """The thread's `count` output pixels (pixel u at `pixel`): whether each is in range and its first
    input position per axis (qd, qh, qw). A forward conv reads input d0 + kd * DD for output d; a
    transposed one reads (d + PD - kd * DD) / SD where that divides; phased, pixel j of the block's
    phase reads j plus the tap's offset."""
    oh, ow = "geo.OH", "geo.OW"
    if phases.phased(plan):
        first, oh, ow = phases.first_positions(plan), "OHp", "OWp"
    elif not plan.transposed:
        first = "pd * KF_SD - KF_PD, ph * KF_SH - KF_PH, pw * KF_SW - KF_PW"
    else:
        first = "pd + KF_PD, ph + KF_PH, pw + KF_PW"
    return f"""  int qd[{count}], qh[{count}], qw[{count}];
  bool qin[{count}];
  #pragma unroll
  for (int u = 0; u < {count}; ++u) {{
    const int px = {pixel};
    qin[u] = px < N;
    const int pw = px % {ow}, ph = px / {ow} % {oh}, pd = px / ({ow} * {oh});
    const int first[3] = {{{first}}};
    qd[u] = first[0];
    qh[u] = first[1];
    qw[u] = first[2];
  }}
"""


def _tap_position(plan: ConvPlan) -> tuple[str, str, str]:
    """(the tap's input position of a pixel, its bounds check, its offset in the input's plane): a
    transposed conv's position must also divide by the stride (phased: the tap's baked offset)."""
    if phases.phased(plan):
        return phases.tap_position(plan)
    if not plan.transposed:
        return (
            "const int d = qd[u] + td, h = qh[u] + th, w = qw[u] + tw;",
            "d >= 0 && d < geo.ID && h >= 0 && h < geo.IH && w >= 0 && w < geo.IW",
            "(d * geo.IH + h) * geo.IW + w",
        )
    return (
        "const int d = qd[u] - td, h = qh[u] - th, w = qw[u] - tw;",
        "d >= 0 && h >= 0 && w >= 0 && d % KF_SD == 0 && h % KF_SH == 0 && w % KF_SW == 0 &&\n"
        "                        d / KF_SD < geo.ID && h / KF_SH < geo.IH && w / KF_SW < geo.IW",
        "(d / KF_SD * geo.IH + h / KF_SH) * geo.IW + w / KF_SW",
    )


def _prologue(plan: ConvPlan) -> str:
    """The block's image and group and their planes, and the BN / 32 output pixels this thread gathers B
    for (n0 + lane + 32 u: a warp's loads of one k row are 32 neighbouring pixels): their first input
    position."""
    return (
        r"""
  constexpr int KF_PX = BN / 32;  /* pixels a thread gathers: 32 threads a k row */
  const int64_t image = blockIdx.z / KF_GROUPS, group = blockIdx.z % KF_GROUPS;
  const int64_t cig = geo.CI / KF_GROUPS;  /* input channels a group */
  const int plane = geo.ID * geo.IH * geo.IW;  /* one input channel (fits an int: checked) */
  W += (image * geo.CI + group * cig) * (int64_t)plane;  /* the group's input channels */
  X += group * (int64_t)M * K;  /* its filters: M output channels x K */
  out += (image * KF_GROUPS + group) * (int64_t)M * N;  /* its output: M channels of P pixels */
  const int cbase = (int)(group * M);  /* its first output channel: bias and tail operands */
  /* this thread's KF_PX B columns (output pixels n0 + lane + 32 u) and the k rows it loads (k4 + 8 j) */
  const int k4 = tid >> 5;
"""
        + _phase_setup(plan)
        + ("" if _pointwise(plan) else _pixel_positions(plan, "KF_PX", "n0 + lane + 32 * u"))
    )


_LOAD_A = r"""  auto load_a = [&](int st, int k0) {
    if (a_vec & 1) {
      #pragma unroll
      for (int l = 0; l < (BM * BK / 4 + 255) / 256; ++l) {
        const int e = tid + l * 256, r = e / (BK / 4), kk = e % (BK / 4) * 4;
        const int gm = m0 + r, gk = k0 + kk;
        const bool ok = gm < M && gk < K;  /* K % 4 == 0: the four are in range together */
        if (e < BM * BK / 4) kf_cp16(KF_A_AT(st, r, kk), ok ? KF_A_SRC(gm, gk) : X, ok);
      }
    } else {
      #pragma unroll
      for (int l = 0; l < BM * BK / 256; ++l) {
        const int e = tid + l * 256, r = e / BK, kk = e % BK;
        const int gm = m0 + r, gk = k0 + kk;
        const bool ok = gm < M && gk < K;
        kf_cp4(KF_A_AT(st, r, kk), ok ? KF_A_SRC(gm, gk) : X, ok);
      }
    }
  };
"""


def _loads(plan: ConvPlan) -> str:
    """The stage fills, cp.async global -> shared (no register staging, zeros where out of range):
    `load_a(st, k0)` the filters' slice [k0, k0 + BK) of the block's rows (16-byte copies where a_vec:
    k-contiguous rows, K % 4 == 0), `load_b(st, k0)` the im2col slice of the thread's BN / 32 pixels: one
    (ci, tap) decode a k row, four 4-byte copies (zeros in the padding and, transposed, where the
    position does not divide by the stride)."""
    if _pointwise(plan):
        return _LOAD_A + _POINTWISE_LOAD_B
    at, ok, index = _tap_position(plan)
    if phases.phased(plan):  # k = (channel, the phase's tap)
        decode = """const int ci = gk / taps, t = gk - ci * taps;
      const int4 tap = kf_tab[t];"""
    else:
        decode = """const int ci = gk / KF_TAPS, t = gk - ci * KF_TAPS;
      const int td = t / (KF_KH * KF_KW) * KF_DD, th = t / KF_KW % KF_KH * KF_DH, tw = t % KF_KW * KF_DW;"""
    return (
        _LOAD_A
        + f"""  auto load_b = [&](int st, int k0) {{
    #pragma unroll
    for (int j = 0; j < BK / 8; ++j) {{
      const int kk = k4 + 8 * j, gk = k0 + kk;
      {decode}
      const float* __restrict__ src = W + (int64_t)ci * plane;
      #pragma unroll
      for (int u = 0; u < KF_PX; ++u) {{
        {at}
        const bool ok = gk < K && qin[u] && {ok};
        kf_cp4(&Bs[st][kk][lane + 32 * u], ok ? src + {index} : W, ok);
      }}
    }}
  }};
"""
    )


def _pointwise(plan: ConvPlan) -> bool:
    """A pointwise conv (one tap, stride 1, no padding): k row gk of output pixel n is input channel
    gk's element n, so B's slices are runs of the input's planes (`_POINTWISE_LOAD_B`)."""
    return spans.pointwise(plan) and not phases.phased(plan)


_POINTWISE_LOAD_B = r"""  auto load_b = [&](int st, int k0) {
    if (a_vec & 2) {  /* 16-byte aligned planes; N % 4 == 0: a quad is in range or past N whole */
      /* thread tid copies columns c .. c + 3 of rows kk0 + l * (1024 / BN) */
      const int kk0 = tid / (BN / 4), c = tid % (BN / 4) * 4;
      const bool in = n0 + c < N;
      const float* __restrict__ src = W + (int64_t)(k0 + kk0) * plane + n0 + c;
      #pragma unroll
      for (int l = 0; l < BK * BN / 1024; ++l) {
        const int kk = kk0 + l * (1024 / BN);
        const bool ok = in && k0 + kk < K;
        kf_cp16(&Bs[st][kk][c], ok ? src + (int64_t)l * (1024 / BN) * plane : W, ok);
      }
    } else {  /* a loop, not unrolled: unrolled, its addresses cost the main loop spills */
      #pragma unroll 1
      for (int l = 0; l < BK * BN / 256; ++l) {
        const int e = tid + l * 256, kk = e / BN, c = e % BN, gk = k0 + kk;
        const bool ok = gk < K && n0 + c < N;
        kf_cp4(&Bs[st][kk][c], ok ? W + (int64_t)gk * plane + n0 + c : W, ok);
      }
    }
  };
"""
"""A pointwise conv's B slice: its k rows are runs of the input's planes, copied 16 bytes at a time
where the planes are 16-byte aligned (bit 1 of a_vec), a quarter of the gather's copies, else 4 bytes
at a time; either without the gather's tap decode, six bounds checks and per-pixel state. On the H100
level1/87's gather issued 2.1 times cuBLAS's instructions a cycle, half its issue slots idle on
dependencies (Nsight Compute, bench/results/h100_2026-12-07c/)."""


def _linear_taps(plan: ConvPlan) -> bool:
    """Whether a tap's input position is the pixel's first plus the tap's offset along every axis (a
    forward conv, or a transposed one of stride 1 minus it): its offset in the input's plane is then the
    pixel's plus the tap's, one add a copy where the position is otherwise recomputed."""
    return not phases.phased(plan) and (not plan.transposed or all(s == 1 for s in plan.stride))


def _pixel_offsets(plan: ConvPlan) -> str:
    """The linear taps' per-pixel setup: each pixel's first position as an offset in the input's plane,
    and the bounds of an axis with one tap (the pixel's own position there) decided once."""
    if not _linear_taps(plan):
        return ""
    return r"""  int qoff[KF_PASSES];  /* the pixel's first input position: its offset in the input's plane */
  #pragma unroll
  for (int u = 0; u < KF_PASSES; ++u) {
    qoff[u] = (qd[u] * geo.IH + qh[u]) * geo.IW + qw[u];
    if (KF_KD == 1) qin[u] = qin[u] && (unsigned)qd[u] < (unsigned)geo.ID;
    if (KF_KH == 1) qin[u] = qin[u] && (unsigned)qh[u] < (unsigned)geo.IH;
    if (KF_KW == 1) qin[u] = qin[u] && (unsigned)qw[u] < (unsigned)geo.IW;
  }
"""


def _nhwc_prologue(plan: ConvPlan) -> str:
    """The channels-last path's block setup: W is the image's NHWC input at the group's first channel,
    X the group's filters as (M, taps x KF_CIG). A pixel's k slice is BK / 4 runs of 16 bytes; thread
    tid copies run tid % (BK / 4) of the pixels tid / (BK / 4) + (256 / (BK / 4)) u, whose first input
    positions it decodes once."""
    return (
        r"""
  const int64_t image = blockIdx.z / KF_GROUPS, group = blockIdx.z % KF_GROUPS;
  const int64_t pixels_in = (int64_t)geo.ID * geo.IH * geo.IW;
  W += image * pixels_in * geo.CI + group * KF_CIG;  /* the image's pixels, the group's first channel */
  X += group * (int64_t)M * K;  /* its filters: M output channels x K = taps x KF_CIG */
  out += (image * KF_GROUPS + group) * (int64_t)M * N;  /* its output: M channels of P pixels */
  const int cbase = (int)(group * M);  /* its first output channel: bias and tail operands */
  constexpr int KF_RUNS = BK / 4;  /* 16-byte runs of a pixel's k slice */
  constexpr int KF_PIXEL_STEP = 256 / KF_RUNS;  /* pixels one pass of the block's threads copies */
  constexpr int KF_PASSES = BN / KF_PIXEL_STEP;
  const int run = (tid % KF_RUNS) * 4, prow = tid / KF_RUNS;
"""
        + _phase_setup(plan)
        + _pixel_positions(plan, "KF_PASSES", "n0 + prow + KF_PIXEL_STEP * u")
        + _pixel_offsets(plan)
    )


def _nhwc_loads(plan: ConvPlan) -> str:
    """The channels-last stage fills: A as `_loads` (k-contiguous filters, 16-byte copies); B one decode
    of (tap, channel) for the thread's run of 4 channels (KF_CIG % 4 == 0: a run lies in one tap), then
    for each of its pixels one bounds check and one 16-byte copy of 4 neighbouring channels (zeros in
    the padding). Through L1 (.ca): a block's pixels read overlapping input at neighbouring taps."""
    at, ok, index = _tap_position(plan)
    if phases.phased(plan):  # k = (the phase's tap, channel); past K, any tap (nothing is read)
        decode = "const int4 tap = kf_tab[t < taps ? t : 0];"
    else:
        decode = (
            "const int td = t / (KF_KH * KF_KW) * KF_DD, th = t / KF_KW % KF_KH * KF_DH,"
            " tw = t % KF_KW * KF_DW;"
        )
    if _linear_taps(plan):
        sign = "-" if plan.transposed else "+"
        at = f"const int d = qd[u] {sign} td, h = qh[u] {sign} th, w = qw[u] {sign} tw;"
        # an axis of one tap was checked once a pixel (_pixel_offsets); the others as unsigned ranges
        ok = " &&\n                        ".join(
            f"(KF_K{a} == 1 || (unsigned){a.lower()} < (unsigned)geo.I{a})" for a in _AXES
        )
        decode += "\n    const int toff = (td * geo.IH + th) * geo.IW + tw;  /* its offset in the plane */"
        index = f"qoff[u] {sign} toff"
    return (
        _LOAD_A
        + f"""  auto load_b = [&](int st, int k0) {{
    const int gk = k0 + run;
    const int t = gk / KF_CIG, ci = gk - t * KF_CIG;
    {decode}
    #pragma unroll
    for (int u = 0; u < KF_PASSES; ++u) {{
      {at}
      const bool ok = gk < K && qin[u] && {ok};
      kf_cp16_l1(KF_B_AT(st, prow + KF_PIXEL_STEP * u, run),
                 ok ? W + (int64_t)({index}) * geo.CI + ci : W, ok);
    }}
  }};
"""
    )


_OPEN = (
    r"""
static_assert(BK == 8 || BK == 16 || BK == 32, "BK must be 8, 16 or 32");
static_assert(KF_STAGES >= 2 && KF_STAGES <= 4, "KF_STAGES must be 2, 3 or 4");
"""
    + TC_HELPERS
    + r"""
/* 16-byte fragment reads (TC_STEP_K16) where both operands' rows are k-contiguous and multiplied once
   (KF_WIDE_FRAGS 1; by default the 4-byte reads of TC_STEP everywhere) */
#ifndef KF_WIDE_FRAGS
#define KF_WIDE_FRAGS 0
#endif
#define KF_FRAG16 (KF_WIDE_FRAGS && KF_NHWC && KF_TF32_TERMS == 1 && BK % 16 == 0)
/* fragments read by ldmatrix (TC_STEP_LDSM) where both operands' rows are k-contiguous (KF_LDSM 1, the
   default of every channels-last unit; 0: the 4-byte reads of TC_STEP) */
#ifndef KF_LDSM
#define KF_LDSM 0
#endif
#define KF_FRAG_LDSM (KF_LDSM && KF_NHWC && !KF_FRAG16)
#if KF_FRAG16
/* As rows (k-contiguous, 16-byte aligned): two rows a quarter warp's LDS.128 reads cover 32 banks */
#define KF_AS_LD (BK % 32 == 0 ? BK + 16 : BK)
#else
#define KF_AS_LD (BK + 4)  /* As rows (k-contiguous, 16-byte aligned): a warp's fragment reads hit 32 banks */
#endif
#if KF_NHWC
#define KF_BS_ROWS BN  /* Bs rows of a pixel's k slice (k-contiguous, as As's) */
#define KF_BS_LD KF_AS_LD
#else
#define KF_BS_ROWS BK  /* Bs rows of 136 pixels a k: likewise */
#define KF_BS_LD (BN + KF_PAD)
#endif
#define KF_SMEM_FLOATS (KF_STAGES * (BM * KF_AS_LD + KF_BS_ROWS * KF_BS_LD))
#define KF_A_AT(st, r, k) (&As[st][r][k])  /* where a copy of A(r, k .. k + 3) lands */
#define KF_B_AT(st, p, k) (&Bs[st][p][k])  /* likewise B's pixel p (channels-last) */
"""
)

_COPIES = r"""
/* 4- and 16-byte copies global -> shared that bypass the registers; ok false: zeros, nothing read */
__device__ __forceinline__ void kf_cp4(float* dst, const float* src, bool ok) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void kf_cp16(float* dst, const float* src, bool ok) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void kf_cp16_l1(float* dst, const float* src, bool ok) {  /* kept in L1 too */
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}
"""

_KERNEL_OPEN = r"""
/* One BM x BN tile of a group's out = filters x im2col (then bias and the tail) per block of 256
   threads, warps as in the GEMM family's tensor-core kernel (warp w owns rows (w / 4) * BM / 2 + [0,
   BM / 2) and columns (w % 4) * BN / 4 + [0, BN / 4)); K streams through KF_STAGES shared stages filled by
   cp.async, KF_STAGES - 1 slices in flight while one is multiplied. X: the filters, W: the input. */
__global__ void __launch_bounds__(256, KF_MIN_BLOCKS)
    kf_conv(int M, int N, int K, const float* __restrict__ X, const float* __restrict__ W,
            const float* __restrict__ bias, float* __restrict__ out, int vec_out, int a_vec,
            const kf_conv_args geo) {
  extern __shared__ __align__(16) float kf_smem[];
  float (*As)[BM][KF_AS_LD] = reinterpret_cast<float (*)[BM][KF_AS_LD]>(kf_smem);
  float (*Bs)[KF_BS_ROWS][KF_BS_LD] =
      reinterpret_cast<float (*)[KF_BS_ROWS][KF_BS_LD]>(kf_smem + KF_STAGES * BM * KF_AS_LD);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;  /* the MMA fragments' group and thread in group */
  const int wm = warp >> 2, wn = warp & 3;
  const int m0 = blockIdx.y * BM;
  @N0@
  float acc[KF_TM][KF_TN];
  #pragma unroll
  for (int i = 0; i < KF_TM; ++i) {
    #pragma unroll
    for (int j = 0; j < KF_TN; ++j) acc[i][j] = 0.0f;
  }
"""


def pipelined_main_loop(slices: str, first_k: str, fragments: str, step: str) -> str:
    """The mma.sync kernel's main loop: `slices` (an expression) k slices through KF_STAGES stages filled
    by `load_a(stage, k0)` and `load_b(stage, k0)`, k0 being `first_k` with slice s for `{s}`;
    `fragments` defines KF_A_FRAG and KF_B_FRAG over stage `cur`, which `step` multiplies."""
    k0, k0_next = first_k.format(s="s"), first_k.format(s="next")
    return (
        rf"""
  /* slice s lives in stage s % KF_STAGES; the first KF_STAGES - 1 are in flight before the loop */
  const int slices = {slices};
  #pragma unroll
  for (int s = 0; s < KF_STAGES - 1; ++s) {{
    if (s < slices) {{
      load_a(s, {k0});
      load_b(s, {k0});
    }}
    asm volatile("cp.async.commit_group;");
  }}
{fragments}  for (int s = 0; s < slices; ++s) {{
    /* this thread's copies of slice s have landed (at most KF_STAGES - 2 later groups pending); the
       barrier makes every thread's visible and frees the stage read in iteration s - 1 */
    asm volatile("cp.async.wait_group %0;" ::"n"(KF_STAGES - 2));
    __syncthreads();
    const int next = s + KF_STAGES - 1;
    if (next < slices) {{
      load_a(next % KF_STAGES, {k0_next});
      load_b(next % KF_STAGES, {k0_next});
    }}
    asm volatile("cp.async.commit_group;");  /* an empty group past the end keeps the count */
    const int cur = s % KF_STAGES;
"""
        + step
        + "  }\n"
    )


_MAIN_LOOP = pipelined_main_loop(
    "(K + BK - 1) / BK",
    "{s} * BK",
    r"""#define KF_A_FRAG(k, r) As[cur][r][k]
#if KF_NHWC
#define KF_B_FRAG(k, c) Bs[cur][c][k]
#else
#define KF_B_FRAG(k, c) Bs[cur][k][c]
#endif
""",
    "#if KF_FRAG16\n"
    + TC_STEP_K16
    + "#elif KF_FRAG_LDSM\n"
    + TC_STEP_LDSM
    + "#else\n"
    + TC_STEP
    + "#endif\n",
)


def _first_pixel(plan: ConvPlan, kernel_open: str) -> str:
    """The kernel's opening with its first pixel n0: phased, the phase's tile (set after the prologue)."""
    if phases.phased(plan):
        return kernel_open.replace("@N0@", "int n0;  /* the phase's pixel tile: set with the phase */")
    return kernel_open.replace("@N0@", "const int n0 = blockIdx.x * BN;")


def _open(plan: ConvPlan) -> str:
    """The mma.sync kernel's definitions and opening."""
    return _OPEN + _COPIES + _first_pixel(plan, _KERNEL_OPEN)


def _wg_definitions() -> str:
    """The warpgroup kernels' definitions (cuda_conv_wgmma.py)."""
    return TC_HELPERS + _COPIES + wgmma.wg_helpers()


def _phase_setup(plan: ConvPlan) -> str:
    return phases.PHASE_SETUP if phases.phased(plan) else ""


def _args_struct(plan: ConvPlan, nhwc: bool) -> str:
    """The kernel's own argument: the sizes read from the tensors at run time (the filter's taps,
    stride, padding and dilation are baked) and the tail's per-channel operands and constants."""
    fields = ["  int CI, ID, IH, IW, OD, OH, OW;"]
    fields += [f"  const float* C{k};" for k in range(len(plan.channel_leaves))]
    fields += [f"  float S{k};" for k in range(len(plan.scalar_leaves))]
    return "\n".join(
        [
            "struct kf_conv_args {",
            *fields,
            "};",
            _a_source(plan, nhwc),
        ]
    )


def _a_source(plan: ConvPlan, nhwc: bool) -> str:
    """KF_A_SRC: the filter element (output channel gm, k) of the block's group (X points at it)."""
    if phases.phased(plan):
        return phases.a_source(nhwc)
    # (CO, CI / G, taps): k-contiguous rows; the channels-last path's own copy (M, taps x KF_CIG) too
    if nhwc or not plan.transposed:
        return "#define KF_A_SRC(gm, gk) (X + (int64_t)(gm) * K + (gk))"
    # (CI, CO / G, taps): an input channel's filters for every output channel, then the taps
    return "#define KF_A_SRC(gm, gk) (X + ((int64_t)((gk) / KF_TAPS) * M + (gm)) * KF_TAPS + (gk) % KF_TAPS)"


def _epilogue(graph: Graph, plan: ConvPlan, at: TileLayout) -> list[str]:
    """Per accumulator row (an output channel; `at`: where the kernel's accumulators sit): bias, the
    tail with the row's per-channel operands, the row's stores."""
    conv = plan.conv.name
    channel = {name: f"C{k}" for k, name in enumerate(plan.channel_leaves)}
    scalar = {name: f"S{k}" for k, name in enumerate(plan.scalar_leaves)}

    def load(leaf: Leaf) -> str:
        if leaf.name == conv:
            return "y"
        if leaf.name in channel:
            return f"geo.{channel[leaf.name]}[cbase + rc]"
        return f"geo.{scalar[leaf.name]}"

    out: list[str] = []
    w = out.append
    w("  #pragma unroll")
    w("  for (int i = 0; i < KF_TM; ++i) {")
    w(f"    const int r = {at.row};")
    w("    const int rc = r < M ? r : M - 1;  /* rows past CO store nothing; read a valid channel */")
    w("    const float cb = bias ? bias[cbase + rc] : 0.0f;")
    w("    float v[KF_TN];")
    w("    #pragma unroll")
    w("    for (int j = 0; j < KF_TN; ++j) {")
    w("      const float y = acc[i][j] + cb;")
    if plan.step is None:
        w("      v[j] = y;")
    else:
        body, val = emit(graph, plan.step, Ref(plan.step.root.name), load, indent="      ")
        out.extend(body)
        w(f"      v[j] = {val};")
    w("    }")
    out.extend(phases.store_lines(at.run_col) if phases.phased(plan) else store_row(at, False))
    w("  }")
    w("}")
    return out


_TO_CHANNELS_LAST = r"""
/* The channels-last path's operands, rewritten into scratch before the conv: x (NB, CI, S) -> (NB, S,
   CI) through a 32 x 33 tile (both sides' accesses coalesce), and the filters to (CO, taps, KF_CIG);
   with one TF32 product each value rounded to TF32 on the way (KF_PREROUNDED: once, not at every
   fragment read). */
#if KF_PREROUNDED
#define KF_STAGED(v) __uint_as_float(kf_round_tf32(v))
#else
#define KF_STAGED(v) (v)
#endif
__global__ void __launch_bounds__(256) kf_to_nhwc(const float* __restrict__ x, float* __restrict__ y, int CI,
                                                  int64_t S) {
  __shared__ float tile[32][33];
  const int64_t s0 = (int64_t)blockIdx.x * 32, image = blockIdx.z;
  const int c0 = blockIdx.y * 32;
  x += image * CI * S;
  y += image * CI * S;
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int c = c0 + r;
    const int64_t s = s0 + threadIdx.x;
    if (c < CI && s < S) tile[r][threadIdx.x] = x[(int64_t)c * S + s];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int64_t s = s0 + r;
    const int c = c0 + threadIdx.x;
    if (c < CI && s < S) y[s * CI + c] = KF_STAGED(tile[threadIdx.x][r]);
  }
}
"""


def _filters_kernel(plan: ConvPlan) -> str:
    """kf_filters: the filters as (G, M, taps, KF_CIG), k = tap x KF_CIG + channel contiguous a row. A
    forward conv's weight is (CO, CI / G, taps), a transposed one's (CI, CO / G, taps)."""
    src = (
        "((g * KF_CIG + ci) * M + m) * KF_TAPS + t"
        if plan.transposed
        else "((g * M + m) * KF_CIG + ci) * KF_TAPS + t"
    )
    return f"""__global__ void kf_filters(const float* __restrict__ w, float* __restrict__ f, int64_t total,
                           int64_t M) {{
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += step) {{
    const int64_t ci = e % KF_CIG, t = e / KF_CIG % KF_TAPS, m = e / (KF_CIG * KF_TAPS) % M;
    const int64_t g = e / (KF_CIG * KF_TAPS * M);
    f[e] = KF_STAGED(w[{src}]);
  }}
}}
"""


def _operand_lines(plan: ConvPlan) -> list[str]:
    """Entry-point lines that check every input against the plan and compute the output's sizes."""
    idx = {name: i for i, name in enumerate(plan.inputs)}
    d = plan.dims
    out = [f"  if (n_inputs != {len(plan.inputs)} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;"]
    out.append("  kf_shape sx, sw, so;")
    for var, name in (("sx", plan.x), ("sw", plan.weight)):
        i = idx[name]
        out.append(f"  if (!kf_tensor_ok(&inputs[{i}]) || !kf_shape_of(&inputs[{i}], &{var}) ||")
        out.append(f"      {var}.nd != {d + 2}) return KF_ERR_BAD_ARGUMENTS;")
    spatial = _AXES[3 - d :]
    taps = " || ".join(f"sw.d[{2 + i}] != KF_K{axis}" for i, axis in enumerate(spatial))
    if plan.transposed:  # the weight is (CI, CO / G, taps)
        out.append("  const int64_t NB = sx.d[0], CI = sx.d[1], CO = sw.d[1] * KF_GROUPS;")
        out.append(f"  if (sw.d[0] != CI || CI % KF_GROUPS != 0 || {taps}) return KF_ERR_BAD_ARGUMENTS;")
    else:  # (CO, CI / G, taps)
        out.append("  const int64_t NB = sx.d[0], CI = sx.d[1], CO = sw.d[0];")
        out.append(f"  if (sw.d[1] * KF_GROUPS != CI || CO % KF_GROUPS != 0 || {taps})")
        out.append("    return KF_ERR_BAD_ARGUMENTS;")
    for axis in _AXES:
        at = f"sx.d[{2 + spatial.index(axis)}]" if axis in spatial else "1"
        out.append(f"  const int64_t I{axis} = {at};")
    for axis, extra in zip(_AXES, plan.output_padding, strict=True):
        span = f"KF_D{axis} * (KF_K{axis} - 1) + 1"  # the dilated filter's extent
        if plan.transposed:
            out.append(
                f"  const int64_t O{axis} = (I{axis} - 1) * KF_S{axis} - 2 * KF_P{axis} + {span} + {extra};"
            )
            continue
        # the padded input less the filter's extent: negative where the filter does not fit
        out.append(f"  const int64_t R{axis} = I{axis} + 2 * KF_P{axis} - ({span});")
        out.append(f"  const int64_t O{axis} = R{axis} < 0 ? 0 : R{axis} / KF_S{axis} + 1;")
    out.append("  if (OD <= 0 || OH <= 0 || OW <= 0) return KF_ERR_BAD_ARGUMENTS;")
    out.append(f"  const float* X = KF_DATA(const float, &inputs[{idx[plan.x]}]);")
    out.append(f"  const float* Wt = KF_DATA(const float, &inputs[{idx[plan.weight]}]);")
    out.append("  const float* B = nullptr;")
    if plan.bias:
        out += _per_channel(idx[plan.bias], "sb", "B")
    for k, name in enumerate(plan.channel_leaves):
        out += _per_channel(idx[name], f"sc{k}", f"C{k}")
    for k, name in enumerate(plan.scalar_leaves):
        out.append(f"  if (!kf_tensor_ok(&inputs[{idx[name]}])) return KF_ERR_BAD_ARGUMENTS;")
        out.append(f"  const float S{k} = KF_DATA(const float, &inputs[{idx[name]}])[0];")
    names = ("OD", "OH", "OW")[3 - d :]
    dims = " || ".join(f"so.d[{2 + i}] != {v}" for i, v in enumerate(names))
    out.append("  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_of(&outputs[0], &so) ||")
    out.append(f"      so.nd != {d + 2} || so.d[0] != NB || so.d[1] != CO || {dims})")
    out.append("    return KF_ERR_BAD_ARGUMENTS;")
    out.append("  float* O = KF_DATA(float, &outputs[0]);")
    return out


_ROUND_FILTERS = r"""
#if KF_A_ROUNDED
/* The filters rounded to TF32 (kf_round_tf32) into scratch, once a call: the kernel's A fragment reads
   then take their bits as they are */
__global__ void __launch_bounds__(256) kf_round_filters(const float* __restrict__ w, float* __restrict__ r,
                                                        int64_t n) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += step)
    r[i] = __uint_as_float(kf_round_tf32(w[i]));
}
#endif
"""


def _rounded_filters_launch() -> list[str]:
    """KF_A_ROUNDED: the filters (CO x K values, forward or transposed) rounded into pooled scratch before
    the conv, which reads them in place of the weight (Wt); a conv with filters of a few thousand values
    (level1/87's 8,192) pays one small kernel for two integer operations a fragment register of A. On
    the channels-last path the filters' own conversion rounds them already (KF_PREROUNDED)."""
    return [
        "#if KF_A_ROUNDED",
        "  float* rounded = kf_alloc(sizeof(float) * (size_t)(CO * K > 0 ? CO * K : 1), st);",
        "  if (!rounded) return KF_ERR_LAUNCH;",
        "  const int64_t rblocks = (CO * K + 255) / 256;",
        "  kf_round_filters<<<(unsigned)(rblocks < 1 ? 1 : rblocks < 4096 ? rblocks : 4096), 256, 0, st>>>(",
        "      Wt, rounded, CO * K);",
        "  Wt = rounded;",
        "#endif",
    ]


# The input's planes are rows of a multiple of 4 floats from a 16-byte aligned base: the span's and the
# pointwise gather's copies of them go 16 bytes at a time
_ROWS_16 = "((ID * IH * IW) % 4 == 0 && ((uintptr_t)X) % 16 == 0)"


def _per_channel(index: int, shape: str, var: str) -> list[str]:
    declare = "" if var == "B" else "const float* "
    return [
        f"  kf_shape {shape};",
        f"  if (!kf_tensor_ok(&inputs[{index}]) || !kf_shape_of(&inputs[{index}], &{shape}) ||",
        f"      kf_prod(&{shape}, 0, {shape}.nd) != CO) return KF_ERR_BAD_ARGUMENTS;",
        f"  {declare}{var} = KF_DATA(const float, &inputs[{index}]);",
    ]


def cuda_conv_unit(graph: Graph, plan: ConvPlan, variant: Variant, header: list[str]) -> str:
    """The whole .cu unit: tunables, prelude, the implicit-GEMM kernel with its epilogue, `kf_forward`
    (the channels-last path where the variant asks for it and a group's channels fill 16-byte runs)."""
    nhwc = variant.channels_last and channels_last_operands_apply(graph, plan)
    bm = _block_rows(plan)
    # warps 64 pixels wide (BN 256): a fragment read from shared memory feeds twice the MMAs; at BM 128
    # (128 accumulators a thread), and at BM 64 for 3xTF32's split fragments, they need the registers of
    # one block an SM (at two, 128 registers a thread, nvcc spilled 28-68 bytes)
    wn, blocks = 8, 2 if bm == 32 or (bm == 64 and variant.tf32) else 1
    if nhwc and variant.tf32 and bm == 128:
        # cuDNN's shape: 128 x 128 tiles of warps 32 pixels wide, two blocks an SM (126 registers, no
        # spills with the ldmatrix reads): 10-25% faster than one 128 x 256 block on the five level-1
        # convs of 128 output channels on the H100, bench/results/h100_2026-12-06/
        wn, blocks = 4, 2
    span = not nhwc and spans.span_applies(plan)
    span_on = span and span_by_default(plan)  # swept either way
    if span and bm == 128 and (span_on or not _pointwise(plan)):
        # the tile those units were measured with, span or gather: two blocks an SM of 128 x 128 (the
        # gather ran 76 at 9.66 ms with it; one block of 128 x 256 slowed the span 5-15% on 76, 67, 87).
        # A pointwise conv's gather of plane runs keeps one block of 128 x 256: on the H100 level1/87's
        # conv 5.16 ms against 5.89 at 128 x 128 (bench/results/h100_2026-12-07c/, cuBLAS 4.54)
        wn, blocks = 4, 2
    warpgroups = nhwc and variant.tf32  # the unit holds the warpgroup kernel beside the mma.sync one
    strip = warpgroups and strips.strip_applies(plan)
    strip_on = strip and strip_by_default(plan)
    wg_on = warpgroups and (warpgroups_by_default(graph, plan) or strip_on)
    # the warpgroup tiles' four stages (two slices in flight, one block an SM): 2-10% faster than three
    # at 256 pixels wide on level1/56, 55, 62, 65, 80 and 57 on the H100 (bench/results/h100_2026-12-06c/)
    stages = 4 if wg_on else 3
    tunables = [
        f"// @kf.tunable BM in [32, 64, 128] default {bm}",
        "// @kf.tunable BK in [8, 16, 32] default 16",
        f"// @kf.tunable KF_STAGES in [2, 3, 4] default {stages}",
        f"// @kf.tunable KF_MIN_BLOCKS in [1, 2] default {blocks}",
        f"// @kf.tunable KF_WN in [4, 8] default {wn}",
    ]
    defaults = {"BM": bm, "BK": 16, "KF_STAGES": stages, "KF_MIN_BLOCKS": blocks, "KF_WN": wn}
    rounded = not nhwc and variant.tf32  # the filters rounded to TF32 once, before the kernel: swept
    if rounded:
        tunables.append("// @kf.tunable KF_A_ROUNDED in [0, 1] default 0")
        defaults["KF_A_ROUNDED"] = 0
    if nhwc and variant.tf32:  # the fragment reads' width, where 16 bytes apply (BK 16 or 32): swept
        tunables.append("// @kf.tunable KF_WIDE_FRAGS in [0, 1] default 0")
        defaults["KF_WIDE_FRAGS"] = 0
    if nhwc:  # the fragments read by ldmatrix (both operands' rows k-contiguous): on by default (faster on
        # 11 of 11 level-1 channels-last convs on the H100, bench/results/h100_2026-12-06/), swept
        tunables.append("// @kf.tunable KF_LDSM in [0, 1] default 1")
        defaults["KF_LDSM"] = 1
    if warpgroups:  # Hopper's warpgroup MMA on swizzled stages (cuda_conv_wgmma.py), its tile width: swept
        tunables.append(f"// @kf.tunable KF_WGMMA in [0, 1] default {int(wg_on)}")
        tunables.append("// @kf.tunable KF_WG_BN in [128, 256] default 256")
        defaults["KF_WGMMA"] = int(wg_on)
        defaults["KF_WG_BN"] = 256
    if strip:  # the row strip (cuda_conv_strip.py): swept
        tunables.append(f"// @kf.tunable KF_WG_STRIP in [0, 1] default {int(strip_on)}")
        defaults["KF_WG_STRIP"] = int(strip_on)
    if span:  # the input span of a 1-D or pointwise conv read in NCL / NCHW (cuda_conv_span.py): swept,
        # and its stages' channel depth (8 as measured; 16 unmeasured)
        tunables.append(f"// @kf.tunable KF_SPAN in [0, 1] default {int(span_on)}")
        defaults["KF_SPAN"] = int(span_on)
        depths = ", ".join(str(c) for c in spans.channel_depths(plan))
        tunables.append(f"// @kf.tunable KF_SPAN_CH in [{depths}] default {spans.CHANNELS}")
        defaults["KF_SPAN_CH"] = spans.CHANNELS
    lines = [*header, variant.line(), *tunables]
    for name, value in defaults.items():
        lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    lines += ["#include <cuda_runtime.h>", PRELUDE, "", "KF_DEFINE_ABI_VERSION()"]
    lines += [
        f"#define KF_TF32_TERMS {1 if variant.tf32 else 3}  /* TF32 products a term (1: cuDNN's) */",
        f"#define KF_NHWC {int(nhwc)}  /* the channels-last operand path */",
        # both operands pass through the channels-last path's conversions, which round them once
        f"#define KF_PREROUNDED {int(nhwc and variant.tf32)}",
        *_geometry_defines(plan),
    ]
    if phases.phased(plan):
        lines.append(phases.phase_tables(plan))
    if rounded:  # A's fragment reads take the staged bits as they are (cuda_gemm_tc.kf_split_tf32_a)
        lines += ["#define KF_A_PREROUNDED KF_A_ROUNDED", ALLOC]
    if nhwc:
        cig = int(graph.shapes[plan.x][1]) // plan.groups
        lines += [f"#define KF_CIG {cig}  /* input channels a group (checked against the input) */", ALLOC]
    prologue = (_nhwc_prologue(plan) if nhwc else _prologue(plan)).rstrip("\n")
    loads = (_nhwc_loads(plan) if nhwc else _loads(plan)).rstrip("\n")
    lines.append(_args_struct(plan, nhwc))
    if warpgroups:
        lines += ["#if KF_WGMMA", _wg_definitions().rstrip("\n")]
        if strip:
            lines += [strips.strip_defines().rstrip("\n"), "#if KF_STRIP"]
            lines.append(strips.strip_kernel(wgmma.WG_OPEN, plan).rstrip("\n"))
            lines += [*strips.row_bounded(_epilogue(graph, plan, wgmma.WG_LAYOUT)), "#else  /* gathers */"]
        lines += [_first_pixel(plan, wgmma.WG_OPEN).rstrip("\n"), prologue, loads]
        lines.append(wgmma.WG_MAIN_LOOP.rstrip("\n"))
        lines += _epilogue(graph, plan, wgmma.WG_LAYOUT)
        if strip:
            lines.append("#endif")
        lines.append("#else  /* mma.sync */")
    if span:
        lines += [(_OPEN + _COPIES).rstrip("\n"), spans.span_defines(plan).rstrip("\n")]
        lines += [_first_pixel(plan, _KERNEL_OPEN).rstrip("\n"), "#if KF_SPAN"]
        lines += [spans.span_prologue(plan).rstrip("\n"), spans.span_loads(plan).rstrip("\n")]
        span_step = TC_STEP.replace("k8 < BK", "k8 < KF_SK")  # a stage's k: every tap of its channels
        span_loop = pipelined_main_loop(spans.SLICES, "{s}", spans.fragments(plan), span_step)
        lines += [span_loop.rstrip("\n"), "#else  /* gathers */"]
        lines += [prologue, loads, _MAIN_LOOP.rstrip("\n"), "#endif"]
    else:
        lines += [_open(plan).rstrip("\n"), prologue, loads, _MAIN_LOOP.rstrip("\n")]
    lines += _epilogue(graph, plan, TC_LAYOUT)
    if warpgroups:
        lines.append("#endif")
    if nhwc:
        lines += [_TO_CHANNELS_LAST.rstrip("\n"), "", _filters_kernel(plan)]
    if rounded:
        lines.append(_ROUND_FILTERS.rstrip("\n"))
    lines.append("")
    w = lines.append
    w("KF_EXPORT int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,")
    w("                         int32_t n_outputs, void* stream) {")
    w("  cudaStream_t st = (cudaStream_t)stream;")
    lines += _operand_lines(plan)
    w("  /* per group: M = CO / G output channels, K = CI / G * taps, P pixels */")
    w("  const int64_t P = OD * OH * OW, M = CO / KF_GROUPS, K = CI / KF_GROUPS * KF_TAPS;")
    w("  const int64_t limit = ((int64_t)1 << 31) - 1;")
    w("  if (P > limit - BN || K > limit || CO > limit || ID * IH * IW > limit) return KF_ERR_UNSUPPORTED;")
    if nhwc:
        w("  if (CI != (int64_t)KF_CIG * KF_GROUPS) return KF_ERR_BAD_ARGUMENTS;")
    w("  if (NB == 0 || CO == 0) return KF_OK;")
    if phases.phased(plan):
        w("  /* phased: grid x is (the phase's pixel tile, output phase); phase 0 has the most pixels */")
        w("  const int64_t PP = (OD + KF_PSD - 1) / KF_PSD * ((OH + KF_PSH - 1) / KF_PSH) *")
        w("                     ((OW + KF_PSW - 1) / KF_PSW);")
        w("  const int64_t ptiles = (PP + BN - 1) / BN, ctiles = (M + BM - 1) / BM;")
        w("  if (ptiles * KF_PHASES > limit) return KF_ERR_UNSUPPORTED;")
    elif strip:
        w("#if KF_STRIP  /* grid x is (output row, tile of it) */")
        w("  const int64_t ptiles = OD * OH * ((OW + BN - 1) / BN), ctiles = (M + BM - 1) / BM;")
        w("#else")
        w("  const int64_t ptiles = (P + BN - 1) / BN, ctiles = (M + BM - 1) / BM;")
        w("#endif")
    else:
        w("  const int64_t ptiles = (P + BN - 1) / BN, ctiles = (M + BM - 1) / BM;")
    w("  if (ctiles > 65535 || NB * KF_GROUPS > 65535) return KF_ERR_UNSUPPORTED;")
    tail = [f"C{k}" for k in range(len(plan.channel_leaves))]
    tail += [f"S{k}" for k in range(len(plan.scalar_leaves))]
    sizes = "(int)CI, (int)ID, (int)IH, (int)IW, (int)OD, (int)OH, (int)OW"
    w(f"  const kf_conv_args geo = {{{', '.join([sizes, *tail])}}};")
    if strip:  # the strip's tiles end with their rows: its float2 stores need even rows
        w("#if KF_STRIP")
        w("  const int vec_out = OW % 2 == 0 && ((uintptr_t)O) % 8 == 0;")
        w("#else")
        w("  const int vec_out = P % 4 == 0 && ((uintptr_t)O) % 16 == 0;")
        w("#endif")
    else:
        w("  const int vec_out = P % 4 == 0 && ((uintptr_t)O) % 16 == 0;")
    contiguous = "0" if plan.transposed else "K % 4 == 0 && ((uintptr_t)Wt) % 16 == 0"
    contiguous = "1" if nhwc else contiguous
    if span:  # the span copies the input 16 bytes at a time where its rows (planes) are 16-byte aligned
        # (bit 0), and (channel, tap) filter rows where they are k-contiguous and aligned (bit 1)
        w("#if KF_SPAN")
        w(f"  const int a_vec = {_ROWS_16}")
        w(f"                    | ({contiguous}) << 1;  /* 16-byte copies: input, filters */")
        w("#else")
    if not nhwc and _pointwise(plan):
        # and a pointwise conv's B slices where the input's planes are 16-byte aligned (bit 1)
        w(f"  const int a_vec = ({contiguous}) | {_ROWS_16} << 1;")
    else:
        w(f"  const int a_vec = {contiguous};  /* 16-byte filter copies: k-contiguous rows */")
    if span:
        w("#endif")
    xtiles = "(ptiles * KF_PHASES)" if phases.phased(plan) else "ptiles"
    w(f"  const dim3 grid((unsigned){xtiles}, (unsigned)ctiles, (unsigned)(NB * KF_GROUPS));")
    w("  const size_t smem = sizeof(float) * KF_SMEM_FLOATS;")
    w("  const cudaFuncAttribute most = cudaFuncAttributeMaxDynamicSharedMemorySize;")
    w("  if (smem > 48 * 1024 && cudaFuncSetAttribute(kf_conv, most, (int)smem) != cudaSuccess)")
    w("    return KF_ERR_LAUNCH;")
    if nhwc:
        w("  /* the input in NHWC and the filters as (CO, taps, KF_CIG), in stream-ordered scratch */")
        w("  const int64_t S = ID * IH * IW;  /* at most 2^31 - 1: checked above */")
        w("  float* xin = kf_alloc(sizeof(float) * (size_t)(NB * CI * S), st);")
        w("  float* fil = kf_alloc(sizeof(float) * (size_t)(CO * K), st);")
        w("  int rc = KF_OK;")
        w("  if (!xin || !fil) {")
        w("    rc = KF_ERR_LAUNCH;")
        w("  } else {")
        w("    const dim3 tgrid((unsigned)((S + 31) / 32), (unsigned)((CI + 31) / 32), (unsigned)NB);")
        w("    kf_to_nhwc<<<tgrid, dim3(32, 8), 0, st>>>(X, xin, (int)CI, S);")
        w("    const int64_t fblocks = (CO * K + 255) / 256;")
        w("    kf_filters<<<(unsigned)(fblocks < 4096 ? fblocks : 4096), 256, 0, st>>>(Wt, fil, CO * K, M);")
        w("    kf_conv<<<grid, 256, smem, st>>>((int)M, (int)P, (int)K, fil, xin, B, O, vec_out, a_vec,")
        w("                                     geo);")
        w("    if (cudaGetLastError() != cudaSuccess) rc = KF_ERR_LAUNCH;")
        w("  }")
        w("  if (xin) cudaFreeAsync(xin, st);")
        w("  if (fil) cudaFreeAsync(fil, st);")
        w("  return rc;")
    else:
        if rounded:
            lines += _rounded_filters_launch()
        w("  /* K = 0 (no input channels): no slice, zeros plus the tail */")
        w("  kf_conv<<<grid, 256, smem, st>>>((int)M, (int)P, (int)K, Wt, X, B, O, vec_out, a_vec, geo);")
        if rounded:  # stream-ordered: the scratch goes back to the pool after the conv has read it
            lines += ["#if KF_A_ROUNDED", "  cudaFreeAsync(rounded, st);", "#endif"]
        w("  if (cudaGetLastError() != cudaSuccess) return KF_ERR_LAUNCH;")
        w("  return KF_OK;")
    w("}")
    w("")
    return "\n".join(lines)

"""The mma.sync conv's input-span main loop for 1-D convs read in NCL, and pointwise convs read in NCHW:
one contiguous span of input a channel, read by every tap and every pixel of the block.

The gathering kernel (cuda_conv.py) copies the im2col matrix element by element: one 4-byte copy per (k
row, pixel), each with its own decode and bounds check, and a 1-D conv of stride 3 (level1/76) has a
warp's 32 copies of a k row spread over 384 bytes. The channels-last path instead converts the whole
input to NLC first, which on a 1-D conv costs as much as the conv itself (76 on the H100: 6.5 ms of
conversion, an 8.6 GB input read and written once more, beside cuDNN's 12.4 ms in all).

In 1-D, output pixels n0 .. n0 + BN - 1 of a block read input positions n * S - P + tap * D: for every
input channel one contiguous span of (BN - 1) * S + (KW - 1) * D + 1 values (a transposed conv of stride
1 reads n + P - tap * D, the same span with the taps reversed). A stage holds the span of 8 input
channels, copied 16 bytes at a time from the NCL input (4 bytes at a time at the row's ends, or where
rows are not 16-byte aligned), and the filters of those 8 channels at every tap; k within a stage is (tap,
channel), so a k8 step is one tap over the 8 channels and B(k, n) is span[k % 8][n * S + (k / 8) * D +
shift], read straight from the span by the fragment loads (`shift`: the span's start past the 16-byte
boundary it was copied from). The spans' row length is padded to a residue modulo 32 banks chosen for the
stride (`span_bank_residue`), so a warp's fragment reads of a k8 step (4 channels x 8 pixels) hit 32
distinct banks (S odd or 1), or as few twice as the stride allows.

So the input is read once from DRAM, as the channels-last path's conversion reads it, and never written
again; the output is written in NCL by the mma.sync kernel's epilogue.

A forward conv of an odd number of taps keeps a stage's filters in rows of (channel, tap)
(`filters_by_channel`): a row's slice is then the filters' own contiguous run of KF_SPAN_CH x taps values,
copied 16 bytes at a time where the filters' rows allow (K % 4 == 0, aligned), a quarter of the 4-byte
copies of (tap, channel) rows, which at 128 output channels a block were as many copies as the span's
own. The fragment reads of a k8 step (one tap, channels tig and tig + 4, rows g) stay on 32 banks for odd
tap counts; even ones would meet 2-4 times in a bank, so they (and transposed convs, whose filters run
(CI, CO / G, taps)) keep the (tap, channel) rows. Tunable KF_SPAN (1 by default where a block holds
at most 64 output channels, and at 128 for forward 1-D convs of odd taps: cuda_conv.span_by_default);
the stages shrink to those that fit in shared memory. Pure string building.

A pointwise conv of any dimension (one tap, stride 1, no padding: level1/87) is the same 1-D conv over
its flattened planes: output pixel p reads input position p of every channel, so a block's pixels read
one span of BN values a channel. Its gather copies them 4 bytes a (k row, pixel), with a decode and
bounds check each; the span copies them 16 bytes at a time. The kernel reads rows of
`plane` = ID * IH * IW values (IW alone in 1-D).
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic import cuda_conv_phases as phases
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan
from kernelfoundry.generators.heuristic.cuda_conv_strip import SMEM_LIMIT

# Input channels a stage (KF_SPAN_CH, tunable): 8, one k8 step a tap, or 16, two; deeper stages take
# half the barriers per k and twice the shared memory (the stages shrink to those that fit)
CHANNELS = 8
CHANNEL_DEPTHS = (8, 16)


def pointwise(plan: ConvPlan) -> bool:
    """One tap, stride 1, no padding on every axis: output pixel p reads input position p of each
    channel, whatever the dimension."""
    unit = (plan.kernel, plan.stride, plan.padding, plan.output_padding)
    return unit == ((1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0))


def span_applies(plan: ConvPlan) -> bool:
    """A 1-D conv whose output pixels read their input as one span, forward (any stride, padding,
    dilation, groups) or transposed of stride 1, or a pointwise conv of any dimension; and two stages of
    the widest tile (128 output channels a block, 256 pixels) fit in shared memory."""
    if (plan.dims != 1 and not pointwise(plan)) or phases.phased(plan):
        return False
    if plan.transposed and plan.stride[2] != 1:
        return False
    return 2 * stage_bytes(128, 256, plan.kernel[2], plan.stride[2], plan.dilation[2]) <= SMEM_LIMIT


def filters_by_channel(plan: ConvPlan) -> bool:
    """Whether a stage's filter rows run (channel, tap), each slice one contiguous run of the filters
    (forward convs of an odd number of taps: their fragment reads stay on 32 banks), else (tap,
    channel)."""
    return not plan.transposed and plan.kernel[2] % 2 == 1


def span_length(width: int, taps: int, stride: int, dilation: int) -> int:
    """Floats a channel's span takes: the tile's reach plus up to 3 before it (the copy starts on a
    16-byte boundary), in whole 16-byte copies."""
    reach = (width - 1) * stride + (taps - 1) * dilation + 1
    return (reach + 3 + 3) // 4 * 4


def span_bank_residue(stride: int) -> int:
    """The spans' row length modulo 32 (a multiple of 4: the rows stay 16-byte aligned) under which the
    fragment reads of a k8 step, channels tig and tig + 4 (tig < 4) at pixels g * stride (g < 8), meet
    the fewest times in one bank."""

    def worst(residue: int) -> int:
        banks = [0] * 32
        for tig in range(4):
            for g in range(8):
                banks[(tig * residue + g * stride) % 32] += 1
        return max(banks)

    return min(range(0, 32, 4), key=lambda r: (worst(r), r))


def _padded(length: int, residue: int) -> int:
    return length + (residue - length % 32) % 32


def stage_bytes(
    rows: int, width: int, taps: int, stride: int, dilation: int, channels: int = CHANNELS
) -> int:
    """One stage: `rows` filter rows of `channels` x taps (padded by 4) and `channels` spans."""
    span = _padded(span_length(width, taps, stride, dilation), span_bank_residue(stride))
    return 4 * (rows * (channels * taps + 4) + channels * span)


def channel_depths(plan: ConvPlan) -> tuple[int, ...]:
    """The stage depths (KF_SPAN_CH) of which two stages of the widest tile fit in shared memory."""
    taps, stride, dilation = plan.kernel[2], plan.stride[2], plan.dilation[2]
    return tuple(
        c for c in CHANNEL_DEPTHS if 2 * stage_bytes(128, 256, taps, stride, dilation, c) <= SMEM_LIMIT
    )


def span_defines(plan: ConvPlan) -> str:
    """After the mma.sync kernel's definitions: the span stages' layout (As rows of the filters, Bs rows
    of a channel's span) and the stages that fit."""
    residue = span_bank_residue(plan.stride[2])
    return rf"""
/* the input span (cuda_conv_span.py): KF_SPAN asks for it */
#ifndef KF_SPAN
#define KF_SPAN 0
#endif
#if KF_SPAN
#define KF_SK (KF_SPAN_CH * KF_KW)  /* k a stage: (tap, channel) */
#define KF_SPAN_LEN ((((BN - 1) * KF_SW + (KF_KW - 1) * KF_DW + 1) + 6) / 4 * 4)
#undef KF_AS_LD
#define KF_AS_LD (KF_SK + 4)  /* an odd multiple of 4: a warp's A fragment reads hit 32 banks */
#undef KF_BS_ROWS
#define KF_BS_ROWS KF_SPAN_CH
#undef KF_BS_LD
#define KF_BS_LD (KF_SPAN_LEN + ({residue} - KF_SPAN_LEN % 32 + 32) % 32)  /* residue {residue}: banks */
#define KF_SPAN_STAGE_BYTES (4 * (BM * KF_AS_LD + KF_BS_ROWS * KF_BS_LD))
#if KF_STAGES * KF_SPAN_STAGE_BYTES > {SMEM_LIMIT}
#undef KF_STAGES
#define KF_STAGES ({SMEM_LIMIT} / KF_SPAN_STAGE_BYTES)  /* two at least: span_applies */
#endif
#undef KF_SMEM_FLOATS
#define KF_SMEM_FLOATS (KF_STAGES * (BM * KF_AS_LD + KF_BS_ROWS * KF_BS_LD))
#endif
"""


def span_prologue(plan: ConvPlan) -> str:
    """The block's image, group and planes, and the span's first input position: 16-byte aligned, with
    the tile's first read `shift` floats into it."""
    # transposed, pixel n reads n + P - tap * D: the span starts at the last tap's position
    start = "n0 + KF_PW - (KF_KW - 1) * KF_DW" if plan.transposed else "n0 * KF_SW - KF_PW"
    return rf"""
  const int64_t image = blockIdx.z / KF_GROUPS, group = blockIdx.z % KF_GROUPS;
  const int64_t cig = geo.CI / KF_GROUPS;  /* input channels a group */
  const int plane = geo.ID * geo.IH * geo.IW;  /* a channel's row: IW in 1-D (fits an int: checked) */
  W += (image * geo.CI + group * cig) * (int64_t)plane;  /* the group's input rows */
  X += group * (int64_t)M * K;  /* its filters */
  out += (image * KF_GROUPS + group) * (int64_t)M * N;  /* its output: M channels of P pixels */
  const int cbase = (int)(group * M);  /* its first output channel: bias and tail operands */
  const int start = {start};  /* the tile's first input position (may be negative: padding) */
  const int a0 = start - ((start % 4) + 4) % 4, shift = start - a0;  /* the copies' first, aligned */
  const int span_vec = a_vec & 1;  /* rows 16-byte aligned: the span copied 16 bytes at a time */
  const int filter_vec = a_vec >> 1;  /* K % 4 == 0, aligned: (channel, tap) filter rows 16 bytes a copy */
  (void)filter_vec;
"""


def span_loads(plan: ConvPlan) -> str:
    """`load_a(st, s)`: the filters of channel slice s at every tap into rows of (tap, channel), 4 bytes a
    copy (zeros past M or the group's channels); `load_b(st, s)`: the slice's spans, 16 bytes a copy
    where the run lies in the row (zeros past the group's channels), else 4 bytes a copy with zeros
    outside the row."""
    if filters_by_channel(plan):
        load_a = r"""  auto load_a = [&](int st, int s) {
    /* row r's slice: the filters' run [s * KF_SK, s * KF_SK + KF_SK) of output channel m0 + r, (channel,
       tap) as they lie; K % 4 == 0 (filter_vec): a quad is in range or past K whole */
    const int64_t k0 = (int64_t)s * KF_SK;
    if (filter_vec) {
      #pragma unroll 1
      for (int l = 0; l < (BM * KF_SK / 4 + 255) / 256; ++l) {
        const int e = tid + l * 256, r = e / (KF_SK / 4), kk = e % (KF_SK / 4) * 4;
        const int gm = m0 + r;
        const bool ok = gm < M && k0 + kk < K;
        if (e < BM * KF_SK / 4) kf_cp16(&As[st][r][kk], ok ? X + (int64_t)gm * K + k0 + kk : X, ok);
      }
    } else {
      #pragma unroll 1
      for (int l = 0; l < (BM * KF_SK + 255) / 256; ++l) {
        const int e = tid + l * 256, r = e / KF_SK, kk = e % KF_SK;
        const int gm = m0 + r;
        const bool ok = gm < M && k0 + kk < K;
        if (e < BM * KF_SK) kf_cp4(&As[st][r][kk], ok ? X + (int64_t)gm * K + k0 + kk : X, ok);
      }
    }
  };
"""
    else:
        if plan.transposed:  # (CI, CO / G, taps), the taps reversed
            source = "X + ((int64_t)ci * M + gm) * KF_KW + (KF_KW - 1 - tap)"
        else:  # (CO, CI / G, taps)
            source = "X + (int64_t)gm * K + ci * KF_KW + tap"
        load_a = rf"""  auto load_a = [&](int st, int s) {{
    #pragma unroll 1
    for (int l = 0; l < (BM * KF_SK + 255) / 256; ++l) {{
      const int e = tid + l * 256, r = e / KF_SK, kk = e % KF_SK, tap = kk / KF_SPAN_CH;
      const int gm = m0 + r, ci = s * KF_SPAN_CH + kk % KF_SPAN_CH;
      const bool ok = gm < M && ci < cig;
      if (e < BM * KF_SK) kf_cp4(&As[st][r][kk], ok ? {source} : X, ok);
    }}
  }};
"""
    return (
        load_a
        + r"""  auto load_b = [&](int st, int s) {
    constexpr int quads = KF_SPAN_LEN / 4;
    #pragma unroll 1
    for (int l = 0; l < (KF_SPAN_CH * quads + 255) / 256; ++l) {
      const int e = tid + l * 256, c = e / quads, p = a0 + e % quads * 4, ci = s * KF_SPAN_CH + c;
      if (e >= KF_SPAN_CH * quads) break;
      float* dst = &Bs[st][c][e % quads * 4];
      const float* row = W + (int64_t)(ci < cig ? ci : 0) * plane;
      if (span_vec && p >= 0 && p + 4 <= plane) {
        kf_cp16(dst, ci < cig ? row + p : W, ci < cig);
      } else {
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool ok = ci < cig && (unsigned)(p + i) < (unsigned)plane;
          kf_cp4(dst + i, ok ? row + p + i : W, ok);
        }
      }
    }
  };
"""
    )


# The main loop's (cuda_conv.pipelined_main_loop) slices, KF_SPAN_CH input channels at every tap each
SLICES = "(int)((cig + KF_SPAN_CH - 1) / KF_SPAN_CH)"


def fragments(plan: ConvPlan) -> str:
    """The main loop's fragments: k within a stage is (tap, channel), so a k8 step is one tap; A read
    from its (channel, tap) or (tap, channel) rows, B from the spans at the pixel's stride and the tap's
    dilation."""
    a = "(k) % KF_SPAN_CH * KF_KW + (k) / KF_SPAN_CH" if filters_by_channel(plan) else "k"
    return f"""#define KF_A_FRAG(k, r) As[cur][r][{a}]
#define KF_B_FRAG(k, c) Bs[cur][(k) % KF_SPAN_CH][(c) * KF_SW + (k) / KF_SPAN_CH * KF_DW + shift]
"""

"""The CUDA conv family's strided transposed conv, computed phase by phase (conv_phases.py): only the taps
that reach a pixel are multiplied.

Computing every tap and discarding those whose input position does not divide by the stride, the conv
family (cuda_conv.py) spent (1 - 1 / S^dims) of its MMAs on zeros. Phased, each block takes one phase's
pixels (grid x: pixel tile, then phase, the phase fastest so that blocks running together write one output
region), K is the group's input channels times the phase's own taps, and each tap's input position is the
pixel's j plus a baked offset: no divisibility test, no zero slices. The tables are baked per plan
(`phase_taps`: every phase's taps with their filter index and input offsets); a block copies its phase's
into shared memory. Stores scatter to o = r + S j (each phase's pixels are S apart along an axis). Pure
string building.
"""

from __future__ import annotations

import math

from kernelfoundry.generators.heuristic.conv_phases import axis_taps, phase_counts, phase_taps
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan

# Multiply-adds an output of a phased conv takes (a group's channels x taps / the stride's product) below
# which a conv is taken to be bound by its stores: there the W axis is left unphased where a W phase has
# no tap (79_conv_transposed_1D, 81's stride 5 over dilated taps: phased along W, their S-apart stores
# made them 0.62x and 0.74x eager on the H200, against 0.98x and 0.85x unphased)
STORE_BOUND_DENSITY = 64


def phase_axes(plan: ConvPlan) -> tuple[bool, bool, bool]:
    """The axes the CUDA conv is phased along: D and H wherever a transposed conv is strided; W too,
    unless a W phase has no tap and the conv is store-bound (its stores stay contiguous along W, its
    taps there keep the divisibility test)."""
    if not plan.transposed or all(s == 1 for s in plan.stride):
        return (False, False, False)
    kw, sw, pw, dw = plan.kernel[2], plan.stride[2], plan.padding[2], plan.dilation[2]
    empty_w = any(not axis_taps(kw, sw, pw, dw, r) for r in range(sw))
    density = plan.in_channels // plan.groups * math.prod(plan.kernel) / math.prod(plan.stride)
    along_w = not empty_w or density >= STORE_BOUND_DENSITY
    strided = any(s > 1 for s in plan.stride[:2]) or (along_w and sw > 1)
    return (True, True, along_w) if strided else (False, False, False)


def phased(plan: ConvPlan) -> bool:
    """Whether the CUDA conv is computed phase by phase (along at least one strided axis)."""
    return any(phase_axes(plan))


def phase_tables(plan: ConvPlan) -> str:
    """The baked tables: the phase counts per axis (KF_PSD, KF_PSH, KF_PSW), each phase's tap count and
    its taps (int4: filter tap, input offsets)."""
    axes = phase_axes(plan)
    phases = phase_taps(plan, axes)
    counts = phase_counts(plan, axes)
    widest = max(1, *(len(p) for p in phases))
    rows = []
    for taps in phases:
        entries = ", ".join("{" + ", ".join(map(str, tap)) + "}" for tap in taps)
        rows.append("    {" + entries + "},")
    return "\n".join(
        [
            *(f"#define KF_PS{a} {n}  /* phases along {a} */" for a, n in zip("DHW", counts, strict=True)),
            "#define KF_PHASES (KF_PSD * KF_PSH * KF_PSW)",
            f"#define KF_PHASE_TAPS {widest}  /* the most taps a phase has */",
            "__constant__ int kf_phase_count[KF_PHASES] = {" + ", ".join(str(len(p)) for p in phases) + "};",
            "/* (filter tap, input offset along D, H, W) of each phase's taps */",
            "__constant__ int4 kf_phase_tab[KF_PHASES][KF_PHASE_TAPS] = {",
            *rows,
            "};",
        ]
    )


# The block's phase and its share of the output, after the prologue has placed the group's pointers
# (with the whole output's N and K): N and K become the phase's pixels and k rows.
PHASE_SETUP = r"""
  /* the block's output phase (rd, rh, rw) and pixel tile: outputs o = r + S j along a phased axis,
     reached by the taps of kf_phase_tab[phase] only. The phase varies fastest along the grid: blocks
     running together write the same output region, each phase's S-apart pixels, so the L2 merges their
     partial sectors before they reach memory (phase after phase, each pass would read and write every
     sector again) */
  const int phase = blockIdx.x % KF_PHASES;
  n0 = blockIdx.x / KF_PHASES * BN;
  const int rd = phase / (KF_PSH * KF_PSW), rh = phase / KF_PSW % KF_PSH, rw = phase % KF_PSW;
  const int ODp = (geo.OD - rd + KF_PSD - 1) / KF_PSD, OHp = (geo.OH - rh + KF_PSH - 1) / KF_PSH;
  const int OWp = (geo.OW - rw + KF_PSW - 1) / KF_PSW;
  const int64_t P = (int64_t)geo.OD * geo.OH * geo.OW;  /* an output channel's pixels */
  N = ODp * OHp * OWp;
  if (n0 >= N) return;  /* a smaller phase's tiles past its end: the whole block leaves */
  const int taps = kf_phase_count[phase];
  K = geo.CI / KF_GROUPS * taps;  /* 0 where no tap reaches the phase: the bias and the tail only */
  __shared__ int4 kf_tab[KF_PHASE_TAPS];
  for (int t = tid; t < taps; t += 256) kf_tab[t] = kf_phase_tab[phase][t];
  __syncthreads();
"""


def first_positions(plan: ConvPlan) -> str:
    """A pixel's first input position per axis (qd, qh, qw) from its phase coordinates (pd, ph, pw):
    j along a phased axis, o + P along one left unphased (the tap's offset -k * D is added after)."""
    axes = phase_axes(plan)
    return ", ".join(f"p{a}" if on else f"p{a} + KF_P{a.upper()}" for a, on in zip("dhw", axes, strict=True))


def a_source(nhwc: bool) -> str:
    """KF_A_SRC phased: k = (channel, phase tap) in NCHW, (phase tap, channel) on the channels-last
    path, read at the filter's own tap (the whole filter's row of KF_TAPS x KF_CIG there)."""
    if nhwc:
        return (
            "#define KF_A_SRC(gm, gk) \\\n"
            "  (X + (int64_t)(gm) * (KF_TAPS * KF_CIG) + kf_tab[(gk) / KF_CIG].x * KF_CIG + (gk) % KF_CIG)"
        )
    return (
        "#define KF_A_SRC(gm, gk) \\\n"
        "  (X + ((int64_t)((gk) / taps) * M + (gm)) * KF_TAPS + kf_tab[(gk) % taps].x)"
    )


def tap_position(plan: ConvPlan) -> tuple[str, str, str]:
    """(the tap's input position of a pixel, its bounds check, its offset in the input's plane): the
    pixel's position plus the tap's offset; along an axis left unphased, divided by the stride where
    that divides."""
    axes = phase_axes(plan)
    at = "const int d = qd[u] + tap.y, h = qh[u] + tap.z, w = qw[u] + tap.w;"
    checks, index = [], []
    for a, on in zip("dhw", axes, strict=True):
        size, stride = f"geo.I{a.upper()}", f"KF_S{a.upper()}"
        if on:
            checks.append(f"{a} >= 0 && {a} < {size}")
            index.append(a)
        else:
            checks.append(f"{a} >= 0 && {a} % {stride} == 0 && {a} / {stride} < {size}")
            index.append(f"{a} / {stride}")
    plane = f"({index[0]} * geo.IH + {index[1]}) * geo.IW + {index[2]}"
    return at, " &&\n                        ".join(checks), plane


def store_lines(column: str) -> list[str]:
    """Accumulator row i's values `v[KF_TN]` stored to the phase's pixels (o = r + S j along a phased
    axis: S apart along W where W is phased), pairs of columns as the tensor-core layout holds them."""
    return [
        "    if (r < M) {",
        "      float* __restrict__ orow = out + (int64_t)r * P;",
        "      #pragma unroll",
        "      for (int q = 0; q < KF_TN / 2; ++q) {",
        f"        const int c = {column};",
        "        #pragma unroll",
        "        for (int u = 0; u < 2; ++u) {",
        "          const int cc = c + u;",
        "          if (cc < N) {",
        "            const int jw = cc % OWp, jh = cc / OWp % OHp, jd = cc / (OWp * OHp);",
        "            const int64_t o = ((int64_t)(rd + KF_PSD * jd) * geo.OH + rh + KF_PSH * jh) * geo.OW;",
        "            orow[o + rw + KF_PSW * jw] = v[q * 2 + u];",
        "          }",
        "        }",
        "      }",
        "    }",
    ]

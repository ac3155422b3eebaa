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

from kernelfoundry.generators.heuristic.conv_phases import phase_taps, phased
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan

__all__ = ["PHASE_SETUP", "TAP_POSITION", "a_source", "phase_tables", "phased", "store_lines"]


def phase_tables(plan: ConvPlan) -> str:
    """The baked tables: KF_PHASES, each phase's tap count and its taps (int4: filter tap, offsets)."""
    phases = phase_taps(plan)
    widest = max(1, *(len(p) for p in phases))
    counts = ", ".join(str(len(p)) for p in phases)
    rows = []
    for taps in phases:
        entries = ", ".join("{" + ", ".join(map(str, tap)) + "}" for tap in taps)
        rows.append("    {" + entries + "},")
    return "\n".join(
        [
            f"#define KF_PHASES {len(phases)}  /* output phases: the stride's product */",
            f"#define KF_PHASE_TAPS {widest}  /* the most taps a phase has */",
            "__constant__ int kf_phase_count[KF_PHASES] = {" + counts + "};",
            "/* (filter tap, input offset along D, H, W) of each phase's taps */",
            "__constant__ int4 kf_phase_tab[KF_PHASES][KF_PHASE_TAPS] = {",
            *rows,
            "};",
        ]
    )


# The block's phase and its share of the output, after the prologue has placed the group's pointers
# (with the whole output's N and K): N and K become the phase's pixels and k rows.
PHASE_SETUP = r"""
  /* the block's output phase (rd, rh, rw) and pixel tile: outputs o = r + S j, reached by the taps of
     kf_phase_tab[phase] only. The phase varies fastest along the grid: blocks running together write
     the same output region, each phase's S-apart pixels, so the L2 merges their partial sectors before
     they reach memory (phase after phase, each pass would read and write every sector again) */
  const int phase = blockIdx.x % KF_PHASES;
  n0 = blockIdx.x / KF_PHASES * BN;
  const int rd = phase / (KF_SH * KF_SW), rh = phase / KF_SW % KF_SH, rw = phase % KF_SW;
  const int ODp = (geo.OD - rd + KF_SD - 1) / KF_SD, OHp = (geo.OH - rh + KF_SH - 1) / KF_SH;
  const int OWp = (geo.OW - rw + KF_SW - 1) / KF_SW;
  const int64_t P = (int64_t)geo.OD * geo.OH * geo.OW;  /* an output channel's pixels */
  N = ODp * OHp * OWp;
  if (n0 >= N) return;  /* a smaller phase's tiles past its end: the whole block leaves */
  const int taps = kf_phase_count[phase];
  K = geo.CI / KF_GROUPS * taps;  /* 0 where no tap reaches the phase: the bias and the tail only */
  __shared__ int4 kf_tab[KF_PHASE_TAPS];
  for (int t = tid; t < taps; t += 256) kf_tab[t] = kf_phase_tab[phase][t];
  __syncthreads();
"""


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


TAP_POSITION = (
    "const int d = qd[u] + tap.y, h = qh[u] + tap.z, w = qw[u] + tap.w;",
    "d >= 0 && d < geo.ID && h >= 0 && h < geo.IH && w >= 0 && w < geo.IW",
    "(d * geo.IH + h) * geo.IW + w",
)


def store_lines(column: str) -> list[str]:
    """Accumulator row i's values `v[KF_TN]` stored to the phase's pixels (o = r + S j per axis: S apart
    along W), pairs of columns as the tensor-core layout holds them."""
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
        "            const int64_t o = ((int64_t)(rd + KF_SD * jd) * geo.OH + rh + KF_SH * jh) * geo.OW;",
        "            orow[o + rw + KF_SW * jw] = v[q * 2 + u];",
        "          }",
        "        }",
        "      }",
        "    }",
    ]

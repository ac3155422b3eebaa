"""CUDA implicit-GEMM convolution on tensor cores, the tail fused into its stores.

The CUDA counterpart of cpu_conv.py, for the same plans (`conv_plan`): one Conv1d /
Conv2d / Conv3d or transposed conv, any stride, padding, dilation and groups, bare or followed by one
pointwise step over per-channel operands and constants. Per image and group, the conv is the product out
(M x P) = W (M x K) * B (K x P) with M = CO / G, P = OD * OH * OW output pixels, K = CI / G * KD * KH * KW
and B the im2col matrix, which is never built: the tensor-core kernel of the GEMM family (cuda_gemm_tc.py,
with its tile loads from cuda_gemm_tiles.py) runs with A = the filters (KF_A_SRC: a forward conv's (CO, CI
/ G, taps) weight is k-contiguous, a transposed one's (CI, CO / G, taps) is not) and B gathered by each
tile load: a thread owns four neighbouring output pixels (B columns) for the whole K loop, their first
input positions decoded once; each k row it loads is decoded into (ci, kd, kh, kw) once, by division by
the baked tap counts, for its four pixels; a tap in the padding (or, transposed, at a position the stride
does not divide) loads 0. A warp's 32 threads cover 128 neighbouring pixels of one k row, so a stride-1
conv's loads coalesce, and the four land in shared memory as one float4. The grid's z is (image, group).

Output rows are channels: the epilogue adds the bias (per row), applies the tail with the per-channel
operands indexed by the row, and stores each row's pixels contiguously (float2 runs where P % 4 == 0).

Precision: torch runs float32 convolutions through cuDNN with TF32 allowed (its default), so eager's
own error, and with it the judge's tolerance floor, is TF32's. The `tf32` variant multiplies once in
TF32 (KF_TF32_TERMS 1: the MMA rate cuDNN gets); the other runs 3xTF32 at float32 accuracy. Tunables:
BM (64 or 128 output channels a block: 64 wastes no rows where CO <= 64), BK (8 or 16), KF_MIN_BLOCKS.
Pure string building.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan, conv_plan
from kernelfoundry.generators.heuristic.cuda_gemm import TC_LAYOUT, store_row
from kernelfoundry.generators.heuristic.cuda_gemm_tc import TC_LOOP, TC_OPEN
from kernelfoundry.generators.heuristic.cuda_gemm_tiles import tile_io
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


def _block_rows(plan: ConvPlan) -> int:
    """BM's default: 64 output channels a block where a group has at most 64 (no wasted rows)."""
    return 64 if int(plan.conv.shape[1]) // plan.groups <= 64 else 128


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


def _prologue(plan: ConvPlan) -> str:
    """The block's image and group and their planes, and the four output pixels this thread gathers B
    for: their first input position (a forward conv reads input d0 + kd * DD for output d; a transposed
    one reads (d + PD - kd * DD) / SD where that divides)."""
    first = (
        "pd * KF_SD - KF_PD, ph * KF_SH - KF_PH, pw * KF_SW - KF_PW"
        if not plan.transposed
        else "pd + KF_PD, ph + KF_PH, pw + KF_PW"
    )
    return (
        r"""
  static_assert(BN == 128, "the gather: 32 threads a k row, 4 pixels a thread");
  const int64_t image = blockIdx.z / KF_GROUPS, group = blockIdx.z % KF_GROUPS;
  const int64_t cig = geo.CI / KF_GROUPS;  /* input channels a group */
  const int plane = geo.ID * geo.IH * geo.IW;  /* one input channel (fits an int: checked) */
  W += (image * geo.CI + group * cig) * (int64_t)plane;  /* the group's input channels */
  X += group * (int64_t)M * K;  /* its filters: M output channels x K */
  out += (image * KF_GROUPS + group) * (int64_t)M * N;  /* its output: M channels of P pixels */
  const int cbase = (int)(group * M);  /* its first output channel: bias and tail operands */
  /* this thread's four B columns (output pixels n0 + c4 + u) and the k rows it loads (tid / 32 + 8 j) */
  const int c4 = (tid & 31) * 4, k4 = tid >> 5;
  int qd[4], qh[4], qw[4];
  bool qin[4];
  #pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int px = n0 + c4 + u;
    qin[u] = px < N;
    const int pw = px % geo.OW, ph = px / geo.OW % geo.OH, pd = px / (geo.OW * geo.OH);
    const int first[3] = {"""
        + first
        + r"""};
    qd[u] = first[0];
    qh[u] = first[1];
    qw[u] = first[2];
  }
"""
    )


def _b_load(plan: ConvPlan) -> str:
    """The im2col slice [k0, k0 + BK) of the thread's four pixels: one (ci, tap) decode a k row, four
    loads (neighbouring threads on neighbouring pixels), zeros in the padding (and, transposed, where
    the position does not divide by the stride)."""
    if not plan.transposed:
        at = "const int d = qd[u] + td, h = qh[u] + th, w = qw[u] + tw;"
        ok = "d >= 0 && d < geo.ID && h >= 0 && h < geo.IH && w >= 0 && w < geo.IW"
        index = "(d * geo.IH + h) * geo.IW + w"
    else:
        at = "const int d = qd[u] - td, h = qh[u] - th, w = qw[u] - tw;"
        ok = (
            "d >= 0 && h >= 0 && w >= 0 && d % KF_SD == 0 && h % KF_SH == 0 && w % KF_SW == 0 &&\n"
            "                        d / KF_SD < geo.ID && h / KF_SH < geo.IH && w / KF_SW < geo.IW"
        )
        index = "(d / KF_SD * geo.IH + h / KF_SH) * geo.IW + w / KF_SW"
    return f"""    #pragma unroll
    for (int j = 0; j < BK / 8; ++j) {{
      const int gk = k0 + k4 + 8 * j;
      const int ci = gk / KF_TAPS, t = gk - ci * KF_TAPS;
      const int td = t / (KF_KH * KF_KW) * KF_DD, th = t / KF_KW % KF_KH * KF_DH, tw = t % KF_KW * KF_DW;
      const float* __restrict__ src = W + (int64_t)ci * plane;
      #pragma unroll
      for (int u = 0; u < 4; ++u) {{
        {at}
        const bool ok = gk < ke && qin[u] && {ok};
        rb[j * 4 + u][0] = ok ? __ldg(src + {index}) : 0.0f;
      }}
    }}
"""


_B_STORE = r"""    #pragma unroll
    for (int j = 0; j < BK / 8; ++j)
      *reinterpret_cast<float4*>(&Bs[b][k4 + 8 * j][c4]) =
          make_float4(rb[j * 4][0], rb[j * 4 + 1][0], rb[j * 4 + 2][0], rb[j * 4 + 3][0]);
"""


def _args_struct(plan: ConvPlan) -> str:
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
            "#define KF_EXTRA_PARAMS , const kf_conv_args geo",
            "#define KF_KSPLIT 0  /* the grid's z is the image; K is never split */",
            _a_source(plan),
        ]
    )


def _a_source(plan: ConvPlan) -> str:
    """KF_A_SRC: the filter element (output channel gm, k) of the block's group (X points at it)."""
    if not plan.transposed:  # (CO, CI / G, taps): k-contiguous rows
        return "#define KF_A_SRC(gm, gk) (X + (int64_t)(gm) * K + (gk))"
    # (CI, CO / G, taps): an input channel's filters for every output channel, then the taps
    return "#define KF_A_SRC(gm, gk) (X + ((int64_t)((gk) / KF_TAPS) * M + (gm)) * KF_TAPS + (gk) % KF_TAPS)"


def _epilogue(graph: Graph, plan: ConvPlan) -> list[str]:
    """Per accumulator row (an output channel): bias, the tail with the row's per-channel operands, the
    row's stores."""
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
    w(f"    const int r = {TC_LAYOUT.row};")
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
    out.extend(store_row(TC_LAYOUT, False))
    w("  }")
    w("}")
    return out


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


def _per_channel(index: int, shape: str, var: str) -> list[str]:
    declare = "" if var == "B" else "const float* "
    return [
        f"  kf_shape {shape};",
        f"  if (!kf_tensor_ok(&inputs[{index}]) || !kf_shape_of(&inputs[{index}], &{shape}) ||",
        f"      kf_prod(&{shape}, 0, {shape}.nd) != CO) return KF_ERR_BAD_ARGUMENTS;",
        f"  {declare}{var} = KF_DATA(const float, &inputs[{index}]);",
    ]


def cuda_conv_unit(graph: Graph, plan: ConvPlan, variant: Variant, header: list[str]) -> str:
    """The whole .cu unit: tunables, prelude, the implicit-GEMM kernel with its epilogue, `kf_forward`."""
    bm = _block_rows(plan)
    tunables = (
        f"// @kf.tunable BM in [64, 128] default {bm}",
        "// @kf.tunable BK in [8, 16] default 16",
        "// @kf.tunable KF_MIN_BLOCKS in [1, 2] default 2",
    )
    lines = [*header, variant.line(), *tunables]
    for name, value in {"BM": bm, "BK": 16, "KF_MIN_BLOCKS": 2}.items():
        lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    lines += ["#include <cuda_runtime.h>", PRELUDE, "", "KF_DEFINE_ABI_VERSION()"]
    lines += [
        f"#define KF_TF32_TERMS {1 if variant.tf32 else 3}  /* TF32 products a term (1: cuDNN's) */",
        "#define KF_A_KMAJOR 0  /* the filters: M rows of K (KF_A_SRC) */",
        "#define KF_B_KMAJOR 1  /* im2col, (K, P): a tile load runs along the pixels */",
        "#define KF_TILE_NEEDED 1",
        *_geometry_defines(plan),
        _args_struct(plan),
        TC_OPEN.rstrip("\n"),
        _prologue(plan).rstrip("\n"),
        tile_io(_b_load(plan), _B_STORE).rstrip("\n"),
        TC_LOOP.rstrip("\n"),
    ]
    lines += _epilogue(graph, plan)
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
    w("  if (NB == 0 || CO == 0) return KF_OK;")
    w("  const int64_t ptiles = (P + BN - 1) / BN, ctiles = (M + BM - 1) / BM;")
    w("  if (ctiles > 65535 || NB * KF_GROUPS > 65535) return KF_ERR_UNSUPPORTED;")
    tail = [f"C{k}" for k in range(len(plan.channel_leaves))]
    tail += [f"S{k}" for k in range(len(plan.scalar_leaves))]
    sizes = "(int)CI, (int)ID, (int)IH, (int)IW, (int)OD, (int)OH, (int)OW"
    w(f"  const kf_conv_args geo = {{{', '.join([sizes, *tail])}}};")
    w("  const int vec_out = P % 4 == 0 && ((uintptr_t)O) % 16 == 0;")
    w("  const dim3 grid((unsigned)ptiles, (unsigned)ctiles, (unsigned)(NB * KF_GROUPS));")
    w("  /* K = 0 (no input channels): one empty slice, zeros plus the tail */")
    w("  const int kchunk = K > 0 ? (int)K : 1;")
    w("  kf_gemm<0><<<grid, 256, 0, st>>>((int)M, (int)P, (int)K, Wt, X, B, O, vec_out, kchunk, geo);")
    w("  if (cudaGetLastError() != cudaSuccess) return KF_ERR_LAUNCH;")
    w("  return KF_OK;")
    w("}")
    w("")
    return "\n".join(lines)

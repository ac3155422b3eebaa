"""CPU implicit-GEMM convolution with a fused epilogue: a conv followed by a per-channel pointwise tail.

Applies when the graph is one `nn.Conv1d` / `Conv2d` / `Conv3d` or `ConvTranspose1d` / `2d` / `3d` (any
stride, padding, dilation, output padding and groups but depthwise ones; zero padding) on its input, alone
or followed by one fused pointwise step whose operands are the conv's output, per-channel tensors (a bias
of shape (C, 1, 1), inference BatchNorm statistics) and constants. The unit takes the reference's input,
parameters and buffers straight (no glue), and the conv output never exists in memory before its tail. The
plan (`conv_plan`) is the CUDA conv family's too (cuda_conv.py).

The convolution is an implicit GEMM: out[n, co, od, oh, ow0 + j] = sum over k = (ci, kd, kh, kw) of the
group's w[co, k] * the input under tap k. A plain 2-D conv (stride 1, no padding or dilation, one group)
reads the k-major B panel in place (`koff[k]` offsets into one image: for a fixed output row and k the
NR = 16*NV inputs are contiguous), staging only a ragged last tile in a zero-padded local `panel`; any
other gathers each (output row, group, column tile)'s im2col `panel` once (zeros in the padding; a
transposed conv of stride 1 reads input o + p - k * d, and its filters are first copied into (CO, KK)
rows) for all the group's channel blocks. A transposed conv with a stride above 1 is computed phase by
phase (conv_phases.py): an output row (n, od, oh) is in phase rd = od % SD, rh = oh % SH, its columns
ow = rw + SW * jw split into SW column phases, and each phase's panel holds only the taps that reach it
(the group's channels times the phase's taps, input j + a baked offset), multiplied by that phase's
filter rows; no tap is gathered as zeros to be multiplied (7 in 8 of them on a 3-D stride-2 conv).
Work is split over (image, output row) across
threads; every tile of NR columns is multiplied by MR output channels at a time in a register tile
(`float acc[MR][NR]`, stored once to an L1 `ctile`), and the tail (bias, BatchNorm, activation) is
applied on the way from `ctile` to the output, its only store. Tunables: MR and NV (the register tile,
defaults 8 x 32 as in the GEMM family), KF_FAST_MATH, KF_DISPATCH. Pure string building: never compiles
or runs what it emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.conv_phases import phase_taps, phased
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import Leaf, Step, partition
from kernelfoundry.generators.heuristic.prelude import cpu_family_head
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant

CONV_TUNABLES = (
    "// @kf.tunable MR in [4, 8, 16] default 8",
    "// @kf.tunable NV in [1, 2, 4] default 2",
    "// @kf.tunable KF_FAST_MATH in [0, 1] default 1",
    "// @kf.tunable KF_DISPATCH in [0, 1] default 1",
)
_DEFAULTS = {"MR": 8, "NV": 2, "KF_DISPATCH": 1}


@dataclass(frozen=True)
class ConvPlan:
    """What the conv family computes: conv2d(x; weight, bias) then one pointwise step per element (none:
    the conv is the output)."""

    conv: OpNode
    x: str
    weight: str
    bias: str | None
    step: Step | None
    channel_leaves: tuple[str, ...]  # per-channel operands of the tail
    scalar_leaves: tuple[str, ...]  # one-element operands of the tail
    inputs: tuple[str, ...]  # entry-point inputs in the reference's order (inputs, parameters, buffers)
    dims: int = 2  # spatial dims: Conv1d / Conv2d / Conv3d (or their transposes)
    # (depth, height, width), a Conv1d / Conv2d's missing dims as stride 1, padding 0, dilation 1
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, int, int] = (0, 0, 0)
    dilation: tuple[int, int, int] = (1, 1, 1)
    kernel: tuple[int, int, int] = (1, 1, 1)  # the filter's taps
    transposed: bool = False  # a ConvTranspose1d / 2d / 3d
    groups: int = 1
    output_padding: tuple[int, int, int] = (0, 0, 0)
    in_channels: int = 0  # the conv module's (all groups')

    @property
    def plain(self) -> bool:
        """A 2-D conv of stride 1 without padding or dilation: its inputs are read in place."""
        unit = (self.stride, self.padding, self.dilation) == ((1, 1, 1), (0, 0, 0), (1, 1, 1))
        return self.dims == 2 and unit and self.groups == 1 and not self.transposed


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


_CONV_DIMS = {"Conv1d": 1, "Conv2d": 2, "Conv3d": 3}
_CONV_TRANSPOSE_DIMS = {"ConvTranspose1d": 1, "ConvTranspose2d": 2, "ConvTranspose3d": 3}


def _three(value: object, dims: int, fill: int) -> tuple[int, int, int] | None:
    """A module's per-dim setting as (depth, height, width); None for one the family does not take."""
    if isinstance(value, str):
        return None
    values = tuple(value) if isinstance(value, tuple | list) else (value,) * dims
    if len(values) != dims or not all(isinstance(v, int) for v in values):
        return None
    full = (fill,) * (3 - dims) + tuple(int(v) for v in values)
    return full[0], full[1], full[2]


def conv_plan(graph: Graph) -> ConvPlan | None:
    """The conv + epilogue plan of the graph (a conv or transposed conv of any groups), or None when the
    family does not apply."""
    heavy = [n for n in graph.nodes if n.kind in KEPT_IN_TORCH]
    if len(heavy) != 1 or graph.nodes[0] is not heavy[0] or len(graph.outputs) != 1:
        return None
    conv = heavy[0]
    fx = conv.fx_node
    mod = graph.modules.get(str(fx.target)) if fx is not None and fx.op == "call_module" else None
    kind = type(mod).__name__
    transposed = kind in _CONV_TRANSPOSE_DIMS
    dims = _CONV_TRANSPOSE_DIMS[kind] if transposed else _CONV_DIMS.get(kind)
    if mod is None or dims is None or mod.padding_mode != "zeros":
        return None
    if mod.groups > 1 and mod.in_channels == mod.groups:
        # depthwise: a GEMM of one input channel a group; the op kernels' depthwise kernel serves it
        return None
    if fx is None or len(fx.args) != 1 or fx.kwargs:  # a transpose's output_size argument
        return None
    stride, padding = _three(mod.stride, dims, 1), _three(mod.padding, dims, 0)
    dilation = _three(mod.dilation, dims, 1)
    extra = _three(mod.output_padding, dims, 0) if transposed else (0, 0, 0)
    kernel = _three(mod.kernel_size, dims, 1)
    if stride is None or padding is None or dilation is None or extra is None or kernel is None:
        return None
    src = conv.args[0] if conv.args else None
    names = {v.name: v for v in graph.inputs}
    if not isinstance(src, Ref) or src.name not in names or len(graph.shapes[src.name]) != dims + 2:
        return None
    by_qual = {v.qualname: v.name for v in graph.inputs}
    weight = by_qual.get(f"{fx.target}.weight")
    bias = by_qual.get(f"{fx.target}.bias")
    if weight is None or (mod.bias is not None) != (bias is not None):
        return None
    inputs = tuple(v.name for v in graph.inputs)
    geometry = {"dims": dims, "stride": stride, "padding": padding, "dilation": dilation}
    geometry.update(kernel=kernel, transposed=transposed, groups=int(mod.groups), output_padding=extra)
    geometry["in_channels"] = int(mod.in_channels)
    if graph.nodes == [conv] and graph.outputs == [conv.name]:  # a bare conv, KernelBench's level 1
        return ConvPlan(conv, src.name, weight, bias, None, (), (), inputs, **geometry)  # type: ignore[arg-type]
    try:
        parts = partition(graph, True)
    except UnsupportedGraph:
        return None
    if len(parts) != 1 or len(parts[0].steps) != 1:
        return None
    step = parts[0].steps[0]
    out_shape = tuple(conv.shape)
    if step.kind != "pointwise" or step.out != graph.outputs[0]:
        return None
    if tuple(graph.shapes[step.out]) != out_shape:
        return None
    per_channel = (out_shape[1],) + (1,) * dims  # broadcasts over (N, C, *spatial) along C
    channels, scalars = [], []
    for leaf in step.leaves(graph):
        shape = tuple(graph.shapes[leaf.name]) + (1,) * leaf.trail
        if leaf.name == conv.name and leaf.trail == 0:
            continue
        if leaf.name not in names:
            return None
        if _numel(shape) == 1:
            scalars.append(leaf.name)
        elif shape[-len(per_channel) :] == per_channel and _numel(shape) == out_shape[1]:
            channels.append(leaf.name)
        else:
            return None
    if conv.name not in {leaf.name for leaf in step.leaves(graph)}:
        return None
    return ConvPlan(
        conv,
        src.name,
        weight,
        bias,
        step,
        tuple(dict.fromkeys(channels)),
        tuple(dict.fromkeys(scalars)),
        tuple(v.name for v in graph.inputs),
        **geometry,  # type: ignore[arg-type]
    )


def conv_applies(graph: Graph) -> bool:
    return conv_plan(graph) is not None


_MICRO = r"""#define NR (16 * NV)

/* One MR x NR tile: ctile[i][j] = sum_k wr[i][k] * b_k[j], with b_k = base + koff[k] (NR contiguous
   inputs for each k); the sums live in a register tile (`acc`) and are stored once. */
static inline __attribute__((always_inline)) void kf_conv_tile(
    const float* const* wr, int64_t kk, const float* __restrict base, const int64_t* __restrict koff,
    float* __restrict ctile) {
  float acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    #pragma omp simd
    for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
  }
  for (int64_t k = 0; k < kk; ++k) {
    const float* __restrict b = base + koff[k];
    for (int i = 0; i < MR; ++i) {
      const float a = wr[i][k];
      #pragma omp simd
      for (int j = 0; j < NR; ++j) acc[i][j] += a * b[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    #pragma omp simd
    for (int j = 0; j < NR; ++j) ctile[i * NR + j] = acc[i][j];
  }
}
"""


def conv_unit(graph: Graph, plan: ConvPlan, variant: Variant, header: list[str], dispatch: str) -> str:
    """The whole translation unit: tunables, prelude, micro-kernel and the `kf_forward` entry point."""
    lines = cpu_family_head(
        header, variant.line(), CONV_TUNABLES, _DEFAULTS, variant.vectorize, dispatch, _MICRO
    )
    w = lines.append
    idx = {name: i for i, name in enumerate(plan.inputs)}
    w("KF_EXPORT KF_CPU_ENTRY int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,")
    w("                                     int32_t n_outputs, void* stream) {")
    w(f"  if (n_inputs != {len(plan.inputs)} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;")
    w("  kf_shape sx, sw, so;")
    for var, name in (("sx", plan.x), ("sw", plan.weight)):
        w(f"  if (!kf_tensor_ok(&inputs[{idx[name]}]) || !kf_shape_of(&inputs[{idx[name]}], &{var}) ||")
        w(f"      {var}.nd != {plan.dims + 2}) return KF_ERR_BAD_ARGUMENTS;")
    if plan.plain:
        w("  const int64_t NB = sx.d[0], CI = sx.d[1], H = sx.d[2], W = sx.d[3];")
        w("  const int64_t CO = sw.d[0], KH = sw.d[2], KW = sw.d[3], OH = H - KH + 1, OW = W - KW + 1;")
        w("  if (sw.d[1] != CI || OH <= 0 || OW <= 0) return KF_ERR_BAD_ARGUMENTS;")
        w("  const int64_t KK = CI * KH * KW;")
    else:
        lines.extend(_general_geometry(plan))
    w(f"  const float* __restrict X = KF_DATA(const float, &inputs[{idx[plan.x]}]);")
    w(f"  const float* __restrict Wt = KF_DATA(const float, &inputs[{idx[plan.weight]}]);")
    per_channel = ([plan.bias] if plan.bias else []) + list(plan.channel_leaves)
    for k, name in enumerate(per_channel):
        w(f"  kf_shape sc{k};")
        w(f"  if (!kf_tensor_ok(&inputs[{idx[name]}]) || !kf_shape_of(&inputs[{idx[name]}], &sc{k}) ||")
        w(f"      kf_prod(&sc{k}, 0, sc{k}.nd) != CO) return KF_ERR_BAD_ARGUMENTS;")
        w(f"  const float* __restrict C{k} = KF_DATA(const float, &inputs[{idx[name]}]);")
    for k, name in enumerate(plan.scalar_leaves):
        w(f"  if (!kf_tensor_ok(&inputs[{idx[name]}])) return KF_ERR_BAD_ARGUMENTS;")
        w(f"  const float S{k} = KF_DATA(const float, &inputs[{idx[name]}])[0];")
    ok = "  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_of(&outputs[0], &so) ||"
    if plan.plain:
        w(f"{ok} so.nd != 4 || so.d[0] != NB ||")
        w("      so.d[1] != CO || so.d[2] != OH || so.d[3] != OW) return KF_ERR_BAD_ARGUMENTS;")
    else:
        names = ("OD", "OH", "OW")[3 - plan.dims :]
        spatial = " || ".join(f"so.d[{2 + i}] != {v}" for i, v in enumerate(names))
        w(f"{ok} so.nd != {plan.dims + 2} ||")
        w(f"      so.d[0] != NB || so.d[1] != CO || {spatial}) return KF_ERR_BAD_ARGUMENTS;")
    w("  float* __restrict O = KF_DATA(float, &outputs[0]);")
    if not plan.plain:
        lines.extend(
            _phased_loops(graph, plan, variant) if phased(plan) else _general_loops(graph, plan, variant)
        )
        return "\n".join(lines)
    w("  int64_t* koff = (int64_t*)malloc(sizeof(int64_t) * (size_t)KK);")
    w("  if (!koff) return KF_ERR_LAUNCH;")
    w("  for (int64_t ci = 0; ci < CI; ++ci)")
    w("    for (int64_t kh = 0; kh < KH; ++kh)")
    w("      for (int64_t kw = 0; kw < KW; ++kw) koff[(ci * KH + kh) * KW + kw] = (ci * H + kh) * W + kw;")
    w("  const int64_t ntiles = (OW + NR - 1) / NR;")
    w("  #pragma omp parallel")
    w("  {")
    w("    /* a ragged last tile of a row, zero-padded, with the same k-major offsets */")
    w("    float* panel = (float*)aligned_alloc(64, sizeof(float) * (size_t)(KK * NR));")
    w("    int64_t* poff = (int64_t*)malloc(sizeof(int64_t) * (size_t)KK);")
    w("    alignas(64) float ctile[MR * NR];")
    w("    for (int64_t k = 0; k < KK; ++k) poff[k] = k * NR;")
    w("    #pragma omp for schedule(static)")
    w("    for (int64_t t = 0; t < NB * OH; ++t) {")
    w("      const int64_t n = t / OH, oh = t % OH;")
    w("      const float* __restrict xrow = X + (n * CI * H + oh) * W;")
    w("      for (int64_t tile = 0; tile < ntiles; ++tile) {")
    w("        const int64_t ow0 = tile * NR, nw = OW - ow0 < NR ? OW - ow0 : NR;")
    w("        const float* base = xrow + ow0;")
    w("        const int64_t* offs = koff;")
    w("        if (nw < NR) {")
    w("          for (int64_t k = 0; k < KK; ++k)")
    w("            for (int64_t j = 0; j < NR; ++j) panel[k * NR + j] = j < nw ? base[koff[k] + j] : 0.0f;")
    w("          base = panel;")
    w("          offs = poff;")
    w("        }")
    w("        for (int64_t co0 = 0; co0 < CO; co0 += MR) {")
    w("          const int64_t nco = CO - co0 < MR ? CO - co0 : MR;")
    w("          const float* wr[MR];")
    w("          for (int i = 0; i < MR; ++i) wr[i] = Wt + (co0 + (i < nco ? i : nco - 1)) * KK;")
    w("          kf_conv_tile(wr, KK, base, offs, ctile);")
    w("          for (int64_t i = 0; i < nco; ++i) {")
    w("            const int64_t co = co0 + i;")
    w("            float* __restrict orow = O + ((n * CO + co) * OH + oh) * OW + ow0;")
    lines += _tail(graph, plan, variant)
    w("          }")
    w("        }")
    w("      }")
    w("    }")
    w("    free(panel);")
    w("    free(poff);")
    w("  }")
    w("  free(koff);")
    w("  (void)stream;")
    w("  return KF_OK;")
    w("}")
    w("")
    return "\n".join(lines)


def _general_geometry(plan: ConvPlan) -> list[str]:
    """Entry-point lines of a conv of any dims, stride, padding, dilation and groups, or a transposed
    one: its sizes as 3-D ones (depth and height 1 where the conv has fewer dims), the output's from
    torch's formula, per group CIG input and COG output channels and KK = CIG * taps."""
    d = plan.dims
    size = ("ID", "IH", "IW")[3 - d :]
    taps = ("KD", "KH", "KW")[3 - d :]
    g = plan.groups
    if plan.transposed:  # the weight is (CI, CO / G, taps)
        lines = [f"  const int64_t NB = sx.d[0], CI = sx.d[1], CO = sw.d[1] * {g};"]
        lines.append(f"  if (sw.d[0] != CI || CI % {g} != 0) return KF_ERR_BAD_ARGUMENTS;")
    else:  # (CO, CI / G, taps)
        lines = ["  const int64_t NB = sx.d[0], CI = sx.d[1], CO = sw.d[0];"]
        lines.append(f"  if (sw.d[1] * {g} != CI || CO % {g} != 0) return KF_ERR_BAD_ARGUMENTS;")
    for name in ("ID", "IH", "IW"):
        lines.append(f"  const int64_t {name} = {f'sx.d[{2 + size.index(name)}]' if name in size else '1'};")
    for name in ("KD", "KH", "KW"):
        lines.append(f"  const int64_t {name} = {f'sw.d[{2 + taps.index(name)}]' if name in taps else '1'};")
    geometry = zip("DHW", plan.stride, plan.padding, plan.dilation, plan.output_padding, strict=True)
    for axis, st, pad, dil, extra in geometry:
        span = f"{dil} * (K{axis} - 1) + 1"  # the dilated filter's extent
        if plan.transposed:
            lines.append(f"  const int64_t O{axis} = (I{axis} - 1) * {st} - {2 * pad} + {span} + {extra};")
        else:  # a negative room (the filter does not fit the padded input) is no output
            lines.append(f"  const int64_t R{axis} = I{axis} + {2 * pad} - ({span});")
            lines.append(f"  const int64_t O{axis} = R{axis} < 0 ? 0 : R{axis} / {st} + 1;")
    lines.append("  if (OD <= 0 || OH <= 0 || OW <= 0) return KF_ERR_BAD_ARGUMENTS;")
    lines.append(f"  const int64_t CIG = CI / {g}, COG = CO / {g}, KK = CIG * KD * KH * KW;")
    return lines


def _general_loops(graph: Graph, plan: ConvPlan, variant: Variant) -> list[str]:
    """The rest of a general conv's entry point: per output row (image, depth, height), group and tile
    of NR output columns, the tile's im2col panel over the group's input channels gathered once (zeros
    where a tap falls in the padding or, transposed, where the stride does not divide its position),
    then every block of MR of the group's output channels multiplied with it in the register tile, the
    tail on the store. A transposed conv's filters are first copied into (CO, KK) rows. A transposed
    conv with a stride above 1 takes `_phased_loops` instead."""
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = plan.stride, plan.padding, plan.dilation
    out = [
        "  /* per k = (ci, kd, kh, kw) of a group, in the weight's order: the group's input channel, the",
        "     dilated tap offsets */",
        "  int64_t* ktap = (int64_t*)malloc(sizeof(int64_t) * (size_t)(4 * KK));",
        "  if (!ktap) return KF_ERR_LAUNCH;",
        "  for (int64_t k = 0; k < KK; ++k) {",
        "    ktap[4 * k] = k / (KD * KH * KW);",
        f"    ktap[4 * k + 1] = (k / (KH * KW)) % KD * {dd};",
        f"    ktap[4 * k + 2] = (k / KW) % KH * {dh};",
        f"    ktap[4 * k + 3] = k % KW * {dw};",
        "  }",
    ]
    if plan.transposed:
        out += [
            "  /* the filters as (CO, KK) rows: (CI, CO / G, taps) holds an input channel's for every output",
            "     channel of its group */",
            "  float* rows = (float*)malloc(sizeof(float) * (size_t)(CO * KK));",
            "  if (!rows) {",
            "    free(ktap);",
            "    return KF_ERR_LAUNCH;",
            "  }",
            "  const int64_t TAPS = KD * KH * KW;",
            "  for (int64_t co = 0; co < CO; ++co)",
            "    for (int64_t k = 0; k < KK; ++k)",
            "      rows[co * KK + k] = Wt[((co / COG * CIG + k / TAPS) * COG + co % COG) * TAPS + k % TAPS];",
            "  const float* Wrows = rows;",
        ]
    else:
        out.append("  const float* Wrows = Wt;  /* (CO, CI / G, taps): rows of KK already */")
    if plan.transposed:
        depth = [
            f"          const int64_t nd = od + {pd} - ktap[4 * k + 1], nh = oh + {ph} - ktap[4 * k + 2];",
            f"          const bool rowin = nd >= 0 && nh >= 0 && nd % {sd} == 0 && nh % {sh} == 0 &&",
            f"                             nd / {sd} < ID && nh / {sh} < IH;",
            f"          const int64_t id = nd / {sd}, ih = nh / {sh};",
        ]
        column = [
            "          for (int64_t j = 0; j < NR; ++j) {",
            f"            const int64_t c = ow0 + j + {pw} - ktap[4 * k + 3];",
            f"            const bool in = j < nw && c >= 0 && c % {sw} == 0 && c / {sw} < IW;",
            f"            prow[j] = in ? xr[c / {sw}] : 0.0f;",
            "          }",
        ]
    else:
        depth = [
            "          const int64_t id = id0 + ktap[4 * k + 1], ih = ih0 + ktap[4 * k + 2];",
            "          const bool rowin = id >= 0 && id < ID && ih >= 0 && ih < IH;",
        ]
        column = [
            "          const int64_t iw = iw0 + ktap[4 * k + 3];",
            "          for (int64_t j = 0; j < NR; ++j) {",
            f"            const int64_t c = iw + j * {sw};",
            "            prow[j] = j < nw && c >= 0 && c < IW ? xr[c] : 0.0f;",
            "          }",
        ]
    out += [
        "  const int64_t ntiles = (OW + NR - 1) / NR;",
        "  int failed = 0;",
        "  #pragma omp parallel",
        "  {",
        "    float* panel = (float*)aligned_alloc(64, sizeof(float) * (size_t)(KK * NR));",
        "    int64_t* poff = (int64_t*)malloc(sizeof(int64_t) * (size_t)KK);",
        "    alignas(64) float ctile[MR * NR];",
        "    if (!panel || !poff) {",
        "      #pragma omp atomic write",
        "      failed = 1;",
        "    } else {",
        "      for (int64_t k = 0; k < KK; ++k) poff[k] = k * NR;",
        "    }",
        "    #pragma omp for schedule(static)",
        "    for (int64_t t = 0; t < NB * OD * OH; ++t) {",
        "      if (!panel || !poff) continue;",
        "      const int64_t n = t / (OD * OH), od = t / OH % OD, oh = t % OH;",
        f"      const int64_t id0 = od * {sd} - {pd}, ih0 = oh * {sh} - {ph};",
        "      (void)id0;",
        "      (void)ih0;",
        f"      for (int64_t g = 0; g < {plan.groups}; ++g)",
        "      for (int64_t tile = 0; tile < ntiles; ++tile) {",
        "        const int64_t ow0 = tile * NR, nw = OW - ow0 < NR ? OW - ow0 : NR;",
        f"        const int64_t iw0 = ow0 * {sw} - {pw};",
        "        (void)iw0;",
        "        for (int64_t k = 0; k < KK; ++k) {",
        "          float* __restrict prow = panel + k * NR;",
        *depth,
        "          if (!rowin) {",
        "            for (int64_t j = 0; j < NR; ++j) prow[j] = 0.0f;",
        "            continue;",
        "          }",
        "          const int64_t ci = g * CIG + ktap[4 * k];",
        "          const float* __restrict xr = X + ((n * CI + ci) * ID + id) * IH * IW + ih * IW;",
        *column,
        "        }",
        "        for (int64_t co0 = g * COG; co0 < (g + 1) * COG; co0 += MR) {",
        "          const int64_t nco = (g + 1) * COG - co0 < MR ? (g + 1) * COG - co0 : MR;",
        "          const float* wr[MR];",
        "          for (int i = 0; i < MR; ++i) wr[i] = Wrows + (co0 + (i < nco ? i : nco - 1)) * KK;",
        "          kf_conv_tile(wr, KK, panel, poff, ctile);",
        "          for (int64_t i = 0; i < nco; ++i) {",
        "            const int64_t co = co0 + i;",
        "            float* __restrict orow = O + (((n * CO + co) * OD + od) * OH + oh) * OW + ow0;",
    ]
    out += _tail(graph, plan, variant)
    return out + _end_of_unit(4, ("ktap", *(("rows",) if plan.transposed else ())))


def _end_of_unit(loops: int, buffers: tuple[str, ...]) -> list[str]:
    """The unit's last lines after the tail: the `loops` loops inside the parallel region closed, each
    thread's panel freed, then the unit's `buffers`, and the status returned."""
    return [
        *(" " * (2 * (loops + 1 - i)) + "}" for i in range(loops)),
        "    free(panel);",
        "    free(poff);",
        "  }",
        *(f"  free({b});" for b in buffers),
        "  (void)stream;",
        "  return failed ? KF_ERR_LAUNCH : KF_OK;",
        "}",
        "",
    ]


def _phase_tables(plan: ConvPlan) -> list[str]:
    """The plan's phase tables baked as static arrays (conv_phases.phase_taps): per output phase (rd, rh,
    rw) at (rd * SH + rh) * SW + rw, its tap count and where its taps start in `kf_phase_tab`, which
    lists every phase's taps one phase after another as (filter tap, input offset along D, H, W). Each
    tap reaches one phase per axis, so the table holds the filter's taps once: KD * KH * KW rows."""
    phases = phase_taps(plan)
    counts = [len(taps) for taps in phases]
    starts = [sum(counts[:i]) for i in range(len(phases))]
    entries = [tap for taps in phases for tap in taps]
    return [
        "  /* the output phases (the stride's product) and the most taps a phase has */",
        f"  enum {{ KF_PHASES = {len(phases)}, KF_PHASE_TAPS = {max(counts)} }};",
        f"  static const int64_t kf_phase_count[KF_PHASES] = {{{', '.join(map(str, counts))}}};",
        f"  static const int64_t kf_phase_start[KF_PHASES] = {{{', '.join(map(str, starts))}}};",
        "  /* every phase's taps, one phase after another: (filter tap, input offset along D, H, W) */",
        f"  static const int64_t kf_phase_tab[{len(entries)}][4] = {{",
        *(f"    {{{', '.join(map(str, tap))}}}," for tap in entries),
        "  };",
    ]


def _phase_rows() -> list[str]:
    """Entry-point lines packing the filters per phase (before the parallel loop, once a call): phase p's
    rows are (CO, CIG * its taps), k = ci * taps + t holding w[ci, co, tap t's filter tap], at CO * CIG *
    kf_phase_start[p]: contiguous rows for kf_conv_tile, CO * KK floats over all phases."""
    return [
        "  /* each phase's filters as (CO, CIG * the phase's taps) rows; (CI, CO / G, taps) holds an input",
        "     channel's for every output channel of its group */",
        "  float* rows = (float*)malloc(sizeof(float) * (size_t)(CO * KK));",
        "  if (!rows) return KF_ERR_LAUNCH;",
        "  const int64_t TAPS = KD * KH * KW;",
        "  for (int64_t p = 0; p < KF_PHASES; ++p) {",
        "    const int64_t T = kf_phase_count[p];",
        "    const int64_t (*tab)[4] = kf_phase_tab + kf_phase_start[p];",
        "    float* __restrict prows = rows + CO * CIG * kf_phase_start[p];",
        "    for (int64_t co = 0; co < CO; ++co)",
        "      for (int64_t ci = 0; ci < CIG; ++ci)",
        "        for (int64_t t = 0; t < T; ++t)",
        "          prows[(co * CIG + ci) * T + t] =",
        "              Wt[((co / COG * CIG + ci) * COG + co % COG) * TAPS + tab[t][0]];",
        "  }",
    ]


def _phased_loops(graph: Graph, plan: ConvPlan, variant: Variant) -> list[str]:
    """The rest of a strided transposed conv's entry point, phase by phase (conv_phases.py): output row
    (n, od, oh) is in phase rd = od % SD, rh = oh % SH at jd = od / SD, jh = oh / SH; for each column
    phase rw its columns ow = rw + SW * jw are tiled by NR along jw, and the tile's panel holds only the
    phase's taps, CIG * taps k rows (input (jd, jh, jw) + the tap's offsets, zeros outside the input),
    multiplied by the phase's filter rows; the tail stores to orow[rw + SW * jw]. A phase no tap reaches
    multiplies nothing (k rows 0): its outputs are the bias and the tail."""
    (sd, sh, sw), groups = plan.stride, plan.groups
    kd, kh, kw = plan.kernel
    out = [
        "  /* the tables are baked for the plan's filter */",
        f"  if (KD != {kd} || KH != {kh} || KW != {kw}) return KF_ERR_BAD_ARGUMENTS;",
        *_phase_tables(plan),
        *_phase_rows(),
        "  int failed = 0;",
        "  #pragma omp parallel",
        "  {",
        "    float* panel = (float*)aligned_alloc(64, sizeof(float) * (size_t)(CIG * KF_PHASE_TAPS * NR));",
        "    int64_t* poff = (int64_t*)malloc(sizeof(int64_t) * (size_t)(CIG * KF_PHASE_TAPS));",
        "    alignas(64) float ctile[MR * NR];",
        "    if (!panel || !poff) {",
        "      #pragma omp atomic write",
        "      failed = 1;",
        "    } else {",
        "      for (int64_t k = 0; k < CIG * KF_PHASE_TAPS; ++k) poff[k] = k * NR;",
        "    }",
        "    #pragma omp for schedule(static)",
        "    for (int64_t t = 0; t < NB * OD * OH; ++t) {",
        "      if (!panel || !poff) continue;",
        "      const int64_t n = t / (OD * OH), od = t / OH % OD, oh = t % OH;",
        f"      const int64_t rd = od % {sd}, rh = oh % {sh}, jd = od / {sd}, jh = oh / {sh};",
        f"      for (int64_t rw = 0; rw < {sw}; ++rw) {{",
        f"        const int64_t p = (rd * {sh} + rh) * {sw} + rw, T = kf_phase_count[p], kk = CIG * T;",
        "        const int64_t (*tab)[4] = kf_phase_tab + kf_phase_start[p];",
        "        const float* prows = rows + CO * CIG * kf_phase_start[p];",
        f"        const int64_t OWp = OW > rw ? (OW - rw + {sw - 1}) / {sw} : 0;  /* the phase's columns */",
        "        const int64_t ntiles = (OWp + NR - 1) / NR;",
        f"        for (int64_t g = 0; g < {groups}; ++g)",
        "        for (int64_t tile = 0; tile < ntiles; ++tile) {",
        "          const int64_t jw0 = tile * NR, nw = OWp - jw0 < NR ? OWp - jw0 : NR;",
        "          for (int64_t k = 0; k < kk; ++k) {",
        "            float* __restrict prow = panel + k * NR;",
        "            const int64_t* tap = tab[k % T];",
        "            const int64_t id = jd + tap[1], ih = jh + tap[2], c0 = jw0 + tap[3];",
        "            if (id < 0 || id >= ID || ih < 0 || ih >= IH) {",
        "              for (int64_t j = 0; j < NR; ++j) prow[j] = 0.0f;",
        "              continue;",
        "            }",
        "            const int64_t ci = g * CIG + k / T;",
        "            const float* __restrict xr = X + ((n * CI + ci) * ID + id) * IH * IW + ih * IW;",
        "            for (int64_t j = 0; j < NR; ++j) {",
        "              const int64_t c = c0 + j;",
        "              prow[j] = j < nw && c >= 0 && c < IW ? xr[c] : 0.0f;",
        "            }",
        "          }",
        "          for (int64_t co0 = g * COG; co0 < (g + 1) * COG; co0 += MR) {",
        "            const int64_t nco = (g + 1) * COG - co0 < MR ? (g + 1) * COG - co0 : MR;",
        "            const float* wr[MR];",
        "            for (int i = 0; i < MR; ++i) wr[i] = prows + (co0 + (i < nco ? i : nco - 1)) * kk;",
        "            kf_conv_tile(wr, kk, panel, poff, ctile);",
        "            for (int64_t i = 0; i < nco; ++i) {",
        "              const int64_t co = co0 + i;",
        "              float* __restrict orow =",
        f"                  O + (((n * CO + co) * OD + od) * OH + oh) * OW + rw + {sw} * jw0;",
    ]
    out += ["  " + line for line in _tail(graph, plan, variant, "j" if sw == 1 else f"{sw} * j")]
    return out + _end_of_unit(5, ("rows",))


def _tail(graph: Graph, plan: ConvPlan, variant: Variant, column: str = "j") -> list[str]:
    """The store of one output channel's tile row: ctile row i (plus the bias) through the tail to
    orow[column] for j < nw (column: the output index of tile column j, `j` where the tile's columns are
    contiguous)."""
    conv = plan.conv.name
    channel = {name: f"C{k + int(bool(plan.bias))}" for k, name in enumerate(plan.channel_leaves)}
    scalar = {name: f"S{k}" for k, name in enumerate(plan.scalar_leaves)}
    bias = " + C0[co]" if plan.bias else ""

    def load(leaf: Leaf) -> str:
        if leaf.name == conv:
            return f"(ctile[i * NR + j]{bias})"
        if leaf.name in channel:
            return f"{channel[leaf.name]}[co]"
        return scalar[leaf.name]

    if plan.step is None:
        body, val = [], load(Leaf(conv))
    else:
        body, val = emit(graph, plan.step, Ref(plan.step.root.name), load, indent="              ")
    simd = ["            #pragma omp simd"] if variant.vectorize else []
    return [
        *simd,
        "            for (int64_t j = 0; j < nw; ++j) {",
        *body,
        f"              orow[{column}] = {val};",
        "            }",
    ]

"""CPU tiled GEMM with a fused epilogue: `nn.Linear` or a matmul followed by a row-wise tail, in one entry
point.

Applies when the graph is one `nn.Linear` on a 2-D input followed by one fused step that reads only the
linear's output (and constants): a pointwise chain, a softmax / log-softmax over the features (with its
pointwise epilogue), or a sum / mean / amax / amin over the features. The unit takes the reference's
input, weight and bias straight (no glue): y = x W^T + b never exists in memory as a whole.

It applies as well to a matmul of two forward inputs, `A @ B` (torch.matmul, torch.mm, `@`) with B 2-D
and A of any rank (its leading dims are the rows), either operand possibly transposed (`A.T`, `B.t()`,
`transpose(0, 1)` of a 2-D input), alone or followed by such a tail: B is packed from (K, N) or, given
transposed, from (N, K) like a linear's weight; a transposed A is copied once into row-major (M, K), an
O(MK) pass beside the O(MNK) product.

Structure (BLIS-like, written so g++ vectorises it; the AVX-512 clone of `KF_CPU_ENTRY` runs here):
- W is packed once per call into panels of NR = 16*NV output features, k-major (`bpanel`), zero-padded;
- rows are split in blocks of at most MC rows (whole MR tiles, a multiple of the threads' count of
  equal blocks) across threads; per block, K is walked in KC slices and every
  panel is multiplied by MR rows at a time in a register-blocked micro-kernel (`float acc[MR][NR]`,
  MR x NV vector registers once vectorised, one broadcast of x per row and k), so the KC x NR panel
  stays in L1 and the block's rows of x in L2; the KC slices give blocked (not sequential) accumulation
  over long K;
- when a block is done, the tail runs over its rows while they are hot in L2 (one `cbuf` per thread):
  bias add, the pointwise chain / the softmax passes / the row reduction, and the output is written once.

Tunables: MC (rows per block: the parallel split over threads, GEMM reuse of each W panel, and how much
of the tail stays in L2), KC (K slice: L1 panel size), MR (rows per micro-tile), NV (16-float vectors
per micro-tile row). The defaults are generic choices fixed before any task ran: an 8 x 32 micro-tile
(16 accumulators, half the AVX-512 register file), a KC x NR panel of 32 KiB (an L1d), 64-row blocks.
Pure string building: never compiles or runs what it emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.entry import reduce_range
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import Leaf, Step, partition
from kernelfoundry.generators.heuristic.prelude import cpu_family_head
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant

# Declared in the order a coordinate sweep visits them: the cache blocks first (they move with the shape
# and the core count), then the register block (it moves with the ISA).
GEMM_TUNABLES = (
    "// @kf.tunable MC in [16, 32, 64, 128, 256] default 64",
    "// @kf.tunable KC in [64, 128, 256, 512] default 256",
    "// @kf.tunable MR in [4, 6, 8, 12] default 8",
    "// @kf.tunable NV in [1, 2, 4] default 2",
    "// @kf.tunable KF_FAST_MATH in [0, 1] default 1",
    "// @kf.tunable KF_DISPATCH in [0, 1] default 1",
)
_DEFAULTS = {"MC": 64, "KC": 256, "MR": 8, "NV": 2, "KF_DISPATCH": 1}
_ROW_REDUCTIONS = ("sum", "mean", "amax", "amin")


@dataclass(frozen=True)
class GemmPlan:
    """What the GEMM family computes: linear(x; weight, bias) or x @ weight, then one fused step over its
    rows (none: the product is the output)."""

    linear: OpNode  # the nn.Linear or the matmul
    x: str
    weight: str
    bias: str | None
    step: Step | None
    inputs: tuple[str, ...]  # entry-point inputs in the reference's order (inputs, then parameters)
    matmul: bool = False  # x @ weight (weight (K, N) unless weight_nk) rather than a linear
    x_transposed: bool = False  # x is given as (K, M): the reference multiplies its transpose
    weight_nk: bool = False  # a matmul's right operand is given as (N, K) (transposed), like a weight
    triangle: str = ""  # "triu" / "tril": a 2-D matmul's output keeps one triangle (the rest is 0)
    diagonal: int = 0  # ... from this diagonal, as torch.triu / torch.tril count it


def gemm_plan(graph: Graph) -> GemmPlan | None:
    """The GEMM + epilogue plan of the graph, or None when the family does not apply."""
    return _linear_plan(graph) or _matmul_plan(graph)


def _tail_step(graph: Graph, gemm: OpNode, out_shape: tuple[int, ...]) -> tuple[bool, Step | None]:
    """The one fused step after the GEMM node (None when the product is the graph's output); False
    when what follows is not a tail this family fuses."""
    if graph.outputs == [gemm.name] and graph.nodes[-1] is gemm:
        return True, None
    try:
        parts = partition(graph, True)
    except UnsupportedGraph:
        return False, None
    if len(parts) != 1 or len(parts[0].steps) != 1 or parts[0].inputs != [gemm.name]:
        return False, None
    step = parts[0].steps[0]
    if step.out != graph.outputs[0] or set(step.leaves(graph)) != {Leaf(gemm.name)}:
        return False, None
    root = step.root
    if step.kind == "pointwise":
        return tuple(graph.shapes[step.out]) == out_shape, step
    if step.kind == "reduction":
        return root.op in _ROW_REDUCTIONS and reduce_range(root, len(out_shape))[:2] == (
            len(out_shape) - 1,
            len(out_shape),
        ), step
    return root.op in ("softmax", "log_softmax") and reduce_range(root, len(out_shape))[:2] == (
        len(out_shape) - 1,
        len(out_shape),
    ), step


def _transposed_input(node: OpNode, graph: Graph) -> str | None:
    """The forward input whose 2-D transpose `node` is (`x.T`, `x.mT`, `x.t()`, `x.transpose(0, 1)`)."""
    fx = node.fx_node
    if fx is None or not fx.args or getattr(fx.args[0], "name", None) is None:
        return None
    source = {v.name: v for v in graph.inputs if v.kind == "input"}.get(
        graph.aliases.get(fx.args[0].name, fx.args[0].name)
    )
    if source is None or len(source.shape) != 2:
        return None
    target = fx.target if isinstance(fx.target, str) else getattr(fx.target, "__name__", "")
    if target == "getattr":
        ok = len(fx.args) == 2 and fx.args[1] in ("T", "mT")
    elif target == "t":
        ok = len(fx.args) == 1
    elif target == "transpose":
        dims = tuple(fx.args[1:3]) if len(fx.args) >= 3 else ()
        ok = {d % 2 for d in dims if isinstance(d, int)} == {0, 1} and len(dims) == 2
    else:
        ok = False
    return source.name if ok else None


def _matmul_plan(graph: Graph) -> GemmPlan | None:
    heavy = [n for n in graph.nodes if n.kind in KEPT_IN_TORCH]
    products = [n for n in heavy if n.op == "matmul"]
    if len(products) != 1 or len(graph.outputs) != 1 or any(v.kind != "input" for v in graph.inputs):
        return None
    mm = products[0]
    triangle = _triangle_of(graph, mm)
    transposes: dict[str, str] = {}
    for node in heavy:
        if node is not mm and not (triangle and node is graph.nodes[-1]):
            source = _transposed_input(node, graph)
            if source is None:
                return None
            transposes[node.name] = source
    if graph.nodes.index(mm) != len(transposes) or len(mm.args) != 2:
        return None
    names = {v.name for v in graph.inputs}
    operands: list[tuple[str, bool]] = []
    for arg in mm.args:
        if not isinstance(arg, Ref) or arg.trail:
            return None
        if arg.name in transposes:
            operands.append((transposes[arg.name], True))
        elif arg.name in names:
            operands.append((arg.name, False))
        else:
            return None
    (x, x_t), (w, w_t) = operands
    if len(graph.shapes[w]) != 2 or len(graph.shapes[x]) < 2 or x == w:
        return None
    inputs = tuple(v.name for v in graph.inputs)
    if triangle is not None:
        if len(mm.shape) != 2:
            return None
        return GemmPlan(
            mm, x, w, None, None, inputs, True, x_t, w_t, triangle=triangle[0], diagonal=triangle[1]
        )
    ok, step = _tail_step(graph, mm, tuple(mm.shape))
    if not ok:
        return None
    return GemmPlan(mm, x, w, None, step, inputs, matmul=True, x_transposed=x_t, weight_nk=w_t)


def _triangle_of(graph: Graph, mm: OpNode) -> tuple[str, int] | None:
    """("triu" | "tril", diagonal) when the graph's output is torch.triu / tril of the matmul alone."""
    last = graph.nodes[-1]
    if last.op not in ("triu", "tril") or graph.outputs != [last.name] or len(graph.nodes) < 2:
        return None
    if graph.nodes[-2] is not mm or last.args != (Ref(mm.name),) or last.fx_node is None:
        return None
    fx = last.fx_node
    diagonal = fx.kwargs.get("diagonal", fx.args[1] if len(fx.args) > 1 else 0)
    if not isinstance(diagonal, int) or len(fx.args) > 2 or set(fx.kwargs) - {"diagonal"}:
        return None
    return last.op, diagonal


def _linear_plan(graph: Graph) -> GemmPlan | None:
    heavy = [n for n in graph.nodes if n.kind in KEPT_IN_TORCH]
    if len(heavy) != 1 or graph.nodes[0] is not heavy[0] or len(graph.outputs) != 1:
        return None
    lin = heavy[0]
    mod = graph.modules.get(str(lin.fx_node.target)) if lin.fx_node is not None else None
    if mod is None or type(mod).__name__ != "Linear" or lin.fx_node.op != "call_module":
        return None
    src = lin.args[0] if lin.args else None
    names = {v.name: v for v in graph.inputs}
    if not isinstance(src, Ref) or src.name not in names or len(graph.shapes[src.name]) != 2:
        return None
    by_qual = {v.qualname: v.name for v in graph.inputs}
    weight = by_qual.get(f"{lin.fx_node.target}.weight")
    bias = by_qual.get(f"{lin.fx_node.target}.bias")
    if weight is None or (mod.bias is not None) != (bias is not None):
        return None
    if any(v.kind == "buffer" for v in graph.inputs):
        return None
    ok, step = _tail_step(graph, lin, tuple(lin.shape))
    if not ok or step is None:  # a bare linear is left to torch's own
        return None
    return GemmPlan(lin, src.name, weight, bias, step, tuple(v.name for v in graph.inputs))


def gemm_applies(graph: Graph) -> bool:
    return gemm_plan(graph) is not None


_MICRO = r"""#define NR (16 * NV)

/* One MR x NR tile of c (leading dimension ldc) += rows ar[0..MR) of x times a k-major KC x NR panel;
   the accumulators are a register tile (MR * NV vector registers once vectorised). */
static inline __attribute__((always_inline)) void kf_gemm_tile(
    const float* const* ar, int64_t k0, const float* __restrict bpanel, float* __restrict c, int64_t ldc,
    int64_t kc, int first) {
  float acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    #pragma omp simd
    for (int j = 0; j < NR; ++j) acc[i][j] = first ? 0.0f : c[i * ldc + j];
  }
  for (int64_t k = 0; k < kc; ++k) {
    const float* __restrict b = bpanel + k * NR;
    for (int i = 0; i < MR; ++i) {
      const float a = ar[i][k0 + k];
      #pragma omp simd
      for (int j = 0; j < NR; ++j) acc[i][j] += a * b[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    #pragma omp simd
    for (int j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
  }
}
"""


def _tail(graph: Graph, plan: GemmPlan, variant: Variant) -> list[str]:
    """The epilogue over one finished row `crow` (bias not yet added), writing the output row."""
    step = plan.step
    simd = "#pragma omp simd " if variant.vectorize else ""
    if step is None and plan.triangle:  # one triangle of the product, zeros elsewhere
        keep = ">=" if plan.triangle == "triu" else "<="
        value = f"j - r {keep} {plan.diagonal} ? crow[j] : 0.0f"
        return [f"        {simd}".rstrip(), f"        for (int64_t j = 0; j < N; ++j) orow[j] = {value};"]
    if step is None:  # the product itself is the output
        return [f"        {simd}".rstrip(), "        for (int64_t j = 0; j < N; ++j) orow[j] = crow[j];"]
    root = step.root
    bias = " + bz[j]" if plan.bias else ""
    lin = plan.linear.name

    def load(leaf: Leaf) -> str:
        assert leaf.name == lin
        return f"(crow[j]{bias})"

    out: list[str] = []
    if step.kind == "pointwise":
        body, val = emit(graph, step, Ref(root.name), load, indent="          ")
        out += [f"        {simd}".rstrip(), "        for (int64_t j = 0; j < N; ++j) {", *body]
        out += [f"          orow[j] = {val};", "        }"]
        return out
    src = root.args[0]
    assert isinstance(src, Ref)
    xb, xv = emit(graph, step, src, load, indent="          ")
    if step.kind == "reduction":
        op = root.op
        init = {"sum": "0.0f", "mean": "0.0f", "amax": "-INFINITY", "amin": "INFINITY"}[op]
        red = {"amax": "max", "amin": "min"}.get(op, "+")
        comb = {
            "amax": f"acc = acc > {xv} ? acc : {xv};",
            "amin": f"acc = acc < {xv} ? acc : {xv};",
        }.get(op, f"acc += {xv};")
        out += [f"        float acc = {init};"]
        out += [f"        {simd}reduction({red}:acc)" if simd else ""]
        out += ["        for (int64_t j = 0; j < N; ++j) {", *xb, f"          {comb}", "        }"]
        out += ["        orow[0] = acc / (float)N;" if op == "mean" else "        orow[0] = acc;"]
        return [line for line in out if line]

    def loop(red: str, stmt: str, pre: list[str]) -> None:
        out.append(f"        {simd}reduction({red})" if simd else "")
        out.extend(["        for (int64_t j = 0; j < N; ++j) {", *pre, f"          {stmt}", "        }"])

    out.append("        float m = -INFINITY, s = 0.0f;")
    loop("max:m", f"m = m > {xv} ? m : {xv};", xb)
    if root.op == "softmax":
        # exp once per element, kept in the output row (L1/L2-resident), then scaled in place
        loop("+:s", f"const float e = kf_exp({xv} - m); orow[j] = e; s += e;", xb)
        out.append("        const float inv = 1.0f / s;")
        value, pre = "orow[j] * inv", []
    else:
        loop("+:s", f"s += kf_exp({xv} - m);", xb)
        out.append("        const float ls = logf(s);")
        value, pre = f"({xv} - m - ls)", xb
    out += [f"        {simd}".rstrip(), "        for (int64_t j = 0; j < N; ++j) {", *pre]
    out.append(f"          const float y = {value};")
    if step.epilogue:
        eb, ev = emit(graph, step, Ref(step.out), load, root_var="y", indent="          ")
        out += [*eb, f"          orow[j] = {ev};"]
    else:
        out.append("          orow[j] = y;")
    out.append("        }")
    return [line for line in out if line]


def _operand_checks(plan: GemmPlan, x_rank_wrong: str) -> list[str]:
    """The argument count, x and the weight float32 contiguous (x refused where `x_rank_wrong` holds,
    the weight 2-D), their shapes in `sx` / `sw`."""
    ix, iw = plan.inputs.index(plan.x), plan.inputs.index(plan.weight)
    return [
        f"  if (n_inputs != {len(plan.inputs)} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;",
        "  kf_shape sx, sw, so;",
        f"  if (!kf_tensor_ok(&inputs[{ix}]) || !kf_shape_of(&inputs[{ix}], &sx) || {x_rank_wrong})",
        "    return KF_ERR_BAD_ARGUMENTS;",
        f"  if (!kf_tensor_ok(&inputs[{iw}]) || !kf_shape_of(&inputs[{iw}], &sw) || sw.nd != 2)",
        "    return KF_ERR_BAD_ARGUMENTS;",
    ]


def linear_operands(plan: GemmPlan, pointer: str, bias: str, no_bias: str | None) -> list[str]:
    """Entry-point lines the GEMM families share: the argument count, x (M, K) and W (N, K) checked,
    M / K / N, pointers X and W declared as `pointer`, the bias checked as (N,) and named `bias`
    (`no_bias` is its value when the linear has none; None declares nothing then)."""
    ix, iw = plan.inputs.index(plan.x), plan.inputs.index(plan.weight)
    lines = [
        *_operand_checks(plan, "sx.nd != 2"),
        "  const int64_t M = sx.d[0], K = sx.d[1], N = sw.d[0];",
        "  if (sw.d[1] != K) return KF_ERR_BAD_ARGUMENTS;",
        f"  {pointer} X = KF_DATA(const float, &inputs[{ix}]);",
        f"  {pointer} W = KF_DATA(const float, &inputs[{iw}]);",
    ]
    if plan.bias:
        ib = plan.inputs.index(plan.bias)
        lines += [
            "  kf_shape sb;",
            f"  if (!kf_tensor_ok(&inputs[{ib}]) || !kf_shape_of(&inputs[{ib}], &sb) || sb.nd != 1 ||",
            "      sb.d[0] != N) return KF_ERR_BAD_ARGUMENTS;",
            f"  {pointer} {bias} = KF_DATA(const float, &inputs[{ib}]);",
        ]
    elif no_bias is not None:
        lines.append(f"  {pointer} {bias} = {no_bias};")
    return lines


def matmul_operands(plan: GemmPlan) -> list[str]:
    """Entry-point lines of a matmul: the argument count, A and B checked, M / K / N (A's leading dims
    are its rows), `X` row-major (M, K) (`XT`, (K, M), when A is given transposed: the caller copies it
    into `X`) and `W` as given."""
    ix, iw = plan.inputs.index(plan.x), plan.inputs.index(plan.weight)
    lines = _operand_checks(plan, "sx.nd < 2")
    if plan.x_transposed:
        lines.append("  if (sx.nd != 2) return KF_ERR_BAD_ARGUMENTS;")
        lines.append("  const int64_t M = sx.d[1], K = sx.d[0];")
    else:
        lines.append("  const int64_t M = kf_prod(&sx, 0, sx.nd - 1), K = sx.d[sx.nd - 1];")
    if plan.weight_nk:
        lines.append("  const int64_t N = sw.d[0];")
        lines.append("  if (sw.d[1] != K) return KF_ERR_BAD_ARGUMENTS;")
    else:
        lines.append("  const int64_t N = sw.d[1];")
        lines.append("  if (sw.d[0] != K) return KF_ERR_BAD_ARGUMENTS;")
    name = "XT" if plan.x_transposed else "X"
    lines.append(f"  const float* __restrict {name} = KF_DATA(const float, &inputs[{ix}]);")
    lines.append(f"  const float* __restrict W = KF_DATA(const float, &inputs[{iw}]);")
    return lines


def gemm_unit(graph: Graph, plan: GemmPlan, variant: Variant, header: list[str], dispatch: str) -> str:
    """The whole translation unit: tunables, prelude, micro-kernel and the `kf_forward` entry point."""
    lines = cpu_family_head(
        header, variant.line(), GEMM_TUNABLES, _DEFAULTS, variant.vectorize, dispatch, _MICRO
    )
    out_rows = "1" if plan.step is not None and plan.step.kind == "reduction" else "N"
    w = lines.append
    w("KF_EXPORT KF_CPU_ENTRY int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,")
    w("                                     int32_t n_outputs, void* stream) {")
    if plan.matmul:
        lines += matmul_operands(plan)
    else:
        lines += linear_operands(plan, "const float* __restrict", "bz", None)
    w("  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_of(&outputs[0], &so)) return KF_ERR_BAD_ARGUMENTS;")
    if plan.matmul and out_rows == "N":  # the output keeps A's leading dims: its count and last dim
        w("  if (kf_prod(&so, 0, so.nd) != M * N || so.nd < 1 || so.d[so.nd - 1] != N)")
        w("    return KF_ERR_BAD_ARGUMENTS;")
    elif plan.matmul:  # one value per row
        w("  if (kf_prod(&so, 0, so.nd) != M) return KF_ERR_BAD_ARGUMENTS;")
    else:
        w(f"  if (kf_prod(&so, 0, so.nd) != M * {out_rows} || (so.nd >= 1 && so.d[0] != M))")
        w("    return KF_ERR_BAD_ARGUMENTS;")
    w("  float* __restrict O = KF_DATA(float, &outputs[0]);")
    w("  const int64_t npanels = (N + NR - 1) / NR, npad = npanels * NR;")
    w("  const int64_t crows = (MC + MR - 1) / MR * MR;")
    w("  float* bpanel = (float*)aligned_alloc(64, sizeof(float) * (size_t)(npad * (K > 0 ? K : 1)));")
    w("  /* one block of finished rows per thread, where the tail reads them while they are in L2 */")
    w("  const int nthreads = omp_get_max_threads();")
    w("  float* cbufs = (float*)aligned_alloc(64, sizeof(float) * (size_t)(nthreads * crows * npad));")
    xt = plan.matmul and plan.x_transposed
    if xt:
        w("  float* xbuf = (float*)aligned_alloc(64, sizeof(float) * (size_t)(M * (K > 0 ? K : 1)));")
        w("  const float* X = xbuf;  /* filled below, in the parallel region */")
        w("  if (!bpanel || !cbufs || !xbuf) {")
        w("    free(bpanel); free(cbufs); free(xbuf); return KF_ERR_LAUNCH;")
        w("  }")
    else:
        w("  if (!bpanel || !cbufs) { free(bpanel); free(cbufs); return KF_ERR_LAUNCH; }")
    w("  #pragma omp parallel num_threads(nthreads)")
    w("  {")
    if xt:
        w("    /* A is given as (K, M): its transpose, row-major (M, K), in 32 x 32 blocks */")
        w("    #pragma omp for schedule(static)")
        w("    for (int64_t m0 = 0; m0 < M; m0 += 32)")
        w("      for (int64_t k0 = 0; k0 < K; k0 += 32)")
        w("        for (int64_t m = m0; m < (m0 + 32 < M ? m0 + 32 : M); ++m)")
        w("          for (int64_t k = k0; k < (k0 + 32 < K ? k0 + 32 : K); ++k)")
        w("            xbuf[m * K + k] = XT[k * M + m];")
    if plan.matmul and not plan.weight_nk:
        w("    /* pack B (K, N) into k-major panels of NR columns (zero-padded): bpanel[p][k][NR] */")
        w("    #pragma omp for schedule(static)")
        w("    for (int64_t p = 0; p < npanels; ++p) {")
        w("      float* __restrict dst = bpanel + p * K * NR;")
        w("      const int64_t n0 = p * NR, nn = N - n0 < NR ? N - n0 : NR;")
        w("      for (int64_t k = 0; k < K; ++k) {")
        w("        const float* __restrict src = W + k * N + n0;")
        w("        for (int64_t jj = 0; jj < NR; ++jj) dst[k * NR + jj] = jj < nn ? src[jj] : 0.0f;")
        w("      }")
        w("    }")
    else:
        w("    /* pack W into k-major panels of NR features (zero-padded): bpanel[p][k][NR] */")
        w("    #pragma omp for schedule(static)")
        w("    for (int64_t p = 0; p < npanels; ++p) {")
        w("      float* __restrict dst = bpanel + p * K * NR;")
        w("      for (int64_t jj = 0; jj < NR; ++jj) {")
        w("        const int64_t n = p * NR + jj;")
        w("        if (n < N) { for (int64_t k = 0; k < K; ++k) dst[k * NR + jj] = W[n * K + k]; }")
        w("        else { for (int64_t k = 0; k < K; ++k) dst[k * NR + jj] = 0.0f; }")
        w("      }")
        w("    }")
    w("    float* cbuf = cbufs + (size_t)omp_get_thread_num() * (size_t)(crows * npad);")
    w("    /* rows per block: at most MC, in whole MR tiles, and as many blocks as make every thread's share")
    w("       equal (192 rows at MC = 64 on 2 threads: 4 blocks of 48, not 3 of 64 with one thread idle) */")
    w("    int64_t nblocks = (M + MC - 1) / MC;")
    w("    nblocks = (nblocks + nthreads - 1) / nthreads * nthreads;")
    w("    int64_t mc = (M + nblocks - 1) / (nblocks > 0 ? nblocks : 1);")
    w("    mc = mc < 1 ? MR : (mc + MR - 1) / MR * MR;")
    w("    nblocks = (M + mc - 1) / mc;")
    w("    #pragma omp for schedule(static)")
    w("    for (int64_t blk = 0; blk < nblocks; ++blk) {")
    w("      const int64_t m0 = blk * mc, m1 = m0 + mc < M ? m0 + mc : M;")
    w("      if (K == 0) for (int64_t i = 0; i < crows * npad; ++i) cbuf[i] = 0.0f;  /* y = bias */")
    w("      for (int64_t k0 = 0; k0 < K; k0 += KC) {")
    w("        const int64_t kc = k0 + KC < K ? KC : K - k0;")
    w("        for (int64_t p = 0; p < npanels; ++p) {")
    w("          const float* __restrict bp = bpanel + (p * K + k0) * NR;")
    w("          for (int64_t m = m0; m < m1; m += MR) {")
    w("            const float* ar[MR];")
    w("            for (int i = 0; i < MR; ++i) ar[i] = X + (m + i < m1 ? m + i : m1 - 1) * K;")
    w("            kf_gemm_tile(ar, k0, bp, cbuf + (m - m0) * npad + p * NR, npad, kc, k0 == 0);")
    w("          }")
    w("        }")
    w("      }")
    w("      for (int64_t r = m0; r < m1; ++r) {")
    w("        const float* __restrict crow = cbuf + (r - m0) * npad;")
    w(f"        float* __restrict orow = O + r * {out_rows};")
    lines += _tail(graph, plan, variant)
    w("      }")
    w("    }")
    w("  }")
    w("  free(cbufs);")
    w("  free(bpanel);")
    if xt:
        w("  free(xbuf);")
    w("  (void)stream;")
    w("  return KF_OK;")
    w("}")
    w("")
    return "\n".join(lines)

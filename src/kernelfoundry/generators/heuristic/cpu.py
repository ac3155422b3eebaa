"""C++/OpenMP emitter: one translation unit per candidate, one entry point per graph part.

Pointwise steps iterate the output as rows x inner (the inner block is where every operand is either
contiguous or constant), parallelised over rows x chunks with `#pragma omp parallel for` and vectorised
with `#pragma omp simd`; broadcast operands get a per-row offset. Reductions and rowops run one row per
iteration with SIMD reductions; reductions and softmaxes over a middle dimension accumulate INNER_TILE columns
at once.
The direct translation (Variant.fuse=False) materialises every op and computes every operand offset per
element. Other strategies: `vectorize=False` drops the SIMD pragmas; `cache_rows` (CPU tiling) evaluates
a fused pointwise chain op by op over L1 tile buffers of TILE elements; `reduction="atomic"` splits
sum/mean rows (inner == 1) in CHUNK pieces across threads and combines partials with `omp atomic`;
`channels_last` conv tails are emitted by layout.py. A fused softmax evaluates exp once per element
(stored in the output row, then scaled). Entry points are cloned per x86 ISA level (`KF_CPU_ENTRY`,
tunable KF_DISPATCH). Must never compile or run what it emits.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kernelfoundry.generators.heuristic.entry import entry_point, ptr, reduce_range, shp
from kernelfoundry.generators.heuristic.expressions import literal
from kernelfoundry.generators.heuristic.graph import Graph, Ref, Shape, UnsupportedGraph
from kernelfoundry.generators.heuristic.layout import (
    LAYOUT_TUNABLES,
    channels_last_entry,
    channels_last_source,
)
from kernelfoundry.generators.heuristic.plan import Leaf, Part, Step, row_mode
from kernelfoundry.generators.heuristic.pools import inside, pool_step, window_taps
from kernelfoundry.generators.heuristic.prelude import PRELUDE
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant

CPU_TUNABLES = (
    "// @kf.tunable CHUNK in [1024, 4096, 16384, 65536] default 16384",
    "// @kf.tunable INNER_TILE in [16, 64, 256] default 64",
    "// @kf.tunable KF_FAST_MATH in [0, 1] default 1",
    "// @kf.tunable KF_DISPATCH in [0, 1] default 1",
)

# Entry points cloned per x86 ISA level and picked when the unit is loaded (GCC target_clones, an ifunc):
# the AVX-512 clone where the CPU has it (twice the lanes of the -march=x86-64-v3 baseline), the baseline
# elsewhere. OpenMP-outlined loop bodies are cloned with their entry point.
ISA_DISPATCH = """#if KF_DISPATCH && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KF_CPU_ENTRY __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define KF_CPU_ENTRY
#endif"""
TILED_TUNABLES = ("// @kf.tunable TILE in [256, 1024, 4096] default 1024",)


def _numel(s: Shape) -> int:
    n = 1
    for d in s:
        n *= d
    return n


def split_point(graph: Graph, leaves: list[Leaf], shape: Shape) -> tuple[int, dict[Leaf, int]]:
    """The first dim of the largest trailing block where each leaf is full (1) or broadcast (0)."""
    nd = len(shape)
    modes: dict[Leaf, int | None] = {leaf: None for leaf in leaves}
    split = nd
    for d in range(nd - 1, -1, -1):
        if shape[d] == 1:
            split = d
            continue
        trial = dict(modes)
        ok = True
        for leaf in leaves:
            ls = tuple(graph.shapes[leaf.name]) + (1,) * leaf.trail
            off = nd - len(ls)
            ld = ls[d - off] if d - off >= 0 else 1
            mode = 1 if ld == shape[d] else 0
            if trial[leaf] is None:
                trial[leaf] = mode
            elif trial[leaf] != mode:
                ok = False
        if not ok:
            break
        modes = trial
        split = d
    return split, {leaf: (1 if m is None else m) for leaf, m in modes.items()}


def _leaf_shape(leaf: Leaf) -> str:
    return f"kf_trail({shp(leaf.name)}, {leaf.trail})"


def _dispatch(code: str) -> str:
    return code.replace("\nKF_EXPORT int ", "\nKF_EXPORT KF_CPU_ENTRY int ")


class CpuEmitter:
    def __init__(self, graph: Graph, variant: Variant) -> None:
        self.graph = graph
        self.variant = variant

    def unit(self, parts: list[Part], header: list[str]) -> str:
        lines = [*header, self.variant.line(), *CPU_TUNABLES]
        if self.variant.cache_rows and self.variant.fuse and not self.variant.channels_last:
            lines += [*TILED_TUNABLES, "#ifndef TILE", "#define TILE 1024", "#endif"]
        lines += [
            "#ifndef CHUNK",
            "#define CHUNK 16384",
            "#endif",
            "#ifndef INNER_TILE",
            "#define INNER_TILE 64",
            "#endif",
            "#ifndef KF_FAST_MATH",
            f"#define KF_FAST_MATH {int(self.variant.vectorize)}",
            "#endif",
            "#ifndef KF_DISPATCH",
            "#define KF_DISPATCH 1",
            "#endif",
            ISA_DISPATCH,
            PRELUDE,
            "#include <omp.h>",
            "",
            "KF_DEFINE_ABI_VERSION()",
            "",
        ]
        nhwc = channels_last_source(self.graph, parts) if self.variant.channels_last else None
        if nhwc is not None:
            lines[lines.index("#ifndef KF_FAST_MATH")] = "\n".join(
                [*LAYOUT_TUNABLES, "#ifndef TILE", "#define TILE 64", "#endif", "#ifndef KF_FAST_MATH"]
            )
            return _dispatch("\n".join([*lines, *channels_last_entry(self.graph, parts[0], nhwc), ""]))
        for part in parts:
            lines += entry_point(
                self.graph,
                part,
                self.step,
                lambda name, n: f"(float*)malloc(sizeof(float) * (size_t)({n}))",
                lambda name: f"free({ptr(name)});",
            )
            lines.append("")
        return _dispatch("\n".join(lines))

    # -- steps -------------------------------------------------------------------------------------
    def step(self, step: Step) -> list[str]:
        if step.kind == "pointwise":
            return self.pointwise(step)
        if step.kind == "reduction":
            return self.reduction(step)
        if step.kind == "pool":
            return self.pool(step)
        return self.rowop(step)

    def pool(self, step: Step) -> list[str]:
        """A pooling window with its producers evaluated at each tap and its consumers at each output
        (pools.py): a task per output row (image, channel, depth, height), its outputs in a loop; the
        operands full along the pooled dims (a run of them a plane) or one value a plane (a bias)."""
        g = self.graph
        window, src, xshape, oshape, lead = pool_step(g, step)
        out = [
            f"    const kf_shape X = {shp(src.name)}, S = {shp(step.out)};",
            f"    const int64_t C = X.d[{lead - 1}], planes = kf_prod(&S, 0, {lead});",
        ]
        for i, (inner, outer) in enumerate((("ID", "OD"), ("IH", "OH"), ("IW", "OW"))):
            dim = lead + i - (3 - window.dims)
            size = (f"X.d[{dim}]", f"S.d[{dim}]") if dim >= lead else ("1", "1")
            out.append(f"    const int64_t {inner} = {size[0]}, {outer} = {size[1]};")
        pre: list[str] = []
        loads: dict[str, dict[Leaf, str]] = {"taps": {}, "outs": {}}
        sides = [("p", "taps", step.prologue_leaves(g), "X", xshape, "at")]
        if step.epilogue:
            sides.append(("e", "outs", step.epilogue_leaves(g), "S", oshape, "ot"))
        for prefix, side, leaves, space, shape, at in sides:
            for k, leaf in enumerate(leaves):
                mode = row_mode(g, leaf, shape, lead)
                assert mode is not None, "the planner refuses pool operands read otherwise"
                name = f"m{prefix}{k}"
                out.append(f"    kf_rowmap {name};")
                out.append(
                    f"    if (!kf_rowmap_make({_leaf_shape(leaf)}, {space}, {lead}, {mode}, &{name}))"
                    " { rc = KF_ERR_UNSUPPORTED; goto kf_done; }"
                )
                offset = f"{ptr(leaf.name)} + kf_rowmap_off(&{name}, nc)"
                if mode:
                    pre.append(f"      const float* __restrict q{prefix}{k} = {offset};")
                    loads[side][leaf] = f"q{prefix}{k}[{at}]"
                else:
                    pre.append(f"      const float b{prefix}{k} = *({offset});")
                    loads[side][leaf] = f"b{prefix}{k}"
        prologue, value = emit(g, step, src, lambda leaf: loads["taps"][leaf], indent="          ")
        epilogue, result = (
            emit(g, step, Ref(step.out), lambda leaf: loads["outs"][leaf], "acc", indent="        ")
            if step.epilogue
            else ([], "acc")
        )
        # windows inside the input check no bounds: the row's outputs vectorise (strided loads)
        simd = self.variant.vectorize and inside(window)
        out += [
            "    #pragma omp parallel for schedule(static)",
            "    for (int64_t r = 0; r < planes * OD * OH; ++r) {",
            "      const int64_t nc = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;",
            *pre,
            f"      float* __restrict o = {ptr(step.out)} + r * OW;",
            *(["      #pragma omp simd"] if simd else []),
            "      for (int64_t ow = 0; ow < OW; ++ow) {",
            "        const int64_t ot = (od * OH + oh) * OW + ow;",
            "        (void)ot;",
            *window_taps(window, prologue, value, "        ", unroll=False, index="int64_t"),
            *epilogue,
            f"        o[ow] = {result};",
            "      }",
            "    }",
        ]
        return out

    def pointwise(self, step: Step) -> list[str]:
        g = self.graph
        shape = g.shapes[step.out]
        leaves = step.prologue_leaves(g)
        direct = not self.variant.fuse
        split, modes = split_point(g, leaves, shape)
        if direct:
            split, modes = len(shape), dict.fromkeys(leaves, 0)
        out = [f"    const kf_shape S = {shp(step.out)};"]
        out.append(f"    const int64_t rows = kf_prod(&S, 0, {split}), inner = kf_prod(&S, {split}, S.nd);")
        for k, leaf in enumerate(leaves):
            out.append(f"    kf_rowmap m{k};")
            out.append(
                f"    if (!kf_rowmap_make({_leaf_shape(leaf)}, S, {split}, {modes[leaf]}, &m{k}))"
                " { rc = KF_ERR_UNSUPPORTED; goto kf_done; }"
            )
        loads = {}
        pre = []
        for k, leaf in enumerate(leaves):
            if modes[leaf] == 1:
                pre.append(
                    f"      const float* __restrict q{k} = {ptr(leaf.name)} + kf_rowmap_off(&m{k}, r);"
                )
                loads[leaf] = f"q{k}[j]"
            else:
                pre.append(f"      const float b{k} = {ptr(leaf.name)}[kf_rowmap_off(&m{k}, r)];")
                loads[leaf] = f"b{k}"
        body, result = emit(g, step, Ref(step.root.name), lambda leaf: loads[leaf], indent="        ")
        chunk = "CHUNK" if not self.variant.par_rows and not direct else "inner"
        out.append(f"    const int64_t chunk = {chunk} > 0 ? {chunk} : 1;")
        out.append("    const int64_t nchunks = (inner + chunk - 1) / chunk;")
        out.append("    #pragma omp parallel for schedule(static)")
        out.append("    for (int64_t t = 0; t < rows * nchunks; ++t) {")
        out.append("      const int64_t r = t / nchunks, j0 = (t % nchunks) * chunk;")
        out.append("      const int64_t j1 = j0 + chunk < inner ? j0 + chunk : inner;")
        out += pre
        out.append(f"      float* __restrict o = {ptr(step.out)} + r * inner;")
        if self.variant.cache_rows and not direct:
            out += self._tiled_body(g, step, leaves, modes)
            out.append("    }")
            return out
        if self.variant.vectorize and not direct:
            out.append("      #pragma omp simd")
        out.append("      for (int64_t j = j0; j < j1; ++j) {")
        out += body
        out.append(f"        o[j] = {result};")
        out.append("      }")
        out.append("    }")
        return out

    def _tiled_body(self, g: Graph, step: Step, leaves: list[Leaf], modes: dict[Leaf, int]) -> list[str]:
        """Cache-blocked op by op: each fused op is its own loop over an L1-resident tile buffer."""
        loads = {leaf: (f"q{k}[jt + i]" if modes[leaf] == 1 else f"b{k}") for k, leaf in enumerate(leaves)}
        body, result = emit(g, step, Ref(step.root.name), lambda leaf: loads[leaf], indent="")
        simd = "        #pragma omp simd" if self.variant.vectorize else ""
        out = ["      for (int64_t jt = j0; jt < j1; jt += TILE) {"]
        out.append("        const int64_t n = jt + TILE < j1 ? TILE : j1 - jt;")
        names = []
        for stmt in body:
            name = stmt.split("=", 1)[0].split()[-1]
            names.append(name)
        last = names[-1] if names and result == names[-1] else None
        for name in names:
            if name != last:
                out.append(f"        alignas(64) float tile_{name}[TILE];")
        rewrite = [(name, f"tile_{name}[i]") for name in sorted(names, key=len, reverse=True)]

        def local(text: str) -> str:
            for name, repl in rewrite:
                text = re.sub(rf"\b{name}\b", repl, text)
            return text

        for name, stmt in zip(names, body, strict=True):
            expr = stmt.split("=", 1)[1].strip().rstrip(";")
            if simd:
                out.append(simd)
            dest = "o[jt + i]" if name == last else f"tile_{name}[i]"
            out.append(f"        for (int64_t i = 0; i < n; ++i) {dest} = {local(expr)};")
        if last is None:
            if simd:
                out.append(simd)
            out.append(f"        for (int64_t i = 0; i < n; ++i) o[jt + i] = {local(result)};")
        out.append("      }")
        return out

    def _row_leaves(self, step: Step, leaves: list[Leaf], shape: Shape, index: str) -> tuple[list[str], dict]:
        """Loads for leaves that are full-shape (row-major index `index`) or scalars (the CPU's plans
        write other operands' prologue out first: plan.partition's `axis_leaves`)."""
        pre: list[str] = []
        loads: dict[Leaf, str] = {}
        for k, leaf in enumerate(leaves):
            ls = tuple(self.graph.shapes[leaf.name])
            if _numel(ls) == 1:
                pre.append(f"    const float c{k}_{leaf.name} = {ptr(leaf.name)}[0];")
                loads[leaf] = f"c{k}_{leaf.name}"
            elif leaf.trail == 0 and ls == tuple(shape):
                pre.append(
                    f"    if (!kf_same({shp(leaf.name)}, {shp(step.root.args[0].name)}))"  # type: ignore[union-attr]
                    " { rc = KF_ERR_UNSUPPORTED; goto kf_done; }"
                )
                loads[leaf] = f"{ptr(leaf.name)}[{index}]"
            else:
                raise UnsupportedGraph(f"`{leaf.name}` broadcasts inside a fused reduction")
        return pre, loads

    def reduction(self, step: Step) -> list[str]:
        g = self.graph
        node = step.root
        src = node.args[0]
        assert isinstance(src, Ref)
        xshape = g.shapes[src.name]
        d0, d1, _ = reduce_range(node, len(xshape))
        simd = "#pragma omp simd " if self.variant.vectorize and self.variant.fuse else ""
        out = [
            f"    const kf_shape X = {shp(src.name)};",
            f"    const int64_t outer = kf_prod(&X, 0, {d0}), R = kf_prod(&X, {d0}, {d1}),"
            f" inner = kf_prod(&X, {d1}, X.nd);",
        ]
        leaves = step.prologue_leaves(g)
        op = node.op
        init = {
            "sum": "0.0f",
            "mean": "0.0f",
            "logsumexp": "-INFINITY",
            "amax": "-INFINITY",
            "amin": "INFINITY",
        }[op]

        def combine(acc: str, v: str) -> str:
            if op in ("amax", "logsumexp"):
                return f"{acc} = {acc} > {v} ? {acc} : {v};"
            if op == "amin":
                return f"{acc} = {acc} < {v} ? {acc} : {v};"
            return f"{acc} += {v};"

        red = {"amax": "max", "logsumexp": "max", "amin": "min"}.get(op, "+")
        # rows: inner == 1, one row per iteration
        pre, loads = self._row_leaves(step, leaves, xshape, "o * R + j")
        out += pre
        body, val = emit(g, step, src, lambda leaf: loads[leaf], indent="          ")
        out.append("    if (inner == 1) {")
        if self.variant.reduction == "atomic" and op in ("sum", "mean"):
            # rows split in CHUNK-long pieces across threads; partial sums combined with atomics
            scale = " / (float)R" if op == "mean" else ""
            red_clause = f"{simd}reduction(+:partial)" if simd else ""
            out += [
                "      const int64_t nsplit = (R + CHUNK - 1) / CHUNK;",
                "      #pragma omp parallel for schedule(static)",
                f"      for (int64_t o = 0; o < outer; ++o) {ptr(step.out)}[o] = 0.0f;",
                "      #pragma omp parallel for schedule(static)",
                "      for (int64_t t = 0; t < outer * nsplit; ++t) {",
                "        const int64_t o = t / nsplit, j0 = (t % nsplit) * CHUNK;",
                "        const int64_t j1 = j0 + CHUNK < R ? j0 + CHUNK : R;",
                "        float partial = 0.0f;",
                *([f"        {red_clause}"] if red_clause else []),
                "        for (int64_t j = j0; j < j1; ++j) {",
                *body,
                f"          partial += {val};",
                "        }",
                "        #pragma omp atomic",
                f"        {ptr(step.out)}[o] += partial{scale};",
                "      }",
            ]
            out.append("    } else {")
            return self._middle_reduction(out, step, leaves, pre, op, init, combine, simd, src)
        out.append("      #pragma omp parallel for schedule(static)")
        out.append("      for (int64_t o = 0; o < outer; ++o) {")
        out.append(f"        float acc = {init};")
        out.append(f"        {simd}{'reduction(' + red + ':acc)' if simd else ''}".rstrip())
        out.append("        for (int64_t j = 0; j < R; ++j) {")
        out += body
        out.append(f"          {combine('acc', val)}")
        out.append("        }")
        if op == "logsumexp":
            out.append("        float s = 0.0f;")
            out.append(f"        {simd}{'reduction(+:s)' if simd else ''}".rstrip())
            out.append("        for (int64_t j = 0; j < R; ++j) {")
            out += body
            out.append(f"          s += kf_exp({val} - acc);")
            out.append("        }")
            out.append("        acc = acc + logf(s);")
        if op == "mean":
            out.append("        acc /= (float)R;")
        out.append(f"        {ptr(step.out)}[o] = acc;")
        out.append("      }")
        out.append("    } else {")
        return self._middle_reduction(out, step, leaves, pre, op, init, combine, simd, src)

    def _middle_reduction(
        self,
        out: list[str],
        step: Step,
        leaves: list[Leaf],
        pre: list[str],
        op: str,
        init: str,
        combine: Callable[[str, str], str],
        simd: str,
        src: Ref,
    ) -> list[str]:
        """The inner != 1 branch: accumulate a tile of columns, contiguous across the inner index."""
        g = self.graph
        xshape = g.shapes[src.name]
        pre2, loads2 = self._row_leaves(step, leaves, xshape, "(o * R + j) * inner + i")
        body2, val2 = emit(g, step, src, lambda leaf: loads2[leaf], indent="            ")
        out += ["  " + p for p in pre2 if p not in pre]
        out.append("      const int64_t ntiles = (inner + INNER_TILE - 1) / INNER_TILE;")
        out.append("      #pragma omp parallel for schedule(static)")
        out.append("      for (int64_t t = 0; t < outer * ntiles; ++t) {")
        out.append("        const int64_t o = t / ntiles, i0 = (t % ntiles) * INNER_TILE;")
        out.append("        const int64_t i1 = i0 + INNER_TILE < inner ? i0 + INNER_TILE : inner;")
        out.append("        float acc[INNER_TILE], mx[INNER_TILE];")
        out.append(f"        for (int64_t i = 0; i < INNER_TILE; ++i) {{ acc[i] = {init}; mx[i] = 0.0f; }}")
        passes = [("acc", combine)]
        out.append("        for (int64_t j = 0; j < R; ++j) {")
        if simd:
            out.append("          #pragma omp simd")
        out.append("          for (int64_t i = i0; i < i1; ++i) {")
        out += body2
        out.append(f"            {combine('acc[i - i0]', val2)}")
        out.append("          }")
        out.append("        }")
        if op == "logsumexp":
            out.append("        for (int64_t i = 0; i < INNER_TILE; ++i) { mx[i] = acc[i]; acc[i] = 0.0f; }")
            out.append("        for (int64_t j = 0; j < R; ++j) {")
            out.append("          for (int64_t i = i0; i < i1; ++i) {")
            out += body2
            out.append(f"            acc[i - i0] += kf_exp({val2} - mx[i - i0]);")
            out.append("          }")
            out.append("        }")
            out.append("        for (int64_t i = 0; i < INNER_TILE; ++i) acc[i] = mx[i] + logf(acc[i]);")
        del passes
        scale = " / (float)R" if op == "mean" else ""
        out.append(
            f"        for (int64_t i = i0; i < i1; ++i) {ptr(step.out)}[o * inner + i] = acc[i - i0]{scale};"
        )
        out.append("      }")
        out.append("    }")
        return out

    def rowop(self, step: Step) -> list[str]:
        g = self.graph
        node = step.root
        src = node.args[0]
        assert isinstance(src, Ref)
        xshape = g.shapes[src.name]
        d0, d1, _ = reduce_range(node, len(xshape))
        if node.op in ("softmax", "log_softmax") and d1 != len(xshape):
            return self._middle_softmax(step, src, d0, d1)
        simd = "#pragma omp simd " if self.variant.vectorize and self.variant.fuse else ""
        out = [f"    const kf_shape X = {shp(src.name)};"]
        if node.op == "group_norm":
            groups = int(node.attrs["num_groups"])
            out.append(f"    const int64_t G = {groups}, C = X.d[1], HW = kf_prod(&X, 2, X.nd);")
            out.append("    if (C % G != 0) { rc = KF_ERR_BAD_ARGUMENTS; goto kf_done; }")
            out.append("    const int64_t outer = X.d[0] * G, R = (C / G) * HW;")
        else:
            out.append(f"    const int64_t outer = kf_prod(&X, 0, {d0}), R = kf_prod(&X, {d0}, X.nd);")
        pro = step.prologue_leaves(g)
        epi = step.epilogue_leaves(g)
        pre, loads = self._row_leaves(step, list(dict.fromkeys(pro + epi)), xshape, "o * R + j")
        out += pre
        xb, xv = emit(g, step, src, lambda leaf: loads[leaf], indent="        ")
        out.append("    #pragma omp parallel for schedule(static)")
        out.append("    for (int64_t o = 0; o < outer; ++o) {")

        def loop(red: str | None, acc_stmt: str) -> None:
            out.append(f"      {simd}{'reduction(' + red + ')' if simd and red else ''}".rstrip())
            out.append("      for (int64_t j = 0; j < R; ++j) {")
            out.extend(xb)
            out.append(f"        {acc_stmt}")
            out.append("      }")

        exp_once = node.op == "softmax" and self.variant.fuse
        if exp_once:
            # exp evaluated once per element: stored in the output row (L1/L2-resident), then scaled
            out.append("      float m = -INFINITY, s = 0.0f;")
            out.append(f"      float* __restrict orow = {ptr(step.out)} + o * R;")
            loop("max:m", f"m = m > {xv} ? m : {xv};")
            loop("+:s", f"const float e = kf_exp({xv} - m); orow[j] = e; s += e;")
            out.append("      const float inv = 1.0f / s;")
            value = "orow[j] * inv"
        elif node.op in ("softmax", "log_softmax"):
            out.append("      float m = -INFINITY, s = 0.0f;")
            loop("max:m", f"m = m > {xv} ? m : {xv};")
            loop("+:s", f"s += kf_exp({xv} - m);")
            if node.op == "softmax":
                out.append("      const float inv = 1.0f / s;")
                value = f"kf_exp({xv} - m) * inv"
            else:
                out.append("      const float ls = logf(s);")
                value = f"({xv} - m - ls)"
        else:
            eps = literal(float(node.attrs.get("eps", 1e-5)))
            out.append("      float mean = 0.0f, var = 0.0f;")
            loop("+:mean", f"mean += {xv};")
            out.append("      mean /= (float)R;")
            loop("+:var", f"var += ({xv} - mean) * ({xv} - mean);")
            out.append(f"      const float rstd = 1.0f / sqrtf(var / (float)R + {eps});")
            value = f"(({xv} - mean) * rstd)"
            extras = [a for a in node.args[1:] if isinstance(a, Ref)]
            w = ptr(extras[0].name) if node.attrs.get("has_weight") else None
            b = ptr(extras[1].name) if node.attrs.get("has_bias") and len(extras) > 1 else None
            if node.op == "layer_norm":
                if w:
                    value = f"({value} * {w}[j])"
                if b:
                    value = f"({value} + {b}[j])"
            else:
                # per-channel affine: loop channels outside, spatial positions inside (no division)
                if w:
                    value = f"({value} * {w}[ch])"
                if b:
                    value = f"({value} + {b}[ch])"
        if node.op == "group_norm":
            out.append("      for (int64_t cc = 0; cc < C / G; ++cc) {")
            out.append("      const int64_t ch = (o % G) * (C / G) + cc;")
            out.append("      (void)ch;")
            out.append(f"      {simd}".rstrip())
            out.append("      for (int64_t j = cc * HW; j < (cc + 1) * HW; ++j) {")
        else:
            out.append(f"      {simd}".rstrip())
            out.append("      for (int64_t j = 0; j < R; ++j) {")
        if not exp_once:
            out += xb
        out.append(f"        const float y = {value};")
        if step.epilogue:
            eb, ev = emit(g, step, Ref(step.out), lambda leaf: loads[leaf], root_var="y", indent="        ")
            out += eb
            out.append(f"        {ptr(step.out)}[o * R + j] = {ev};")
        else:
            out.append(f"        {ptr(step.out)}[o * R + j] = y;")
        out.append("      }")
        if node.op == "group_norm":
            out.append("      }")
        out.append("    }")
        return out

    def _middle_softmax(self, step: Step, src: Ref, d0: int, d1: int) -> list[str]:
        """Softmax / log-softmax over a dimension that is not the last (channels of NCHW): a tile of
        INNER_TILE columns, contiguous across the inner index, holds its max and sum per column while
        the R rows stream past three times (max, sum of exp, write with the epilogue). Fused: exp is
        evaluated once, stored in the output and scaled in the write pass."""
        g = self.graph
        node = step.root
        xshape = g.shapes[src.name]
        simd = "#pragma omp simd" if self.variant.vectorize and self.variant.fuse else ""
        leaves = list(dict.fromkeys(step.prologue_leaves(g) + step.epilogue_leaves(g)))
        pre, loads = self._row_leaves(step, leaves, xshape, "(o * R + j) * inner + i")
        xb, xv = emit(g, step, src, lambda leaf: loads[leaf], indent="          ")
        exp_once = node.op == "softmax" and self.variant.fuse
        dst = f"{ptr(step.out)}[(o * R + j) * inner + i]"
        out = [
            f"    const kf_shape X = {shp(src.name)};",
            f"    const int64_t outer = kf_prod(&X, 0, {d0}), R = kf_prod(&X, {d0}, {d1}),"
            f" inner = kf_prod(&X, {d1}, X.nd);",
            *pre,
            "    const int64_t ntiles = (inner + INNER_TILE - 1) / INNER_TILE;",
            "    #pragma omp parallel for schedule(static)",
            "    for (int64_t t = 0; t < outer * ntiles; ++t) {",
            "      const int64_t o = t / ntiles, i0 = (t % ntiles) * INNER_TILE;",
            "      const int64_t i1 = i0 + INNER_TILE < inner ? i0 + INNER_TILE : inner;",
            "      float m[INNER_TILE], s[INNER_TILE];",
            "      for (int64_t i = 0; i < INNER_TILE; ++i) { m[i] = -INFINITY; s[i] = 0.0f; }",
        ]

        def columns(*body: str) -> None:
            out.append("      for (int64_t j = 0; j < R; ++j) {")
            if simd:
                out.append(f"        {simd}")
            out.append("        for (int64_t i = i0; i < i1; ++i) {")
            out.extend(body)
            out.append("        }")
            out.append("      }")

        columns(*xb, f"          m[i - i0] = m[i - i0] > {xv} ? m[i - i0] : {xv};")
        if exp_once:
            columns(*xb, f"          const float e = kf_exp({xv} - m[i - i0]); {dst} = e; s[i - i0] += e;")
            out.append("      for (int64_t i = 0; i < INNER_TILE; ++i) s[i] = 1.0f / s[i];")
            value, body = f"{dst} * s[i - i0]", []
        elif node.op == "softmax":
            columns(*xb, f"          s[i - i0] += kf_exp({xv} - m[i - i0]);")
            out.append("      for (int64_t i = 0; i < INNER_TILE; ++i) s[i] = 1.0f / s[i];")
            value, body = f"kf_exp({xv} - m[i - i0]) * s[i - i0]", xb
        else:
            columns(*xb, f"          s[i - i0] += kf_exp({xv} - m[i - i0]);")
            out.append("      for (int64_t i = 0; i < INNER_TILE; ++i) s[i] = m[i] + logf(s[i]);")
            value, body = f"({xv} - s[i - i0])", xb
        write = [*body, f"          const float y = {value};"]
        if step.epilogue:
            eb, ev = emit(g, step, Ref(step.out), lambda leaf: loads[leaf], root_var="y", indent="          ")
            write += [*eb, f"          {dst} = {ev};"]
        else:
            write.append(f"          {dst} = y;")
        columns(*write)
        out.append("    }")
        return out

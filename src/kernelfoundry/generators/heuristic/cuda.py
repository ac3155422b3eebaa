"""CUDA emitter: one .cu unit per candidate, one host entry point per part launching one kernel per step.

Pointwise steps: 2-D grid-stride kernels over rows x inner (blockIdx.y strides rows, so a broadcast
operand's offset is computed once per row), float4 loads/stores when Variant.vectorize and the inner
size allows. Reductions over the last dims and rowops: one block per row, block reduction by warp
shuffles (Variant.reduction "warp"), a shared-memory tree with __syncthreads ("block"), or, for sums,
row splits combined with atomicAdd ("atomic"). Softmax may use the online formulation (one pass for max
and sum) and cache the row in shared memory (Variant.cache_rows). Middle-dim reductions: one thread per
output column. Every launch goes to the given stream. A unit carries only the reduction helpers its
kernels call, so its source shows the strategy it uses. Must never compile or run what it emits.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kernelfoundry.generators.heuristic.cpu import _leaf_shape, split_point
from kernelfoundry.generators.heuristic.entry import entry_point, ptr, reduce_range, shp
from kernelfoundry.generators.heuristic.expressions import literal
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import Leaf, Part, Step
from kernelfoundry.generators.heuristic.prelude import PRELUDE
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant

CUDA_TUNABLES = (
    "// @kf.tunable BLOCK in [128, 256, 512, 1024] default 256",
    "// @kf.tunable ROW_BLOCK in [128, 256, 512, 1024] default 512",
    "// @kf.tunable PER_THREAD in [1, 2, 4, 8] default 4",
)

COMBINE = r"""
template <int OP>
__device__ __forceinline__ float kf_combine(float a, float b) {
  if (OP == 0) return a + b;
  if (OP == 1) return fmaxf(a, b);
  return fminf(a, b);
}
"""

REDUCE_WARP = r"""
/* Warp-shuffle block reduction; every thread gets the result. `scratch` holds 33 floats. */
template <int OP>
__device__ float kf_block_reduce_warp(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = kf_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? scratch[lane] : (OP == 0 ? 0.0f : (OP == 1 ? -INFINITY : INFINITY));
    for (int o = 16; o > 0; o >>= 1) v = kf_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[32] = v;
  }
  __syncthreads();
  return scratch[32];
}
"""

REDUCE_LANES = r"""
/* Reduction across the 32 lanes of a warp; every lane gets the result. No shared memory, no barrier. */
template <int OP>
__device__ __forceinline__ float kf_warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1) v = kf_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
"""

# Rows up to WARP_ROW_MAX long get one warp each (Variant.row_warps): a block per short row leaves most
# of its threads idle and pays two barriers per reduction.
WARP_TUNABLES = ("// @kf.tunable WARP_ROW_MAX in [1024, 4096, 16384] default 4096",)

REDUCE_TREE = r"""
/* Shared-memory tree reduction with block barriers only; `scratch` holds blockDim.x floats. */
template <int OP>
__device__ float kf_block_reduce_tree(float v, float* scratch) {
  __syncthreads();
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      scratch[threadIdx.x] = kf_combine<OP>(scratch[threadIdx.x], scratch[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = scratch[0];
  __syncthreads();
  return r;
}
"""


class CudaEmitter:
    def __init__(self, graph: Graph, variant: Variant) -> None:
        self.graph = graph
        self.variant = variant
        self.kernels: list[str] = []
        self.counter = 0
        self._eps = 1e-5
        self._lanes = False  # reductions across one warp's lanes (warp-per-row kernels)
        self._steps: list[Step] = []  # the part being emitted, for fusion across adjacent steps
        self._fused_into: dict[str, tuple[str, int]] = {}  # pointwise out -> (reduction input, d1)

    def unit(self, parts: list[Part], header: list[str]) -> str:
        bodies: list[str] = []
        for part in parts:
            self._steps = part.steps
            bodies += entry_point(
                self.graph,
                part,
                self.step,
                lambda name, n: f"kf_alloc(sizeof(float) * (size_t)({n}), st)",
                lambda name: f"if ({ptr(name)}) cudaFreeAsync({ptr(name)}, st);",
            )
            bodies.append("")
        lines = [*header, self.variant.line(), *CUDA_TUNABLES]
        defaults = [("BLOCK", 256), ("ROW_BLOCK", 512), ("PER_THREAD", 4)]
        if "WARP_ROW_MAX" in "\n".join(bodies):
            lines += WARP_TUNABLES
            defaults.append(("WARP_ROW_MAX", 4096))
        for name, default in defaults:
            lines += [f"#ifndef {name}", f"#define {name} {default}", "#endif"]
        # only the reduction helpers the kernels call: a unit's source shows the strategy it uses
        used = "\n".join(self.kernels)
        helpers = [COMBINE] if "kf_combine" in used or "kf_block_reduce" in used else []
        helpers += [REDUCE_WARP] if "kf_block_reduce_warp" in used else []
        helpers += [REDUCE_LANES] if "kf_warp_reduce" in used else []
        helpers += [REDUCE_TREE] if "kf_block_reduce_tree" in used else []
        lines += ["#include <cuda_runtime.h>", PRELUDE, *helpers]
        lines += [
            "static float* kf_alloc(size_t bytes, cudaStream_t st) {",
            "  void* p = nullptr;",
            "  return cudaMallocAsync(&p, bytes, st) == cudaSuccess ? (float*)p : nullptr;",
            "}",
            "",
            "KF_DEFINE_ABI_VERSION()",
            "",
            *self.kernels,
        ]
        text = "\n".join(bodies)
        text = text.replace(
            "void* stream) {\n", "void* stream) {\n  cudaStream_t st = (cudaStream_t)stream;\n"
        )
        lines.append(text)
        return "\n".join(lines)

    def step(self, step: Step) -> list[str]:
        self.counter += 1
        if step.kind == "pointwise":
            return self.pointwise(step)
        if step.kind == "reduction":
            return self.reduction(step)
        return self.rowop(step)

    def _launch_check(self) -> list[str]:
        return ["    if (cudaGetLastError() != cudaSuccess) { rc = KF_ERR_LAUNCH; goto kf_done; }"]

    # -- pointwise ---------------------------------------------------------------------------------
    def pointwise(self, step: Step) -> list[str]:
        g = self.graph
        shape = g.shapes[step.out]
        leaves = step.prologue_leaves(g)
        direct = not self.variant.fuse
        split, modes = split_point(g, leaves, shape)
        if direct:
            split, modes = len(shape), dict.fromkeys(leaves, 0)
        kname = f"kf_step{self.counter}"
        vec = self.variant.vectorize and not direct
        params = ["int64_t rows", "int64_t inner", f"float* __restrict__ {ptr(step.out)}"]
        for k, leaf in enumerate(leaves):
            params += [f"const float* __restrict__ {ptr(leaf.name)}", f"kf_rowmap m{k}"]
        pre, loads, loads4 = [], {}, {}
        for k, leaf in enumerate(leaves):
            if modes[leaf] == 1:
                pre.append(
                    f"    const float* __restrict__ q{k} = {ptr(leaf.name)} + kf_rowmap_off_dev(m{k}, r);"
                )
                loads[leaf] = f"q{k}[j]"
                loads4[leaf] = k
            else:
                pre.append(f"    const float b{k} = {ptr(leaf.name)}[kf_rowmap_off_dev(m{k}, r)];")
                loads[leaf] = f"b{k}"
        body, result = emit(g, step, Ref(step.root.name), lambda leaf: loads[leaf], indent="      ")
        k = [f"__global__ void __launch_bounds__(1024) {kname}({', '.join(params)}) {{"]
        k.append("  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {")
        k += pre
        k.append(f"    float* __restrict__ o = {ptr(step.out)} + r * inner;")
        if vec:
            k.append("    const int64_t n4 = inner / 4;")
            aligned = " && ".join(
                ["((r * inner) % 4 == 0)"] + [f"(((uintptr_t)q{i}) % 16 == 0)" for i in loads4.values()]
            )
            k.append(f"    if ({aligned}) {{")
            # PER_THREAD float4 per thread, all loads issued before any math: bytes in flight hide latency
            k.append("      const int64_t chunk = (int64_t)blockDim.x * PER_THREAD;")
            k.append(
                "      for (int64_t c0 = blockIdx.x * chunk; c0 < n4; c0 += (int64_t)gridDim.x * chunk) {"
            )
            for i in loads4.values():
                k.append(f"        float4 w{i}[PER_THREAD];")
            k.append("        #pragma unroll")
            k.append("        for (int u = 0; u < PER_THREAD; ++u) {")
            k.append("          const int64_t j4 = c0 + (int64_t)u * blockDim.x + threadIdx.x;")
            for i in loads4.values():
                k.append(f"          if (j4 < n4) w{i}[u] = reinterpret_cast<const float4*>(q{i})[j4];")
            k.append("        }")
            k.append("        #pragma unroll")
            k.append("        for (int u = 0; u < PER_THREAD; ++u) {")
            k.append("          const int64_t j4 = c0 + (int64_t)u * blockDim.x + threadIdx.x;")
            k.append("          if (j4 >= n4) break;")
            k.append("          float4 res;")
            for comp in "xyzw":
                lane_loads = {
                    leaf: (f"w{loads4[leaf]}[u].{comp}" if leaf in loads4 else loads[leaf]) for leaf in leaves
                }
                b2, r2 = emit(
                    g, step, Ref(step.root.name), lambda leaf, ll=lane_loads: ll[leaf], indent="          "
                )
                k.append("          {")
                k += b2
                k.append(f"          res.{comp} = {r2};")
                k.append("          }")
            k.append("          reinterpret_cast<float4*>(o)[j4] = res;")
            k.append("        }")
            k.append("      }")
            k.append(
                "      for (int64_t j = n4 * 4 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < inner;"
            )
            k.append("           j += (int64_t)gridDim.x * blockDim.x) {")
            k += body
            k.append(f"        o[j] = {result};")
            k.append("      }")
            k.append("      continue;")
            k.append("    }")
        k.append("    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < inner;")
        k.append("         j += (int64_t)gridDim.x * blockDim.x) {")
        k += body
        k.append(f"      o[j] = {result};")
        k.append("    }")
        k.append("  }")
        k.append("}")
        self.kernels.append("\n".join(k))
        out = [f"    const kf_shape S = {shp(step.out)};"]
        out.append(f"    const int64_t rows = kf_prod(&S, 0, {split}), inner = kf_prod(&S, {split}, S.nd);")
        args = ["rows", "inner", ptr(step.out)]
        for i, leaf in enumerate(leaves):
            out.append(f"    kf_rowmap m{i};")
            out.append(
                f"    if (!kf_rowmap_make({_leaf_shape(leaf)}, S, {split}, {modes[leaf]}, &m{i}))"
                " { rc = KF_ERR_UNSUPPORTED; goto kf_done; }"
            )
            args += [ptr(leaf.name), f"m{i}"]
        per = "4" if vec else "1"
        out.append(f"    const int64_t step = (int64_t)BLOCK * {per} * PER_THREAD;")
        out.append("    const int64_t need = (inner + step - 1) / step;")
        out.append("    const unsigned gx = (unsigned)(need < 65535 ? (need > 0 ? need : 1) : 65535);")
        out.append("    const unsigned gy = (unsigned)(rows < 65535 ? (rows > 0 ? rows : 1) : 65535);")
        out.append("    if (rows * inner > 0)")
        out.append(f"      {kname}<<<dim3(gx, gy), BLOCK, 0, st>>>({', '.join(args)});")
        out += self._launch_check()
        if step.out in self._fused_into:
            # computed by the reduction before it when that one ran the fused column kernel
            src, d1 = self._fused_into[step.out]
            guard = f"    if (kf_prod(&{shp(src)}, {d1}, {shp(src)}.nd) < 32) {{"
            out = [guard, *["  " + line for line in out], "    }"]
        return out

    # -- rows: loads for full / scalar leaves -------------------------------------------------------
    def _row_params(self, leaves: list[Leaf], index: str) -> tuple[list[str], list[str], list[str], dict]:
        params, args, pre, loads = [], [], [], {}
        for k, leaf in enumerate(leaves):
            ls = self.graph.shapes[leaf.name]
            n = 1
            for d in ls:
                n *= d
            params.append(f"const float* __restrict__ {ptr(leaf.name)}")
            args.append(ptr(leaf.name))
            if n == 1:
                pre.append(f"  const float c{k} = {ptr(leaf.name)}[0];")
                loads[leaf] = f"c{k}"
            else:
                loads[leaf] = f"{ptr(leaf.name)}[{index}]"
        return params, args, pre, loads

    def _full_leaves(self, leaves: list[Leaf]) -> list[tuple[int, Leaf]]:
        """The leaves read element by element along the row (index k as in `_row_params`)."""
        out = []
        for k, leaf in enumerate(leaves):
            n = 1
            for d in self.graph.shapes[leaf.name]:
                n *= d
            if n > 1:
                out.append((k, leaf))
        return out

    def _vec_ok(self, leaves: list[Leaf], also: tuple[str, ...] = ()) -> str:
        """Host-side condition for the float4 row paths: rows of 4k elements, operands 16-byte aligned."""
        ptrs = [ptr(leaf.name) for _, leaf in self._full_leaves(leaves)] + list(also)
        return " && ".join(["(R % 4 == 0)"] + [f"(((uintptr_t){p}) % 16 == 0)" for p in ptrs])

    def _vec_sweep(
        self,
        step: Step,
        src: Ref,
        leaves: list[Leaf],
        loads: dict,
        tid: str,
        group: str,
        stmt: Callable[[str], str],
        indent: str = "    ",
    ) -> list[str]:
        """Stream one row [0, R) at `base` as float4: PER_THREAD loads per thread in flight, then the math.

        `stmt(value)` is the statement consuming one element's value; the row length must be a multiple of 4.
        """
        full = self._full_leaves(leaves)
        i2 = indent + "  "

        def body(u: str) -> list[str]:
            lines: list[str] = []
            for comp in "xyzw":
                lane = dict(loads)
                for k, leaf in full:
                    lane[leaf] = f"w{k}[{u}].{comp}"
                b, v = self._emit(step, src, lane, i2 + "    ")
                lines += [f"{i2}  {{", *b, f"{i2}    {stmt(v)}", f"{i2}  }}"]
            return lines

        k = [f"{indent}const int64_t n4 = R >> 2;", f"{indent}int64_t j4 = {tid};"]
        k.append(f"{indent}for (; j4 + (int64_t)(PER_THREAD - 1) * {group} < n4;")
        k.append(f"{indent}     j4 += (int64_t)PER_THREAD * {group}) {{")
        for kk, _ in full:
            k.append(f"{i2}float4 w{kk}[PER_THREAD];")
        k.append(f"{i2}#pragma unroll")
        k.append(f"{i2}for (int u = 0; u < PER_THREAD; ++u) {{")
        for kk, leaf in full:
            k.append(
                f"{i2}  w{kk}[u] = reinterpret_cast<const float4*>({ptr(leaf.name)} + base)"
                f"[j4 + (int64_t)u * {group}];"
            )
        k.append(f"{i2}}}")
        k.append(f"{i2}#pragma unroll")
        k.append(f"{i2}for (int u = 0; u < PER_THREAD; ++u) {{")
        k += body("u")
        k.append(f"{i2}}}")
        k.append(f"{indent}}}")
        k.append(f"{indent}for (; j4 < n4; j4 += {group}) {{")
        for kk, leaf in full:
            k.append(
                f"{i2}const float4 w{kk}[1] = "
                f"{{reinterpret_cast<const float4*>({ptr(leaf.name)} + base)[j4]}};"
            )
        k += body("0")
        k.append(f"{indent}}}")
        return k

    def _emit(self, step: Step, src: Ref, loads: dict, indent: str) -> tuple[list[str], str]:
        return emit(self.graph, step, src, lambda leaf: loads[leaf], indent=indent)

    def _reduce_call(self, op_code: int, v: str) -> str:
        if self._lanes:
            return f"kf_warp_reduce<{op_code}>({v})"
        fn = "kf_block_reduce_tree" if self.variant.reduction == "block" else "kf_block_reduce_warp"
        return f"{fn}<{op_code}>({v}, kf_scratch)"

    def reduction(self, step: Step) -> list[str]:
        g = self.graph
        node = step.root
        src = node.args[0]
        assert isinstance(src, Ref)
        d0, d1, _ = reduce_range(node, len(g.shapes[src.name]))
        op = node.op
        leaves = step.prologue_leaves(g)
        kname = f"kf_step{self.counter}"
        init = {
            "sum": "0.0f",
            "mean": "0.0f",
            "logsumexp": "-INFINITY",
            "amax": "-INFINITY",
            "amin": "INFINITY",
        }[op]
        code = {"sum": 0, "mean": 0, "logsumexp": 1, "amax": 1, "amin": 2}[op]
        comb = f"kf_combine<{code}>"
        atomic = self.variant.reduction == "atomic" and op in ("sum", "mean")
        # rows kernel (inner == 1)
        params, args, pre, loads = self._row_params(leaves, "base + j")
        body, val = emit(g, step, src, lambda leaf: loads[leaf], indent="    ")
        vec = self.variant.vectorize and self.variant.fuse
        vec_param = ", int vec" if vec else ""
        k = [f"__global__ void {kname}_rows(int64_t outer, int64_t R, int splits{vec_param},"
             " float* __restrict__ out" + "".join(", " + p for p in params) + ") {"]  # fmt: skip
        k.append("  __shared__ float kf_scratch[1024 + 33];")
        k += pre
        k.append("  for (int64_t t = blockIdx.x; t < outer * splits; t += gridDim.x) {")
        k.append("    const int64_t o = t / splits, part = t % splits;")
        k.append("    const int64_t per = (R + splits - 1) / splits, lo = part * per;")
        k.append("    const int64_t hi = lo + per < R ? lo + per : R;")
        k.append("    const int64_t base = o * R;")
        k.append(f"    float acc = {init};")
        if vec:
            k.append("    if (vec && splits == 1) {")
            k += self._vec_sweep(
                step, src, leaves, loads, "threadIdx.x", "blockDim.x",
                lambda v: f"acc = {comb}(acc, {v});", indent="      ",
            )  # fmt: skip
            k.append("    } else {")
        k.append("    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {")
        k += ["  " + b for b in body]
        k.append(f"      acc = {comb}(acc, {val});")
        k.append("    }")
        if vec:
            k.append("    }")
        k.append(f"    acc = {self._reduce_call(code, 'acc')};")
        if op == "logsumexp":
            k.append("    float s = 0.0f;")
            k.append("    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {")
            k += ["  " + b for b in body]
            k.append(f"      s += expf({val} - acc);")
            k.append("    }")
            k.append(f"    s = {self._reduce_call(0, 's')};")
            k.append("    acc = acc + logf(s);")
        scale = " / (float)R" if op == "mean" else ""
        if atomic:
            k.append(f"    if (threadIdx.x == 0) atomicAdd(&out[o], acc{scale});")
        else:
            k.append(f"    if (threadIdx.x == 0) out[o] = acc{scale};")
        k.append("  }")
        k.append("}")
        warp_rows = self.variant.row_warps and not atomic
        if warp_rows:
            k.append(f"__global__ void __launch_bounds__(256) {kname}_wrows(int64_t outer,"
                     f" int64_t R{vec_param}, float* __restrict__ out"
                     + "".join(", " + p for p in params) + ") {")  # fmt: skip
            k += pre
            k.append("  const int lane = threadIdx.x & 31;")
            k.append("  const int64_t warps = blockDim.x >> 5;")
            k.append(
                "  for (int64_t o = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); o < outer;"
                " o += (int64_t)gridDim.x * warps) {"
            )
            k.append("    const int64_t base = o * R;")
            k.append(f"    float acc = {init};")
            if vec:
                k.append("    if (vec) {")
                k += self._vec_sweep(
                    step,
                    src,
                    leaves,
                    loads,
                    "lane",
                    "32",
                    lambda v: f"acc = {comb}(acc, {v});",
                    indent="      ",
                )
                k.append("    } else {")
            k.append("    for (int64_t j = lane; j < R; j += 32) {")
            k += ["  " + b for b in body]
            k.append(f"      acc = {comb}(acc, {val});")
            k.append("    }")
            if vec:
                k.append("    }")
            k.append(f"    acc = kf_warp_reduce<{code}>(acc);")
            if op == "logsumexp":
                k.append("    float s = 0.0f;")
                k.append("    for (int64_t j = lane; j < R; j += 32) {")
                k += ["  " + b for b in body]
                k.append(f"      s += expf({val} - acc);")
                k.append("    }")
                k.append("    s = kf_warp_reduce<0>(s);")
                k.append("    acc = acc + logf(s);")
            k.append(f"    if (lane == 0) out[o] = acc{' / (float)R' if op == 'mean' else ''};")
            k.append("  }")
            k.append("}")
        # columns kernel (inner > 1): one thread per output element, coalesced across the inner index
        params2, args2, pre2, loads2 = self._row_params(leaves, "(o * R + j) * inner + i")
        body2, val2 = emit(g, step, src, lambda leaf: loads2[leaf], indent="    ")
        k.append(f"__global__ void {kname}_cols(int64_t outer, int64_t R, int64_t inner, int splits,"
                 " float* __restrict__ out"
                 + "".join(", " + p for p in params2) + ") {")  # fmt: skip
        k += pre2
        k.append(
            "  for (int64_t tt = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; tt < outer * inner * splits;"
        )
        k.append("       tt += (int64_t)gridDim.x * blockDim.x) {")
        k.append("    const int64_t t = tt % (outer * inner), part = tt / (outer * inner);")
        k.append("    const int64_t o = t / inner, i = t % inner;")
        k.append("    const int64_t per = (R + splits - 1) / splits, lo = part * per;")
        k.append("    const int64_t hi = lo + per < R ? lo + per : R;")
        k.append(f"    float acc = {init};")
        k.append("    for (int64_t j = lo; j < hi; ++j) {")
        k += ["  " + b for b in body2]
        k.append(f"      acc = {comb}(acc, {val2});")
        k.append("    }")
        if op == "logsumexp":
            k.append("    float s = 0.0f;")
            k.append("    for (int64_t j = 0; j < R; ++j) {")
            k += ["  " + b for b in body2]
            k.append(f"      s += expf({val2} - acc);")
            k.append("    }")
            k.append("    acc = acc + logf(s);")
        if atomic:
            k.append(f"    atomicAdd(&out[t], acc{scale});")
        else:
            k.append(f"    out[t] = acc{scale};")
        k.append("  }")
        k.append("}")
        tiled = not atomic and op != "logsumexp"
        vcols = tiled and vec and self.variant.row_warps
        consumer = self._column_consumer(step, src, d0, d1) if tiled and self.variant.fuse else None
        if tiled:
            k += self._tiled_cols_kernel(kname, params2, pre2, body2, val2, init, comb, scale)
        if vcols:
            k += self._vec_cols_kernel(kname, step, src, leaves, params2, pre2, loads2, init, comb, scale)
        fused_args = ""
        if consumer is not None:
            k += self._fused_cols_kernel(kname, step, consumer, params2, pre2, body2, val2, init, comb, scale)
            if vec:
                k += self._fused_cols_kernel4(
                    kname, step, src, leaves, consumer, params2, pre2, loads2, init, comb, scale
                )
            self._fused_into[consumer.out] = (src.name, d1)
            fused_args = (
                ", " + ptr(consumer.out) + "".join(", " + x for x in self._consumer_args(step, consumer))
            )
        self.kernels.append("\n".join(k))
        a = "".join(", " + x for x in args)
        out = [
            f"    const kf_shape X = {shp(src.name)};",
            f"    const int64_t outer = kf_prod(&X, 0, {d0}), R = kf_prod(&X, {d0}, {d1}),"
            f" inner = kf_prod(&X, {d1}, X.nd);",
            "    if (inner == 1) {",
        ]
        if atomic:
            out.append(
                "      const int64_t sp = R / 65536 > 0 ? (R / 65536 < 256 ? R / 65536 : 256) : 1;\n"
                "      const int splits = (int)(outer >= 1024 ? 1 : sp);"
            )
            out.append(f"      cudaMemsetAsync({ptr(step.out)}, 0, sizeof(float) * outer, st);")
        else:
            out.append("      const int splits = 1;")
        out.append("      const int64_t nb = outer * splits < 65535 * 8 ? outer * splits : 65535 * 8;")
        varg = ""
        if vec:
            out.append(f"      const int vec = {self._vec_ok(leaves)};")
            varg = ", vec"
        launch = (
            f"      if (nb > 0) {kname}_rows<<<(unsigned)nb, ROW_BLOCK, 0, st>>>"
            f"(outer, R, splits{varg}, {ptr(step.out)}{a});"
        )
        if warp_rows:
            out.append("      if (R <= WARP_ROW_MAX) {")
            out.append("        const int64_t wb = (outer + 7) / 8;  /* 8 warps (rows) per block */")
            out.append("        const unsigned nbw = (unsigned)(wb < 65535 * 8 ? wb : 65535 * 8);")
            out.append(
                f"        if (outer > 0) {kname}_wrows<<<nbw, 256, 0, st>>>"
                f"(outer, R{varg}, {ptr(step.out)}{a});"
            )
            out.append("      } else {")
            out.append("  " + launch)
            out.append("      }")
        else:
            out.append(launch)
        out.append("    } else {")
        if atomic:
            out.append("      const int64_t cols = outer * inner, want = (int64_t)1 << 19;")
            out.append("      int64_t sp = cols >= want ? 1 : (want + cols - 1) / cols;")
            out.append("      sp = sp < R / 32 ? sp : (R / 32 > 0 ? R / 32 : 1);")
            out.append("      const int csplits = (int)sp;")
            out.append(f"      cudaMemsetAsync({ptr(step.out)}, 0, sizeof(float) * cols, st);")
        else:
            out.append("      const int csplits = 1;")
        a2 = "".join(", " + x for x in args2)
        if consumer is not None and vec:
            full = [
                ptr(leaf.name) for leaf in self._consumer_leaves(step, consumer) if not self._is_scalar(leaf)
            ]
            ok = self._vec_ok(leaves, (ptr(step.out), ptr(consumer.out), *full))
            out.append(f"      if (inner >= 32 && {ok.replace('(R % 4 == 0)', '(inner % 4 == 0)')}) {{")
            out.append("        const int64_t tb = outer * ((inner / 4 + 31) / 32);")
            out.append(
                f"        {kname}_fcols4<<<(unsigned)(tb < 65535 * 8 ? tb : 65535 * 8), 256, 0, st>>>"
                f"(outer, R, inner, {ptr(step.out)}{a2}{fused_args});"
            )
            out.append("      } else")
        if consumer is not None:
            out.append("      if (inner >= 32) {  /* the reduction and its broadcast consumer in one pass */")
            out.append("        const int64_t tb = outer * ((inner + 31) / 32);")
            out.append(
                f"        {kname}_fcols<<<(unsigned)(tb < 65535 * 8 ? tb : 65535 * 8), 256, 0, st>>>"
                f"(outer, R, inner, {ptr(step.out)}{a2}{fused_args});"
            )
            out.append("      } else")
        if vcols:
            # enough columns for a full GPU: one thread per 4 columns, float4 rows, no shared memory
            ok = self._vec_ok(leaves, (ptr(step.out),)).replace("(R % 4 == 0)", "(inner % 4 == 0)")
            out.append(f"      if ({ok} && outer * (inner / 4) >= 132 * 1024) {{")
            out.append("        const int64_t nv = (outer * (inner / 4) + 255) / 256;")
            out.append(
                f"        {kname}_vcols<<<(unsigned)(nv < 65535 * 8 ? nv : 65535 * 8), 256, 0, st>>>"
                f"(outer, R, inner, {ptr(step.out)}{a2});"
            )
            out.append("      } else")
        if tiled:
            out.append("      if (inner >= 32) {  /* 32 columns x 8 row groups per block, coalesced rows */")
            out.append("        const int64_t tb = outer * ((inner + 31) / 32);")
            out.append(
                f"        {kname}_tcols<<<(unsigned)(tb < 65535 * 8 ? tb : 65535 * 8), 256, 0, st>>>"
                f"(outer, R, inner, {ptr(step.out)}{a2});"
            )
            out.append("      } else {")
        out.append("      const int64_t nb = (outer * inner * csplits + BLOCK - 1) / BLOCK;")
        out.append(
            f"      if (nb > 0) {kname}_cols<<<(unsigned)(nb < 65535 * 8 ? nb : 65535 * 8), BLOCK, 0, st>>>"
            f"(outer, R, inner, csplits, {ptr(step.out)}{a2});"
        )
        if tiled:
            out.append("      }")
        out.append("    }")
        return out + self._launch_check()

    def _tiled_cols_kernel(
        self, kname: str, params: list[str], pre: list[str], body: list[str], val: str, init: str,
        comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """Middle-dim reduction, one block per (outer, 32 columns): 8 row groups of one warp each read
        128-byte row segments; each thread combines runs of 32 rows before its total (bounded rounding),
        then the 8 partials meet in shared memory."""
        k = [f"__global__ void __launch_bounds__(256) {kname}_tcols(int64_t outer, int64_t R, int64_t inner,"
             " float* __restrict__ out" + "".join(", " + p for p in params) + ") {"]  # fmt: skip
        k.append("  __shared__ float kf_part[8][33];")
        k += pre
        k.append("  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;")
        k.append("  const int64_t tiles = (inner + 31) / 32;")
        k.append("  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {")
        k.append("    const int64_t o = b / tiles, i = (b % tiles) * 32 + tx;")
        k.append(f"    float acc = {init};")
        k.append("    if (i < inner) {")
        k.append("      for (int64_t j0 = ty; j0 < R; j0 += 8 * 32) {")
        k.append("        const int64_t j1 = j0 + 8 * 32 < R ? j0 + 8 * 32 : R;")
        k.append(f"        float part = {init};")
        k.append("        #pragma unroll 8")
        k.append("        for (int64_t j = j0; j < j1; j += 8) {")
        k += ["    " + b for b in body]
        k.append(f"          part = {comb}(part, {val});")
        k.append("        }")
        k.append(f"        acc = {comb}(acc, part);")
        k.append("      }")
        k.append("    }")
        k.append("    kf_part[ty][tx] = acc;")
        k.append("    __syncthreads();")
        k.append("    if (ty == 0) {")
        k.append("      float r = kf_part[0][tx];")
        k.append(f"      for (int y = 1; y < 8; ++y) r = {comb}(r, kf_part[y][tx]);")
        k.append(f"      if (i < inner) out[o * inner + i] = r{scale};")
        k.append("    }")
        k.append("    __syncthreads();")
        k.append("  }")
        k.append("}")
        return k

    def _column_consumer(self, step: Step, src: Ref, d0: int, d1: int) -> Step | None:
        """The next step when it is a pointwise map over the reduction's input that reads the reduction
        result broadcast over the reduced dims (x / rms, x - mean): then both run as one kernel."""
        g = self.graph
        i = next((n for n, s in enumerate(self._steps) if s is step), None)
        if i is None or i + 1 >= len(self._steps):
            return None
        nxt = self._steps[i + 1]
        xshape = tuple(g.shapes[src.name])
        keep = tuple(1 if d0 <= n < d1 else d for n, d in enumerate(xshape))
        if nxt.kind != "pointwise" or tuple(g.shapes[nxt.out]) != xshape or src.trail != 0:
            return None
        reads_result = False
        for leaf in nxt.prologue_leaves(g):
            shape = tuple(g.shapes[leaf.name])
            if leaf.name == step.out:
                if leaf.trail != 0 or shape != keep:
                    return None
                reads_result = True
            elif not (_numel_of(shape) == 1 or (leaf.trail == 0 and shape == xshape)):
                return None
        return nxt if reads_result else None

    def _consumer_leaves(self, step: Step, consumer: Step) -> list[Leaf]:
        """The consumer's operands that the reduction kernel does not already take."""
        taken = {leaf.name for leaf in step.prologue_leaves(self.graph)} | {step.out}
        return [leaf for leaf in consumer.prologue_leaves(self.graph) if leaf.name not in taken]

    def _consumer_args(self, step: Step, consumer: Step) -> list[str]:
        return [ptr(leaf.name) for leaf in self._consumer_leaves(step, consumer)]

    def _is_scalar(self, leaf: Leaf) -> bool:
        return _numel_of(tuple(self.graph.shapes[leaf.name])) == 1

    def _fused_cols_kernel4(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], consumer: Step, params: list[str],
        pre: list[str], loads: dict, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """`_fused_cols_kernel` over float4 columns (inner a multiple of 4, operands 16-byte aligned):
        a warp moves 512 contiguous bytes per row instead of 128."""
        g = self.graph
        extra = self._consumer_leaves(step, consumer)
        full = self._full_leaves(leaves)
        cparams = [f"float* __restrict__ {ptr(consumer.out)}"]
        cparams += [f"const float* __restrict__ {ptr(leaf.name)}" for leaf in extra]
        k = [f"__global__ void __launch_bounds__(256) {kname}_fcols4(int64_t outer, int64_t R, int64_t inner,"
             " float* __restrict__ out" + "".join(", " + p for p in params + cparams) + ") {"]  # fmt: skip
        k.append("  __shared__ float4 kf_part4[8][32];")
        k += pre
        cloads: dict = {}
        cfull: list[tuple[int, Leaf]] = []
        for n, leaf in enumerate(consumer.prologue_leaves(g)):
            if leaf.name == step.out:
                cloads[leaf] = "red4.{c}"
            elif self._is_scalar(leaf):
                k.append(f"  const float pc{n} = {ptr(leaf.name)}[0];")
                cloads[leaf] = f"pc{n}"
            else:
                cfull.append((n, leaf))
                cloads[leaf] = f"p{n}.{{c}}"
        i4 = f"make_float4({init}, {init}, {init}, {init})"
        k.append("  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;")
        k.append("  const int64_t q = inner / 4, tiles = (q + 31) / 32;")
        k.append("  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {")
        k.append("    const int64_t o = b / tiles, i4 = (b % tiles) * 32 + tx;")
        k.append(f"    float4 acc = {i4};")
        k.append("    if (i4 < q) {")
        k.append("      for (int64_t j0 = ty; j0 < R; j0 += 8 * 32) {")
        k.append("        const int64_t j1 = j0 + 8 * 32 < R ? j0 + 8 * 32 : R;")
        k.append(f"        float4 part = {i4};")
        k.append("        #pragma unroll 8")
        k.append("        for (int64_t j = j0; j < j1; j += 8) {")
        for kk, leaf in full:
            k.append(
                f"          const float4 w{kk} = reinterpret_cast<const float4*>({ptr(leaf.name)}"
                " + (o * R + j) * inner)[i4];"
            )
        for comp in "xyzw":
            lane = dict(loads)
            for kk, leaf in full:
                lane[leaf] = f"w{kk}.{comp}"
            b, v = self._emit(step, src, lane, "            ")
            k += ["          {", *b, f"            part.{comp} = {comb}(part.{comp}, {v});", "          }"]
        k.append("        }")
        k += [f"        acc.{c} = {comb}(acc.{c}, part.{c});" for c in "xyzw"]
        k.append("      }")
        k.append("    }")
        k.append("    kf_part4[ty][tx] = acc;")
        k.append("    __syncthreads();")
        k.append("    if (ty == 0) {")
        k.append("      float4 r = kf_part4[0][tx];")
        k.append("      for (int y = 1; y < 8; ++y) {")
        k += [f"        r.{c} = {comb}(r.{c}, kf_part4[y][tx].{c});" for c in "xyzw"]
        k.append("      }")
        if scale:
            k += [f"      r.{c} = r.{c}{scale};" for c in "xyzw"]
        k.append("      kf_part4[0][tx] = r;")
        k.append("      if (i4 < q) reinterpret_cast<float4*>(out + o * inner)[i4] = r;")
        k.append("    }")
        k.append("    __syncthreads();")
        k.append("    const float4 red4 = kf_part4[0][tx];")
        rows: list[str] = []
        for comp in "xyzw":
            lane = {leaf: text.replace("{c}", comp) for leaf, text in cloads.items()}
            b, v = emit(
                g, consumer, Ref(consumer.root.name), lambda leaf, ll=lane: ll[leaf], indent="          "
            )
            varying = [f"p{n}." for n, _ in cfull]
            hoisted, b, v = hoist_column_invariants(b, v, varying, f"_{comp}", "    ")
            k += hoisted
            rows += ["        {", *b, f"          res.{comp} = {v};", "        }"]
        k.append("    if (i4 < q) {")
        k.append("      #pragma unroll 8")
        k.append("      for (int64_t j = ty; j < R; j += 8) {")
        for n, leaf in cfull:
            k.append(
                f"        const float4 p{n} = reinterpret_cast<const float4*>({ptr(leaf.name)}"
                " + (o * R + j) * inner)[i4];"
            )
        k.append("        float4 res;")
        k += rows
        k.append(f"        reinterpret_cast<float4*>({ptr(consumer.out)} + (o * R + j) * inner)[i4] = res;")
        k.append("      }")
        k.append("    }")
        k.append("    __syncthreads();")
        k.append("  }")
        k.append("}")
        return k

    def _fused_cols_kernel(
        self, kname: str, step: Step, consumer: Step, params: list[str], pre: list[str], body: list[str],
        val: str, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """`_tiled_cols_kernel` whose block then applies the consumer to its 32-column tile while that
        tile is still in L1: the input is read from DRAM once and the consumer's output written once."""
        g = self.graph
        extra = self._consumer_leaves(step, consumer)
        loads: dict = {}
        pre2: list[str] = []
        for k, leaf in enumerate(consumer.prologue_leaves(g)):
            if leaf.name == step.out:
                loads[leaf] = "red"
            elif _numel_of(tuple(g.shapes[leaf.name])) == 1:
                pre2.append(f"  const float pc{k} = {ptr(leaf.name)}[0];")
                loads[leaf] = f"pc{k}"
            else:
                loads[leaf] = f"{ptr(leaf.name)}[(o * R + j) * inner + i]"
        pbody, pval = emit(g, consumer, Ref(consumer.root.name), lambda leaf: loads[leaf], indent="        ")
        cparams = [f"float* __restrict__ {ptr(consumer.out)}"]
        cparams += [f"const float* __restrict__ {ptr(leaf.name)}" for leaf in extra]
        k = [f"__global__ void __launch_bounds__(256) {kname}_fcols(int64_t outer, int64_t R, int64_t inner,"
             " float* __restrict__ out" + "".join(", " + p for p in params + cparams) + ") {"]  # fmt: skip
        k.append("  __shared__ float kf_part[8][33];")
        k += pre + pre2
        k.append("  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;")
        k.append("  const int64_t tiles = (inner + 31) / 32;")
        k.append("  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {")
        k.append("    const int64_t o = b / tiles, i = (b % tiles) * 32 + tx;")
        k.append(f"    float acc = {init};")
        k.append("    if (i < inner) {")
        k.append("      for (int64_t j0 = ty; j0 < R; j0 += 8 * 32) {")
        k.append("        const int64_t j1 = j0 + 8 * 32 < R ? j0 + 8 * 32 : R;")
        k.append(f"        float part = {init};")
        k.append("        #pragma unroll 8")
        k.append("        for (int64_t j = j0; j < j1; j += 8) {")
        k += ["    " + b for b in body]
        k.append(f"          part = {comb}(part, {val});")
        k.append("        }")
        k.append(f"        acc = {comb}(acc, part);")
        k.append("      }")
        k.append("    }")
        k.append("    kf_part[ty][tx] = acc;")
        k.append("    __syncthreads();")
        k.append("    if (ty == 0) {")
        k.append("      float r = kf_part[0][tx];")
        k.append(f"      for (int y = 1; y < 8; ++y) r = {comb}(r, kf_part[y][tx]);")
        k.append(f"      r = r{scale};")
        k.append("      kf_part[0][tx] = r;")
        k.append("      if (i < inner) out[o * inner + i] = r;")
        k.append("    }")
        k.append("    __syncthreads();")
        k.append("    const float red = kf_part[0][tx];")
        varying = [text for text in loads.values() if "(o * R + j)" in text]
        hoisted, pbody, pval = hoist_column_invariants(pbody, pval, varying, "", "    ")
        k += hoisted
        k.append("    if (i < inner) {")
        k.append("      #pragma unroll 8")
        k.append("      for (int64_t j = ty; j < R; j += 8) {")
        k += pbody
        k.append(f"        {ptr(consumer.out)}[(o * R + j) * inner + i] = {pval};")
        k.append("      }")
        k.append("    }")
        k.append("    __syncthreads();")
        k.append("  }")
        k.append("}")
        return k

    def _vec_cols_kernel(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], params: list[str], pre: list[str],
        loads: dict, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """Middle-dim reduction over wide rows: one thread per 4 adjacent columns, float4 loads of each
        reduced row (8 in flight), runs of 32 rows combined before the total (bounded rounding)."""
        full = self._full_leaves(leaves)
        k = [f"__global__ void __launch_bounds__(256) {kname}_vcols(int64_t outer, int64_t R, int64_t inner,"
             " float* __restrict__ out" + "".join(", " + p for p in params) + ") {"]  # fmt: skip
        k += pre
        k.append("  const int64_t q = inner / 4;")
        k.append(
            "  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * q;"
            " t += (int64_t)gridDim.x * blockDim.x) {"
        )
        k.append("    const int64_t o = t / q, i4 = t % q;")
        k.append(f"    float4 acc = make_float4({init}, {init}, {init}, {init});")
        k.append("    for (int64_t j0 = 0; j0 < R; j0 += 32) {")
        k.append("      const int64_t j1 = j0 + 32 < R ? j0 + 32 : R;")
        k.append(f"      float4 part = make_float4({init}, {init}, {init}, {init});")
        k.append("      #pragma unroll 8")
        k.append("      for (int64_t j = j0; j < j1; ++j) {")
        for kk, leaf in full:
            k.append(
                f"        const float4 w{kk} = reinterpret_cast<const float4*>({ptr(leaf.name)}"
                " + (o * R + j) * inner)[i4];"
            )
        for comp in "xyzw":
            lane = dict(loads)
            for kk, leaf in full:
                lane[leaf] = f"w{kk}.{comp}"
            b, v = self._emit(step, src, lane, "          ")
            k += ["        {", *b, f"          part.{comp} = {comb}(part.{comp}, {v});", "        }"]
        k.append("      }")
        for comp in "xyzw":
            k.append(f"      acc.{comp} = {comb}(acc.{comp}, part.{comp});")
        k.append("    }")
        if scale:
            k.append("    acc.x = acc.x / (float)R; acc.y = acc.y / (float)R;")
            k.append("    acc.z = acc.z / (float)R; acc.w = acc.w / (float)R;")
        k.append("    reinterpret_cast<float4*>(out + o * inner)[i4] = acc;")
        k.append("  }")
        k.append("}")
        return k

    # -- rowops --------------------------------------------------------------------------------------
    def rowop(self, step: Step) -> list[str]:
        g = self.graph
        node = step.root
        src = node.args[0]
        assert isinstance(src, Ref)
        xshape = g.shapes[src.name]
        d0, d1, _ = reduce_range(node, len(xshape))
        if node.op in ("softmax", "log_softmax") and d1 != len(xshape):
            raise UnsupportedGraph(f"`{node.name}` normalises dimension {d0}, not the last one")
        kname = f"kf_step{self.counter}"
        pro, epi = step.prologue_leaves(g), step.epilogue_leaves(g)
        leaves = list(dict.fromkeys(pro + epi))
        params, args, pre, loads = self._row_params(leaves, "base + j")
        extras = [a for a in node.args[1:] if isinstance(a, Ref)]
        for e in extras:
            params.append(f"const float* __restrict__ {ptr(e.name)}")
            args.append(ptr(e.name))
        xb, xv = emit(g, step, src, lambda leaf: loads[leaf], indent="        ")
        self._eps = float(node.attrs.get("eps", 1e-5))
        value = self._row_value(node, extras)
        epilogue: list[str] = []
        result = "y"
        if step.epilogue:
            epilogue, result = emit(
                g, step, Ref(step.out), lambda leaf: loads[leaf], root_var="y", indent="        "
            )
        signature = (
            "(int64_t outer, int64_t R, int64_t G, int64_t C, int64_t HW, float* __restrict__ out"
            + "".join(", " + p for p in params)
            + ")"
        )
        self.kernels.append(
            self._row_kernel_global(kname, signature, pre, xb, xv, value, epilogue, result, node.op)
        )
        if self.variant.cache_rows:
            self.kernels.append(
                self._row_kernel_regs(kname, signature, pre, xb, xv, value, epilogue, result, node.op)
            )
        if self.variant.row_warps:
            self.kernels.append(
                self._row_kernel_warp(kname, signature, pre, xb, xv, value, epilogue, result, node.op)
            )
        vec = (
            self.variant.vectorize
            and self.variant.fuse
            and (self.variant.cache_rows or self.variant.row_warps)
        )
        if vec:
            for warp in (True, False) if self.variant.row_warps else (False,):
                if not warp and not self.variant.cache_rows:
                    continue
                self.kernels.append(
                    self._row_kernel_vec(
                        kname,
                        signature,
                        pre,
                        step,
                        src,
                        leaves,
                        loads,
                        value,
                        epilogue,
                        result,
                        node.op,
                        warp,
                    )
                )
        out = [f"    const kf_shape X = {shp(src.name)};"]
        if node.op == "group_norm":
            groups = int(node.attrs["num_groups"])
            out.append(f"    const int64_t G = {groups}, C = X.d[1], HW = kf_prod(&X, 2, X.nd);")
            out.append("    if (C % G != 0) { rc = KF_ERR_BAD_ARGUMENTS; goto kf_done; }")
            out.append("    const int64_t outer = X.d[0] * G, R = (C / G) * HW;")
            out.append("    if (R >= ((int64_t)1 << 31)) { rc = KF_ERR_UNSUPPORTED; goto kf_done; }")
        else:
            out.append(
                f"    const int64_t G = 1, C = 1, HW = 1, outer = kf_prod(&X, 0, {d0}),"
                f" R = kf_prod(&X, {d0}, X.nd);"
            )
        a = f"(outer, R, G, C, HW, {ptr(step.out)}{''.join(', ' + x for x in args)})"
        out.append("    const unsigned nb = (unsigned)(outer < 65535 * 8 ? outer : 65535 * 8);")
        out.append("    const int64_t per = (R + ROW_BLOCK - 1) / ROW_BLOCK;")
        if self.variant.row_warps:
            out.append("    const int64_t wb = (outer + 7) / 8;  /* 8 warps (rows) per block */")
            out.append("    const unsigned nbw = (unsigned)(wb < 65535 * 8 ? wb : 65535 * 8);")
        if vec:
            out.append(f"    const int vec = {self._vec_ok(leaves, (ptr(step.out),))};")
        out.append("    if (outer <= 0) {")
        if vec and self.variant.row_warps:
            # short rows: one warp per row, the row in registers as float4 (up to 16 per lane)
            for v in (1, 2, 4, 8, 16):
                out.append(f"    }} else if (vec && R <= WARP_ROW_MAX && R <= {128 * v}) {{")
                out.append(f"      {kname}_vwarp<{v}><<<nbw, 256, 0, st>>>{a};")
        if vec and self.variant.cache_rows:
            for v in (1, 2, 4, 8, 16):
                out.append(f"    }} else if (vec && R <= {4 * v} * (int64_t)ROW_BLOCK) {{")
                out.append(f"      {kname}_vregs<{v}><<<nb, ROW_BLOCK, 0, st>>>{a};")
        if self.variant.row_warps:
            out.append("    } else if (R <= WARP_ROW_MAX) {")
            out.append(f"      {kname}_warp<<<nbw, 256, 0, st>>>{a};")
        if self.variant.cache_rows:
            for pt in (1, 2, 4, 8, 16, 32):
                out.append(f"    }} else if (per <= {pt}) {{")
                out.append(f"      {kname}_regs<{pt}><<<nb, ROW_BLOCK, 0, st>>>{a};")
        out.append("    } else {")
        out.append(f"      {kname}<<<nb, ROW_BLOCK, 0, st>>>{a};")
        out.append("    }")
        return out + self._launch_check()

    def _row_value(self, node: OpNode, extras: list[Ref]) -> str:
        """The normalised value `y` of element j from `xv` and the row statistics."""
        if node.op == "softmax":
            return "kf_exp(xv - m) * inv"
        if node.op == "log_softmax":
            return "(xv - m - ls)"
        value = "((xv - mean) * rstd)"
        w = ptr(extras[0].name) if node.attrs.get("has_weight") else None
        b = ptr(extras[1].name) if node.attrs.get("has_bias") and len(extras) > 1 else None
        # 32-bit division: the host side refuses rows of 2^31 elements or more
        idx = (
            "j" if node.op == "layer_norm" else "((o % G) * (C / G) + (int64_t)((uint32_t)j / (uint32_t)HW))"
        )
        if w:
            value = f"({value} * {w}[{idx}])"
        if b:
            value = f"({value} + {b}[{idx}])"
        return value

    def _stats(self, op: str, eps: str, sweep: Callable[[str], list[str]], online: bool) -> list[str]:
        """Row statistics: m, inv, ls (softmax family) or mean, rstd (norms); `sweep(stmt)` loops over xv."""
        k: list[str] = []
        if op in ("softmax", "log_softmax"):
            k.append("    float m = -INFINITY, s = 0.0f;")
            if online:
                k += sweep(
                    "{ const float m_new = fmaxf(m, xv); s = s * kf_exp(m - m_new) + kf_exp(xv - m_new);"
                    " m = m_new; }"
                )
                k.append("    const float bm = " + self._reduce_call(1, "m") + ";")
                k.append("    s = (m == -INFINITY) ? 0.0f : s * kf_exp(m - bm);")
                k.append("    s = " + self._reduce_call(0, "s") + ";")
                k.append("    m = bm;")
            else:
                k += sweep("m = fmaxf(m, xv);")
                k.append("    m = " + self._reduce_call(1, "m") + ";")
                k += sweep("s += kf_exp(xv - m);")
                k.append("    s = " + self._reduce_call(0, "s") + ";")
            k.append("    const float inv = 1.0f / s, ls = logf(s);")
            k.append("    (void)inv; (void)ls;")
        else:
            k.append("    float mean = 0.0f, var = 0.0f;")
            k += sweep("mean += xv;")
            k.append("    mean = " + self._reduce_call(0, "mean") + " / (float)R;")
            k += sweep("var += (xv - mean) * (xv - mean);")
            k.append("    var = " + self._reduce_call(0, "var") + " / (float)R;")
            k.append(f"    const float rstd = rsqrtf(var + {eps});")
        return k

    def _row_kernel_global(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str,
    ) -> str:  # fmt: skip
        """One block per row, every pass re-reads the row from global memory (L2 catches most of it)."""

        def sweep(stmt: str) -> list[str]:
            return [
                "    for (int64_t j = threadIdx.x; j < R; j += blockDim.x) {",
                *xb,
                f"        const float xv = {xv};",
                f"        {stmt}",
                "    }",
            ]

        eps = literal(float(self._eps))
        k = [
            f"__global__ void __launch_bounds__(1024) {kname}{signature} {{",
            "  __shared__ float kf_scratch[1024 + 33];",
        ]
        k += pre
        k.append("  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {")
        k.append("    const int64_t base = o * R;")
        k += self._stats(op, eps, sweep, self.variant.online)
        k += sweep(
            "const float y = " + value + ";\n" + "\n".join(epilogue) + f"\n        out[base + j] = {result};"
        )
        k += ["  }", "}"]
        return "\n".join(k)

    def _row_kernel_warp(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str,
    ) -> str:  # fmt: skip
        """One warp per row (rows up to WARP_ROW_MAX): lane-strided sweeps, shuffle-only reductions."""

        def sweep(stmt: str) -> list[str]:
            return [
                "    for (int64_t j = lane; j < R; j += 32) {",
                *xb,
                f"        const float xv = {xv};",
                f"        {stmt}",
                "    }",
            ]

        eps = literal(float(self._eps))
        k = [f"__global__ void __launch_bounds__(256) {kname}_warp{signature} {{"]
        k += pre
        k.append("  const int lane = threadIdx.x & 31;")
        k.append("  const int64_t warps = blockDim.x >> 5;")
        k.append(
            "  for (int64_t o = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); o < outer;"
            " o += (int64_t)gridDim.x * warps) {"
        )
        k.append("    const int64_t base = o * R;")
        self._lanes = True
        try:
            k += self._stats(op, eps, sweep, self.variant.online)
        finally:
            self._lanes = False
        k += sweep(
            "const float y = " + value + ";\n" + "\n".join(epilogue) + f"\n        out[base + j] = {result};"
        )
        k += ["  }", "}"]
        return "\n".join(k)

    def _row_kernel_vec(
        self, kname: str, signature: str, pre: list[str], step: Step, src: Ref, leaves: list[Leaf],
        loads: dict, value: str, epilogue: list[str], result: str, op: str, warp: bool,
    ) -> str:  # fmt: skip
        """The row in registers as float4 (V per thread): one 16-byte read and write per 4 elements.

        `warp`: one warp per row (shuffle-only statistics); else one block of ROW_BLOCK threads per row.
        """
        used: set = set()

        def record(leaf: Leaf) -> str:
            used.add(leaf)
            return loads[leaf]

        emit(self.graph, step, src, record, indent="")
        full = [(k, leaf) for k, leaf in self._full_leaves(leaves) if leaf in used]
        neutral = "-INFINITY" if op in ("softmax", "log_softmax") else "0.0f"
        tid, group = ("lane", "32") if warp else ("threadIdx.x", "blockDim.x")

        def sweep(stmt: str) -> list[str]:
            return [
                "    #pragma unroll",
                "    for (int i = 0; i < V; ++i) {",
                "      #pragma unroll",
                "      for (int c = 0; c < 4; ++c) {",
                f"        const int64_t j = ({tid} + (int64_t)i * {group}) * 4 + c;",
                "        if (j < R) {",
                "          const float xv = xr[4 * i + c];",
                f"          {stmt}",
                "        }",
                "      }",
                "    }",
            ]

        name = f"{kname}_vwarp" if warp else f"{kname}_vregs"
        bound = "256" if warp else "ROW_BLOCK"
        k = ["template <int V>", f"__global__ void __launch_bounds__({bound}) {name}{signature} {{"]
        if not warp:
            k.append("  __shared__ float kf_scratch[1024 + 33];")
        k += pre
        if warp:
            k.append("  const int lane = threadIdx.x & 31;")
            k.append("  const int64_t warps = blockDim.x >> 5;")
            k.append(
                "  for (int64_t o = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); o < outer;"
                " o += (int64_t)gridDim.x * warps) {"
            )
        else:
            k.append("  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {")
        k.append("    const int64_t base = o * R;")
        k.append("    float xr[4 * V];")
        k.append("    #pragma unroll")
        k.append("    for (int i = 0; i < V; ++i) {")
        k.append(f"      const int64_t j4 = {tid} + (int64_t)i * {group};")
        k.append("      if (j4 * 4 < R) {")
        for kk, leaf in full:
            k.append(
                f"        const float4 w{kk} = reinterpret_cast<const float4*>({ptr(leaf.name)} + base)[j4];"
            )
        for c, comp in enumerate("xyzw"):
            lane = dict(loads)
            for kk, leaf in full:
                lane[leaf] = f"w{kk}.{comp}"
            b, v = self._emit(step, src, lane, "          ")
            k += ["        {", f"          const int64_t j = j4 * 4 + {c};", "          (void)j;", *b]
            k += [f"          xr[4 * i + {c}] = {v};", "        }"]
        k.append("      } else {")
        k.append(f"        xr[4 * i] = xr[4 * i + 1] = xr[4 * i + 2] = xr[4 * i + 3] = {neutral};")
        k.append("      }")
        k.append("    }")
        eps = literal(float(self._eps))
        self._lanes = warp
        try:
            k += self._stats(op, eps, sweep, self.variant.online)
        finally:
            self._lanes = False
        k.append("    #pragma unroll")
        k.append("    for (int i = 0; i < V; ++i) {")
        k.append(f"      const int64_t j4 = {tid} + (int64_t)i * {group};")
        k.append("      if (j4 * 4 < R) {")
        k.append("        float4 res;")
        for c, comp in enumerate("xyzw"):
            k += [
                "        {",
                f"          const int64_t j = j4 * 4 + {c};",
                f"          const float xv = xr[4 * i + {c}];",
            ]
            k.append(f"          const float y = {value};")
            k += epilogue
            k += [f"          res.{comp} = {result};", "        }"]
        k.append("        reinterpret_cast<float4*>(out + base)[j4] = res;")
        k.append("      }")
        k.append("    }")
        k += ["  }", "}"]
        return "\n".join(k)

    def _row_kernel_regs(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str,
    ) -> str:  # fmt: skip
        """Rows of up to PT * blockDim.x elements held in registers: one read and one write of DRAM."""
        neutral = "-INFINITY" if op in ("softmax", "log_softmax") else "0.0f"

        def sweep(stmt: str) -> list[str]:
            return [
                "    #pragma unroll",
                "    for (int i = 0; i < PT; ++i) {",
                "      const int64_t j = threadIdx.x + (int64_t)i * blockDim.x;",
                "      if (j < R) {",
                "        const float xv = xr[i];",
                f"        {stmt}",
                "      }",
                "    }",
            ]

        eps = literal(float(self._eps))
        k = ["template <int PT>", f"__global__ void __launch_bounds__(ROW_BLOCK) {kname}_regs{signature} {{"]
        k.append("  __shared__ float kf_scratch[1024 + 33];")
        k += pre
        k.append("  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {")
        k.append("    const int64_t base = o * R;")
        k.append("    float xr[PT];")
        k.append("    #pragma unroll")
        k.append("    for (int i = 0; i < PT; ++i) {")
        k.append("      const int64_t j = threadIdx.x + (int64_t)i * blockDim.x;")
        k.append(f"      xr[i] = {neutral};")
        k.append("      if (j < R) {")
        k += xb
        k.append(f"        xr[i] = {xv};")
        k.append("      }")
        k.append("    }")
        k += self._stats(op, eps, sweep, self.variant.online)
        k += sweep(
            "const float y = " + value + ";\n" + "\n".join(epilogue) + f"\n        out[base + j] = {result};"
        )
        k += ["  }", "}"]
        return "\n".join(k)


def _numel_of(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


_DEFINITION = re.compile(r"^\s*const float (v_\w+) = (.*);$")
_NAME = re.compile(r"\bv_\w+")


def hoist_column_invariants(
    body: list[str], value: str, varying: list[str], suffix: str, indent: str
) -> tuple[list[str], list[str], str]:
    """Split a consumer's per-element statements into those that depend only on the column (the reduced
    value, scalars: computed once, before the row loop, named with `suffix`) and those that read the row.
    A row value divided by a column invariant becomes a product with its reciprocal, computed once.

    `varying` are the substrings that mark a row-dependent load. Returns (hoisted, body, value).
    """
    invariant: dict[str, str] = {}
    moving: set[str] = set()
    hoisted: list[str] = []
    rest: list[str] = []
    for line in body:
        m = _DEFINITION.match(line)
        if m is None:
            rest.append(line)
            continue
        name, expr = m.groups()
        uses = set(_NAME.findall(expr))
        if any(v in expr for v in varying) or uses & moving:
            moving.add(name)
            rest.append(line)
        else:
            invariant[name] = name + suffix
            hoisted.append(f"{indent}const float {name + suffix} = {expr};")

    def rename(text: str) -> str:
        return _NAME.sub(lambda m: invariant.get(m.group(0), m.group(0)), text)

    hoisted = [rename(line) for line in hoisted]
    rest, value = [rename(line) for line in rest], rename(value)
    reciprocals: dict[str, str] = {}

    def by_reciprocal(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in invariant.values():
            return m.group(0)
        reciprocals.setdefault(name, f"{name}_inv")
        return f"* {reciprocals[name]})"

    divide = re.compile(r"/ (v_\w+)\)")
    rest, value = [divide.sub(by_reciprocal, line) for line in rest], divide.sub(by_reciprocal, value)
    hoisted += [f"{indent}const float {inv} = 1.0f / {name};" for name, inv in reciprocals.items()]
    return hoisted, rest, value

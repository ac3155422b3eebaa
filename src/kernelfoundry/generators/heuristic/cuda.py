"""CUDA emitter: one .cu unit per candidate, one host entry point per part launching one kernel per step.

Pointwise steps: 2-D grid-stride kernels over rows x inner (blockIdx.y strides rows, so a broadcast
operand's offset is computed once per row), float4 loads/stores when Variant.vectorize and the operands
allow (a row that starts off 16 bytes peels its head). Reductions over the last dims and rowops: one
block per row, block reduction by warp shuffles (Variant.reduction "warp"), a shared-memory tree with
__syncthreads ("block"), or, for sums, row splits combined with atomicAdd ("atomic"); rows of any length
stream float4 from their first 16-byte boundary, and a reduction over rows runs its broadcast consumer
in the same kernel. Softmax may use the online formulation (one pass for max and sum) and keep rows in
registers (Variant.cache_rows; cuda_rows.py). Middle-dim reductions: tiled column kernels, fused with a
broadcast consumer when one follows; softmaxes over a middle dim: a thread per column (cuda_columns.py).
Every launch goes to the given stream. A unit carries only the reduction helpers its kernels call, so
its source shows the strategy it uses. Must never compile or run what it emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.generators.heuristic.cpu import _leaf_shape, split_point
from kernelfoundry.generators.heuristic.cuda_base import ROW_HEAD
from kernelfoundry.generators.heuristic.cuda_columns import (
    REALIGN4,
    TCOLS_DEFAULT,
    TCOLS_TUNABLES,
    WCOLS_DEFAULTS,
    WCOLS_TUNABLES,
    ColumnKernels,
)
from kernelfoundry.generators.heuristic.cuda_onchip_rows import (
    CLUSTER_HEAD,
    CLUSTER_SHARE,
    CLUSTER_SMEM_FLOATS,
    GRID_DEFAULTS,
    GRID_PHASES,
    GRID_PLAN,
    GRID_TUNABLES,
    ONCHIP_MAX_ROW,
    ONCHIP_MIN_ROW,
    ONCHIP_SMEM_FLOATS,
    ONCHIP_THREADS,
    OnChipRows,
    cluster_reduce,
    grid_reduce,
)
from kernelfoundry.generators.heuristic.cuda_pools import PoolKernels
from kernelfoundry.generators.heuristic.entry import entry_point, ptr, reduce_range, shp
from kernelfoundry.generators.heuristic.graph import Ref
from kernelfoundry.generators.heuristic.layout import (
    channels_last_source,
    cuda_channels_last_unit,
    cuda_to_channels_last_unit,
    to_channels_last_entry,
)
from kernelfoundry.generators.heuristic.plan import Leaf, Part, Step
from kernelfoundry.generators.heuristic.prelude import PRELUDE
from kernelfoundry.generators.heuristic.stepexpr import emit

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

# A middle-dim reduction fused with its consumer keeps up to 64 reduced rows per thread in registers
# (one DRAM read of the tile) or re-reads its tile for the consumer (fewer registers, more blocks).
FUSED_TUNABLES = ("// @kf.tunable FUSED_ROWS_IN_REGISTERS in [0, 1] default 1",)

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


ALLOC = r"""
#include <mutex>
/* Intermediates come from a stream-ordered pool that keeps its memory between calls: the device's
   default pool hands it back to the driver at every synchronisation, and mapping it again on the
   next call costs more than a memory-bound kernel. */
static float* kf_alloc(size_t bytes, cudaStream_t st) {
  static cudaMemPool_t pools[64] = {};
  static std::mutex guard;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  {
    std::lock_guard<std::mutex> lock(guard);
    if (!pools[dev]) {
      cudaMemPoolProps props = {};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = dev;
      cudaMemPool_t pool;
      if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) return nullptr;
      uint64_t keep = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      pools[dev] = pool;
    }
  }
  void* p = nullptr;
  return cudaMallocFromPoolAsync(&p, bytes, pools[dev], st) == cudaSuccess ? (float*)p : nullptr;
}
"""


class CudaEmitter(OnChipRows, ColumnKernels, PoolKernels):
    def unit(self, parts: list[Part], header: list[str]) -> str:
        bodies: list[str] = []
        nhwc = channels_last_source(self.graph, parts, "cuda") if self.variant.channels_last else None
        if nhwc is not None:
            kernel, entry = cuda_channels_last_unit(self.graph, parts[0], nhwc)
            convert, convert_entry = cuda_to_channels_last_unit(to_channels_last_entry(parts[0]))
            self.kernels += [kernel, convert]
            bodies += [*entry, "", *convert_entry, ""]
            parts = []
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
        launches = "\n".join(bodies)
        if "WARP_ROW_MAX" in launches:
            lines += WARP_TUNABLES
            defaults.append(("WARP_ROW_MAX", 4096))
        if "FUSED_ROWS_IN_REGISTERS" in launches:
            lines += FUSED_TUNABLES
            defaults.append(("FUSED_ROWS_IN_REGISTERS", 1))
        if "TCOLS_WIDTH" in launches:
            lines += TCOLS_TUNABLES
            defaults.append(("TCOLS_WIDTH", TCOLS_DEFAULT))
        if "KF_WCOLS" in launches:
            lines += WCOLS_TUNABLES
            defaults += WCOLS_DEFAULTS
        if "KF_GRID_ROWS" in launches:  # with the cluster rows' launch, which reads KF_CLUSTER_MOST
            lines += GRID_TUNABLES
            defaults += GRID_DEFAULTS
        for name, default in defaults:
            lines += [f"#ifndef {name}", f"#define {name} {default}", "#endif"]
        # only the reduction helpers the kernels call: a unit's source shows the strategy it uses
        used = "\n".join(self.kernels)
        # the cluster and grid reductions reduce each block with the variant's block reduction first
        cluster, grid = "kf_cluster_reduce" in used, "kf_grid_reduce" in used
        held, tree = cluster or grid, self.variant.reduction == "block"
        helpers = [COMBINE] if "kf_combine" in used or "kf_block_reduce" in used or held else []
        helpers += [REDUCE_WARP] if "kf_block_reduce_warp" in used or (held and not tree) else []
        helpers += [REDUCE_LANES] if "kf_warp_reduce" in used else []
        helpers += [REDUCE_TREE] if "kf_block_reduce_tree" in used or (held and tree) else []
        helpers += [REALIGN4] if "kf_realign4" in used else []
        if held:
            block = "kf_block_reduce_tree" if tree else "kf_block_reduce_warp"
            helpers = [
                "#include <cooperative_groups.h>",
                *helpers,
                *([cluster_reduce(block)] if cluster else []),
                *([grid_reduce(block), GRID_PLAN] if grid else []),
            ]
        lines += ["#include <cuda_runtime.h>", PRELUDE, *helpers]
        lines += [ALLOC, ""]
        lines += [
            "KF_DEFINE_ABI_VERSION()",
            "",
            *self.kernels,
        ]
        text = launches.replace(
            "void* stream) {\n", "void* stream) {\n  cudaStream_t st = (cudaStream_t)stream;\n"
        )
        lines.append(text)
        return "\n".join(lines)

    def step(self, step: Step) -> list[str]:
        self.counter += 1
        self._enter(step)
        if step.kind == "pointwise":
            return self.pointwise(step)
        if step.kind == "reduction":
            return self.reduction(step)
        if step.kind == "pool":
            return self.pool(step)
        return self.rowop(step)

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
        if direct:
            # direct translation: every element is a row (inner == 1), so threads, not blocks, take rows
            k.append(
                "  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;"
                " r += (int64_t)gridDim.x * blockDim.x) {"
            )
            k += pre
            k.append(f"    float* __restrict__ o = {ptr(step.out)} + r * inner;")
            k.append("    for (int64_t j = 0; j < inner; ++j) {")
            k += body
            k.append(f"      o[j] = {result};")
            k.append("    }")
            k.append("  }")
            k.append("}")
            self.kernels.append("\n".join(k))
            return self._pointwise_launch(step, kname, leaves, split, modes, vec, flat=True)
        k.append("  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {")
        k += pre
        k.append(f"    float* __restrict__ o = {ptr(step.out)} + r * inner;")
        if vec:
            # rows that do not start on 16 bytes (an odd inner size) peel `head` scalars first: the
            # float4 body then covers them too, when every full operand shares the output's offset
            k.append("    const int64_t lead = (int64_t)((16 - ((uintptr_t)o) % 16) % 16) / 4;")
            k.append("    const int64_t head = lead < inner ? lead : inner;")
            k.append("    const int64_t n4 = (inner - head) / 4;")
            aligned = " && ".join(
                ["(((uintptr_t)o) % 4 == 0)"]
                + [f"(((uintptr_t)(q{i} + head)) % 16 == 0)" for i in loads4.values()]
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
                k.append(
                    f"          if (j4 < n4) w{i}[u] = reinterpret_cast<const float4*>(q{i} + head)[j4];"
                )
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
            k.append("          reinterpret_cast<float4*>(o + head)[j4] = res;")
            k.append("        }")
            k.append("      }")
            k.append("      /* the head [0, head) and the tail [head + 4 * n4, inner) */")
            k.append("      const int64_t rest = inner - 4 * n4;")
            k.append("      for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rest;")
            k.append("           t += (int64_t)gridDim.x * blockDim.x) {")
            k.append("        const int64_t j = t < head ? t : t + 4 * n4;")
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
        return self._pointwise_launch(step, kname, leaves, split, modes, vec, flat=False)

    def _pointwise_launch(
        self, step: Step, kname: str, leaves: list[Leaf], split: int, modes: dict, vec: bool, flat: bool
    ) -> list[str]:
        """Host code of a pointwise step: row maps of its operands, the grid, the launch."""
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
        if flat:
            out.append("    const int64_t need = (rows + BLOCK - 1) / BLOCK;")
            out.append(
                "    const unsigned gx = (unsigned)(need < 65535 * 8 ? (need > 0 ? need : 1) : 65535 * 8);"
            )
            out.append("    if (rows * inner > 0)")
            out.append(f"      {kname}<<<gx, BLOCK, 0, st>>>({', '.join(args)});")
        else:
            per = "4" if vec else "1"
            out.append(f"    const int64_t step = (int64_t)BLOCK * {per} * PER_THREAD;")
            out.append("    const int64_t need = (inner + step - 1) / step;")
            # a block per chunk, as eager launches: grid.x may be 2^31 - 1. Capped at 65535 blocks that
            # strode over the tensor, the default BLOCK and PER_THREAD ran level1/19_ReLU and 21_Sigmoid at
            # 3.20 and 3.19 ms on the H200, uncapped 3.09 and 3.07 (eager 3.03;
            # tests/kernelbench/probe_pointwise_grid.py, bench/results/h200_2026-12-04b)
            out.append(
                "    const unsigned gx = (unsigned)(need < 2147483647 ? (need > 0 ? need : 1) : 2147483647);"
            )
            out.append("    const unsigned gy = (unsigned)(rows < 65535 ? (rows > 0 ? rows : 1) : 65535);")
            out.append("    if (rows * inner > 0)")
            out.append(f"      {kname}<<<dim3(gx, gy), BLOCK, 0, st>>>({', '.join(args)});")
        out += self._launch_check()
        if step.out in self._fused_into:
            # computed by the reduction before it, whose fused row (inner == 1) or column (inner >= 32)
            # kernel ran it
            src, d1 = self._fused_into[step.out]
            inner = f"kf_prod(&{shp(src)}, {d1}, {shp(src)}.nd)"
            guard = f"    if ({inner} > 1 && {inner} < 32) {{"
            out = [guard, *["  " + line for line in out], "    }"]
        return out

    def _fused_rows_kernel(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], consumer: Step, params: list[str],
        pre: list[str], loads: dict, body: list[str], val: str, init: str, comb: str, code: int, op: str,
        vec: bool, warp: bool,
    ) -> list[str]:  # fmt: skip
        """A reduction over the last dims and its broadcast consumer (x / mean(|x|), x - max) in one
        kernel: a block (or with `warp` a warp) reduces its row, writes the result, then applies the
        consumer to the same row while it is still in cache (float4 when `vec`), instead of a second
        kernel that re-reads the whole input from DRAM after every row's reduction."""
        g = self.graph
        tid, group = ("lane", "32") if warp else ("threadIdx.x", "blockDim.x")
        name, bound = (f"{kname}_fwrows", "256") if warp else (f"{kname}_frows", "1024")
        signature = (
            f"__global__ void __launch_bounds__({bound}) {name}(int64_t outer, int64_t R"
            + (", int vec" if vec else "")
            + ", float* __restrict__ out"
            + "".join(", " + x for x in params + self._consumer_params(step, consumer))
            + ") {"
        )
        cpre, cloads, cfull = self._consumer_loads(step, consumer, lambda leaf: f"{ptr(leaf.name)}[base + j]")
        k = [signature, *self._row_loop_head(pre + cpre, warp)]
        self._lanes = warp
        try:
            sweep = _RowSweep(tid, group, tid, "R", "vec")
            k += self._row_accumulate(step, src, leaves, loads, body, val, init, comb, code, op, vec, sweep)
        finally:
            self._lanes = False
        k.append(f"    const float red = acc{' / (float)R' if op == 'mean' else ''};")
        k.append(f"    if ({tid} == 0) out[o] = red;")
        cout = ptr(consumer.out)
        cbody, cval = emit(g, consumer, Ref(consumer.root.name), lambda leaf: cloads[leaf], indent="      ")
        if vec:
            k.append("    if (vec) {")
            k.append("      " + ROW_HEAD)
            k.append("      const int64_t n4 = (R - head) >> 2;")
            k.append("      #pragma unroll 4")
            k.append(f"      for (int64_t j4 = {tid}; j4 < n4; j4 += {group}) {{")
            for n, leaf in cfull:
                row4 = f"reinterpret_cast<const float4*>({ptr(leaf.name)} + base + head)"
                k.append(f"        const float4 p{n} = {row4}[j4];")
            k.append("        float4 res;")
            for comp in "xyzw":
                lane = dict(cloads)
                for n, leaf in cfull:
                    lane[leaf] = f"p{n}.{comp}"
                b, v = emit(
                    g, consumer, Ref(consumer.root.name), lambda leaf, ll=lane: ll[leaf], indent="          "
                )
                k += ["        {", *b, f"          res.{comp} = {v};", "        }"]
            k.append(f"        reinterpret_cast<float4*>({cout} + base + head)[j4] = res;")
            k.append("      }")
            k += _rest_loop(tid, group, "      ")
            k += ["  " + b for b in cbody]
            k += [f"        {cout}[base + j] = {cval};", "      }"]
            k.append("      continue;")
            k.append("    }")
        k.append(f"    for (int64_t j = {tid}; j < R; j += {group}) {{")
        k += cbody
        k.append(f"      {cout}[base + j] = {cval};")
        k.append("    }")
        k += ["  }", "}"]
        return k

    def _row_accumulate(
        self, step: Step, src: Ref, leaves: list[Leaf], loads: dict, body: list[str], val: str, init: str,
        comb: str, code: int, op: str, vec: bool, sweep: _RowSweep,
    ) -> list[str]:  # fmt: skip
        """One row's reduction into `acc` by the threads `sweep` names: float4 sweep when allowed, else
        strided scalars; then the group reduction (and logsumexp's second pass)."""
        k = [f"    float acc = {init};"]
        peel = sweep.vec_span is None  # whole rows of any length: float4 from the first aligned element
        if vec:
            k.append(f"    if ({sweep.vec_condition}) {{")
            if peel:
                k.append("      " + ROW_HEAD)
            k += self._vec_sweep(
                step, src, leaves, loads, sweep.tid, sweep.group,
                lambda v: f"acc = {comb}(acc, {v});", indent="      ", span=sweep.vec_span, peel=peel,
            )  # fmt: skip
            if peel:
                k += _rest_loop(sweep.tid, sweep.group, "      ")
                k += ["    " + b for b in body]
                k += [f"        acc = {comb}(acc, {val});", "      }"]
            k.append("    } else {")
        loop = f"    for (int64_t j = {sweep.start}; j < {sweep.end}; j += {sweep.group}) {{"
        # unrolled so that a thread has several loads in flight (the scalar path streams long rows
        # where an operand is read by position)
        k += ["    #pragma unroll 4", loop, *["  " + b for b in body]]
        k += [f"      acc = {comb}(acc, {val});", "    }"]
        if vec:
            k.append("    }")
        k.append(f"    acc = {self._reduce_call(code, 'acc')};")
        if op == "logsumexp":
            k += [
                "    float s = 0.0f;",
                loop,
                *["  " + b for b in body],
                f"      s += expf({val} - acc);",
                "    }",
            ]
            k += [f"    s = {self._reduce_call(0, 's')};", "    acc = acc + logf(s);"]
        return k

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
        # the float4 paths that index positions their own way (rows, fused rows, fused float4 columns):
        # not where a leaf is read by the position `j` (plan.axis_leaf); plain float4 columns name it
        vec_paths = vec and not self._read_by_position(leaves)
        # the plain and warp row kernels stream float4 in any case (`_vec_sweep` declares each
        # component's position `j` for the leaves read by it)
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
        sweep = _RowSweep("threadIdx.x", "blockDim.x", "lo + threadIdx.x", "hi", "vec && splits == 1")
        if atomic and vec:
            # a split's share of the row in float4 units, so that split rows stream float4 too
            k.append(
                "    const int64_t n4all = R >> 2, per4 = (n4all + splits - 1) / splits, lo4 = part * per4;"
            )
            k.append("    const int64_t hi4 = lo4 + per4 < n4all ? lo4 + per4 : n4all;")
            sweep = _RowSweep("threadIdx.x", "blockDim.x", "lo + threadIdx.x", "hi", "vec", ("lo4", "hi4"))
        k += self._row_accumulate(step, src, leaves, loads, body, val, init, comb, code, op, vec, sweep)
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
            self._lanes = True
            try:
                sweep = _RowSweep("lane", "32", "lane", "R", "vec")
                k += self._row_accumulate(
                    step, src, leaves, loads, body, val, init, comb, code, op, vec, sweep
                )
            finally:
                self._lanes = False
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
        # the realignment shuffles: only where the variant reports warp-level work (its warp reductions)
        wcols = tiled and vec_paths and self.variant.reduction == "warp"
        if wcols:
            k += self._wide_cols_kernel(kname, step, src, leaves, params2, pre2, loads2, init, comb, scale)
        fused_args = ""
        onchip: list[str] = []
        if consumer is not None:
            for warp in (False, True) if warp_rows else (False,):
                k += self._fused_rows_kernel(
                    kname, step, src, leaves, consumer, params, pre, loads, body, val, init, comb, code, op,
                    vec_paths, warp,
                )  # fmt: skip
            onchip = self._fused_rows_onchip(
                kname, step, src, leaves, loads, consumer, params, pre, init, comb, code, op
            )
            k += onchip
            k += self._fused_cols_kernel(kname, step, consumer, params2, pre2, body2, val2, init, comb, scale)
            if vec_paths:
                k += self._fused_cols_kernel4(
                    kname, step, src, leaves, consumer, params2, pre2, loads2, init, comb, scale
                )
                k += self._fused_cols_kernel4_regs(
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
            # rows split into parts of 64 Ki elements or more until about 2048 blocks run (a few a
            # streaming multiprocessor): one full reduction fills the GPU, many rows need no split
            out.append(
                "      const int64_t want = (2048 + outer - 1) / outer, most = R / 65536;\n"
                "      const int splits = (int)(most < want ? (most > 1 ? most : 1) : want);"
            )
            out.append(f"      cudaMemsetAsync({ptr(step.out)}, 0, sizeof(float) * outer, st);")
        else:
            out.append("      const int splits = 1;")
        out.append("      const int64_t nb = outer * splits < 65535 * 8 ? outer * splits : 65535 * 8;")
        varg = ""
        if vec:
            out.append(f"      const int vec = {self._vec_ok(leaves, whole_rows=atomic)};")
            varg = ", vec"
        launch = (
            f"      if (nb > 0) {kname}_rows<<<(unsigned)nb, ROW_BLOCK, 0, st>>>"
            f"(outer, R, splits{varg}, {ptr(step.out)}{a});"
        )
        if consumer is not None:
            # the reduction and its broadcast consumer in one kernel: each row is read back right after
            # its reduction (from L2, or L1 for short rows), not after every row's reduction
            fvarg = ""
            if vec_paths:
                full = [
                    ptr(leaf.name)
                    for leaf in self._consumer_leaves(step, consumer)
                    if not self._is_scalar(leaf)
                ]
                ok = self._vec_ok(leaves, (ptr(consumer.out), *full), whole_rows=False)
                out.append(f"      const int fvec = {ok};")
                fvarg = ", fvec"
            fargs = f"(outer, R{fvarg}, {ptr(step.out)}{a}{fused_args});"
            launch = f"      if (nb > 0) {kname}_frows<<<(unsigned)nb, ROW_BLOCK, 0, st>>>{fargs}"
            if onchip:  # long rows held on chip while they are reduced: read once (cuda_onchip_rows.py)
                smem = f"sizeof(float) * {ONCHIP_SMEM_FLOATS}"
                out.append(
                    f"      if (FUSED_ROWS_IN_REGISTERS && R >= {ONCHIP_MIN_ROW} && R <= {ONCHIP_MAX_ROW}) {{"
                )
                out.append(
                    f"        cudaFuncSetAttribute({kname}_fcrows,"
                    f" cudaFuncAttributeMaxDynamicSharedMemorySize, (int)({smem}));"
                )
                out.append(f"        const size_t kf_held = sizeof(float) * (size_t)(R - {ONCHIP_MIN_ROW});")
                out.append(
                    f"        if (nb > 0) {kname}_fcrows<<<(unsigned)nb, {ONCHIP_THREADS}, kf_held, st>>>"
                    f"(outer, R, {ptr(step.out)}{a}{fused_args});"
                )
                out.append("      } else {")
            if warp_rows:
                out.append("      if (R <= WARP_ROW_MAX) {")
                out.append("        const int64_t wb = (outer + 7) / 8;  /* 8 warps (rows) per block */")
                out.append("        const unsigned nbw = (unsigned)(wb < 65535 * 8 ? wb : 65535 * 8);")
                out.append(f"        if (outer > 0) {kname}_fwrows<<<nbw, 256, 0, st>>>{fargs}")
                out.append("      } else {")
                out.append("  " + launch)
                out.append("      }")
            else:
                out.append(launch)
            if onchip:
                out.append("      }")
        elif warp_rows:
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
        if consumer is not None and vec_paths:
            full = [
                ptr(leaf.name) for leaf in self._consumer_leaves(step, consumer) if not self._is_scalar(leaf)
            ]
            ok = self._vec_ok(leaves, (ptr(step.out), ptr(consumer.out), *full))
            out.append(f"      if (inner >= 32 && {ok.replace('(R % 4 == 0)', '(inner % 4 == 0)')}) {{")
            out.append("        const int64_t tb = outer * ((inner / 4 + 31) / 32);")
            grid = "<<<(unsigned)(tb < 65535 * 8 ? tb : 65535 * 8), 256, 0, st>>>"
            fargs = f"(outer, R, inner, {ptr(step.out)}{a2}{fused_args});"
            for v in (1, 2, 4, 8):  # short reduced dims: each thread keeps its rows in registers
                out.append(f"        {'' if v == 1 else 'else '}if (FUSED_ROWS_IN_REGISTERS && R <= {8 * v})")
                out.append(f"          {kname}_fcols4r<{v}>{grid}{fargs}")
            out.append("        else")
            out.append(f"          {kname}_fcols4{grid}{fargs}")
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
        if wcols:
            # rows of no multiple of 4 floats: wide tiles of realigned float4s, where they fill the GPU,
            # or (KF_WCOLS 2) tiles of one row group with the rows split over blocks until they do
            ok = self._vec_ok(leaves, (), whole_rows=False)
            out += _wide_split_launch(kname, ptr(step.out), a2, ok)
            out.append(
                f"      if (KF_WCOLS == 1 && inner % 4 != 0 && inner >= 128 && {ok}"
                " && outer * ((inner + 255) / 256) >= KF_WCOLS_MIN_BLOCKS) {"
            )
            out.append("        const int64_t w1 = outer * ((inner + 1023) / 1024);")
            out.append("        const int64_t w2 = outer * ((inner + 511) / 512);")
            out.append("        const int64_t w4 = outer * ((inner + 255) / 256);")
            wargs = f"(outer, R, inner, {ptr(step.out)}{a2}, R, 1, nullptr);"
            for rg, blocks in ((1, "w1"), (2, "w2"), (4, "w4")):
                cap = f"(unsigned)({blocks} < 65535 * 8 ? {blocks} : 65535 * 8)"
                head = "if" if rg == 1 else "else if" if rg == 2 else "else"
                cond = f" ({blocks} >= KF_WCOLS_MIN_BLOCKS)" if rg < 4 else ""
                out.append(f"        {head}{cond}")
                out.append(f"          {kname}_wcols<{rg}><<<{cap}, 256, 0, st>>>{wargs}")
            out.append("      } else")
        if tiled:
            out.append("      if (inner >= 32) {  /* TCOLS_WIDTH columns x row groups a block */")
            out.append("        const int64_t tb = outer * ((inner + TCOLS_WIDTH - 1) / TCOLS_WIDTH);")
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

    def rowop(self, step: Step) -> list[str]:
        g = self.graph
        node = step.root
        src = node.args[0]
        assert isinstance(src, Ref)
        xshape = g.shapes[src.name]
        d0, d1, _ = reduce_range(node, len(xshape))
        if node.op in ("softmax", "log_softmax") and d1 != len(xshape):
            return self.middle_softmax(step, src, d0, d1)
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
        # float4 passes over rows that do not fit registers (or when no variant keeps them there); not
        # where a leaf is read by the element's position (plan.axis_leaf): those name it their own way
        positional = self._read_by_position(leaves)
        float4 = self.variant.vectorize and self.variant.fuse and not positional
        rvec = (step, src, leaves, loads) if float4 else None
        self.kernels.append(
            self._row_kernel(kname, signature, pre, xb, xv, value, epilogue, result, node.op, False, rvec)
        )
        if self.variant.cache_rows:
            self.kernels.append(
                self._row_kernel_regs(kname, signature, pre, xb, xv, value, epilogue, result, node.op)
            )
            self.kernels.append(
                self._row_kernel_cluster(kname, signature, pre, xb, xv, value, epilogue, result, node.op)
            )
            self.kernels.append(
                self._row_kernel_grid(kname, signature, pre, xb, xv, value, epilogue, result, node.op)
            )
        if self.variant.row_warps:
            self.kernels.append(
                self._row_kernel(kname, signature, pre, xb, xv, value, epilogue, result, node.op, True, rvec)
            )
        vec = float4 and (self.variant.cache_rows or self.variant.row_warps)
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
        split = node.op in ("layer_norm", "group_norm")
        if split:
            self.kernels.append(
                self._row_kernels_split(
                    kname, signature, pre, step, src, leaves, loads, xb, xv, value, epilogue, result
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
        if self.variant.cache_rows:
            out.append("    int kf_grid_rows = 0, kf_grid_blocks = 0;  /* grid-held rows (_grows) */")
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
            out += _cluster_rows_launch(kname, a)
            out += _grid_rows_launch(kname, a)
        if split:
            # long rows: every SM busy however few the rows, float4 sweeps, two reads and one write
            svec = (
                self._vec_ok(leaves, (ptr(step.out),))
                if self.variant.vectorize and self.variant.fuse
                else "0"
            )
            rest = "".join(", " + x for x in args)
            out.append("    } else if (R >= 16384) {")
            out.append("      int64_t S = (132 * 8 + outer - 1) / outer;")
            out.append("      S = S < R / 8192 ? S : R / 8192;")
            out.append("      S = S < 1024 ? (S > 1 ? S : 1) : 1024;")
            out.append("      float* kf_part = kf_alloc(sizeof(float) * 2 * (size_t)(outer * S), st);")
            out.append("      if (!kf_part) { rc = KF_ERR_LAUNCH; goto kf_done; }")
            out.append(f"      const int svec = {svec};")
            out.append("      const int64_t ns = outer * S;")
            out.append("      const unsigned nbs = (unsigned)(ns < 65535 * 8 ? ns : 65535 * 8);")
            out.append(
                f"      {kname}_sstats<<<nbs, 256, 0, st>>>(outer, R, G, C, HW, (int)S, svec, kf_part{rest});"
            )
            out.append(
                f"      {kname}_snorm<<<nbs, 256, 0, st>>>(outer, R, G, C, HW, (int)S, svec, kf_part,"
                f" {ptr(step.out)}{rest});"
            )
            out.append("      cudaFreeAsync(kf_part, st);")
        out.append("    } else {")
        out.append(f"      {kname}<<<nb, ROW_BLOCK, 0, st>>>{a};")
        out.append("    }")
        return out + self._launch_check()


def _cluster_rows_launch(kname: str, a: str) -> list[str]:
    """The launch branch of `{kname}_crows` (cuda_onchip_rows.py): rows a thread block cluster can hold,
    the fewest blocks (a power of two) whose shares fit, a row a cluster."""
    smem = f"sizeof(float) * {CLUSTER_SMEM_FLOATS}"
    return [
        f"    }} else if (R <= KF_CLUSTER_MOST * (int64_t){CLUSTER_SHARE}) {{  /* a row a cluster */",
        "      int kf_blocks = 1;",
        f"      while ((R + kf_blocks - 1) / kf_blocks > {CLUSTER_SHARE}) kf_blocks *= 2;",
        "      const int64_t kf_per = (R + kf_blocks - 1) / kf_blocks;",
        f"      const int64_t kf_rest = kf_per > {ONCHIP_MIN_ROW} ? kf_per - {ONCHIP_MIN_ROW} : 0;",
        f"      cudaFuncSetAttribute({kname}_crows, cudaFuncAttributeMaxDynamicSharedMemorySize,",
        f"                           (int)({smem}));",
        "      cudaLaunchConfig_t kf_config = {};",
        "      kf_config.gridDim = dim3((unsigned)((outer < 65535 ? outer : 65535) * kf_blocks));",
        f"      kf_config.blockDim = dim3({ONCHIP_THREADS});",
        f"      kf_config.dynamicSmemBytes = sizeof(float) * (size_t)({CLUSTER_HEAD} + kf_rest);",
        "      kf_config.stream = st;",
        "      cudaLaunchAttribute kf_attr[1];",
        "      kf_attr[0].id = cudaLaunchAttributeClusterDimension;",
        "      kf_attr[0].val.clusterDim.x = (unsigned)kf_blocks;",
        "      kf_attr[0].val.clusterDim.y = 1;",
        "      kf_attr[0].val.clusterDim.z = 1;",
        "      kf_config.attrs = kf_attr;",
        "      kf_config.numAttrs = 1;",
        f"      cudaLaunchKernelEx(&kf_config, {kname}_crows, {a[1:-1]});",
    ]


def _grid_rows_launch(kname: str, a: str) -> list[str]:
    """The launch branch of `{kname}_grows` (cuda_onchip_rows.py), where KF_GRID_ROWS is on: rows longer
    than a cluster holds, held by co-resident blocks (kf_grid_rows_plan) of a cooperative launch, their
    statistics' slots and arrival flags from the unit's pool, the flags zeroed first."""
    slots = f"(size_t)outer * {GRID_PHASES} * kf_grid_blocks"
    return [
        "    } else if (KF_GRID_ROWS &&",
        f"               (kf_grid_blocks = kf_grid_rows_plan({kname}_grows, R, outer, &kf_grid_rows)) > 0)"
        " {",
        "      const int64_t kf_per = (R + kf_grid_blocks - 1) / kf_grid_blocks;",
        f"      const int64_t kf_rest = kf_per > {ONCHIP_MIN_ROW} ? kf_per - {ONCHIP_MIN_ROW} : 0;",
        f"      float* kf_gslots = kf_alloc(sizeof(float) * ({slots} + (size_t)outer * kf_grid_blocks), st);",
        "      if (!kf_gslots) { rc = KF_ERR_LAUNCH; goto kf_done; }",
        f"      unsigned int* kf_arrivals = reinterpret_cast<unsigned int*>(kf_gslots + {slots});",
        "      cudaMemsetAsync(kf_arrivals, 0, sizeof(unsigned int) * (size_t)outer * kf_grid_blocks, st);",
        "      cudaLaunchConfig_t kf_config = {};",
        "      kf_config.gridDim = dim3((unsigned)(kf_grid_rows * kf_grid_blocks));",
        f"      kf_config.blockDim = dim3({ONCHIP_THREADS});",
        f"      kf_config.dynamicSmemBytes = sizeof(float) * (size_t)({CLUSTER_HEAD} + kf_rest);",
        "      kf_config.stream = st;",
        "      cudaLaunchAttribute kf_attr[1];",
        "      kf_attr[0].id = cudaLaunchAttributeCooperative;",
        "      kf_attr[0].val.cooperative = 1;",
        "      kf_config.attrs = kf_attr;",
        "      kf_config.numAttrs = 1;",
        f"      cudaLaunchKernelEx(&kf_config, {kname}_grows, {a[1:-1]},",
        "                         kf_grid_blocks, kf_gslots, kf_arrivals);",
        "      cudaFreeAsync(kf_gslots, st);",
    ]


def _rest_loop(tid: str, group: str, indent: str) -> list[str]:
    """The opening of a strided loop over a peeled row's head [0, head) and tail [head + 4 * n4, R),
    defining the element index `j`."""
    return [
        f"{indent}for (int64_t t = {tid}; t < R - 4 * n4; t += {group}) {{",
        f"{indent}  const int64_t j = t < head ? t : t + 4 * n4;",
    ]


@dataclass(frozen=True)
class _RowSweep:
    """Which threads share a row: index, group size, scalar loop bounds and the float4 path's guard."""

    tid: str
    group: str
    start: str
    end: str
    vec_condition: str
    vec_span: tuple[str, str] | None = None  # float4 range [first, end) when not the whole row


def _wide_split_launch(kname: str, out: str, operands: str, ok: str) -> list[str]:
    """KF_WCOLS 2: one-row-group wide tiles (1024 columns) over row chunks of rc rows (a multiple of 32, at
    least 64) until KF_WCOLS_SPLIT_BLOCKS blocks run; more than one chunk writes partials to a pooled
    buffer that `_wfin` combines into `out`. `operands`: the kernels' operand arguments, each after ", "."""
    cap = "(unsigned)(wb < 65535 * 8 ? wb : 65535 * 8)"
    return [
        f"      if (KF_WCOLS == 2 && inner % 4 != 0 && inner >= 128 && {ok}) {{",
        "        const int64_t cells = outer * ((inner + 1023) / 1024), most = R / 64 > 1 ? R / 64 : 1;",
        "        const int64_t want = (KF_WCOLS_SPLIT_BLOCKS + cells - 1) / cells;",
        "        int64_t chunks = want < most ? want : most;",
        "        int64_t rc = ((R + chunks - 1) / chunks + 31) / 32 * 32;",
        "        chunks = (R + rc - 1) / rc;",
        "        float* kf_ws = chunks > 1 ? kf_alloc(sizeof(float) * (size_t)(chunks * outer * inner), st)"
        " : nullptr;",
        "        if (!kf_ws) { chunks = 1; rc = R; }",
        "        const int64_t wb = cells * chunks;",
        f"        {kname}_wcols<1><<<{cap}, 256, 0, st>>>"
        f"(outer, R, inner, {out}{operands}, rc, chunks, kf_ws);",
        "        if (kf_ws) {",
        "          const int64_t fb = (outer * inner + 255) / 256;",
        f"          {kname}_wfin<<<(unsigned)(fb < 65535 * 8 ? fb : 65535 * 8), 256, 0, st>>>"
        f"(outer, R, inner, {out}, chunks, kf_ws);",
        "          cudaFreeAsync(kf_ws, st);",
        "        }",
        "      } else",
    ]

"""CUDA column kernels: reductions over a middle dimension, alone or fused with their broadcast consumer,
and softmax / log-softmax over a middle dimension (the channels of NCHW).

Tiled (32 columns x 8 row groups), float4 columns, and the fused reduction + consumer kernels with the
consumer's column-only math hoisted out of the row loop.
"""

from __future__ import annotations

import re

from kernelfoundry.generators.heuristic.cuda_base import EmitterBase, _numel_of
from kernelfoundry.generators.heuristic.entry import ptr, shp
from kernelfoundry.generators.heuristic.graph import Ref
from kernelfoundry.generators.heuristic.plan import Leaf, Step
from kernelfoundry.generators.heuristic.stepexpr import emit

# The tiled middle-dim reduction's columns per block (its row groups: 256 / TCOLS_WIDTH). Wider tiles read
# longer contiguous row segments (fewer DRAM pages open at once, a misaligned row's shared sectors met in
# one SM's L1) at fewer row groups per block. On the H100 64 beat 32 by 3-4% in kernel time on level1/47,
# 49 and 53 (rows of 4,095 floats), 128 and 256 lost 2-9% (bench/results/h100_2026-12-06b/).
TCOLS_WIDTH = "TCOLS_WIDTH"
TCOLS_DEFAULT = 64
TCOLS_TUNABLES = (f"// @kf.tunable TCOLS_WIDTH in [32, 64, 128, 256] default {TCOLS_DEFAULT}",)

# Rows whose length is no multiple of 4 (level1/47's 4,095 floats) start at every 4-byte offset, so a
# warp's row segment of a narrow tile shares a 32-byte sector with its neighbours': on the H100 the 64-column
# tiles moved 9% more DRAM bytes than the input (Nsight Compute, bench/results/h100_2026-12-06f/). The wide
# column tiles (`_wcols`) read each warp's 128 columns of a row as aligned float4s, realigned by warp
# shuffles (kf_realign4), in tiles of 1024 / RG columns (RG row groups a 256-thread block), so only the
# tiles' edges share sectors. `KF_WCOLS` 0 keeps the narrow tiles; a launch takes them where fewer than
# KF_WCOLS_MIN_BLOCKS blocks of 256 columns would run (two blocks an SM of the H100/H200's 132). Off by
# default, swept: on the H100 the wide tiles lost 3-4% to the 64-column ones on level1/47, 49 and 53
# (3.43 against 3.33 ms on 47; bench/results/h100_2026-12-07/).
# That loss is the wave quantisation the wide tiles paid: level1/47 (128 x 4,095 columns) makes 512 tiles of
# 1024 columns, 3.9 blocks an SM. `KF_WCOLS` 2 keeps the one-row-group tiles and splits the rows over blocks
# instead, until at least KF_WCOLS_SPLIT_BLOCKS blocks run (chunks of at least 64 rows, a multiple of 32),
# each chunk's partial column results combined by a second kernel in chunk order (deterministic); the
# partials are chunks x outer x inner floats, 0.2% of 47's input at its 9 chunks.
WCOLS_SPLIT_DEFAULT = 4224
WCOLS_TUNABLES = (
    "// @kf.tunable KF_WCOLS in [0, 1, 2] default 0",
    f"// @kf.tunable KF_WCOLS_SPLIT_BLOCKS in [2112, 4224, 8448] default {WCOLS_SPLIT_DEFAULT}",
)
WCOLS_DEFAULTS = (
    ("KF_WCOLS", 0),
    ("KF_WCOLS_MIN_BLOCKS", 264),
    ("KF_WCOLS_SPLIT_BLOCKS", WCOLS_SPLIT_DEFAULT),
)

REALIGN4 = r"""
/* The aligned float4 at p where it starts before `end`, zeros after: a float4 that starts inside the
   tensor stays inside its 16-byte granule, so no read leaves the tensor's pages. */
__device__ __forceinline__ float4 kf_ld4_upto(const float* p, const float* end) {
  return p < end ? *reinterpret_cast<const float4*>(p) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

/* Lane `lane`'s floats p[4 lane .. 4 lane + 3] of the warp's 128 from p (p 4-byte aligned, the same for the
   whole warp), read as aligned float4s: each lane loads the aligned float4 at its place and takes the rest
   from the next lane's (lane 31 from the float4 after the warp's), so every 32-byte sector is read once. */
__device__ __forceinline__ float4 kf_realign4(const float* p, int lane, const float* end) {
  const int m = (int)(((uintptr_t)p >> 2) & 3);
  const float* a = p - m;
  const float4 A = kf_ld4_upto(a + 4 * lane, end);
  if (m == 0) return A;
  float4 B;
  B.x = __shfl_down_sync(0xffffffffu, A.x, 1);
  B.y = __shfl_down_sync(0xffffffffu, A.y, 1);
  B.z = __shfl_down_sync(0xffffffffu, A.z, 1);
  if (lane == 31) B = kf_ld4_upto(a + 128, end);
  if (m == 1) return make_float4(A.y, A.z, A.w, B.x);
  if (m == 2) return make_float4(A.z, A.w, B.x, B.y);
  return make_float4(A.w, B.x, B.y, B.z);
}
"""

# A middle-dim softmax keeps each column's values in registers where its length R is at most one of these
MIDDLE_SOFTMAX_CACHED = (8, 16, 32, 64)


class ColumnKernels(EmitterBase):
    def middle_softmax(self, step: Step, src: Ref, d0: int, d1: int) -> list[str]:
        """Softmax / log-softmax over dims [d0, d1) of a tensor with trailing dims after them: one thread
        per column (outer, i), neighbouring threads on neighbouring i, so every row j is one coalesced
        read across a warp. Columns of up to 64 values (Variant.cache_rows) stay in registers: one read,
        exp once per element; longer ones take an online pass (max and sum together) and a write pass
        that reads the column again (from L2: a wave's columns fit in it). The rowop's prologue and its
        fused epilogue (full-shape or scalar operands) run per element."""
        g = self.graph
        node = step.root
        kname = f"kf_step{self.counter}"
        leaves = list(dict.fromkeys(step.prologue_leaves(g) + step.epilogue_leaves(g)))
        params, args, pre, loads = self._row_params(leaves, "(o * R + j) * inner + i")
        xb, xv = self._emit(step, src, loads, "      ")
        epilogue: list[str] = []
        result = "y"
        if step.epilogue:
            epilogue, result = emit(
                g, step, Ref(step.out), lambda leaf: loads[leaf], root_var="y", indent="      "
            )
        soft = node.op == "softmax"
        stat = "    const float inv = 1.0f / s;" if soft else "    const float ls = m + logf(s);"
        dst = "out[(o * R + j) * inner + i]"
        signature = (
            "(int64_t outer, int64_t R, int64_t inner, float* __restrict__ out"
            + "".join(", " + p for p in params)
            + ")"
        )
        head = [
            *pre,
            "  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * inner;",
            "       t += (int64_t)gridDim.x * blockDim.x) {",
            "    const int64_t o = t / inner, i = t % inner;",
        ]
        write = ["      const float y = {};", *epilogue, f"      {dst} = {result};"]

        def writing(value: str) -> list[str]:
            return [write[0].format(value), *write[1:]]

        k = [f"__global__ void __launch_bounds__(256) {kname}_mid{signature} {{", *head]
        k.append("    float m = -INFINITY, s = 0.0f;")
        k.append("    for (int64_t j = 0; j < R; ++j) {")
        k += xb
        k.append(f"      const float xv = {xv};")
        k.append("      const float m_new = fmaxf(m, xv);")
        k.append("      s = s * kf_exp(m - m_new) + kf_exp(xv - m_new);")
        k.append("      m = m_new;")
        k.append("    }")
        k.append(stat)
        k.append("    for (int64_t j = 0; j < R; ++j) {")
        k += xb
        k.append(f"      const float xv = {xv};")
        k += writing("kf_exp(xv - m) * inv" if soft else "(xv - ls)")
        k += ["    }", "  }", "}"]
        kernels = ["\n".join(k)]
        cached = self.variant.cache_rows
        if cached:
            r = ["template <int N>"]
            r.append(f"__global__ void __launch_bounds__(256) {kname}_midregs{signature} {{")
            r += head
            r.append("    float v[N];")
            r.append("    float m = -INFINITY;")
            r.append("    #pragma unroll")
            r.append("    for (int j = 0; j < N; ++j) {")
            r.append("      if (j < R) {")
            r += ["  " + b for b in xb]
            r.append(f"        v[j] = {xv};")
            r.append("        m = fmaxf(m, v[j]);")
            r.append("      }")
            r.append("    }")
            r.append("    float s = 0.0f;")
            r.append("    #pragma unroll")
            r.append("    for (int j = 0; j < N; ++j) {")
            if soft:
                r.append("      if (j < R) { v[j] = kf_exp(v[j] - m); s += v[j]; }")
            else:
                r.append("      if (j < R) s += kf_exp(v[j] - m);")
            r.append("    }")
            r.append(stat)
            r.append("    #pragma unroll")
            r.append("    for (int j = 0; j < N; ++j) {")
            r.append("      if (j < R) {")
            r += ["  " + line for line in writing("v[j] * inv" if soft else "(v[j] - ls)")]
            r.append("      }")
            r.append("    }")
            r += ["  }", "}"]
            kernels.append("\n".join(r))
        self.kernels += kernels
        a = f"(outer, R, inner, {ptr(step.out)}{''.join(', ' + x for x in args)})"
        out = [
            f"    const kf_shape X = {shp(src.name)};",
            f"    const int64_t outer = kf_prod(&X, 0, {d0}), R = kf_prod(&X, {d0}, {d1}),"
            f" inner = kf_prod(&X, {d1}, X.nd);",
            "    const int64_t nb = (outer * inner + 255) / 256;",
            "    const unsigned grid = (unsigned)(nb < 65535 * 8 ? nb : 65535 * 8);",
            "    if (nb <= 0) {",
        ]
        if cached:
            for n in MIDDLE_SOFTMAX_CACHED:
                out.append(f"    }} else if (R <= {n}) {{")
                out.append(f"      {kname}_midregs<{n}><<<grid, 256, 0, st>>>{a};")
        out.append("    } else {")
        out.append(f"      {kname}_mid<<<grid, 256, 0, st>>>{a};")
        out.append("    }")
        return out + self._launch_check()

    def _tiled_cols_kernel(
        self, kname: str, params: list[str], pre: list[str], body: list[str], val: str, init: str,
        comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """Middle-dim reduction, one block per (outer, TCOLS_WIDTH columns): 256 / TCOLS_WIDTH row groups
        read TCOLS_WIDTH * 4-byte row segments; each thread combines runs of 32 rows before its total
        (bounded rounding), then the row groups' partials meet in shared memory."""
        k = _column_tile_open(f"{kname}_tcols", params, pre, TCOLS_WIDTH)
        k += _column_tile_reduce(body, val, init, comb, scale, TCOLS_WIDTH)
        k += ["  }", "}"]
        return k

    def _wide_cols_kernel(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], params: list[str], pre: list[str],
        loads: dict, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """Middle-dim reduction in wide column tiles: RG row groups of 8 / RG warps a 256-thread block, a
        warp 128 columns of each of its rows read as realigned float4s (kf_realign4: rows of any length,
        operands 16-byte aligned), a lane 4 columns; runs of 32 rows combined before the total (bounded
        rounding), the row groups' partials then meet in shared memory. A lane past the row's end reads
        the next row's values (or zeros after the last) into columns it never writes. A block walks the
        rc rows of one of `chunks` row chunks: with one chunk it writes the result, with more its
        partials go to kf_ws (chunks x outer x inner), which `_wfin` combines in chunk order."""
        full = self._full_leaves(leaves)
        i4 = f"make_float4({init}, {init}, {init}, {init})"
        k = ["template <int RG>"]
        split = ["int64_t rc", "int64_t chunks", "float* __restrict__ kf_ws"]
        k.append(_column_signature(f"{kname}_wcols", params + split))
        k.append("  constexpr int WPR = 8 / RG, TW = 128 * WPR;  /* warps a row group, columns a tile */")
        k.append("  __shared__ float4 kf_wpart[256];")
        k += pre
        k.append("  const int lane = threadIdx.x & 31, ty = (threadIdx.x >> 5) / WPR;")
        k.append("  const int64_t tiles = (inner + TW - 1) / TW, total = outer * R * inner;")
        k.append("  const int64_t cells = outer * tiles;")
        k.append("  for (int64_t b = blockIdx.x; b < cells * chunks; b += gridDim.x) {")
        k.append("    const int64_t s = b / cells, o = (b % cells) / tiles;  /* row chunk s of rc rows */")
        k.append(
            "    const int64_t c0 = (b % tiles) * TW + ((threadIdx.x >> 5) % WPR) * 128, c = c0 + 4 * lane;"
        )
        k.append("    const int64_t lo = s * rc, hi = lo + rc < R ? lo + rc : R;")
        k.append(f"    float4 acc = {i4};")
        k.append("    for (int64_t j0 = lo + ty; j0 < hi; j0 += RG * 32) {")
        k.append("      const int64_t j1 = j0 + RG * 32 < hi ? j0 + RG * 32 : hi;")
        k.append(f"      float4 part = {i4};")
        k.append("      int64_t e = (o * R + j0) * inner + c0;  /* the warp's first element of row j */")
        k.append("      #pragma unroll 4")
        k.append("      for (int64_t j = j0; j < j1; j += RG, e += RG * inner) {")
        k += [
            f"        const float4 w{kk} = kf_realign4({ptr(leaf.name)} + e, lane, {ptr(leaf.name)} + total);"
            for kk, leaf in full
        ]
        k += self._float4_combine(step, src, full, loads, comb, "        ", "w{kk}", "part")
        k.append("      }")
        k += [f"      acc.{c} = {comb}(acc.{c}, part.{c});" for c in "xyzw"]
        k.append("    }")
        k.append("    if (RG > 1) {")
        k.append("      kf_wpart[threadIdx.x] = acc;")
        k.append("      __syncthreads();")
        k.append("      if (ty == 0) {")
        k.append("        for (int y = 1; y < RG; ++y) {")
        k.append("          const float4 p = kf_wpart[threadIdx.x + y * 32 * WPR];")
        k += [f"          acc.{c} = {comb}(acc.{c}, p.{c});" for c in "xyzw"]
        k.append("        }")
        k.append("      }")
        k.append("      __syncthreads();")
        k.append("    }")
        k.append("    if (ty == 0 && chunks == 1) {")
        for n, comp in enumerate("xyzw"):
            k.append(f"      if (c + {n} < inner) out[o * inner + c + {n}] = acc.{comp}{scale};")
        k.append("    } else if (ty == 0) {  /* the chunk's partials, combined by _wfin */")
        k.append("      float* w = kf_ws + (s * outer + o) * inner;")
        for n, comp in enumerate("xyzw"):
            k.append(f"      if (c + {n} < inner) w[c + {n}] = acc.{comp};")
        k.append("    }")
        k.append("  }")
        k.append("}")
        k.append(_column_signature(f"{kname}_wfin", ["int64_t chunks", "const float* __restrict__ kf_ws"]))
        k.append("  const int64_t n = outer * inner;")
        k.append("  for (int64_t t = blockIdx.x * 256 + threadIdx.x; t < n; t += (int64_t)gridDim.x * 256) {")
        k.append("    float r = kf_ws[t];")
        k.append(f"    for (int64_t s = 1; s < chunks; ++s) r = {comb}(r, kf_ws[s * n + t]);")
        k.append(f"    out[t] = r{scale};")
        k.append("  }")
        k.append("}")
        return k

    def _float4_row_into_part(
        self, step: Step, src: Ref, full: list[tuple[int, Leaf]], loads: dict, comb: str, indent: str
    ) -> list[str]:
        """Row j's 4 columns at i4 of every full operand as float4, each component combined into `part`."""
        k = [f"{indent}const float4 w{kk} = {_row4(leaf.name)};" for kk, leaf in full]
        return k + self._float4_combine(step, src, full, loads, comb, indent, "w{kk}", "part")

    def _float4_combine(
        self, step: Step, src: Ref, full: list[tuple[int, Leaf]], loads: dict, comb: str, indent: str,
        lane: str, target: str,
    ) -> list[str]:  # fmt: skip
        """The reduction's value for each component of a float4, combined into the float4 `target`."""
        return self._float4_components(
            step, src, full, loads, indent, lane, lambda c, v: f"{target}.{c} = {comb}({target}.{c}, {v});"
        )

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

    def _fused_cols_kernel4(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], consumer: Step, params: list[str],
        pre: list[str], loads: dict, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """`_fused_cols_kernel` over float4 columns (inner a multiple of 4, operands 16-byte aligned):
        a warp moves 512 contiguous bytes per row instead of 128."""
        full = self._full_leaves(leaves)
        k = [_column_signature(f"{kname}_fcols4", params + self._consumer_params(step, consumer))]
        k.append("  __shared__ float4 kf_part4[8][32];")
        k += pre
        scalars, cloads, cfull = self._float4_consumer_loads(step, consumer, {})
        k += scalars
        i4 = f"make_float4({init}, {init}, {init}, {init})"
        k += _FLOAT4_TILE_LOOP
        k.append(f"    float4 acc = {i4};")
        k.append("    if (i4 < q) {")
        k.append("      for (int64_t j0 = ty; j0 < R; j0 += 8 * 32) {")
        k.append("        const int64_t j1 = j0 + 8 * 32 < R ? j0 + 8 * 32 : R;")
        k.append(f"        float4 part = {i4};")
        k.append("        #pragma unroll 8")
        k.append("        for (int64_t j = j0; j < j1; j += 8) {")
        k += self._float4_row_into_part(step, src, full, loads, comb, "          ")
        k.append("        }")
        k += [f"        acc.{c} = {comb}(acc.{c}, part.{c});" for c in "xyzw"]
        k.append("      }")
        k.append("    }")
        k += _float4_tile_reduce(comb, scale)
        hoisted, rows = self._float4_consumer_rows(consumer, cloads, [f"p{n}." for n, _ in cfull])
        k += hoisted
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
        # evict-first stores keep L2 for the tile this loop re-reads
        k.append(
            "        __stcs("
            + f"reinterpret_cast<float4*>({ptr(consumer.out)} + (o * R + j) * inner) + i4, res);"
        )
        k += _CLOSE_ROW_LOOP_AND_TILE
        return k

    def _consumer_params(self, step: Step, consumer: Step) -> list[str]:
        extra = self._consumer_leaves(step, consumer)
        return [f"float* __restrict__ {ptr(consumer.out)}"] + [
            f"const float* __restrict__ {ptr(leaf.name)}" for leaf in extra
        ]

    def _float4_consumer_loads(
        self, step: Step, consumer: Step, cached: dict[str, int]
    ) -> tuple[list[str], dict, list[tuple[int, Leaf]]]:
        """How the fused consumer reads each operand, per float4 component `{c}`: the reduced column
        (`red4`), a scalar loaded once, a row of the reduction's input kept in registers (`cached`: leaf
        name -> register array index), or a float4 loaded per row (`p<n>`, returned in the list)."""
        scalars: list[str] = []
        cloads: dict = {}
        cfull: list[tuple[int, Leaf]] = []
        for n, leaf in enumerate(consumer.prologue_leaves(self.graph)):
            if leaf.name == step.out:
                cloads[leaf] = "red4.{c}"
            elif self._is_scalar(leaf):
                scalars.append(f"  const float pc{n} = {ptr(leaf.name)}[0];")
                cloads[leaf] = f"pc{n}"
            elif leaf.name in cached and leaf.trail == 0:
                cloads[leaf] = f"cw{cached[leaf.name]}[v].{{c}}"
            else:
                cfull.append((n, leaf))
                cloads[leaf] = f"p{n}.{{c}}"
        return scalars, cloads, cfull

    def _float4_consumer_rows(
        self, consumer: Step, cloads: dict, varying: list[str]
    ) -> tuple[list[str], list[str]]:
        """The consumer's statements for one float4 of a row, component by component into `res`, and
        its column-only statements hoisted before the row loop (`varying` marks row-dependent reads)."""
        hoisted: list[str] = []
        rows: list[str] = []
        for comp in "xyzw":
            lane = {leaf: text.replace("{c}", comp) for leaf, text in cloads.items()}
            b, val = emit(
                self.graph,
                consumer,
                Ref(consumer.root.name),
                lambda leaf, ll=lane: ll[leaf],
                indent="          ",
            )
            lifted, b, val = hoist_column_invariants(b, val, varying, f"_{comp}", "    ")
            hoisted += lifted
            rows += ["        {", *b, f"          res.{comp} = {val};", "        }"]
        return hoisted, rows

    def _fused_cols_kernel4_regs(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], consumer: Step, params: list[str],
        pre: list[str], loads: dict, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """`_fused_cols_kernel4` for reduced dims of at most 8 * V rows: each thread keeps its V rows of
        the reduction's operands in registers, so DRAM sees the input once and the output once."""
        full = self._full_leaves(leaves)
        k = ["template <int V>"]
        k.append(_column_signature(f"{kname}_fcols4r", params + self._consumer_params(step, consumer)))
        k.append("  __shared__ float4 kf_part4[8][32];")
        k += pre
        scalars, cloads, cfull = self._float4_consumer_loads(
            step, consumer, {leaf.name: kk for kk, leaf in full}
        )
        k += scalars
        k += _FLOAT4_TILE_LOOP
        k.append(f"    float4 acc = make_float4({init}, {init}, {init}, {init});")
        k += [f"    float4 cw{kk}[V];" for kk, _ in full]
        k.append("    #pragma unroll")
        k.append("    for (int v = 0; v < V; ++v) {  /* every load of the tile in flight at once */")
        k.append("      const int64_t j = ty + 8 * (int64_t)v;")
        k.append("      if (i4 < q && j < R) {")
        k += [f"        cw{kk}[v] = {_row4(leaf.name)};" for kk, leaf in full]
        k.append("      }")
        k.append("    }")
        k.append("    #pragma unroll")
        k.append("    for (int v = 0; v < V; ++v) {")
        k.append("      if (i4 < q && ty + 8 * v < R) {")
        k += self._float4_combine(step, src, full, loads, comb, "        ", "cw{kk}[v]", "acc")
        k.append("      }")
        k.append("    }")
        k += _float4_tile_reduce(comb, scale)
        hoisted, rows = self._float4_consumer_rows(consumer, cloads, [f"p{n}." for n, _ in cfull] + ["cw"])
        k += hoisted
        k.append("    #pragma unroll")
        k.append("    for (int v = 0; v < V; ++v) {")
        k.append("      const int64_t j = ty + 8 * (int64_t)v;")
        k.append("      if (i4 < q && j < R) {")
        k += [f"        const float4 p{n} = {_row4(leaf.name)};" for n, leaf in cfull]
        k.append("        float4 res;")
        k += rows
        k.append(f"        reinterpret_cast<float4*>({ptr(consumer.out)} + (o * R + j) * inner)[i4] = res;")
        k += _CLOSE_ROW_LOOP_AND_TILE
        return k

    def _fused_cols_kernel(
        self, kname: str, step: Step, consumer: Step, params: list[str], pre: list[str], body: list[str],
        val: str, init: str, comb: str, scale: str,
    ) -> list[str]:  # fmt: skip
        """`_tiled_cols_kernel` whose block then applies the consumer to its 32-column tile while that
        tile is still in L1: the input is read from DRAM once and the consumer's output written once."""
        g = self.graph
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
        k = _column_tile_open(f"{kname}_fcols", params + self._consumer_params(step, consumer), pre + pre2)
        k += _column_tile_reduce(body, val, init, comb, scale)
        k.append("    const float red = kf_part[0][tx];")
        varying = [text for text in loads.values() if "(o * R + j)" in text]
        hoisted, pbody, pval = hoist_column_invariants(pbody, pval, varying, "", "    ")
        k += hoisted
        k.append("    if (i < inner) {")
        k.append("      #pragma unroll 8")
        k.append("      for (int64_t j = ty; j < R; j += 8) {")
        k += pbody
        k.append(f"        __stcs({ptr(consumer.out)} + (o * R + j) * inner + i, {pval});")
        k += _CLOSE_ROW_LOOP_AND_TILE
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
        k += self._float4_row_into_part(step, src, full, loads, comb, "        ")
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


# The end of a fused kernel: its row loop, the guard around it, the barrier before the block's next
# tile reuses the shared partials, the loop over tiles, the kernel.
_CLOSE_ROW_LOOP_AND_TILE = ["      }", "    }", "    __syncthreads();", "  }", "}"]


# The float4 column kernels' loop over tiles: 8 row groups (ty) x 32 lanes (tx) of 4 columns each.
_FLOAT4_TILE_LOOP = [
    "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;",
    "  const int64_t q = inner / 4, tiles = (q + 31) / 32;",
    "  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {",
    "    const int64_t o = b / tiles, i4 = (b % tiles) * 32 + tx;",
]


def _float4_tile_reduce(comb: str, scale: str) -> list[str]:
    """The 8 row groups' float4 partials meet in shared memory; the column's result is written to `out`
    and every thread of the block gets it as `red4`."""
    k = ["    kf_part4[ty][tx] = acc;"]
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
    return k


def _column_signature(name: str, params: list[str]) -> str:
    """A column kernel's signature: (outer, R, inner) of the reduced view, the reduced output, params."""
    head = f"__global__ void __launch_bounds__(256) {name}(int64_t outer, int64_t R, int64_t inner,"
    return head + " float* __restrict__ out" + "".join(", " + p for p in params) + ") {"


def _row4(name: str) -> str:
    """Row j's 4 columns at i4 of operand `name`, as one float4 load."""
    return f"reinterpret_cast<const float4*>({ptr(name)} + (o * R + j) * inner)[i4]"


def _column_tile_open(name: str, params: list[str], pre: list[str], width: str = "32") -> list[str]:
    """Kernel head of the `width`-column x (256 / `width`)-row-group tiling of a 256-thread block:
    signature, scratch, the loop over tiles. `width` is a literal or a macro (a power of two, 32 to 256)."""
    k = [_column_signature(name, params)]
    k.append(f"  __shared__ float kf_part[256 / {width}][{width} + 1];")
    k += pre
    k.append(f"  const int tx = threadIdx.x % {width}, ty = threadIdx.x / {width};")
    k.append(f"  const int64_t tiles = (inner + {width} - 1) / {width};")
    k.append("  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {")
    k.append(f"    const int64_t o = b / tiles, i = (b % tiles) * {width} + tx;")
    return k


def _column_tile_reduce(
    body: list[str], val: str, init: str, comb: str, scale: str, width: str = "32"
) -> list[str]:
    """Each thread combines its row group in runs of 32 rows (bounded rounding), the row groups' partials
    meet in shared memory; the column's result is written to `out` and left in kf_part[0][tx] for the
    block. `width` as in `_column_tile_open`."""
    groups = f"(256 / {width})"
    k = [f"    float acc = {init};"]
    k.append("    if (i < inner) {")
    k.append(f"      for (int64_t j0 = ty; j0 < R; j0 += {groups} * 32) {{")
    k.append(f"        const int64_t j1 = j0 + {groups} * 32 < R ? j0 + {groups} * 32 : R;")
    k.append(f"        float part = {init};")
    k.append("        #pragma unroll 8")
    k.append(f"        for (int64_t j = j0; j < j1; j += {groups}) {{")
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
    k.append(f"      for (int y = 1; y < {groups}; ++y) r = {comb}(r, kf_part[y][tx]);")
    if scale:
        k.append(f"      r = r{scale};")
    k.append("      kf_part[0][tx] = r;")
    k.append("      if (i < inner) out[o * inner + i] = r;")
    k.append("    }")
    k.append("    __syncthreads();")
    return k


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

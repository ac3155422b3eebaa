"""CUDA row kernels: a row (the trailing reduced dims) per block or per warp, in registers or streamed.

Streaming float4 sweeps for reductions, the softmax / norm statistics, and the rowop kernels (block per
row re-reading global memory, warp per row, rows in registers as scalars or float4).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kernelfoundry.generators.heuristic.cuda_base import ROW_HEAD, EmitterBase
from kernelfoundry.generators.heuristic.entry import ptr
from kernelfoundry.generators.heuristic.expressions import literal
from kernelfoundry.generators.heuristic.graph import OpNode, Ref
from kernelfoundry.generators.heuristic.plan import Leaf, Step
from kernelfoundry.generators.heuristic.stepexpr import emit

# A leaf's read by its position along the last reduced dim (plan.AxisLeaf.index): its pointer, and the
# kf_divider of its size where the position wraps
_POSITION_READ = re.compile(r"^(\w+)\[(?:kf_mod\((a\d+n), j\)|j)\]$")


class RowKernels(EmitterBase):
    def _position_quads(self, leaves: list[Leaf], loads: dict) -> dict[Leaf, str]:
        """The leaves a float4 sweep may read four positions at a time (the last reduced dim's operands:
        a hinge loss's per-column target), each with the in-kernel condition that allows it: its
        pointer 16-byte aligned, the row's and its own size multiples of 4."""
        quads: dict[Leaf, str] = {}
        for leaf in leaves:
            match = _POSITION_READ.match(loads[leaf]) if leaf in self._axis_leaves else None
            if match is None:
                continue
            pointer, divider = match.groups()
            # rows of 4k elements start at a position of 4k (a peeled row's head is empty)
            allowed = f"(((uintptr_t){pointer}) % 16 == 0) && (R % 4 == 0)"
            quads[leaf] = f"{allowed} && ({divider}.d % 4 == 0)" if divider else allowed
        return quads

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
        span: tuple[str, str] | None = None,
        peel: bool = False,
        counted: bool = False,
    ) -> list[str]:
        """Stream one row [0, R) at `base` as float4: PER_THREAD loads per thread in flight, then the math.

        `stmt(value)` is the statement consuming one element's value; the row length must be a multiple of 4.
        `span` (first, end) streams only those float4 of the row (a split's share). `peel`: the row
        starts `head` elements before a 16-byte boundary (any length): the float4 cover
        [head, head + 4 * n4), the caller the rest (`counted`: the caller has declared n4).
        """
        full = self._full_leaves(leaves)
        i2 = indent + "  "
        first = "head + " if peel else ""

        quads = self._position_quads(leaves, loads)
        # with the quads loaded, a component names its position only where another leaf reads by it
        others_by_position = any(
            self._axis_leaves[leaf].by != "o"
            for leaf in leaves
            if leaf in self._axis_leaves and leaf not in quads
        )

        def body(u: str) -> list[str]:
            # each component's position `j` where a leaf is read by it
            def position(c: int) -> str:
                return f"{first}4 * (j4 + (int64_t){u} * {group}) + {c}"

            at = position if self._read_by_position(leaves) else None
            one_by_one = self._float4_components(
                step, src, full, loads, i2 + "  ", "w{kk}[" + u + "]", lambda _c, v: stmt(v), at
            )
            if not quads:
                return one_by_one
            # the leaves read by position along the row's last dim as one float4 each where their size
            # is a multiple of 4 and they are 16-byte aligned (then the row is too: its first position
            # is a multiple of 4, and four positions from one lie in the same period)
            names = {leaf: f"q{n}" for n, leaf in enumerate(quads)}
            k = [f"{i2}  if ({' && '.join(quads.values())}) {{"]
            k += [f"{i2}    float4 {name};" for name in names.values()]
            k.append(f"{i2}    {{")
            k.append(f"{i2}      const int64_t j = {position(0)};")
            k += [
                f"{i2}      {q} = *reinterpret_cast<const float4*>(&{loads[leaf]});"
                for leaf, q in names.items()
            ]
            k.append(f"{i2}    }}")
            at_quads = at if others_by_position else None
            k += self._float4_components(
                step,
                src,
                full,
                loads,
                i2 + "    ",
                "w{kk}[" + u + "]",
                lambda _c, v: stmt(v),
                at_quads,
                names,
            )
            k.append(f"{i2}  }} else {{")
            k += ["  " + line for line in one_by_one]
            k.append(f"{i2}  }}")
            return k

        at = "base + head" if peel else "base"
        if counted:
            k = [f"{indent}int64_t j4 = {tid};"]
        elif peel:
            k = [f"{indent}const int64_t n4 = (R - head) >> 2;", f"{indent}int64_t j4 = {tid};"]
        elif span is None:
            k = [f"{indent}const int64_t n4 = R >> 2;", f"{indent}int64_t j4 = {tid};"]
        else:
            k = [f"{indent}const int64_t n4 = {span[1]};", f"{indent}int64_t j4 = {span[0]} + {tid};"]
        k.append(f"{indent}for (; j4 + (int64_t)(PER_THREAD - 1) * {group} < n4;")
        k.append(f"{indent}     j4 += (int64_t)PER_THREAD * {group}) {{")
        for kk, _ in full:
            k.append(f"{i2}float4 w{kk}[PER_THREAD];")
        k.append(f"{i2}#pragma unroll")
        k.append(f"{i2}for (int u = 0; u < PER_THREAD; ++u) {{")
        for kk, leaf in full:
            k.append(
                f"{i2}  w{kk}[u] = reinterpret_cast<const float4*>({ptr(leaf.name)} + {at})"
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
                f"{{reinterpret_cast<const float4*>({ptr(leaf.name)} + {at})[j4]}};"
            )
        k += body("0")
        k.append(f"{indent}}}")
        return k

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

    def _stats(
        self, op: str, eps: str, sweep: Callable[[str], list[str]], online: bool, slot: str | None = None
    ) -> list[str]:
        """Row statistics: m, inv, ls (softmax family) or mean, rstd (norms); `sweep(stmt)` loops over xv.

        `slot`: the row is in registers and `slot` is the current element's register. Extra sweeps then
        cost no memory traffic, so the max comes first (no online rescaling, whose two exponentials per
        element made the H200 softmax compute-bound), and softmax leaves exp(x - m) in the register
        for the output (`xv * inv`): one exponential per element in all.
        """
        k: list[str] = []
        if op in ("softmax", "log_softmax"):
            k.append("    float m = -INFINITY, s = 0.0f;")
            if slot is not None:
                k += sweep("m = fmaxf(m, xv);")
                k.append("    m = " + self._reduce_call(1, "m") + ";")
                k += sweep(
                    f"{{ const float e = kf_exp(xv - m); {slot} = e; s += e; }}"
                    if op == "softmax"
                    else "s += kf_exp(xv - m);"
                )
                k.append("    s = " + self._reduce_call(0, "s") + ";")
            elif online:
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

    def _row_kernel(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str, warp: bool,
        vec: tuple[Step, Ref, list[Leaf], dict] | None = None,
    ) -> str:  # fmt: skip
        """Every pass re-reads the row from global memory (L2 catches most of it). One block per row, or
        with `warp` one warp per row (rows up to WARP_ROW_MAX): lane-strided sweeps, shuffle-only
        reductions. With `vec` (step, src, leaves, loads) and 16-byte aligned operands, every pass
        streams float4 from each row's first 16-byte boundary (PER_THREAD loads in flight a thread;
        scalars one at a time kept the rows of a long softmax latency-bound), the head and tail as
        scalars."""
        tid, group = ("lane", "32") if warp else ("threadIdx.x", "blockDim.x")

        def scalar(stmt: str, start: str = tid, end: str = "R", index: str = "") -> list[str]:
            return [
                f"    for (int64_t {'t' if index else 'j'} = {start}; {'t' if index else 'j'} < {end};"
                f" {'t' if index else 'j'} += {group}) {{",
                *([f"        const int64_t j = {index};"] if index else []),
                *xb,
                f"        const float xv = {xv};",
                f"        {stmt}",
                "    }",
            ]

        write = (
            "const float y = " + value + ";\n" + "\n".join(epilogue) + f"\n        out[base + j] = {result};"
        )
        sweep = scalar
        if vec is not None:
            step, src, leaves, loads = vec
            used: set = set()

            def record(leaf: Leaf) -> str:
                used.add(leaf)
                return loads[leaf]

            emit(self.graph, step, src, record, indent="")
            read = [leaf for leaf in leaves if leaf in used]
            ok = self._vec_ok(read, ("out",), whole_rows=False)
            rest = ("R - 4 * n4", "t < head ? t : t + 4 * n4")

            def sweep(stmt: str) -> list[str]:
                k = [f"    if ({ok}) {{", "      " + ROW_HEAD, "      const int64_t n4 = (R - head) >> 2;"]
                k += self._vec_sweep(
                    step, src, read, loads, tid, group, lambda v: f"{{ const float xv = {v}; {stmt} }}",
                    indent="      ", peel=True, counted=True,
                )  # fmt: skip
                k += ["  " + line for line in scalar(stmt, tid, *rest)]
                k += ["    } else {", *["  " + line for line in scalar(stmt)], "    }"]
                return k

            writes = [f"    if ({ok}) {{", "      " + ROW_HEAD, "      const int64_t n4 = (R - head) >> 2;"]
            writes += self._vec_write(step, src, read, loads, tid, group, value, epilogue, result)
            writes += ["  " + line for line in scalar(write, tid, *rest)]
            writes += ["    } else {", *["  " + line for line in scalar(write)], "    }"]
        eps = literal(float(self._eps))
        name, bound = (f"{kname}_warp", "256") if warp else (kname, "1024")
        k = [f"__global__ void __launch_bounds__({bound}) {name}{signature} {{"]
        k += self._row_loop_head(pre, warp)
        self._lanes = warp
        try:
            k += self._stats(op, eps, sweep, self.variant.online)
        finally:
            self._lanes = False
        k += writes if vec is not None else scalar(write)
        k += ["  }", "}"]
        return "\n".join(k)

    def _vec_write(
        self, step: Step, src: Ref, read: list[Leaf], loads: dict, tid: str, group: str, value: str,
        epilogue: list[str], result: str,
    ) -> list[str]:  # fmt: skip
        """The output pass of a peeled row as float4, PER_THREAD loads in flight a thread: the value of
        element j = head + 4 * j4 + c from the row's statistics, the epilogue, one float4 store."""
        full = self._full_leaves(read)

        def body(w: str, u: str) -> list[str]:
            k = ["          float4 res;"]
            for c, comp in enumerate("xyzw"):
                lanes = dict(loads)
                for kk, leaf in full:
                    lanes[leaf] = f"{w}{kk}[{u}].{comp}"
                b, v = self._emit(step, src, lanes, "            ")
                k += [
                    "          {",
                    f"            const int64_t j = head + 4 * j4u + {c};",
                    "            (void)j;",
                ]
                k += b
                k += [f"            const float xv = {v};", f"            const float y = {value};"]
                k += ["  " + line for line in epilogue]
                k += [f"            res.{comp} = {result};", "          }"]
            k.append("          reinterpret_cast<float4*>(out + base + head)[j4u] = res;")
            return k

        k = [f"      int64_t j4 = {tid};"]
        k.append(f"      for (; j4 + (int64_t)(PER_THREAD - 1) * {group} < n4;")
        k.append(f"           j4 += (int64_t)PER_THREAD * {group}) {{")
        for kk, _ in full:
            k.append(f"        float4 w{kk}[PER_THREAD];")
        k.append("        #pragma unroll")
        k.append("        for (int u = 0; u < PER_THREAD; ++u) {")
        for kk, leaf in full:
            k.append(
                f"          w{kk}[u] = reinterpret_cast<const float4*>({ptr(leaf.name)} + base + head)"
                f"[j4 + (int64_t)u * {group}];"
            )
        k.append("        }")
        k.append("        #pragma unroll")
        k.append("        for (int u = 0; u < PER_THREAD; ++u) {")
        k.append(f"          const int64_t j4u = j4 + (int64_t)u * {group};")
        k += ["  " + line for line in body("w", "u")]
        k.append("        }")
        k.append("      }")
        k.append(f"      for (; j4 < n4; j4 += {group}) {{")
        k.append("        const int64_t j4u = j4;")
        for kk, leaf in full:
            row4 = f"reinterpret_cast<const float4*>({ptr(leaf.name)} + base + head)"
            k.append(f"        const float4 w{kk}[1] = {{{row4}[j4]}};")
        k += body("w", "0")
        k.append("      }")
        return k

    @staticmethod
    def _row_loop_head(pre: list[str], warp: bool) -> list[str]:
        """Kernel prologue up to `base`: block scratch (block per row), operands, the loop over rows."""
        k = [] if warp else ["  __shared__ float kf_scratch[1024 + 33];"]
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
        return k

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
        # 32-bit float4 indices against R / 4 (the host launches these for R % 4 == 0 and rows of at
        # most 64 * ROW_BLOCK elements): 64-bit per-element guards cost registers (80 against 51 for
        # softmax's row of 8 float4s), and with them a block per SM less on the H200
        tid, group = ("lane", "32") if warp else ("(int)threadIdx.x", "ROW_BLOCK")

        def sweep(stmt: str) -> list[str]:
            return [
                "    #pragma unroll",
                "    for (int i = 0; i < V; ++i) {",
                f"      if ({tid} + i * {group} < R4) {{",
                "        #pragma unroll",
                "        for (int c = 0; c < 4; ++c) {",
                "          const float xv = xr[4 * i + c];",
                f"          {stmt}",
                "        }",
                "      }",
                "    }",
            ]

        name = f"{kname}_vwarp" if warp else f"{kname}_vregs"
        bound = "256" if warp else "ROW_BLOCK"
        k = ["template <int V>", f"__global__ void __launch_bounds__({bound}) {name}{signature} {{"]
        k += self._row_loop_head(pre, warp)
        k.append("    const int R4 = (int)(R >> 2);")
        k.append("    float xr[4 * V];")
        k.append("    #pragma unroll")
        k.append("    for (int i = 0; i < V; ++i) {")
        k.append(f"      const int j4 = {tid} + i * {group};")
        k.append("      if (j4 < R4) {")
        for kk, leaf in full:
            k.append(
                f"        const float4 w{kk} = reinterpret_cast<const float4*>({ptr(leaf.name)} + base)[j4];"
            )
        for c, comp in enumerate("xyzw"):
            lane = dict(loads)
            for kk, leaf in full:
                lane[leaf] = f"w{kk}.{comp}"
            b, v = self._emit(step, src, lane, "          ")
            k += ["        {", f"          const int64_t j = (int64_t)j4 * 4 + {c};", "          (void)j;"]
            k += b
            k += [f"          xr[4 * i + {c}] = {v};", "        }"]
        k.append("      } else {")
        k.append(f"        xr[4 * i] = xr[4 * i + 1] = xr[4 * i + 2] = xr[4 * i + 3] = {neutral};")
        k.append("      }")
        k.append("    }")
        eps = literal(float(self._eps))
        self._lanes = warp
        try:
            k += self._stats(op, eps, sweep, self.variant.online, slot="xr[4 * i + c]")
        finally:
            self._lanes = False
        if op == "softmax":
            value = "xv * inv"  # the registers hold exp(x - m) now
        k.append("    #pragma unroll")
        k.append("    for (int i = 0; i < V; ++i) {")
        k.append(f"      const int j4 = {tid} + i * {group};")
        k.append("      if (j4 < R4) {")
        k.append("        float4 res;")
        for c, comp in enumerate("xyzw"):
            k += [
                "        {",
                f"          const int64_t j = (int64_t)j4 * 4 + {c};",
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
                "      const int j = (int)threadIdx.x + i * ROW_BLOCK;",
                "      if (j < Ri) {",
                "        const float xv = xr[i];",
                f"        {stmt}",
                "      }",
                "    }",
            ]

        eps = literal(float(self._eps))
        k = ["template <int PT>", f"__global__ void __launch_bounds__(ROW_BLOCK) {kname}_regs{signature} {{"]
        k += self._row_loop_head(pre, False)
        k.append("    const int Ri = (int)R;  /* rows of at most 32 * ROW_BLOCK elements come here */")
        k.append("    float xr[PT];")
        k.append("    #pragma unroll")
        k.append("    for (int i = 0; i < PT; ++i) {")
        k.append("      const int j = (int)threadIdx.x + i * ROW_BLOCK;")
        k.append(f"      xr[i] = {neutral};")
        k.append("      if (j < Ri) {")
        k += xb
        k.append(f"        xr[i] = {xv};")
        k.append("      }")
        k.append("    }")
        k += self._stats(op, eps, sweep, self.variant.online, slot="xr[i]")
        if op == "softmax":
            value = "xv * inv"  # the registers hold exp(x - m) now
        k += sweep(
            "const float y = " + value + ";\n" + "\n".join(epilogue) + f"\n        out[base + j] = {result};"
        )
        k += ["  }", "}"]
        return "\n".join(k)

    def _row_kernels_split(
        self, kname: str, signature: str, pre: list[str], step: Step, src: Ref, leaves: list[Leaf],
        loads: dict, xb: list[str], xv: str, value: str, epilogue: list[str], result: str,
    ) -> str:  # fmt: skip
        """LayerNorm / GroupNorm rows too long for registers, split over S blocks each (S = 1 when there
        are rows enough): `_sstats` sums x - shift and its square over its share of the row (float4 when
        `vec`; the shift is the row's first element, so that E[d^2] - E[d]^2 does not cancel), one
        partial pair per block into `part`; `_snorm` combines the row's S pairs and normalises its share.
        Two reads and one write of DRAM, every SM busy however few the rows."""
        used: set = set()

        def record(leaf: Leaf) -> str:
            used.add(leaf)
            return loads[leaf]

        emit(self.graph, step, src, record, indent="")
        full = [(k, leaf) for k, leaf in self._full_leaves(leaves) if leaf in used]
        head = signature.replace("float* __restrict__ out", "int S, int vec, float* __restrict__ part", 1)

        def loop(body_vec: list[str], body_scalar: list[str]) -> list[str]:
            k = ["    if (vec) {"]
            k.append("      const int64_t R4 = R >> 2, per4 = (R4 + S - 1) / S, lo4 = sp * per4;")
            k.append("      const int64_t hi4 = lo4 + per4 < R4 ? lo4 + per4 : R4;")
            k.append("      for (int64_t j4 = lo4 + threadIdx.x; j4 < hi4; j4 += blockDim.x) {")
            for kk, leaf in full:
                load = f"reinterpret_cast<const float4*>({ptr(leaf.name)} + base)[j4]"
                k.append(f"        const float4 w{kk} = {load};")
            k += body_vec
            k.append("      }")
            k.append("    } else {")
            k.append(
                "      const int64_t per = (R + S - 1) / S, lo = sp * per, hi = lo + per < R ? lo + per : R;"
            )
            k.append("      for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {")
            k += ["  " + b for b in xb]
            k.append(f"          const float xv = {xv};")
            k += body_scalar
            k.append("      }")
            k.append("    }")
            return k

        def components(stmt: Callable[[str], list[str]]) -> list[str]:
            k: list[str] = []
            for c, comp in enumerate("xyzw"):
                lanes = dict(loads)
                for kk, leaf in full:
                    lanes[leaf] = f"w{kk}.{comp}"
                b, v = self._emit(step, src, lanes, "          ")
                k += ["        {", f"          const int64_t j = j4 * 4 + {c};", "          (void)j;", *b]
                k += [f"          const float xv = {v};", *stmt(comp), "        }"]
            return k

        def row_head(name: str, params: str) -> list[str]:
            k = [f"__global__ void __launch_bounds__(256) {kname}_{name}{params} {{"]
            k.append("  __shared__ float kf_scratch[1024 + 33];")
            k += pre
            k.append("  for (int64_t t = blockIdx.x; t < outer * S; t += gridDim.x) {")
            k.append("    const int64_t o = t / S, sp = t % S, base = o * R;")
            k.append("    float shift;")
            k.append("    {")
            k.append("      const int64_t j = 0;")
            k.append("      (void)j;")
            k += xb
            k.append(f"      shift = {xv};")
            k.append("    }")
            return k

        k = row_head("sstats", head)
        k.append("    float s1 = 0.0f, s2 = 0.0f;")
        accumulate = ["          { const float d = xv - shift; s1 += d; s2 += d * d; }"]
        k += loop(components(lambda _c: accumulate), accumulate)
        k.append("    s1 = " + self._reduce_call(0, "s1") + ";")
        k.append("    s2 = " + self._reduce_call(0, "s2") + ";")
        k.append("    if (threadIdx.x == 0) { part[2 * t] = s1; part[2 * t + 1] = s2; }")
        k += ["  }", "}"]
        norm_head = head.replace(
            "float* __restrict__ part", "const float* __restrict__ part, float* __restrict__ out", 1
        )
        k += row_head("snorm", norm_head)
        k.append("    float s1 = 0.0f, s2 = 0.0f;")
        k.append("    for (int64_t i = threadIdx.x; i < S; i += blockDim.x) {")
        k.append("      s1 += part[2 * (o * S + i)];")
        k.append("      s2 += part[2 * (o * S + i) + 1];")
        k.append("    }")
        k.append("    s1 = " + self._reduce_call(0, "s1") + ";")
        k.append("    s2 = " + self._reduce_call(0, "s2") + ";")
        k.append("    const float dm = s1 / (float)R;")
        k.append("    const float mean = shift + dm;")
        k.append("    const float var = fmaxf(s2 / (float)R - dm * dm, 0.0f);")
        k.append(f"    const float rstd = rsqrtf(var + {literal(float(self._eps))});")

        def write(comp: str) -> list[str]:
            return [f"          const float y = {value};", *epilogue, f"          res.{comp} = {result};"]

        vec_body = ["        float4 res;", *components(write)]
        vec_body.append("        reinterpret_cast<float4*>(out + base)[j4] = res;")
        scalar_body = [
            f"          const float y = {value};",
            *epilogue,
            f"          out[base + j] = {result};",
        ]
        k += loop(vec_body, scalar_body)
        k += ["  }", "}"]
        return "\n".join(k)

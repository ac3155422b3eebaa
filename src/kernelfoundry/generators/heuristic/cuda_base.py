"""What every part of the CUDA emitter shares: the emitter's state, operand loads and reduction calls.

Pure string building; see cuda.py for the emitter itself.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelfoundry.generators.heuristic.entry import ptr, shp
from kernelfoundry.generators.heuristic.graph import Graph, Ref
from kernelfoundry.generators.heuristic.plan import AxisLeaf, Leaf, Step, axis_leaf
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant


class EmitterBase:
    """State and helpers of one unit's emission (`CudaEmitter` is this plus the row and column kernels)."""

    def __init__(self, graph: Graph, variant: Variant) -> None:
        self.graph = graph
        self.variant = variant
        self.kernels: list[str] = []
        self.counter = 0
        self._eps = 1e-5
        self._lanes = False  # reductions across one warp's lanes (warp-per-row kernels)
        # reductions across the blocks holding a row (cuda_onchip_rows.py): "cluster" (a thread block
        # cluster's distributed shared memory), "grid" (co-resident blocks through global memory), or ""
        self._held_by = ""
        self._steps: list[Step] = []  # the part being emitted, for fusion across adjacent steps
        self._fused_into: dict[str, tuple[str, int]] = {}  # pointwise out -> (reduction input, d1)
        # the reduction / row op being emitted: its leaves that vary along one dim (plan.axis_leaf)
        self._axis_leaves: dict[Leaf, AxisLeaf] = {}

    def _enter(self, step: Step) -> None:
        """A step's emission begins: which of its leaves vary along one dim of its input only."""
        self._axis_leaves = {}
        src = step.root.args[0] if step.root.args else None
        if step.kind in ("pointwise", "pool") or not isinstance(src, Ref):
            return
        xshape = self.graph.shapes[src.name]
        for leaf in step.prologue_leaves(self.graph):
            along = axis_leaf(self.graph, leaf, step.root, xshape)
            if along is not None:
                self._axis_leaves[leaf] = along

    def _read_by_position(self, leaves: list[Leaf]) -> bool:
        """Whether a leaf is read by the position `j` in the reduced range: rows then run element by
        element (their float4 paths name positions otherwise)."""
        return any(self._axis_leaves[leaf].by != "o" for leaf in leaves if leaf in self._axis_leaves)

    def _launch_check(self) -> list[str]:
        return ["    if (cudaGetLastError() != cudaSuccess) { rc = KF_ERR_LAUNCH; goto kf_done; }"]

    def _row_params(self, leaves: list[Leaf], index: str) -> tuple[list[str], list[str], list[str], dict]:
        params, args, pre, loads = [], [], [], {}
        for k, leaf in enumerate(leaves):
            ls = self.graph.shapes[leaf.name]
            n = 1
            for d in ls:
                n *= d
            params.append(f"const float* __restrict__ {ptr(leaf.name)}")
            args.append(ptr(leaf.name))
            if leaf in self._axis_leaves:
                # element (<o or j> / s) % n (every row kernel names its row `o`, every scalar sweep its
                # position `j`); s and n from the input `X` in scope at the launch, n the leaf's own
                # size (never out of it), as kf_dividers (a multiply and a shift, not a division)
                along = self._axis_leaves[leaf]
                params += [f"kf_divider a{k}s", f"kf_divider a{k}n"]
                size = f"kf_prod(&{shp(leaf.name)}, 0, {shp(leaf.name)}.nd)"
                args += [
                    f"kf_divider_of(kf_prod(&X, {along.axis + 1}, {along.end}))",
                    f"kf_divider_of({size})",
                ]
                loads[leaf] = f"{ptr(leaf.name)}[{along.index(f'a{k}s', f'a{k}n')}]"
            elif n == 1:
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
            if n > 1 and leaf not in self._axis_leaves:
                out.append((k, leaf))
        return out

    def _vec_ok(self, leaves: list[Leaf], also: tuple[str, ...] = (), whole_rows: bool = True) -> str:
        """Host-side condition for the float4 row paths: operands 16-byte aligned and, with
        `whole_rows`, rows of 4k elements (without it the kernel peels each row's unaligned head)."""
        ptrs = [ptr(leaf.name) for _, leaf in self._full_leaves(leaves)] + list(also)
        rows = ["(R % 4 == 0)"] if whole_rows else []
        return " && ".join(rows + [f"(((uintptr_t){p}) % 16 == 0)" for p in ptrs])

    def _emit(self, step: Step, src: Ref, loads: dict, indent: str) -> tuple[list[str], str]:
        return emit(self.graph, step, src, lambda leaf: loads[leaf], indent=indent)

    def _float4_components(
        self, step: Step, src: Ref, full: list[tuple[int, Leaf]], loads: dict, indent: str, lane: str,
        stmt: Callable[[str, str], str], position: Callable[[int], str] | None = None,
        quads: dict[Leaf, str] | None = None,
    ) -> list[str]:  # fmt: skip
        """The step's value for each component of a float4 element, in its own scope: operand kk is read
        from the float4 that `lane` names (e.g. "w{kk}"), `stmt(component, value)` consumes the value.
        `position(c)`: component c's position in the row, declared as `j` in its scope (for the leaves
        read by position, plan.axis_leaf). `quads`: leaves read by position from a float4 the caller
        loaded (its name), the four components' values at once."""
        k: list[str] = []
        for c, comp in enumerate("xyzw"):
            lanes = dict(loads)
            for kk, leaf in full:
                lanes[leaf] = lane.format(kk=kk) + f".{comp}"
            for leaf, quad in (quads or {}).items():
                lanes[leaf] = f"{quad}.{comp}"
            b, v = self._emit(step, src, lanes, indent + "  ")
            at = [f"{indent}  const int64_t j = {position(c)};"] if position is not None else []
            k += [f"{indent}{{", *at, *b, f"{indent}  {stmt(comp, v)}", f"{indent}}}"]
        return k

    def _is_scalar(self, leaf: Leaf) -> bool:
        return _numel_of(tuple(self.graph.shapes[leaf.name])) == 1

    def _consumer_loads(
        self, step: Step, consumer: Step, element: Callable[[Leaf], str]
    ) -> tuple[list[str], dict, list[tuple[int, Leaf]]]:
        """How a reduction's broadcast consumer reads its operands in a fused row kernel: (the kernel's
        loads of its scalars, each operand's expression, its full operands by position): the reduced
        value is `red`, a scalar `pc<n>`, a full operand `element(leaf)`."""
        pre: list[str] = []
        loads: dict = {}
        full: list[tuple[int, Leaf]] = []
        for n, leaf in enumerate(consumer.prologue_leaves(self.graph)):
            if leaf.name == step.out:
                loads[leaf] = "red"
            elif self._is_scalar(leaf):
                pre.append(f"  const float pc{n} = {ptr(leaf.name)}[0];")
                loads[leaf] = f"pc{n}"
            else:
                full.append((n, leaf))
                loads[leaf] = element(leaf)
        return pre, loads, full

    def _reduce_call(self, op_code: int, v: str) -> str:
        if self._lanes:
            return f"kf_warp_reduce<{op_code}>({v})"
        if self._held_by == "cluster":
            return f"kf_cluster_reduce<{op_code}>({v}, kf_scratch, kf_xchg, kf_parity)"
        if self._held_by == "grid":
            exchange = "kf_row_slots, kf_row_arrivals, kf_blocks, kf_rank, kf_phase"
            return f"kf_grid_reduce<{op_code}>({v}, kf_scratch, {exchange})"
        fn = "kf_block_reduce_tree" if self.variant.reduction == "block" else "kf_block_reduce_warp"
        return f"{fn}<{op_code}>({v}, kf_scratch)"


# The elements of a row before its first 16-byte boundary (operands' base pointers are aligned, so
# element `base` of every full operand sits at the same offset from one)
ROW_HEAD = "const int64_t lead = (4 - (base & 3)) & 3, head = lead < R ? lead : R;"


def _numel_of(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

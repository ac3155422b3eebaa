"""Planning a graph part into kernel steps: where values are materialised and what is fused.

A *part* is a maximal run of generated (pointwise / reduction / rowop) nodes between torch nodes; it
becomes one entry point. A *step* is one parallel loop nest (one CUDA kernel) inside the entry point: a
pointwise step evaluates a fused expression per output element, a reduction step reduces a (possibly
fused) prologue expression, a rowop step normalises rows and may evaluate a fused epilogue while
writing. `fuse=False` gives the direct translation: one step per op, every intermediate materialised.

Pure: no torch, no code emission.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, Shape, UnsupportedGraph


@dataclass(frozen=True)
class Leaf:
    """A tensor a step reads: an entry-point input or a materialised intermediate."""

    name: str
    trail: int = 0


@dataclass
class Step:
    kind: str  # "pointwise" | "reduction" | "rowop" | "pool"
    out: str  # the value the step writes
    root: OpNode  # the reduction / rowop node, or the final pointwise node
    inlined: set[str] = field(default_factory=set)  # pointwise nodes evaluated in registers
    epilogue: bool = False  # rowop whose pointwise consumers are evaluated while writing `out`

    def leaves(self, graph: Graph) -> list[Leaf]:
        """Tensors the step loads, in first-use order: prologue (root input), root extras, epilogue."""
        found = self.prologue_leaves(graph)
        for a in self.root.args[1:] if self.kind != "pointwise" else ():
            if isinstance(a, Ref):
                found.append(Leaf(a.name, a.trail))
        return list(dict.fromkeys(found + self.epilogue_leaves(graph)))

    def prologue_leaves(self, graph: Graph) -> list[Leaf]:
        if self.kind == "pointwise":
            return self._visit(graph, Ref(self.root.name))
        src = self.root.args[0]
        return self._visit(graph, src) if isinstance(src, Ref) else []

    def epilogue_leaves(self, graph: Graph) -> list[Leaf]:
        return self._visit(graph, Ref(self.out)) if self.epilogue else []

    def _visit(self, graph: Graph, start: Ref) -> list[Leaf]:
        seen: dict[Leaf, None] = {}

        def visit(name: str, trail: int) -> None:
            if name in self.inlined:
                node = graph.node(name)
                assert node is not None
                for a in node.args:
                    if isinstance(a, Ref):
                        visit(a.name, a.trail)
            elif not (self.epilogue and name == self.root.name):
                seen.setdefault(Leaf(name, trail), None)

        visit(start.name, start.trail)
        return list(seen)


@dataclass
class Part:
    entry_point: str
    nodes: list[OpNode]
    inputs: list[str]  # values read from outside the part, in entry-point input order
    outputs: list[str]  # values the part writes for later use or as graph outputs
    steps: list[Step]


def partition(
    graph: Graph, fuse: bool, single_entry: str = "kf_forward", axis_leaves: bool = False
) -> list[Part]:
    """Split the graph's generated nodes into parts; without torch nodes there is one part, the ABI entry.
    `axis_leaves`: reductions and row ops read their prologue's one-dim operands themselves (`axis_leaf`)
    instead of reading the prologue written out (the CUDA emitter's plans: on a GPU the pass over memory
    costs more than evaluating the prologue again in each of the step's passes; on the CPU at the bench's
    sizes it did not, bench/results/seed_ab_axis_leaves_cpu.json)."""
    parts: list[list[OpNode]] = []
    current: list[OpNode] = []
    for n in graph.nodes:
        if n.kind in KEPT_IN_TORCH:
            if current:
                parts.append(current)
                current = []
        else:
            current.append(n)
    if current:
        parts.append(current)
    result: list[Part] = []
    no_torch = not graph.has_torch_nodes
    for i, nodes in enumerate(parts):
        names = {n.name for n in nodes}
        inputs: dict[str, None] = {}
        for n in nodes:
            for a in n.args:
                if isinstance(a, Ref) and a.name not in names:
                    inputs.setdefault(a.name, None)
        later_users = {
            a.name for n in graph.nodes if n.name not in names for a in n.args if isinstance(a, Ref)
        }
        outputs = [n.name for n in nodes if n.name in later_users or n.name in graph.outputs]
        if no_torch:
            input_names = [v.name for v in graph.inputs]
            outputs = list(graph.outputs)
        else:
            input_names = list(inputs)
        entry = single_entry if no_torch else f"kf_part{i}"
        part = Part(entry, nodes, input_names, outputs, [])
        part.steps = plan_steps(graph, part, fuse, axis_leaves)
        result.append(part)
    return result


def reduce_range(node: OpNode, rank: int) -> tuple[int, int, bool]:
    """[d0, d1) reduced (or normalised) by a reduction / rowop, and keepdim; must be contiguous."""
    a = node.attrs
    if node.op in ("softmax", "log_softmax"):
        d = int(a.get("dim", -1) if a.get("dim") is not None else -1)
        d = d + rank if d < 0 else d
        return d, d + 1, True
    if node.op == "layer_norm":
        k = len(a["normalized_shape"])
        return rank - k, rank, True
    if node.op == "group_norm":
        return 1, rank, True
    dim = a.get("dim")
    keep = bool(a.get("keepdim", False))
    if dim is None:
        return 0, rank, keep
    dims = sorted({(int(d) + rank) % rank for d in (dim if isinstance(dim, list | tuple) else [dim])})
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise UnsupportedGraph(f"`{node.name}` reduces non-adjacent dimensions {dims}")
    return dims[0], dims[-1] + 1, keep


def row_lead(node: OpNode, xshape: Shape) -> int:
    """How many leading dims of a reduction's or row op's input index its rows (their product is the
    row count): those before the reduced range; a group norm's rows are (image, group), one channel
    each where there are as many groups as channels (an instance norm)."""
    if node.op == "group_norm":
        return 2 if len(xshape) > 1 and int(node.attrs["num_groups"]) == int(xshape[1]) else 1
    if node.kind == "pool":
        return len(xshape) - int(node.attrs["pool_window"].dims)
    return reduce_range(node, len(xshape))[0]


def row_mode(graph: Graph, leaf: Leaf, shape: Shape, lead: int) -> int | None:
    """How a kernel over `shape` whose rows are its first `lead` dims reads `leaf`: 1 where the leaf is
    full along the other dims (a run of it a row), 0 where it is constant along them (one value a row,
    a per-channel bias), None otherwise; along the row dims it may be full or broadcast."""
    ls = tuple(graph.shapes[leaf.name]) + (1,) * leaf.trail
    if len(ls) > len(shape):
        return None
    ls = (1,) * (len(shape) - len(ls)) + ls
    if any(d not in (1, n) for d, n in zip(ls[:lead], shape[:lead], strict=True)):
        return None
    if ls[lead:] == tuple(shape[lead:]):
        return 1
    return 0 if all(d == 1 for d in ls[lead:]) else None


@dataclass(frozen=True)
class AxisLeaf:
    """A leaf of a reduction or row op that varies along one dim `axis` of its input only (a per-channel
    bias, a per-column scale), read by the row `o` (the axis is among the dims [start, end) that index
    rows: one value a row) or by the position `j` within the reduced dims [start, end): its element
    (by / prod(xshape[axis + 1:end])) % xshape[axis], without the division or the remainder where the
    axis ends or starts the range (`index`)."""

    axis: int
    by: str  # "o", "j", or "channel": a group norm's channel, from its row and position
    start: int
    end: int

    def index(self, divisor: str, count: str) -> str:
        """The element's index, `divisor` and `count` the names of the `kf_divider`s of
        prod(xshape[axis + 1:end]) and xshape[axis] where they are needed (a multiply and a shift each,
        not a 64-bit division); a group norm's channel from the G, C and HW its kernels take, in 32 bits:
        they refuse rows of 2^31 elements or more."""
        if self.by == "channel":
            return "(o % G) * (C / G) + (int64_t)((uint32_t)j / (uint32_t)HW)"
        last, first = self.axis == self.end - 1, self.axis == self.start
        if last and first:
            return self.by
        if last:
            return f"kf_mod({count}, {self.by})"
        if first:
            return f"kf_div({divisor}, {self.by})"
        return f"kf_mod({count}, kf_div({divisor}, {self.by}))"


def axis_leaf(graph: Graph, leaf: Leaf, node: OpNode, xshape: Shape) -> AxisLeaf | None:
    """How a reduction's or row op's (`node`, input shape `xshape`) leaf that varies along one dim
    only is read, or None (a full-shape or one-element leaf, or one read otherwise): by the row where
    the dim indexes rows, else by the position `j` in the reduced range (every kernel of a reduction or
    a row op names each element's position so). Not along a group norm's channels where a group has
    several, it is read by the channel its row and position make (`channel_leaf_is_cheap` decides)."""
    shape = tuple(graph.shapes[leaf.name]) + (1,) * leaf.trail
    if len(shape) > len(xshape) or _numel(shape) <= 1:
        return None
    shape = (1,) * (len(xshape) - len(shape)) + shape
    varying = [d for d, n in enumerate(shape) if n != 1]
    if len(varying) != 1 or shape[varying[0]] != xshape[varying[0]] or shape == tuple(xshape):
        return None
    axis = varying[0]
    lead = row_lead(node, xshape)
    if axis < lead:
        return AxisLeaf(axis, "o", 0, lead)
    if node.op == "group_norm":
        return AxisLeaf(axis, "channel", 1, len(xshape)) if axis == 1 else None
    d0, d1, _ = reduce_range(node, len(xshape))
    return AxisLeaf(axis, "j", d0, d1) if d0 <= axis < d1 else None


# pointwise ops whose evaluation costs less than a pass over memory even done once a norm's pass
AFFINE_OPS = frozenset({"add", "sub", "rsub", "mul", "div", "neg"})


def channel_leaf_is_cheap(graph: Graph, cone: set[str]) -> bool:
    """Whether a group norm may evaluate its prologue `cone` in each of its passes (two or three over
    the row) rather than read it written out once: only where the cone is affine (a conv's bias, a
    scale), not a sigmoid or a mish evaluated again and again."""
    return all((node := graph.node(name)) is not None and node.op in AFFINE_OPS for name in cone)


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _full_or_scalar(graph: Graph, leaf: Leaf, shape: Shape) -> bool:
    s = graph.shapes[leaf.name]
    return _numel(s) == 1 or (leaf.trail == 0 and tuple(s) == tuple(shape))


def _epilogue_fusable(graph: Graph, leaf: Leaf, node: OpNode) -> bool:
    """Whether a fused epilogue of `node` (a rowop or a pool) can read `leaf` at each output: full or a
    scalar, a pool's also constant along its pooled dims."""
    if node.kind == "pool":
        return row_mode(graph, leaf, node.shape, row_lead(node, node.shape)) is not None
    return _full_or_scalar(graph, leaf, node.shape)


def _cone(graph: Graph, root: str, materialised: set[str], part_names: set[str]) -> set[str]:
    """Pointwise nodes evaluated in registers to produce `root`, stopping at materialised values."""
    cone: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        node = graph.node(name)
        if name in cone or node is None or name not in part_names or node.kind != "pointwise":
            continue
        if name in materialised and name != root:
            continue
        cone.add(name)
        stack.extend(a.name for a in node.args if isinstance(a, Ref))
    return cone


def plan_steps(graph: Graph, part: Part, fuse: bool, axis_leaves: bool = False) -> list[Step]:
    names = {n.name for n in part.nodes}
    mat: set[str] = set(part.outputs)
    if not fuse:
        return [Step(n.kind, n.name, n, {n.name} if n.kind == "pointwise" else set()) for n in part.nodes]
    heavy_steps = [n for n in part.nodes if n.kind in ("reduction", "rowop", "pool")]
    mat.update(n.name for n in heavy_steps)
    # Prologue fusion: a reduction / rowop reads its pointwise input cone in registers when every
    # tensor that cone loads is the input's full shape or a scalar (or, with `axis_leaves`, varies
    # along one dim); a pool's window taps when each is full or constant along the pooled dims.
    # Otherwise the input is materialised.
    for r in heavy_steps:
        src = r.args[0]
        if not isinstance(src, Ref) or src.name not in names:
            continue
        cone = _cone(graph, src.name, mat - {src.name}, names)
        probe = Step(r.kind, r.name, r, cone)
        xshape = graph.shapes[src.name]

        def fusable(leaf: Leaf, node: OpNode = r, xshape: Shape = xshape, cone: set[str] = cone) -> bool:
            if node.kind == "pool":
                return row_mode(graph, leaf, xshape, row_lead(node, xshape)) is not None
            if _full_or_scalar(graph, leaf, xshape):
                return True
            along = axis_leaf(graph, leaf, node, xshape) if axis_leaves else None
            return along is not None and (along.by != "channel" or channel_leaf_is_cheap(graph, cone))

        if not all(fusable(leaf) for leaf in probe.prologue_leaves(graph)):
            mat.add(src.name)
    # Epilogue fusion: a rowop or pool whose value flows only through same-shape pointwise nodes into
    # one sink.
    epilogue_of: dict[str, str] = {}
    for r in (n for n in heavy_steps if n.kind in ("rowop", "pool")):
        sink = r.name
        while True:
            users = graph.users(sink)
            if len(users) != 1 or users[0].kind != "pointwise" or users[0].name not in names:
                break
            if users[0].shape != r.shape or (sink != r.name and sink in mat):
                break
            sink = users[0].name
        if sink == r.name or r.name in part.outputs:
            continue
        cone = _cone(graph, sink, (mat - {r.name}) | {r.name}, names)
        if any(u.name not in cone for u in graph.users(r.name)):
            continue
        probe = Step(r.kind, sink, r, cone, epilogue=True)
        if all(_epilogue_fusable(graph, leaf, r) for leaf in probe.epilogue_leaves(graph)):
            mat.discard(r.name)
            mat.add(sink)
            epilogue_of[sink] = r.name
    steps: list[Step] = []
    fused_sinks = set(epilogue_of)
    for n in part.nodes:
        if n.name in fused_sinks:
            continue
        if n.kind in ("reduction", "rowop", "pool") and n.name not in mat:
            sink = next(s for s, r in epilogue_of.items() if r == n.name)
            cone = _cone(graph, sink, mat | {n.name}, names)
            src = n.args[0]
            if isinstance(src, Ref) and src.name not in mat:
                cone |= _cone(graph, src.name, mat, names)
            steps.append(Step(n.kind, sink, n, cone, epilogue=True))
        elif n.kind in ("reduction", "rowop", "pool"):
            src = n.args[0]
            cone = set()
            if isinstance(src, Ref) and src.name not in mat:
                cone = _cone(graph, src.name, mat, names)
            steps.append(Step(n.kind, n.name, n, cone))
        elif n.name in mat:
            steps.append(Step("pointwise", n.name, n, _cone(graph, n.name, mat, names)))
    return steps

"""The mean or sum over a linear map's output features without the map (a reformulation, like
conv_means.py).

`y = x @ B (+ b)` averaged over its last dim is `x @ mean_j B[:, j] (+ mean(b))`: a matrix-vector
product instead of a matrix product (for nn.Linear, B = W^T and mean_j B[:, j] is W averaged over its
rows). Affine ops between the map and the mean commute with it: those whose other operand is constant
along the features (a scale, a shift by a number) act on the mean as they did on each feature; a shift
by an operand that varies along the features (a per-feature bias, subtracted) becomes a shift by that
operand's mean; a scale that varies along them does not commute (not rewritten). A sum is the mean times
the feature count. KernelBench level 2 has GEMMs whose output is only ever summed or averaged over its
features (14_Gemm_Divide_Sum_Scaling, 51_Gemm_Subtract_GlobalAvgPool_...): a 1024 x 8192 x 8192 GEMM
(2.7 ms on the H200) becomes a pass over W and a matrix-vector product.

`lower_feature_means` replaces the map by a node without an fx node (`glue`: the product with the
averaged weight), shaped (..., 1); a varying shift's operand by its mean (another such node); a sum at
the end reads the chain's value times the feature count (a generated multiply). The fused seeds read the
rewritten graph (candidate.py); the direct translation keeps the map. Pure graph rewriting.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, broadcast_shapes
from kernelfoundry.generators.heuristic.plan import reduce_range

_SCALES = frozenset({"mul", "div", "neg"})
_SHIFTS = frozenset({"add", "sub", "rsub"})


def _linear(graph: Graph, node: OpNode) -> tuple[str, str, str | None] | None:
    """(glue call of the mean over the output features with `{0}` x, `{1}` the weight, `{2}` the bias;
    the weight's and the bias's names) of an nn.Linear module node or a matmul by a 2-D matrix."""
    fx = node.fx_node
    if node.kind != "heavy" or fx is None or len(node.args) < 1 or not isinstance(node.args[0], Ref):
        return None
    if fx.op == "call_module" and node.op == "module" and not node.attrs.keys() - {"module"}:
        module = graph.modules.get(str(fx.target))
        if type(module).__name__ != "Linear" or len(fx.args) != 1 or fx.kwargs:
            return None
        params = {v.qualname: v.name for v in graph.inputs}
        weight = params[f"{fx.target}.weight"]
        bias = params.get(f"{fx.target}.bias") if module.bias is not None else None
        return "torch.matmul({0}, {1}.mean(0).unsqueeze(-1))", weight, bias
    if node.op == "matmul" and len(node.args) == 2 and isinstance(node.args[1], Ref) and not node.attrs:
        b = node.args[1]
        if b.trail or b.name in graph.opaque or len(graph.shapes.get(b.name, ())) != 2:
            return None
        return "torch.matmul({0}, {1}.mean(-1, keepdim=True))", b.name, None
    return None


def _varies_along_last(graph: Graph, operand: Any, rank: int) -> bool | None:
    """Whether an operand varies along the last of `rank` dims (None: not a plain operand)."""
    if not isinstance(operand, Ref):
        return False if isinstance(operand, float | int) else None
    if operand.name not in graph.shapes or operand.name in graph.opaque:
        return None
    shape = tuple(graph.shapes[operand.name]) + (1,) * operand.trail
    return len(shape) > 0 and shape[-1] != 1 and len(shape) <= rank


def _chain(graph: Graph, start: OpNode) -> tuple[list[OpNode], OpNode] | None:
    """The affine nodes after `start` (each the sole reader of the one before) and the sum or mean over
    the last dim that ends them; None when the value goes anywhere else or an op does not commute."""
    rank = len(start.shape)
    steps: list[OpNode] = []
    current = start
    while True:
        nxt = graph.sole_reader(current.name)
        if nxt is None:
            return None
        at = [i for i, a in enumerate(nxt.args) if isinstance(a, Ref) and a.name == current.name]
        if len(at) != 1 or nxt.args[at[0]].trail:  # type: ignore[union-attr]
            return None
        if nxt.kind == "reduction" and nxt.op in ("sum", "mean"):
            return (steps, nxt) if reduce_range(nxt, rank)[:2] == (rank - 1, rank) else None
        if nxt.kind != "pointwise" or nxt.op not in _SCALES | _SHIFTS:
            return None
        if nxt.op == "div" and at[0] != 0:
            return None
        for i, a in enumerate(nxt.args):
            varies = _varies_along_last(graph, a, rank) if i != at[0] else False
            if varies is None or (varies and nxt.op in _SCALES):
                return None
        steps.append(nxt)
        current = nxt


def _position(nodes: list[OpNode], name: str) -> int:
    return next(i for i, n in enumerate(nodes) if n.name == name)


def lower_feature_means(graph: Graph) -> Graph:
    """The graph with each linear map whose output only reaches a sum or mean over its features through
    affine ops computed as that mean directly, the ops after it on (..., 1) values."""
    nodes = list(graph.nodes)
    shapes = dict(graph.shapes)
    changed = False
    for node in graph.nodes:
        found = _linear(graph, node)
        chain = _chain(graph, node) if found is not None else None
        if found is None or chain is None:
            continue
        call, weight, bias = found
        steps, reduction = chain
        rank, features = len(node.shape), node.shape[-1]
        small = (*node.shape[:-1], 1)
        x = node.args[0]
        assert isinstance(x, Ref)
        operands = (Ref(x.name), Ref(weight)) + ((Ref(bias),) if bias else ())
        glue = f"{call} + {{2}}.mean()" if bias else call
        nodes[nodes.index(node)] = OpNode(
            node.name, "linear_feature_mean", "other", operands, {"glue": glue}, small
        )
        shapes[node.name] = small
        value = small
        in_chain = {node.name, *(s.name for s in steps)}
        for step in steps:
            args = list(step.args)
            for i, a in enumerate(args):
                if isinstance(a, Ref) and a.name not in in_chain:
                    if _varies_along_last(graph, a, rank):
                        # a per-feature shift: its mean over the features
                        shape = (*graph.shapes[a.name], *(1,) * a.trail)
                        mean = OpNode(
                            f"{step.name}_feature_mean_{i}", "feature_mean", "other", (Ref(a.name),),
                            {"glue": f"{{0}}{'.unsqueeze(-1)' * a.trail}.mean(-1, keepdim=True)"},
                            (*shape[:-1], 1),
                        )  # fmt: skip
                        nodes.insert(_position(nodes, step.name), mean)
                        shapes[mean.name] = mean.shape
                        args[i] = Ref(mean.name)
                        a = args[i]
                    value = broadcast_shapes(value, tuple(shapes[a.name]) + (1,) * a.trail)
            shapes[step.name] = value
            nodes[_position(nodes, step.name)] = replace(step, args=tuple(args), shape=value)
        if reduction.op == "sum":
            last = steps[-1].name if steps else node.name
            scaled = OpNode(
                f"{reduction.name}_features", "mul", "pointwise", (Ref(last), float(features)), {}, value
            )
            shapes[scaled.name] = value
            at = _position(nodes, reduction.name)
            nodes.insert(at, scaled)
            nodes[at + 1] = replace(reduction, args=(Ref(scaled.name), *reduction.args[1:]))
        changed = True
    return replace(graph, nodes=nodes, shapes=shapes) if changed else graph

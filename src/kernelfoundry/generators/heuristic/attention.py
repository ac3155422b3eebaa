"""Scaled dot-product attention as the ops it is made of (a reformulation, like unbias.py).

`F.scaled_dot_product_attention(q, k, v)` without a mask, dropout or causality is
softmax(q k^T * scale) v. Kept whole, the only generated form is the op kernels' attention family (a
thread a query row: on KernelBench's 97_ScaledDotProductAttention, 32 x 32 heads of 512 x 1024, seconds a
call on the H200). Rewritten, the two products are matmuls the glue runs in the library (cuBLAS / MKL,
like every other matmul the fused seeds keep) and the scale and the softmax over the key axis are a
generated row op between them, fused. The fused seeds read the rewritten graph (candidate.py); the direct
translation keeps the node, so the op kernel stays a candidate.

The new matmul nodes have no fx node: `glue` in their attributes is the call the glue writes, `{0}` and
`{1}` its operands. Pure graph rewriting; never touches tensors.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from kernelfoundry.generators.heuristic.classify import classify_op
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref

_ARGUMENTS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
SCORES_CALL = "torch.matmul({0}, {1}.transpose(-2, -1))"
PRODUCT_CALL = "torch.matmul({0}, {1})"


def _plain_attention(graph: Graph, node: OpNode) -> tuple[str, str, str, float] | None:
    """(q, k, v, scale) of an attention node the rewrite covers, else None."""
    import torch

    fx = node.fx_node
    if node.op != "scaled_dot_product_attention" or fx is None or fx.op != "call_function":
        return None
    settings: dict[str, Any] = dict(zip(_ARGUMENTS, fx.args, strict=False))
    settings.update(fx.kwargs)
    if set(settings) - set(_ARGUMENTS):
        return None
    plain = settings.get("attn_mask") is None and not settings.get("is_causal", False)
    plain = plain and not settings.get("enable_gqa", False) and settings.get("dropout_p", 0.0) == 0.0
    names = []
    for key in ("query", "key", "value"):
        arg = settings.get(key)
        if not isinstance(arg, torch.fx.Node):
            return None
        names.append(graph.aliases.get(arg.name, arg.name))
    if not plain or any(n in graph.opaque or n not in graph.shapes for n in names):
        return None
    q, k, v = (tuple(graph.shapes[n]) for n in names)
    if len(q) < 2 or not (len(q) == len(k) == len(v)) or not (q[:-2] == k[:-2] == v[:-2]):
        return None
    if q[-1] != k[-1] or k[-2] != v[-2] or q[-1] == 0:
        return None
    scale = settings.get("scale")
    if scale is not None and not isinstance(scale, int | float):
        return None
    return names[0], names[1], names[2], float(scale) if scale is not None else 1.0 / math.sqrt(q[-1])


def lower_attention(graph: Graph) -> Graph:
    """The graph with every plain attention node written as matmul, scale, softmax, matmul."""
    nodes: list[OpNode] = []
    shapes = dict(graph.shapes)
    changed = False
    for n in graph.nodes:
        found = _plain_attention(graph, n)
        taken = {f"{n.name}_scores", f"{n.name}_scaled", f"{n.name}_weights"} & set(shapes)
        if found is None or taken:
            nodes.append(n)
            continue
        q, k, v, scale = found
        scores_shape = (*graph.shapes[q][:-1], graph.shapes[k][-2])
        parts = [
            (f"{n.name}_scores", "matmul", (Ref(q), Ref(k)), {"glue": SCORES_CALL}, scores_shape),
            (f"{n.name}_scaled", "mul", (Ref(f"{n.name}_scores"), scale), {}, scores_shape),
            (f"{n.name}_weights", "softmax", (Ref(f"{n.name}_scaled"),), {"dim": -1}, scores_shape),
            (n.name, "matmul", (Ref(f"{n.name}_weights"), Ref(v)), {"glue": PRODUCT_CALL}, tuple(n.shape)),
        ]
        for name, op, args, attrs, shape in parts:
            nodes.append(OpNode(name, op, classify_op(op), args, attrs, shape, None))
            shapes[name] = shape
        changed = True
    return replace(graph, nodes=nodes, shapes=shapes) if changed else graph

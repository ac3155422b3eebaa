"""CUDA: a conv's bias added by the generated part after it, not by cuDNN (a reformulation).

cuDNN adds a float32 conv's bias in a pass of its own over the whole output: on the H200 1.6 ms of
eager's 5.7 ms for level2/25_Conv2d_Min_Tanh_Tanh, 3.4 of 7.5 for 5_ConvTranspose2d_Subtract_Tanh
(tests/kernelbench/probe_conv_layouts.py; bench/results/h200_2026-12-03_pipeline). torch.compile calls
the conv without it and adds it in the fused kernel after. Where every user of a conv module the glue
keeps in torch is a generated op, the glue calls the conv without its bias (F.conv*d on the module's
weight, `unbiased`) and the graph gains the per-channel add, which the part after it fuses at no cost.
Pure graph rewriting; never touches tensors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref

# module type -> its torch.nn.functional call
CONV_FUNCTIONS = {
    "Conv1d": "conv1d",
    "Conv2d": "conv2d",
    "Conv3d": "conv3d",
    "ConvTranspose1d": "conv_transpose1d",
    "ConvTranspose2d": "conv_transpose2d",
    "ConvTranspose3d": "conv_transpose3d",
}


def functional_conv(graph: Graph, node: OpNode, x: str, weight: str, bias: str) -> str:
    """Python for the conv module `node` calls as its torch.nn.functional call on `x` with the weight
    and bias expressions given (the module's own, folded ones, or None), its geometry spelled out;
    keyword arguments, since conv*d and conv_transpose*d order them differently."""
    module = graph.modules[node.fx_node.target]
    name = type(module).__name__
    geometry = f"stride={module.stride!r}, padding={module.padding!r}, dilation={module.dilation!r}"
    if name.startswith("ConvTranspose"):
        geometry += f", output_padding={module.output_padding!r}"
    return f"F.{CONV_FUNCTIONS[name]}({x}, {weight}, {bias}, {geometry}, groups={module.groups})"


def unbias_convs(graph: Graph) -> Graph:
    """The graph with each eligible conv `unbiased` and its bias added by a new pointwise node."""
    nodes = list(graph.nodes)
    shapes = dict(graph.shapes)
    changed = False
    for heavy in graph.nodes:
        module = _conv_module(graph, heavy)
        if module is None or heavy.name in graph.outputs:
            continue
        # torch nodes nothing reads are not emitted (torch.min(x, d) whose values a generated amin computes)
        users = [u for u in graph.users(heavy.name) if u.kind not in KEPT_IN_TORCH or _live(graph, u)]
        if not users or any(u.kind in KEPT_IN_TORCH for u in users):
            continue  # a torch op reads the conv: the bias would cost a pass of its own again
        bias = next((v for v in graph.inputs if v.qualname == f"{heavy.fx_node.target}.bias"), None)
        if bias is None or tuple(bias.shape) != (heavy.shape[1],):
            continue
        added = OpNode(
            f"{heavy.name}_biased",
            "add",
            "pointwise",
            (Ref(heavy.name), Ref(bias.name, len(heavy.shape) - 2)),  # (C,) as (C, 1, ...)
            {},
            heavy.shape,
        )
        shapes[added.name] = heavy.shape
        at = nodes.index(heavy)
        nodes[at] = replace(heavy, attrs={**heavy.attrs, "unbiased": True})
        nodes.insert(at + 1, added)
        for i, n in enumerate(nodes):
            if n in users:
                args = tuple(
                    Ref(added.name, a.trail) if isinstance(a, Ref) and a.name == heavy.name else a
                    for a in n.args
                )
                nodes[i] = replace(n, args=args)
        changed = True
    return replace(graph, nodes=nodes, shapes=shapes) if changed else graph


def _live(graph: Graph, node: OpNode) -> bool:
    return bool(graph.users(node.name)) or node.name in graph.outputs


def _conv_module(graph: Graph, node: OpNode) -> Any:
    """The conv module `node` calls (with a bias, zero padding, not folded), else None."""
    if node.op != "module" or node.fx_node is None or node.fx_node.op != "call_module":
        return None
    if "fold" in node.attrs or len(node.fx_node.args) != 1 or node.fx_node.kwargs:
        return None
    module = graph.modules.get(node.fx_node.target)
    if module is None or type(module).__name__ not in CONV_FUNCTIONS:
        return None
    if getattr(module, "bias", None) is None or getattr(module, "padding_mode", "zeros") != "zeros":
        return None
    return module


def unbiased_call(graph: Graph, node: OpNode, x: str) -> str:
    """Python for the conv without its bias: F.conv*d on the module's weight."""
    return functional_conv(graph, node, x, f"self.{node.fx_node.target}.weight", "None")

"""Folding per-channel affine tails into the weights of the heavy op before them (a reformulation).

conv/linear followed by `+ bias`, `- bias`, `* c`, `/ c` (per-channel parameters or constants) or an
inference batch norm computes conv(x, W * s) + (b * s + t) for a per-channel scale s and shift t: the
glue computes W * s and b * s + t from the parameters (O(weights), not O(activations)) and the tail
kernel is left with what is not affine (the activation, ...). Only folds when at least one generated op
remains after the fold. Pure graph rewriting; never touches tensors.
"""

from __future__ import annotations

from dataclasses import replace

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref
from kernelfoundry.generators.heuristic.unbias import functional_conv

_FOLDABLE_MODULES = ("Conv1d", "Conv2d", "Conv3d", "Linear")


def _per_channel(graph: Graph, ref: Ref, channels: int, spatial: int) -> bool:
    """A parameter/buffer holding one value per output channel, aligned with the channel dimension."""
    value = next((v for v in graph.inputs if v.name == ref.name and v.kind in ("param", "buffer")), None)
    if value is None:
        return False
    shape = tuple(value.shape) + (1,) * ref.trail
    return shape == (channels,) + (1,) * spatial


def fold_affine_tails(graph: Graph) -> tuple[Graph, bool]:
    """The graph with foldable tails folded into their heavy op's `fold` attribute; and whether any was."""
    nodes = list(graph.nodes)
    rename: dict[str, str] = {}
    changed = False
    for heavy in list(nodes):
        if heavy.op != "module" or heavy.fx_node is None or heavy.fx_node.op != "call_module":
            continue
        module = graph.modules.get(heavy.fx_node.target)
        if module is None or type(module).__name__ not in _FOLDABLE_MODULES:
            continue
        if getattr(module, "padding_mode", "zeros") != "zeros":
            continue
        channels = heavy.shape[1] if len(heavy.shape) > 1 else heavy.shape[0]
        spatial = max(len(heavy.shape) - 2, 0)
        steps: list[tuple[str, object]] = []
        current = heavy.name
        folded: list[OpNode] = []
        while True:
            users = [n for n in nodes if any(isinstance(a, Ref) and a.name == current for a in n.args)]
            if len(users) != 1 or current in graph.outputs:
                break
            user = users[0]
            step = _affine_step(graph, user, current, channels, spatial)
            if step is None:
                break
            steps.append(step)
            folded.append(user)
            current = user.name
        remaining = [n for n in nodes if n not in folded and n.kind not in KEPT_IN_TORCH]
        if not folded or not remaining:
            continue
        attrs = dict(heavy.attrs)
        attrs["fold"] = tuple(steps)
        nodes[nodes.index(heavy)] = replace(heavy, attrs=attrs)
        for f in folded:
            nodes.remove(f)
        rename[current] = heavy.name
        changed = True
    if not changed:
        return graph, False

    def fix(a: object) -> object:
        return Ref(rename.get(a.name, a.name), a.trail) if isinstance(a, Ref) else a

    nodes = [replace(n, args=tuple(fix(a) for a in n.args)) for n in nodes]
    outputs = [rename.get(o, o) for o in graph.outputs]
    return Graph(graph.inputs, nodes, outputs, graph.shapes, graph.modules, graph.aliases), True


def _affine_step(graph: Graph, node: OpNode, current: str, channels: int, spatial: int) -> tuple | None:
    args = node.args
    if node.op in ("add", "sub") and len(args) == 2:
        if (
            args[0] == Ref(current)
            and isinstance(args[1], Ref)
            and _per_channel(graph, args[1], channels, spatial)
        ):
            return (node.op, args[1].name)
        reversed_add = node.op == "add" and args[1] == Ref(current) and isinstance(args[0], Ref)
        if reversed_add and _per_channel(graph, args[0], channels, spatial):  # type: ignore[arg-type]
            return ("add", args[0].name)  # type: ignore[union-attr]
        if isinstance(args[1], float) and args[0] == Ref(current):
            return (node.op + "_const", args[1])
        return None
    if node.op in ("mul", "div") and len(args) == 2:
        if args[0] == Ref(current) and isinstance(args[1], float):
            return (node.op + "_const", args[1])
        if node.op == "mul" and args[1] == Ref(current) and isinstance(args[0], float):
            return ("mul_const", args[0])
        return None
    if node.op == "batch_norm" and args[0] == Ref(current):
        refs = [a.name for a in args[1:] if isinstance(a, Ref)]
        return ("batch_norm", (tuple(refs), float(node.attrs["eps"]), bool(node.attrs.get("affine"))))
    return None


def folded_call(graph: Graph, heavy: OpNode, x: str) -> str:
    """Python for the heavy op with its folded tail: F.conv2d / F.linear on folded weight and bias."""
    module_name = heavy.fx_node.target
    module = graph.modules[module_name]
    qual = {v.name: f"self.{v.qualname}" for v in graph.inputs}
    base = f"self.{module_name}"
    scale = "1.0"
    shift = f"{base}.bias" if module.bias is not None else f"{base}.weight.new_zeros({base}.weight.shape[0])"
    for kind, payload in heavy.attrs["fold"]:
        if kind in ("add", "sub"):
            sign = "+" if kind == "add" else "-"
            shift = f"({shift} {sign} {qual[payload]}.reshape(-1))"
        elif kind in ("add_const", "sub_const"):
            shift = f"({shift} {'+' if kind == 'add_const' else '-'} {payload!r})"
        elif kind in ("mul_const", "div_const"):
            op = "*" if kind == "mul_const" else "/"
            scale = f"({scale} {op} {payload!r})"
            shift = f"({shift} {op} {payload!r})"
        else:
            refs, eps, affine = payload
            mean, var = qual[refs[0]], qual[refs[1]]
            k = f"torch.rsqrt({var} + {eps!r})"
            if affine:
                k = f"({qual[refs[2]]} * {k})"
            scale = f"({scale} * {k})"
            shift = f"(({shift} - {mean}) * {k}" + (f" + {qual[refs[3]]})" if affine else ")")
    kind = type(module).__name__
    view = "-1" + ", 1" * (module.weight.dim() - 1)
    weight = f"{base}.weight"
    if scale != "1.0":
        weight = f"({base}.weight * torch.as_tensor({scale}, device={base}.weight.device).reshape({view}))"
    if kind == "Linear":
        return f"F.linear({x}, {weight}, {shift})"
    return functional_conv(graph, heavy, x, weight, shift)

"""Capturing a task's reference as a small dataflow graph the proposer can generate kernels from.

torch.fx traces `Model.forward` symbolically; ShapeProp runs it once on the task's inputs so every node
carries its shape. Each fx node becomes an `OpNode` with a canonical op name, operands (`Ref` to a graph
value, or a baked float constant) and attributes; modules are resolved (nn.LayerNorm -> layer_norm with
its parameters as operands, nn.BatchNorm in inference -> its pointwise formula, an adaptive average
pool to size 1 -> mean, torch.norm (2 / Frobenius) -> the square root of a sum of squares, ...).
Scalars from `get_init_inputs` and constants in `forward` (`torch.tensor(c)` included) are baked as
floats.

Must never compile or run a kernel; torch is imported lazily so the module imports without it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH, classify_op
from kernelfoundry.tasks.model import ShapeVariant, Task, TaskError

Shape = tuple[int, ...]

# torch.fx's symbolic tracing patches nn.Module.__call__ for the whole process while it runs: two traces
# at once (a caller generating in threads) broke each other ("module is not installed as a submodule",
# "CURRENT_PATCHER is None") and left the patch behind for every later module call. One at a time.
_TRACING = threading.Lock()


@dataclass(frozen=True)
class Ref:
    """A use of a graph value, optionally viewed with `trail` singleton dimensions appended.

    (Batch norm's per-channel statistics of shape (C,) are used as (C, 1, 1) against NCHW.)
    """

    name: str
    trail: int = 0


Operand = Ref | float


@dataclass(frozen=True)
class Value:
    """A tensor entering the graph: a forward input, a parameter or a buffer, with its ABI input index."""

    name: str
    kind: str  # "input" | "param" | "buffer"
    index: int
    shape: Shape
    qualname: str = ""  # parameter/buffer path in the module ("conv.weight"); forward arg name for inputs


@dataclass(frozen=True)
class OpNode:
    name: str
    op: str
    kind: str  # classify.KINDS
    args: tuple[Operand, ...]
    attrs: Mapping[str, Any]
    shape: Shape
    fx_node: Any = field(default=None, compare=False, repr=False)  # kept for torch nodes (glue)


@dataclass
class Graph:
    inputs: list[Value]
    nodes: list[OpNode]
    outputs: list[str]
    shapes: dict[str, Shape]
    modules: Mapping[str, Any] = field(default_factory=dict)  # qualname -> nn.Module, for glue
    aliases: Mapping[str, str] = field(default_factory=dict)  # fx names of identity ops -> their value
    # values that are not float32 tensors (integer / bool inputs, indices, sizes): only torch reads them
    opaque: frozenset[str] = frozenset()
    # values of tensors fx made constants of (qualname -> nested lists), rebuilt by the glue
    constants: Mapping[str, Any] = field(default_factory=dict)
    # torch nodes generated as op kernels beside the parts (settle.py sets it when the glue alone
    # would perform every operation of the reference)
    generated_ops: frozenset[str] = frozenset()

    def node(self, name: str) -> OpNode | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def users(self, name: str) -> list[OpNode]:
        return [n for n in self.nodes if any(isinstance(a, Ref) and a.name == name for a in n.args)]

    def sole_reader(self, name: str) -> OpNode | None:
        """The one node that reads `name`, where `name` is no output of the graph (a rewrite may then
        change the value `name` holds)."""
        users = self.users(name)
        return users[0] if len(users) == 1 and name not in self.outputs else None

    @property
    def has_torch_nodes(self) -> bool:
        return any(n.kind in KEPT_IN_TORCH for n in self.nodes)


class UnsupportedGraph(TaskError):
    def __init__(self, message: str) -> None:
        super().__init__("unsupported", message)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """torch's broadcast of the shapes (right-aligned; UnsupportedGraph where they do not broadcast)."""
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise UnsupportedGraph(f"operands of shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


# Positional signatures used to bind call_function / call_method arguments to names.
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "gelu": ("input", "approximate"),
    "leaky_relu": ("input", "negative_slope"),
    "elu": ("input", "alpha"),
    "hardtanh": ("input", "min_val", "max_val"),
    "softplus": ("input", "beta", "threshold"),
    "clamp": ("input", "min", "max"),
    "clip": ("input", "min", "max"),
    "pow": ("input", "exponent"),
    "softmax": ("input", "dim"),
    "log_softmax": ("input", "dim"),
    "sum": ("input", "dim", "keepdim"),
    "mean": ("input", "dim", "keepdim"),
    "amax": ("input", "dim", "keepdim"),
    "amin": ("input", "dim", "keepdim"),
    "logsumexp": ("input", "dim", "keepdim"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "group_norm": ("input", "num_groups", "weight", "bias", "eps"),
}


def _bind(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    names = _SIGNATURES.get(op, ())
    bound: dict[str, Any] = {}
    for i, a in enumerate(args):
        bound[names[i] if i < len(names) else f"arg{i}"] = a
    bound.update(kwargs)
    return bound


def capture(task: Task, shape: ShapeVariant | None = None, seed: int = 0) -> Graph:
    """Trace the task's reference and annotate shapes. Raises UnsupportedGraph naming what failed."""
    import torch
    from torch import fx
    from torch.fx.passes.shape_prop import ShapeProp

    from kernelfoundry.tasks.reference import instantiate

    shape = shape or (task.shapes[0] if task.shapes else ShapeVariant("default"))
    ref = instantiate(task, shape, seed, "cpu")
    tensor_inputs = [
        x if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float32) for x in ref.inputs
    ]
    with _TRACING:
        try:
            gm = fx.symbolic_trace(ref.model)
        except Exception as exc:
            raise UnsupportedGraph(
                f"torch.fx could not trace the reference: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            ShapeProp(gm).propagate(*tensor_inputs)
        except Exception as exc:
            raise UnsupportedGraph(f"shape propagation failed: {type(exc).__name__}: {exc}") from exc
    return _lower(gm, tensor_inputs)


def _lower(gm: Any, inputs: Sequence[Any]) -> Graph:
    import torch

    modules = dict(gm.named_modules())
    params = list(gm.named_parameters())
    buffers = list(gm.named_buffers())
    values: list[Value] = []
    shapes: dict[str, Shape] = {}
    qual_to_name: dict[str, str] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, n in enumerate(placeholders):
        shp = tuple(inputs[i].shape)
        values.append(Value(n.name, "input", i, shp, n.target))
        shapes[n.name] = shp
    offset = len(placeholders)
    for j, (q, p) in enumerate(params):
        name = "p_" + q.replace(".", "_")
        values.append(Value(name, "param", offset + j, tuple(p.shape), q))
        shapes[name] = tuple(p.shape)
        qual_to_name[q] = name
    offset += len(params)
    for j, (q, b) in enumerate(buffers):
        name = "b_" + q.replace(".", "_")
        values.append(Value(name, "buffer", offset + j, tuple(b.shape), q))
        shapes[name] = tuple(b.shape)
        qual_to_name[q] = name
    # Integer / bool inputs (class indices, masks) are only read by ops kept in torch.
    opaque: set[str] = {
        v.name for v in values if v.kind == "input" and inputs[v.index].dtype != torch.float32
    }
    opaque |= {qual_to_name[q] for q, t in [*params, *buffers] if t.dtype != torch.float32}

    nodes: list[OpNode] = []
    pairs: dict[
        str, tuple[Any, str]
    ] = {}  # torch.max / min with a dim: (values, indices) taken apart by getitem
    alias: dict[str, str] = {}  # identity ops (dropout in eval, get_attr of a parameter) resolve to a value
    outputs: list[str] = []

    # Tensors fx made constants of (`torch.tensor(c)` in forward): not in the reference's state dict,
    # so one-element ones are baked as numbers and the glue rebuilds the others from their values.
    traced_constants = {q: b for q, b in buffers if q.startswith("_tensor_constant")}

    scalars: dict[str, float] = {}  # one-element float tensors built from a literal in forward

    def ref(a: Any) -> Operand:
        if isinstance(a, torch.fx.Node) and a.name in scalars:
            return scalars[a.name]
        if isinstance(a, torch.fx.Node):
            if a.op == "get_attr" and a.target in traced_constants:
                value = traced_constants[a.target]
                if value.numel() == 1 and value.dtype.is_floating_point:
                    return float(value.item())
            return Ref(alias.get(a.name, a.name))
        if isinstance(a, bool):
            return float(a)
        if isinstance(a, int | float):
            return float(a)
        raise UnsupportedGraph(f"operand {a!r} is neither a tensor nor a scalar")

    def add(n: Any, op: str, args: Sequence[Operand], attrs: Mapping[str, Any] | None = None) -> None:
        meta = n.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            raise UnsupportedGraph(f"node `{n.name}` ({op}) does not produce a single tensor")
        if meta.dtype != torch.float32:
            raise UnsupportedGraph(f"node `{n.name}` ({op}) produces {meta.dtype}; only float32 is supported")
        if any(isinstance(a, Ref) and a.name in opaque for a in args):
            raise UnsupportedGraph(f"node `{n.name}` ({op}) reads a value that is not a float32 tensor")
        shp = tuple(meta.shape)
        kind = classify_op(op)
        nodes.append(OpNode(n.name, op, kind, tuple(args), dict(attrs or {}), shp, n))
        shapes[n.name] = shp

    def synth(name: str, op: str, args: Sequence[Operand], attrs: Mapping[str, Any], shp: Shape) -> Ref:
        """A node no fx node stands for (a loss's parts): generated, never replayed alone by torch."""
        if name in shapes:
            raise UnsupportedGraph(f"node name `{name}` is taken")
        nodes.append(OpNode(name, op, classify_op(op), tuple(args), dict(attrs), tuple(shp), None))
        shapes[name] = tuple(shp)
        return Ref(name)

    def add_torch(n: Any, op: str) -> None:
        """The node stays in torch (the glue replays it): any op, any result (tuples, sizes, ints)."""
        meta = n.meta.get("tensor_meta")
        is_float = meta is not None and hasattr(meta, "shape") and meta.dtype == torch.float32
        shp = tuple(meta.shape) if is_float else ()
        if not is_float:
            opaque.add(n.name)
        kind = classify_op(op)
        kind = kind if kind in KEPT_IN_TORCH else "other"
        refs = tuple(Ref(alias.get(a.name, a.name)) for a in n.all_input_nodes)
        nodes.append(OpNode(n.name, op, kind, refs, {}, shp, n))
        shapes[n.name] = shp

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            result = n.args[0]
            items = result if isinstance(result, tuple | list) else (result,)
            for it in items:
                if not isinstance(it, torch.fx.Node):
                    raise UnsupportedGraph("the reference returns something other than tensors")
                outputs.append(alias.get(it.name, it.name))
            continue
        if n.op == "get_attr":
            if n.target in qual_to_name:
                alias[n.name] = qual_to_name[n.target]
                continue
            raise UnsupportedGraph(f"attribute `{n.target}` is neither a parameter nor a buffer")
        if n.op == "call_module":
            try:
                _lower_module(n, modules[n.target], qual_to_name, ref, add, alias, synth, shapes)
            except UnsupportedGraph:
                add_torch(n, _module_op(modules[n.target]))
            continue
        op = n.target if n.op == "call_method" else getattr(n.target, "__name__", str(n.target))
        op = _CANONICAL.get(op, op)
        if op == "einsum" and _einsum_is_matmul(n):
            op = "matmul"  # a contraction of A's last dim with a matrix: A @ B (the glue replays the einsum)
        if op in ("max", "min") and _has_dim(n):
            # torch.max(x, dim) is a (values, indices) pair: the getitem that takes one lowers it
            pairs[n.name] = (n, op)
            add_torch(n, op)
            continue
        if op in ("max", "min") and not n.kwargs and len(n.args) in (1, 2):
            # torch.max(x): the max of every element; torch.max(a, b) of two tensors: elementwise
            if len(n.args) == 1:
                op = "a" + op
            elif isinstance(n.args[1], torch.fx.Node):
                op = "maximum" if op == "max" else "minimum"
        if op in ("getitem", "getattr") and isinstance(n.args[0], torch.fx.Node) and n.args[0].name in pairs:
            try:
                _lower_pair_item(n, *pairs[n.args[0].name], ref, add)
            except UnsupportedGraph:
                add_torch(n, op)
            continue
        if op == "tensor" and _float_literal(n) is not None:
            # torch.tensor(c, device=x.device) in forward: generated ops read the number c, torch ops
            # (the glue) the tensor
            scalars[n.name] = _float_literal(n)
        try:
            _lower_call(n, op, ref, add, alias, synth, shapes)
        except UnsupportedGraph:
            add_torch(n, op)
    # A (values, indices) pair whose every item was lowered (values as amax / amin) is dead: kept, it
    # would split the generated nodes around it into two parts (a materialised intermediate between)
    read = {a.name for n in nodes for a in n.args if isinstance(a, Ref)} | set(outputs)
    nodes = [n for n in nodes if n.name not in pairs or n.name in read]
    constants = {q: b.tolist() for q, b in traced_constants.items() if b.numel() <= 4096}
    # A traced constant every use of which was baked as a number is no input: the reference's
    # state (what a unit without glue is called with) does not hold it.
    used = {a.name for n in nodes for a in n.args if isinstance(a, Ref)} | set(outputs)
    baked = {v.name for v in values if v.qualname in traced_constants and v.name not in used}
    if baked:
        kept = [v for v in values if v.name not in baked]
        values = [Value(v.name, v.kind, i, v.shape, v.qualname) for i, v in enumerate(kept)]
    return Graph(values, nodes, outputs, shapes, modules, alias, frozenset(opaque), constants)


def _einsum_is_matmul(n: Any) -> bool:
    """`torch.einsum("...x,xy->...y", A, B)` with named dims (e.g. "bijl,lk->bijk"): A @ B."""
    if len(n.args) != 3 or n.kwargs or not isinstance(n.args[0], str):
        return False
    equation = n.args[0].replace(" ", "")
    if "->" not in equation or "." in equation:
        return False
    inputs, out = equation.split("->")
    parts = inputs.split(",")
    if len(parts) != 2 or len(parts[1]) != 2 or len(parts[0]) < 2:
        return False
    a, (x, y) = parts[0], parts[1]
    letters = a + y
    return a[-1] == x and out == a[:-1] + y and len(set(letters)) == len(letters) and letters.isalpha()


def _has_dim(n: Any) -> bool:
    """torch.max / min with a dimension (a pair result), not of one tensor or of two tensors."""
    import torch

    dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
    return isinstance(dim, int) and not isinstance(dim, torch.fx.Node)


def _float_literal(n: Any) -> float | None:
    """c of `torch.tensor(c, ...)` where it builds a one-element float32 tensor from a number."""
    import torch

    meta = n.meta.get("tensor_meta")
    value = n.args[0] if n.args else None
    if meta is None or getattr(meta, "dtype", None) != torch.float32 or tuple(meta.shape) != ():
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _lower_pair_item(n: Any, pair: Any, pair_op: str, ref: Any, add: Any) -> None:
    """`torch.max(x, d)[0]` or `.values` -> amax over d, `[1]` -> argmax over d (likewise min)."""
    index = {"values": 0, "indices": 1}.get(n.args[1], n.args[1])
    dim = pair.kwargs.get("dim", pair.args[1] if len(pair.args) > 1 else None)
    keep = bool(pair.kwargs.get("keepdim", pair.args[2] if len(pair.args) > 2 else False))
    base = "amax" if pair_op == "max" else "amin"
    if index == 0:
        add(n, base, [ref(pair.args[0])], {"dim": dim, "keepdim": keep})
    else:
        raise UnsupportedGraph(f"`{pair.name}[{index}]` (indices) stays in torch")


def _module_op(mod: Any) -> str:
    return _pooling_op(type(mod).__name__) or "module"


def _lower_call(
    n: Any, op: str, ref: Any, add: Any, alias: dict[str, str], synth: Any, shapes: dict[str, Shape]
) -> None:
    """One call_function / call_method node; UnsupportedGraph sends it to torch."""
    from kernelfoundry.generators.heuristic.losses import LOSSES, decompose_loss

    if op in LOSSES:
        names = ("input", "target", "size_average", "reduce", "reduction", "beta")
        if op == "huber_loss":
            names = ("input", "target", "reduction", "delta")
        if op == "kl_div":
            names = ("input", "target", "size_average", "reduce", "reduction", "log_target")
        settings = dict(zip(names, n.args, strict=False))
        settings.update(n.kwargs)
        if settings.get("size_average") is not None or settings.get("reduce") is not None:
            raise UnsupportedGraph(f"`{n.name}`: legacy reduction arguments")
        operands = [ref(settings["input"]), ref(settings["target"])]
        decompose_loss(n.name, op, operands, shapes, settings, synth, lambda *a: add(n, "mean", *a[1:]))
        return
    if op == "norm":
        _lower_norm(n, ref, add, synth, shapes)
        return
    if op in _GLOBAL_POOLS:
        _lower_global_pool(n, op, ref, add, n.args[1] if len(n.args) > 1 else n.kwargs.get("output_size"))
        return
    bound = _bind(op, n.args, n.kwargs)
    if op in ("dropout", "contiguous", "clone", "detach") or (op == "to" and n.op == "call_method"):
        alias[n.name] = alias.get(n.args[0].name, n.args[0].name)
        return
    kind = classify_op(op)
    if kind == "pointwise":
        attrs = {k: v for k, v in bound.items() if k != "input" and not k.startswith("arg")}
        if op in ("add", "sub", "mul", "div", "truediv", "maximum", "minimum", "rsub"):
            if "alpha" in n.kwargs:
                raise UnsupportedGraph(f"`{op}` with alpha is not supported")
            operands = [ref(a) for a in n.args[:2]]
            if "other" in n.kwargs:
                operands.append(ref(n.kwargs["other"]))
            add(n, op, operands, {})
        elif op == "pow":
            exponent = bound.get("exponent", bound.get("arg1"))
            if not isinstance(exponent, int | float):
                raise UnsupportedGraph("pow with a tensor exponent is not supported")
            add(n, op, [ref(n.args[0])], {"exponent": float(exponent)})
        else:
            add(n, op, [ref(n.args[0])], attrs)
    elif kind in ("reduction", "rowop"):
        attrs = {k: v for k, v in bound.items() if k != "input"}
        extra: list[Operand] = []
        if op in ("layer_norm", "group_norm"):
            for key in ("weight", "bias"):
                w = attrs.pop(key, None)
                attrs["has_" + key] = w is not None
                if w is not None:
                    extra.append(ref(w))
        add(n, op, [ref(n.args[0]), *extra], attrs)
    else:
        raise UnsupportedGraph(f"operation `{op}` stays in torch")


_GLOBAL_POOLS = {f"adaptive_avg_pool{d}d": d for d in (1, 2, 3)}


def _lower_global_pool(n: Any, op: str, ref: Any, add: Any, output_size: Any) -> None:
    """An adaptive average pool to one value per channel (output size 1 in every pooled dim) is the
    mean over the trailing dims, kept; any other output size stays in torch."""
    dims = _GLOBAL_POOLS[op]
    sizes = list(output_size) if isinstance(output_size, tuple | list) else [output_size] * dims
    if len(sizes) != dims or any(s != 1 for s in sizes):
        raise UnsupportedGraph(f"`{n.name}`: {op} to {output_size!r} stays in torch")
    add(n, "mean", [ref(n.args[0])], {"dim": tuple(range(-dims, 0)), "keepdim": True})


def _float32() -> Any:
    import torch

    return torch.float32


def _lower_norm(n: Any, ref: Any, add: Any, synth: Any, shapes: dict[str, Shape]) -> None:
    """torch.norm / Tensor.norm as the 2-norm (Frobenius) over the given dims, all by default: the
    square root of a sum of squares. Other p, `out` or `dtype` stay in torch."""
    names = ("input", "p", "dim", "keepdim", "out", "dtype")
    settings = dict(zip(names, n.args, strict=False))
    settings.update(n.kwargs)
    p = settings.get("p", "fro")
    if p not in ("fro", 2, 2.0) or settings.get("out") is not None or settings.get("dtype") is not None:
        raise UnsupportedGraph(f"`{n.name}`: norm with p={p!r} stays in torch")
    x = ref(settings["input"])
    meta = n.meta.get("tensor_meta")
    if not isinstance(x, Ref) or getattr(meta, "dtype", None) != _float32():
        raise UnsupportedGraph(f"`{n.name}`: only the norm of a float32 tensor is generated")
    shape = shapes[x.name]
    dim = settings.get("dim")
    keep = bool(settings.get("keepdim", False))
    listed = dim if isinstance(dim, tuple | list) else [dim]
    if dim is not None and not all(isinstance(d, int) and -len(shape) <= d < len(shape) for d in listed):
        raise UnsupportedGraph(f"`{n.name}`: norm over dims {dim!r}")
    reduced = set(range(len(shape))) if dim is None else {d % len(shape) for d in listed}
    out = tuple(1 if i in reduced else s for i, s in enumerate(shape) if keep or i not in reduced)
    square = synth(f"{n.name}_sq", "mul", [x, x], {}, shape)
    total = synth(f"{n.name}_sumsq", "sum", [square], {"dim": dim, "keepdim": keep}, out)
    add(n, "sqrt", [total])


# Aliases that name the same computation.
_CANONICAL: dict[str, str] = {
    "truediv": "div",
    "true_divide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "clip": "clamp",
    "max_values": "amax",
    "silu_": "silu",
    "relu_": "relu",
    "matmul": "matmul",
    "mm": "matmul",
    "__matmul__": "matmul",
    "negative": "neg",
    "special_erf": "erf",
}


def _lower_module(
    n: Any,
    mod: Any,
    qual_to_name: dict[str, str],
    ref: Any,
    add: Any,
    alias: dict[str, str],
    synth: Any,
    shapes: dict[str, Shape],
) -> None:
    from torch import nn

    from kernelfoundry.generators.heuristic.losses import decompose_loss

    x = ref(n.args[0]) if n.args else None
    pname = lambda attr: Ref(qual_to_name[f"{n.target}.{attr}"])  # noqa: E731
    losses = {
        nn.SmoothL1Loss: "smooth_l1_loss",
        nn.HuberLoss: "huber_loss",
        nn.MSELoss: "mse_loss",
        nn.TripletMarginLoss: "triplet_margin_loss",
        nn.KLDivLoss: "kl_div",
    }
    if type(mod) in losses:
        if n.kwargs:
            raise UnsupportedGraph(f"`{n.name}`: keyword arguments to a loss module")
        settings = {
            k: getattr(mod, k)
            for k in ("reduction", "beta", "delta", "margin", "p", "eps", "swap", "log_target")
            if hasattr(mod, k)
        }
        final = lambda *a: add(n, "mean", *a[1:])  # noqa: E731
        decompose_loss(n.name, losses[type(mod)], [ref(a) for a in n.args], shapes, settings, synth, final)
        return
    if isinstance(mod, nn.InstanceNorm1d | nn.InstanceNorm2d | nn.InstanceNorm3d) and (
        not mod.track_running_stats
    ):
        # instance norm is group norm with one channel per group
        channels = n.meta["tensor_meta"].shape[1]
        extra = [pname("weight"), pname("bias")] if mod.affine else []
        attrs = {"num_groups": channels, "eps": mod.eps, "has_weight": mod.affine, "has_bias": mod.affine}
        add(n, "group_norm", [x, *extra], attrs)
        return
    pname = lambda attr: Ref(qual_to_name[f"{n.target}.{attr}"])  # noqa: E731
    simple = {
        nn.ReLU: "relu",
        nn.Tanh: "tanh",
        nn.Sigmoid: "sigmoid",
        nn.SiLU: "silu",
        nn.Mish: "mish",
        nn.Hardswish: "hardswish",
        nn.Hardsigmoid: "hardsigmoid",
        nn.SELU: "selu",
    }
    for cls, op in simple.items():
        if type(mod) is cls:
            add(n, op, [x])
            return
    if isinstance(mod, nn.Dropout | nn.Identity):
        alias[n.name] = x.name
    elif isinstance(mod, nn.GELU):
        add(n, "gelu", [x], {"approximate": mod.approximate})
    elif isinstance(mod, nn.LeakyReLU):
        add(n, "leaky_relu", [x], {"negative_slope": mod.negative_slope})
    elif isinstance(mod, nn.ELU):
        add(n, "elu", [x], {"alpha": mod.alpha})
    elif isinstance(mod, nn.Hardtanh):
        add(n, "hardtanh", [x], {"min_val": mod.min_val, "max_val": mod.max_val})
    elif isinstance(mod, nn.Softplus):
        add(n, "softplus", [x], {"beta": mod.beta, "threshold": mod.threshold})
    elif isinstance(mod, nn.Softmax | nn.LogSoftmax):
        add(n, "softmax" if isinstance(mod, nn.Softmax) else "log_softmax", [x], {"dim": mod.dim})
    elif isinstance(mod, nn.LayerNorm):
        extra = [pname("weight"), pname("bias")] if mod.elementwise_affine and mod.bias is not None else []
        if mod.elementwise_affine and mod.bias is None:
            extra = [pname("weight")]
        attrs = {
            "normalized_shape": tuple(mod.normalized_shape),
            "eps": mod.eps,
            "has_weight": mod.elementwise_affine,
            "has_bias": mod.elementwise_affine and mod.bias is not None,
        }
        add(n, "layer_norm", [x, *extra], attrs)
    elif isinstance(mod, nn.GroupNorm):
        extra = [pname("weight"), pname("bias")] if mod.affine else []
        attrs = {
            "num_groups": mod.num_groups,
            "eps": mod.eps,
            "has_weight": mod.affine,
            "has_bias": mod.affine,
        }
        add(n, "group_norm", [x, *extra], attrs)
    elif isinstance(mod, nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d) and not mod.training:
        _lower_batch_norm(n, mod, qual_to_name, x, add)
    elif isinstance(
        mod, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.ConvTranspose2d | nn.ConvTranspose3d
    ):
        add(n, "module", [x], {"module": n.target})
    elif (pool := _pooling_op(type(mod).__name__)) in _GLOBAL_POOLS:
        try:
            _lower_global_pool(n, pool, ref, add, mod.output_size)
        except UnsupportedGraph:
            add(n, pool, [ref(a) for a in n.args], {"module": n.target})
    elif pool is not None:
        add(n, pool, [ref(a) for a in n.args], {"module": n.target})
    else:
        add(n, "module", [ref(a) for a in n.args], {"module": n.target, "other": True})


def _pooling_op(module_class: str) -> str | None:
    """`MaxPool2d` -> `max_pool2d`, `AdaptiveAvgPool1d` -> `adaptive_avg_pool1d`, `LPPool2d` -> `lp_pool2d`:
    the functional name, classified as pooling (None for any other module)."""
    op = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", module_class.replace("LPPool", "LpPool")).lower()
    return op if classify_op(op) == "pooling" else None


def _lower_batch_norm(n: Any, mod: Any, qual_to_name: dict[str, str], x: Ref, add: Any) -> None:
    """Inference batch norm is pointwise: (x - mean) * rsqrt(var + eps) * weight + bias, per channel."""
    import torch

    if mod.running_mean is None:
        raise UnsupportedGraph(f"batch norm `{n.target}` tracks no running statistics")
    ndim = len(n.meta["tensor_meta"].shape)
    q = lambda attr: Ref(qual_to_name[f"{n.target}.{attr}"], ndim - 2)  # noqa: E731
    args: list[Operand] = [x, q("running_mean"), q("running_var")]
    if mod.affine:
        args += [q("weight"), q("bias")]
    meta = n.meta["tensor_meta"]
    if meta.dtype != torch.float32:
        raise UnsupportedGraph(f"batch norm `{n.target}` output is {meta.dtype}")
    add(n, "batch_norm", args, {"eps": mod.eps, "affine": mod.affine})

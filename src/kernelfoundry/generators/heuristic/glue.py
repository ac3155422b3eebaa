"""The Python glue (`ModelNew`) for graphs whose heavy ops stay in torch.

`ModelNew.__init__` recreates the reference's parameterised modules with every constructor setting
(`module_constructor`; same attribute names, so the evaluator copies the reference's weights by name)
and bare parameters/buffers with their shapes; `forward` runs heavy and other torch nodes in order and
calls each generated part through the injected `kf.launch(entry, inputs, outputs)`, preallocating
outputs with shapes computed from the inputs'. The glue never calls the ops a part replaces, uses no
try/except, threads, files or timers. Pure string building; torch is only touched to read module types
and settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.entry import reduce_range
from kernelfoundry.generators.heuristic.fold import folded_call
from kernelfoundry.generators.heuristic.graph import Graph, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.opkernels import GLUE_HELPERS, OpKernel
from kernelfoundry.generators.heuristic.plan import Part
from kernelfoundry.generators.heuristic.unbias import unbiased_call

_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "matmul": "@", "pow": "**", "floordiv": "//"}

_HELPERS = """
def _reduced(shape, d0, d1, keepdim):
    dims = list(shape)
    return tuple(dims[:d0] + ([1] * (d1 - d0) if keepdim else []) + dims[d1:])
"""


# a generated pool's output shape (pools.PoolWindow.out_shape), settings as (d, h, w)
_POOLED = """
def _pooled(shape, dims, window, stride, padding, dilation):
    lead = len(shape) - dims
    out = [
        (n + 2 * padding[a] - dilation[a] * (window[a] - 1) - 1) // stride[a] + 1
        for n, a in zip(shape[lead:], range(3 - dims, 3))
    ]
    return tuple(shape[:lead]) + tuple(out)
"""


def _to_last(rank: int) -> tuple[int, ...]:
    """The dims in NHWC order (the channels, dim 1, last): permute() to an NHWC tensor's contiguous view."""
    return (0, *range(2, rank), 1)


def _from_last(rank: int) -> tuple[int, ...]:
    """The inverse of _to_last: an NHWC tensor seen as NCHW with channels-last strides."""
    return (0, rank - 1, *range(1, rank - 1))


def _dims(order: tuple[int, ...]) -> str:
    return ", ".join(str(d) for d in order)


# constructor arguments a module keeps under another attribute name
_SETTING_ATTRIBUTES = {("PairwiseDistance", "p"): "norm"}


def module_constructor(mod: Any) -> str:
    """The call that rebuilds a torch.nn module with every setting it was built with: each constructor
    argument from the attribute of its name (a repr leaves settings out: AvgPool2d's shows neither
    count_include_pad nor divisor_override, a loss's no reduction or margin, a conv's padding_mode
    unquoted). A weight-like argument (a bias flag, a loss's class weights) is rebuilt as its flag or
    an empty tensor of its shape, the values coming with the state dict; an argument the module does
    not keep (PReLU's init, deprecated loss flags) keeps its default. The repr where a setting is of
    a kind this does not write."""
    import inspect

    import torch

    cls = type(mod)
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return repr(mod)
    args = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("device", "dtype") or p.name[0] == "_":
            continue
        attribute = _SETTING_ATTRIBUTES.get((cls.__name__, p.name), p.name)
        if not hasattr(mod, attribute):
            continue
        value = getattr(mod, attribute)
        if isinstance(p.default, bool) and (value is None or isinstance(value, torch.Tensor)):
            code = repr(value is not None)  # `bias=True`: the module holds the tensor or None
        elif isinstance(value, torch.Tensor):
            code = f"torch.empty({tuple(value.shape)!r})"
        else:
            code = _setting(value)
            if code is None:
                return repr(mod)
        args.append(f"{p.name}={code}")
    return f"{cls.__name__}({', '.join(args)})"


def _setting(value: Any) -> str | None:
    """Python source for a module setting (numbers, strings, flags, None, tuples and lists of them),
    or None for anything else."""
    import math

    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float):
        return f"float({str(value)!r})" if math.isinf(value) or math.isnan(value) else repr(value)
    if isinstance(value, tuple | list):
        items = [_setting(v) for v in value]
        if any(i is None for i in items):
            return None
        inner = ", ".join(i for i in items if i is not None)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if items else "()"
    return None


def _modules_to_recreate(graph: Graph, generated: frozenset[str] = frozenset()) -> list[str]:
    """Leaf modules the glue rebuilds (`module_constructor`): those it calls, and owners of parameters it
    reads. A module only an op kernel computes (`generated` nodes) is not rebuilt, its parameters are
    declared bare: rebuilding it would perform the reference's op in the glue's eyes."""
    used: set[str] = set()
    for n in graph.nodes:
        if n.kind not in KEPT_IN_TORCH:
            continue  # a module the unit computes (a fused pool, pools.py)
        if n.fx_node is not None and n.fx_node.op == "call_module" and n.name not in generated:
            used.add(n.fx_node.target)
    computed = {
        n.fx_node.target
        for n in graph.nodes
        if n.name in generated and n.fx_node is not None and n.fx_node.op == "call_module"
    }
    for v in graph.inputs:
        if v.kind in ("param", "buffer") and "." in v.qualname:
            owner = v.qualname.rsplit(".", 1)[0]
            if owner not in computed:
                used.add(owner)
    leaves = []
    for q in sorted(used):
        mod = graph.modules.get(q)
        if mod is None:
            continue
        if any(True for _ in mod.children()):
            raise UnsupportedGraph(f"module `{q}` has submodules; the glue cannot recreate it")
        if not type(mod).__module__.startswith("torch.nn"):
            raise UnsupportedGraph(f"module `{q}` is not a torch.nn module ({type(mod).__name__})")
        leaves.append(q)
    return leaves


def glue_source(
    graph: Graph,
    parts: list[Part],
    channels_last: frozenset[str] = frozenset(),
    ops: Mapping[str, tuple[OpKernel, str]] | None = None,
    to_nhwc: str | None = None,
) -> str:
    """ModelNew; heavy ops named in `channels_last` run on an NHWC input (torch's channels-last copy,
    or the one entry point `to_nhwc` writes) and reach their part as NHWC; nodes named in `ops` launch
    their generated op kernel (entry) instead of running in torch."""
    ops = ops or {}
    helpers = [_HELPERS, GLUE_HELPERS] if ops else [_HELPERS]
    if any(n.kind == "pool" for n in graph.nodes):
        helpers.append(_POOLED)
    # functions a rewrite's node calls (conv_means.py), each defined once
    for n in graph.nodes:
        helper = n.attrs.get("glue_helper") if n.fx_node is None else None
        if helper and helper not in helpers:
            helpers.append(helper)
    lines = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", *helpers, ""]
    lines += [
        "class ModelNew(nn.Module):",
        "    def __init__(self, *init_inputs):",
        "        super().__init__()",
    ]
    recreated = _modules_to_recreate(graph, frozenset(ops))
    containers: set[str] = set()

    def declare_containers(qualname: str) -> None:
        bits = qualname.split(".")
        for i in range(1, len(bits)):
            c = ".".join(bits[:i])
            if c not in containers:
                containers.add(c)
                lines.append(f"        self.{c} = nn.Module()")

    for q in recreated:
        declare_containers(q)
        lines.append(f"        self.{q} = nn.{module_constructor(graph.modules[q])}")
    for v in graph.inputs:
        owner = v.qualname.rsplit(".", 1)[0] if "." in v.qualname else ""
        if v.kind == "input" or owner in recreated:
            continue
        declare_containers(v.qualname)
        shape = repr(tuple(int(d) for d in v.shape))  # `()` for a 0-d parameter
        if v.kind == "param":
            lines.append(f"        self.{v.qualname} = nn.Parameter(torch.empty({shape}))")
        else:
            base, _, leaf = v.qualname.rpartition(".")
            target = f"self.{base}" if base else "self"
            if v.qualname in graph.constants:
                value = f"torch.tensor({graph.constants[v.qualname]!r})"
            else:
                value = f"torch.empty({shape})"
            lines.append(f"        {target}.register_buffer({leaf!r}, {value})")
    placeholders = [v for v in graph.inputs if v.kind == "input"]
    lines.append("")
    lines.append(f"    def forward(self, {', '.join(v.name for v in placeholders)}):")
    expr = {v.name: (v.name if v.kind == "input" else f"self.{v.qualname}") for v in graph.inputs}
    part_of = {n.name: p for p in parts for n in p.nodes}
    emitted: set[str] = set()
    for n in graph.nodes:
        if n.name in ops:
            lines += _op_launch(n.name, *ops[n.name], expr)
            expr[n.name] = n.name
            continue
        if n.kind in KEPT_IN_TORCH and not graph.users(n.name) and n.name not in graph.outputs:
            continue  # nothing reads it (torch.min(x, d) whose values a generated amin computes)
        if n.kind in KEPT_IN_TORCH and n.fx_node is None:  # a rewrite's node: its own call (attention.py)
            lines.append(f"        {n.name} = {n.attrs['glue'].format(*(expr[a.name] for a in n.args))}")
            expr[n.name] = n.name
            continue
        if n.kind in KEPT_IN_TORCH:
            first = n.fx_node.args[0] if n.fx_node.args else None
            src = graph.aliases.get(first.name, first.name) if hasattr(first, "name") else ""
            call_expr = dict(expr)
            if n.name in channels_last and to_nhwc:
                rank = len(graph.shapes[src])
                dims = ", ".join(f"{expr[src]}.shape[{d}]" for d in _to_last(rank))
                device = f"{expr[src]}.device"
                empty = f"torch.empty(({dims}), dtype=torch.float32, device={device})"
                lines.append(f"        {src}_nhwc = {empty}")
                lines.append(f"        kf.launch({to_nhwc!r}, [{expr[src]}], [{src}_nhwc])")
                call_expr[src] = f"{src}_nhwc.permute({_dims(_from_last(rank))})"
            elif n.name in channels_last:
                layout = "channels_last" if len(graph.shapes[n.name]) == 4 else "channels_last_3d"
                lines.append(f"        {src}_nhwc = {expr[src]}.contiguous(memory_format=torch.{layout})")
                call_expr[src] = f"{src}_nhwc"
            if "fold" in n.attrs:
                lines.append(f"        {n.name} = {folded_call(graph, n, call_expr[src])}")
            elif n.attrs.get("unbiased"):
                lines.append(f"        {n.name} = {unbiased_call(graph, n, call_expr[src])}")
            else:
                lines.append(f"        {n.name} = {_torch_call(graph, n.fx_node, call_expr)}")
            expr[n.name] = n.name
            continue
        part = part_of[n.name]
        if part.entry_point in emitted:
            continue
        emitted.add(part.entry_point)
        for name in part.outputs:
            shape = _py_shape(graph, name, expr)
            lines.append(
                f"        {name} = torch.empty({shape}, dtype=torch.float32,"
                f" device={expr[part.inputs[0]]}.device)"
            )
        for name in part.outputs:
            expr[name] = name
        ins = ", ".join(
            f"{expr[i]}.permute({_dims(_to_last(len(graph.shapes[i])))}).contiguous()"
            if i in channels_last
            else expr[i]
            for i in part.inputs
        )
        outs = ", ".join(part.outputs)
        lines.append(f"        kf.launch({part.entry_point!r}, [{ins}], [{outs}])")
    rets = [expr[o] for o in graph.outputs]
    lines.append(f"        return {rets[0] if len(rets) == 1 else '(' + ', '.join(rets) + ')'}")
    return "\n".join(lines) + "\n"


def _op_launch(name: str, kernel: OpKernel, entry: str, expr: dict[str, str]) -> list[str]:
    """Allocate an op kernel's output from its inputs' shapes, launch it, apply its cast."""
    shapes = [f"tuple({expr[i]}.shape)" for i in kernel.inputs]
    ins = ", ".join(f"{expr[i]}.contiguous()" for i in kernel.inputs)
    lines = [
        f"        {name} = torch.empty({kernel.out_shape.format(*shapes)}, dtype=torch.float32,"
        f" device={expr[kernel.inputs[0]]}.device)",
        f"        kf.launch({entry!r}, [{ins}], [{name}])",
    ]
    if kernel.cast:
        lines.append(f"        {name} = {name}{kernel.cast}")
    return lines


def _py_shape(graph: Graph, name: str, expr: dict[str, str]) -> str:
    if name in expr:
        return f"tuple({expr[name]}.shape)"
    node = graph.node(name)
    assert node is not None
    if node.kind == "pointwise":
        shapes = []
        for a in node.args:
            if isinstance(a, Ref):
                s = _py_shape(graph, a.name, expr)
                shapes.append(f"{s} + (1,) * {a.trail}" if a.trail else s)
        return shapes[0] if len(shapes) == 1 else f"tuple(torch.broadcast_shapes({', '.join(shapes)}))"
    src = node.args[0]
    assert isinstance(src, Ref)
    s = _py_shape(graph, src.name, expr)
    if node.kind == "reduction":
        d0, d1, keep = reduce_range(node, len(graph.shapes[src.name]))
        return f"_reduced({s}, {d0}, {d1}, {keep})"
    if node.kind == "pool":
        w = node.attrs["pool_window"]
        return f"_pooled({s}, {w.dims}, {w.window}, {w.stride}, {w.padding}, {w.dilation})"
    return s


def _torch_call(graph: Graph, fx_node: Any, expr: dict[str, str]) -> str:
    from torch.fx.node import Node, _get_qualified_name

    def fmt(a: Any) -> str:
        if isinstance(a, Node):
            name = graph.aliases.get(a.name, a.name)
            if a.op == "get_attr":
                return f"self.{a.target}"
            return expr[name]
        if isinstance(a, tuple | list):
            inner = ", ".join(fmt(x) for x in a)
            return f"({inner},)" if isinstance(a, tuple) else f"[{inner}]"
        if isinstance(a, slice):
            return f"slice({fmt(a.start)}, {fmt(a.stop)}, {fmt(a.step)})"
        return repr(a)

    args = [fmt(a) for a in fx_node.args]
    kwargs = [f"{k}={fmt(v)}" for k, v in fx_node.kwargs.items()]
    if fx_node.op == "call_module":
        return f"self.{fx_node.target}({', '.join(args + kwargs)})"
    if fx_node.op == "call_method":
        return f"{args[0]}.{fx_node.target}({', '.join(args[1:] + kwargs)})"
    qual = _get_qualified_name(fx_node.target)
    short = qual.rsplit(".", 1)[-1]
    if fx_node.target is getattr and len(args) == 2 and isinstance(fx_node.args[1], str):
        return f"{args[0]}.{fx_node.args[1]}"
    if qual.startswith("_operator."):
        if short in _INFIX and len(args) == 2:
            return f"({args[0]} {_INFIX[short]} {args[1]})"
        if short == "getitem":
            return f"{args[0]}[{args[1]}]"
        if short == "neg":
            return f"(-{args[0]})"
        raise UnsupportedGraph(f"operator `{short}` has no glue form")
    if qual.startswith("torch._C._nn.") or qual.startswith("torch.nn.functional."):
        qual = "F." + short
    return f"{qual}({', '.join(args + kwargs)})"

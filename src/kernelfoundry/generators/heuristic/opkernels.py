"""Generated kernels for the ops the fused emitters leave to torch: matmuls, convolutions, pooling,
scans, arg-reductions and attention, one entry point (`kf_opN`) per op.

They serve tasks where nothing else could be generated (a KernelBench level-1 matmul, conv, pooling,
cumsum or argmax task is that one op, and a candidate must launch at least one generated kernel):
`op_kernel(graph, node)` says whether and how such a node is generated; `op_entry(kernel, entry,
backend)` writes its C++ / CUDA entry point. Each family is one item function over a parameter struct
(`KF_HD`, so g++ and nvcc compile the same text): the CPU entry runs the items in an
`omp parallel for`, the CUDA entry launches one thread per item with a grid-stride loop on the given
stream, except where a family has CUDA kernels of its own (opkernels_cuda.py: scans, fixed-window
pooling, convolutions, arg-reductions). Items are output rows where a row's inner loop vectorises on
the CPU (matmul: k-outer row updates; convolution: the output row's valid column range per kernel
tap). Shapes are read from
the descriptors at run time; stride, padding, dilation, groups and window sizes are the module's and
are baked in. The glue allocates the output (shape formulas in `GLUE_HELPERS`) and passes contiguous
inputs. Pure string building; torch is only touched to read module attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelfoundry.generators.heuristic.graph import Graph, OpNode

CONV_MODULES = {"Conv1d": 1, "Conv2d": 2, "Conv3d": 3}
CONV_TRANSPOSE_MODULES = {"ConvTranspose1d": 1, "ConvTranspose2d": 2, "ConvTranspose3d": 3}
POOL_MODULES = {
    f"{kind}{d}d": (kind, d)
    for kind in ("MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool")
    for d in (1, 2, 3)
}


@dataclass(frozen=True)
class OpKernel:
    """How one torch node is generated: its family, the values its entry reads (in order), the
    baked parameters, the glue's output-shape expression (`{0}`, `{1}` .. the inputs) and a cast the
    glue applies to the float output (argmax / argmin indices)."""

    node: str
    family: str
    inputs: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    out_shape: str = ""
    cast: str = ""
    bool_inputs: tuple[int, ...] = ()  # positions of inputs that are bool tensors (a scan's mask)


def declared_tunable(name: str, values: tuple[int, ...], default: int) -> str:
    """A unit's tunable: its `@kf.tunable` declaration (what the sweeps read) and its default define."""
    listed = ", ".join(str(v) for v in values)
    declaration = f"// @kf.tunable {name} in [{listed}] default {default}"
    return f"{declaration}\n#ifndef {name}\n#define {name} {default}\n#endif"


def scan_value(k: OpKernel, x: str, m: str, q: str) -> str:
    """A scan's input element at physical offset `q`: x's, times the mask's where the scan is masked
    (torch's `x * mask` of a bool mask: x * 1.0 or x * 0.0, so inf and NaN stay as torch has them)."""
    return f"({x}[{q}] * (float){m}[{q}])" if k.params.get("masked") else f"{x}[{q}]"


def _name(graph: Graph, a: Any) -> str | None:
    import torch

    if not isinstance(a, torch.fx.Node):
        return None
    name = graph.aliases.get(a.name, a.name)
    if a.op == "get_attr":
        by_qual = {v.qualname: v.name for v in graph.inputs}
        name = by_qual.get(str(a.target), name)
    return None if name in graph.opaque else name


def _param(graph: Graph, qualname: str) -> str | None:
    return next((v.name for v in graph.inputs if v.qualname == qualname), None)


def _triple(value: Any, dims: int, fill: int) -> tuple[int, int, int]:
    """A module's int-or-tuple setting for `dims` spatial dims, as (d, h, w) with `fill` in front."""
    items = list(value) if isinstance(value, tuple | list) else [value] * dims
    if len(items) != dims or not all(isinstance(v, int) for v in items):
        raise ValueError(value)
    return tuple([fill] * (3 - dims) + items)  # type: ignore[return-value]


def _shape_call(function: str, inputs: int, *constants: Any) -> str:
    """`function({0}, {1}, c0, c1, ..)`: a glue shape formula over the inputs' shapes."""
    items = [f"{{{i}}}" for i in range(inputs)] + [repr(c) for c in constants]
    return f"{function}({', '.join(items)})"


def op_kernel(graph: Graph, node: OpNode) -> OpKernel | None:
    """The generated form of a node kept in torch, or None when no family covers it."""
    fx = node.fx_node
    if fx is None:
        return _rewritten_kernel(node)
    try:
        if fx.op == "call_module":
            return _module_kernel(graph, node, graph.modules.get(str(fx.target)))
        return _function_kernel(graph, node)
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def _rewritten_kernel(node: OpNode) -> OpKernel | None:
    """The generated form of a node a rewrite made (no fx node): a scan idiom (scans.py)."""
    if node.op not in ("cumsum", "cumprod") or "dim" not in node.attrs:
        return None
    inputs = tuple(a.name for a in node.args if hasattr(a, "name"))
    flags = {f: int(bool(node.attrs.get(f))) for f in ("reverse", "exclusive", "masked")}
    params = {"dim": int(node.attrs["dim"]), "prod": int(node.op == "cumprod"), **flags}
    return OpKernel(node.name, "scan", inputs, params, "{0}", bool_inputs=(1,) if flags["masked"] else ())


def _module_kernel(graph: Graph, node: OpNode, mod: Any) -> OpKernel | None:
    if mod is None:
        return None
    cls = type(mod).__name__
    fx = node.fx_node
    x = _name(graph, fx.args[0]) if fx.args else None
    if x is None or len(fx.args) != 1 or fx.kwargs:
        return None
    target = str(fx.target)
    if cls == "Linear":
        weight = _param(graph, f"{target}.weight")
        bias = _param(graph, f"{target}.bias") if mod.bias is not None else None
        assert weight is not None
        ins = (x, weight) if bias is None else (x, weight, bias)
        return OpKernel(node.name, "linear", ins, {"bias": int(bias is not None)}, "{0}[:-1] + ({1}[0],)")
    if cls in CONV_MODULES or cls in CONV_TRANSPOSE_MODULES:
        transposed = cls in CONV_TRANSPOSE_MODULES
        dims = CONV_TRANSPOSE_MODULES[cls] if transposed else CONV_MODULES[cls]
        if mod.padding_mode != "zeros" or isinstance(mod.padding, str):
            return None
        weight = _param(graph, f"{target}.weight")
        bias = _param(graph, f"{target}.bias") if mod.bias is not None else None
        assert weight is not None
        params = {
            "dims": dims,
            "stride": _triple(mod.stride, dims, 1),
            "padding": _triple(mod.padding, dims, 0),
            "dilation": _triple(mod.dilation, dims, 1),
            "groups": int(mod.groups),
            "bias": int(bias is not None),
        }
        ins = (x, weight) if bias is None else (x, weight, bias)
        params["kernel"] = _triple(mod.kernel_size, dims, 1)
        if transposed:
            params["output_padding"] = _triple(mod.output_padding, dims, 0)
            shape = _shape_call(
                "_convt_shape",
                2,
                params["stride"],
                params["padding"],
                params["dilation"],
                params["output_padding"],
                mod.groups,
            )
            return OpKernel(node.name, "conv_transpose", ins, params, shape)
        shape = _shape_call("_conv_shape", 2, params["stride"], params["padding"], params["dilation"])
        params["in_per_group"] = int(mod.in_channels // mod.groups)
        return OpKernel(node.name, "conv", ins, params, shape)
    if cls in POOL_MODULES:
        kind, dims = POOL_MODULES[cls]
        if kind.startswith("Adaptive"):
            if getattr(mod, "return_indices", False):
                return None
            size = _triple(mod.output_size, dims, 1)
            if any(s is None for s in size):
                return None
            return _pool(node.name, x, dims, "max" if "Max" in kind else "avg", {"adaptive": 1, "out": size})
        if getattr(mod, "return_indices", False) or getattr(mod, "ceil_mode", False):
            return None
        window = _triple(mod.kernel_size, dims, 1)
        stride = _triple(mod.stride if mod.stride is not None else mod.kernel_size, dims, 1)
        settings = {
            "window": window,
            "stride": stride,
            "padding": _triple(mod.padding, dims, 0),
            "dilation": _triple(getattr(mod, "dilation", 1), dims, 1),
            "include_pad": int(getattr(mod, "count_include_pad", True)),
            "divisor": int(getattr(mod, "divisor_override", None) or 0),
        }
        return _pool(node.name, x, dims, "max" if kind == "MaxPool" else "avg", settings)
    return None


def _pool(name: str, x: str, dims: int, kind: str, settings: dict[str, Any]) -> OpKernel:
    params = {"dims": dims, "max": int(kind == "max"), "adaptive": 0, **settings}
    if params["adaptive"]:
        shape = "{0}[:-" + str(dims) + "] + " + repr(tuple(params["out"][3 - dims :]))
    else:
        window, stride, padding, dilation = (params[k] for k in ("window", "stride", "padding", "dilation"))
        shape = _shape_call("_pool_shape", 1, dims, window, stride, padding, dilation)
    return OpKernel(name, "pool", (x,), params, shape)


def _bound(fx: Any, names: Sequence[str]) -> dict[str, Any]:
    """Positional (after the tensor for methods too) and keyword arguments by name."""
    bound = dict(zip(names, fx.args, strict=False))
    bound.update(fx.kwargs)
    return bound


def _function_kernel(graph: Graph, node: OpNode) -> OpKernel | None:
    fx = node.fx_node
    op = node.op
    if op in ("matmul", "bmm", "mm"):
        # an einsum the graph lowered to a matmul (graph._einsum_is_matmul) carries its equation first
        operands = fx.args[1:] if isinstance(fx.args[0], str) else fx.args
        a, b = (_name(graph, v) for v in operands[:2])
        if a is None or b is None or len(operands) != 2:
            return None
        return OpKernel(node.name, "matmul", (a, b), {}, "_matmul_shape({0}, {1})")
    if op == "linear":
        bound = _bound(fx, ("input", "weight", "bias"))
        x, w = _name(graph, bound["input"]), _name(graph, bound["weight"])
        bias = _name(graph, bound["bias"]) if bound.get("bias") is not None else None
        if x is None or w is None or (bound.get("bias") is not None and bias is None):
            return None
        ins = (x, w) if bias is None else (x, w, bias)
        return OpKernel(node.name, "linear", ins, {"bias": int(bias is not None)}, "{0}[:-1] + ({1}[0],)")
    if op in ("cumsum", "cumprod"):
        bound = _bound(fx, ("input", "dim"))
        x = _name(graph, bound["input"])
        if x is None or not isinstance(bound.get("dim"), int) or bound.get("dtype") is not None:
            return None
        return OpKernel(node.name, "scan", (x,), {"dim": bound["dim"], "prod": int(op == "cumprod")}, "{0}")
    if op in ("argmax", "argmin"):
        bound = _bound(fx, ("input", "dim", "keepdim"))
        x, dim = _name(graph, bound["input"]), bound.get("dim")
        if x is None or not isinstance(dim, int):
            return None
        keep = bool(bound.get("keepdim", False))
        shape = _shape_call("_reduced_dim", 1, dim, keep)
        params = {"dim": dim, "max": int(op == "argmax")}
        return OpKernel(node.name, "argreduce", (x,), params, shape, cast=".to(torch.int64)")
    if op == "scaled_dot_product_attention":
        bound = _bound(fx, ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"))
        q, k, v = (_name(graph, bound[n]) for n in ("query", "key", "value"))
        if q is None or k is None or v is None or bound.get("attn_mask") is not None:
            return None
        if bound.get("dropout_p", 0.0) or bound.get("is_causal", False) or bound.get("enable_gqa", False):
            return None
        scale = bound.get("scale")
        if scale is not None and not isinstance(scale, int | float):
            return None
        params = {"scale": float(scale) if scale is not None else 0.0}
        return OpKernel(node.name, "attention", (q, k, v), params, "{0}[:-1] + ({2}[-1],)")
    return None


GLUE_HELPERS = """
def _matmul_shape(a, b):
    return tuple(torch.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))) + (a[-2], b[-1])

def _spatial(shape, n):
    return [1] * (3 - n) + list(shape[-n:])

def _conv_shape(x, w, stride, padding, dilation):
    n = len(x) - 2
    xs, ks = _spatial(x, n), _spatial(w, n)
    out = [(xs[i] + 2 * padding[i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(3)]
    return (x[0], w[0]) + tuple(out[3 - n:])

def _convt_shape(x, w, stride, padding, dilation, output_padding, groups):
    n = len(x) - 2
    xs, ks = _spatial(x, n), _spatial(w, n)
    out = [
        (xs[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (ks[i] - 1) + output_padding[i] + 1
        for i in range(3)
    ]
    return (x[0], w[1] * groups) + tuple(out[3 - n:])

def _pool_shape(x, n, window, stride, padding, dilation):
    xs = _spatial(x, n)
    out = [(xs[i] + 2 * padding[i] - dilation[i] * (window[i] - 1) - 1) // stride[i] + 1 for i in range(3)]
    return tuple(x[:-n]) + tuple(out[3 - n:])

def _reduced_dim(x, dim, keepdim):
    d = dim % len(x)
    return tuple(x[:d]) + ((1,) if keepdim else ()) + tuple(x[d + 1:])
"""

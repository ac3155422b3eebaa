"""The spatial mean of a convolution without the convolution (a reformulation, like unbias.py).

A convolution is linear in its input: summed over every output position, each weight tap w[co, ci, k]
meets the inputs of channel ci that tap reads at some output position, so

    sum_o conv(x)[n, co, o] = O * b[co] + sum_{ci, k} w[co, ci, k] * S[n, ci, k],

S[n, ci, k] the sum of those inputs. Along each spatial dim the inputs tap k reads form a 0/1 matrix
M_d[k, i] (a conv: positions i = o * stride - padding + k * dilation of some output o; a transposed
conv: inputs i whose output i * stride - padding + k * dilation falls inside the output), so S is x
contracted with one small matrix per dim. A conv's (or transposed conv's) output followed only by
per-channel affine ops (a scale, a bias, an inference batch norm: values constant over the spatial
dims) and then a mean over all its spatial dims is that mean of the conv, then the same affine ops on
(N, C, 1, ...) values: the mean commutes with them. A mean over some of the spatial dims (a depth mean
after a 3-D conv) contracts only those, and the rest is a convolution of fewer dims whose input channels
are (channel, tap along the reduced dims) pairs: level2/13's transposed 3-D conv followed by a mean over
the depth becomes a transposed 2-D conv with three times the input channels over a 32nd of the
positions. KernelBench level 2 has such tails
(ConvTranspose2d then a global average pool): cuDNN's conv writes gigabytes that the mean reads back;
this reads x once (a skinny product per dim in cuBLAS) and multiplies a (N, Ci * taps) matrix by the
weight.

`lower_conv_means` replaces such a conv node by a node without an fx node (`glue`: the call of
`_conv_spatial_mean`, whose text is in `glue_helper`), shaped (N, C, 1, ...); the affine ops and the
mean after it keep their places on the small values and are generated as before. Groups of one only.
The fused seeds read the rewritten graph (candidate.py); the direct translation keeps the conv.
Pure graph rewriting; never touches tensors.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, broadcast_shapes
from kernelfoundry.generators.heuristic.plan import reduce_range
from kernelfoundry.generators.heuristic.unbias import CONV_FUNCTIONS

# Ops whose value is affine in one operand when every other operand is constant over the spatial dims
# (`div` only with that operand as the dividend; a batch norm's statistics and affine are per channel)
_AFFINE = frozenset({"add", "sub", "rsub", "mul", "div", "neg", "batch_norm"})

SPATIAL_MEAN_HELPER = '''
_TAP_READS = {}


def _tap_reads(size, k_len, stride, padding, dilation, output_padding, transposed, device, dtype):
    """(the 0/1 matrix of which of `size` inputs each of `k_len` taps reads, (k_len, size); the conv's
    output length): shape-only, built once per geometry and device."""
    key = (size, k_len, stride, padding, dilation, output_padding, transposed, str(device), dtype)
    if key not in _TAP_READS:
        i = torch.arange(size, device=device)[None, :]
        k = torch.arange(k_len, device=device)[:, None]
        if transposed:
            out = (size - 1) * stride - 2 * padding + dilation * (k_len - 1) + output_padding + 1
            o = i * stride - padding + k * dilation
            reads = (o >= 0) & (o < out)
        else:
            out = (size + 2 * padding - dilation * (k_len - 1) - 1) // stride + 1
            t = i + padding - k * dilation
            reads = (t >= 0) & (t % stride == 0) & (t < out * stride)
        _TAP_READS[key] = (reads.to(dtype), out)
    return _TAP_READS[key]


def _conv_spatial_mean(x, weight, bias, transposed, stride, padding, dilation, output_padding, reduced):
    """The mean over the spatial dims `reduced` (0 the first) of conv(x) (conv_transpose(x) when
    `transposed`), groups of one, those dims kept as ones: per weight tap along them the sum of the
    inputs it reads (one 0/1 matrix per reduced dim), then a convolution over the other spatial dims whose
    input channels are (channel, reduced taps) pairs, or a product with the weight where none is left.
    The last reduced dim is contracted first: the input is read once, in its own layout."""
    dims = x.dim() - 2
    kept = [d for d in range(dims) if d not in reduced]
    sums = x
    positions, taps = 1, 1
    for d in sorted(reduced, reverse=True):
        size, k_len = x.shape[2 + d], weight.shape[2 + d]
        extra = output_padding[d] if transposed else 0
        along = (stride[d], padding[d], dilation[d], extra)
        reads, out = _tap_reads(size, k_len, *along, transposed, x.device, x.dtype)
        positions *= out
        taps *= k_len
        sums = torch.matmul(sums.movedim(2 + d, -1), reads.t()).movedim(-1, 2 + d)
    n, ci = x.shape[0], x.shape[1]
    front = [2 + d for d in reduced]
    back = [2 + d for d in kept]
    sums = sums.permute(0, 1, *front, *back).reshape(n, ci * taps, *(x.shape[b] for b in back))
    if transposed:
        w = weight.permute(0, *front, 1, *back)
        w = w.reshape(ci * taps, weight.shape[1], *(weight.shape[b] for b in back))
    else:
        w = weight.permute(0, 1, *front, *back)
        w = w.reshape(weight.shape[0], ci * taps, *(weight.shape[b] for b in back))
    if kept:
        geometry = {
            "stride": [stride[d] for d in kept],
            "padding": [padding[d] for d in kept],
            "dilation": [dilation[d] for d in kept],
        }
        if transposed:
            call = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[len(kept) - 1]
            result = call(sums, w, None, output_padding=[output_padding[d] for d in kept], **geometry)
        else:
            result = (F.conv1d, F.conv2d, F.conv3d)[len(kept) - 1](sums, w, None, **geometry)
    else:
        result = torch.matmul(sums, (w.t() if transposed else w).t())
    result = result / positions
    if bias is not None:
        result = result + bias.reshape(-1, *([1] * len(kept)))
    shape = [1 if d in reduced else result.shape[2 + kept.index(d)] for d in range(dims)]
    return result.reshape(n, result.shape[1], *shape)
'''


def _conv_module(graph: Graph, node: OpNode) -> Any:
    """The conv module a plain torch conv node calls (groups of one, zero padding given as numbers)."""
    fx = node.fx_node
    if node.kind != "heavy" or fx is None or fx.op != "call_module" or node.attrs.keys() - {"module"}:
        return None
    module = graph.modules.get(str(fx.target))
    if module is None or type(module).__name__ not in CONV_FUNCTIONS or len(fx.args) != 1 or fx.kwargs:
        return None
    if module.groups != 1 or module.padding_mode != "zeros" or isinstance(module.padding, str):
        return None
    return module


def _constant_along(graph: Graph, operand: Any, rank: int, dims: range) -> bool:
    """A number, or a tensor whose (right-aligned) dims `dims` are all 1."""
    if not isinstance(operand, Ref):
        return isinstance(operand, float | int)
    if operand.name not in graph.shapes or operand.name in graph.opaque:
        return False
    shape = tuple(graph.shapes[operand.name]) + (1,) * operand.trail
    if len(shape) > rank:
        return False
    shape = (1,) * (rank - len(shape)) + shape
    return all(shape[d] == 1 for d in dims)


def _affine_step(node: OpNode, chain: str) -> bool:
    """Whether `node` is affine in its operand `chain` (read once, untrailed) where its other operands
    are constant along the reduced dims (checked once those are known)."""
    if node.kind != "pointwise" or node.op not in _AFFINE:
        return False
    at = [i for i, a in enumerate(node.args) if isinstance(a, Ref) and a.name == chain]
    if len(at) != 1 or node.args[at[0]].trail != 0:  # type: ignore[union-attr]
        return False
    # a dividend, a batch norm's input: not a divisor or a batch norm's statistics
    return at[0] == 0 or node.op not in ("div", "batch_norm")


def _spatial_mean_chain(graph: Graph, conv: OpNode) -> tuple[list[OpNode], range] | None:
    """The affine nodes after `conv` up to and including a mean over some of its spatial dims (those
    dims), each the sole reader of the one before and the affine ones' other operands constant along
    those dims; None when the conv's value goes anywhere else."""
    rank = len(conv.shape)
    chain: list[OpNode] = []
    current = conv
    while True:
        nxt = graph.sole_reader(current.name)
        if nxt is None:
            return None
        if nxt.kind == "reduction" and nxt.op == "mean":
            src = nxt.args[0] if nxt.args else None
            if not isinstance(src, Ref) or src.name != current.name or src.trail:
                return None
            d0, d1, _ = reduce_range(nxt, rank)
            if d0 < 2 or d1 <= d0:
                return None
            dims = range(d0, d1)
            names = {s.name for s in chain} | {conv.name}
            others = [a for s in chain for a in s.args if not (isinstance(a, Ref) and a.name in names)]
            if not all(_constant_along(graph, a, rank, dims) for a in others):
                return None
            return [*chain, nxt], dims
        if not _affine_step(nxt, current.name):
            return None
        chain.append(nxt)
        current = nxt


def _mean_call(graph: Graph, conv: OpNode, module: Any, dims: range) -> tuple[str, list[Ref]]:
    """The glue's call ({0} x, {1} the weight, {2} the bias) of the mean over `dims` and the node's
    operands."""
    target = str(conv.fx_node.target)
    params = {v.qualname: v.name for v in graph.inputs}
    weight = params[f"{target}.weight"]
    bias = params.get(f"{target}.bias") if module.bias is not None else None
    transposed = type(module).__name__.startswith("ConvTranspose")
    geometry = f"{tuple(module.stride)!r}, {tuple(module.padding)!r}, {tuple(module.dilation)!r}"
    extra = f"{tuple(module.output_padding)!r}" if transposed else "None"
    x = conv.args[0]
    assert isinstance(x, Ref)
    operands = [Ref(x.name), Ref(weight)] + ([Ref(bias)] if bias else [])
    bias_expr = "{2}" if bias else "None"
    reduced = tuple(d - 2 for d in dims)
    call = f"_conv_spatial_mean({{0}}, {{1}}, {bias_expr}, {transposed}, {geometry}, {extra}, {reduced!r})"
    return call, operands


def lower_conv_means(graph: Graph) -> Graph:
    """The graph with each conv whose output only reaches a mean over spatial dims through affine ops
    constant along them computed as that mean directly (`_conv_spatial_mean`), the ops after it on the
    smaller values (those dims one long)."""
    nodes = list(graph.nodes)
    shapes = dict(graph.shapes)
    changed = False
    for conv in graph.nodes:
        module = _conv_module(graph, conv)
        found = _spatial_mean_chain(graph, conv) if module is not None else None
        x = conv.args[0] if conv.args else None
        if found is None or not isinstance(x, Ref) or x.trail or x.name in graph.opaque:
            continue
        chain, dims = found
        call, operands = _mean_call(graph, conv, module, dims)
        small = tuple(1 if d in dims else n for d, n in enumerate(conv.shape))
        attrs = {"glue": call, "glue_helper": SPATIAL_MEAN_HELPER}
        nodes[nodes.index(conv)] = OpNode(
            conv.name, "conv_spatial_mean", "other", tuple(operands), attrs, small
        )
        shapes[conv.name] = small
        value = small
        for step in chain[:-1]:
            for a in step.args:
                if isinstance(a, Ref) and a.name != conv.name and a.name not in {s.name for s in chain}:
                    value = broadcast_shapes(value, tuple(graph.shapes[a.name]) + (1,) * a.trail)
            shapes[step.name] = value
            nodes[nodes.index(step)] = replace(step, shape=value)
        changed = True
    return replace(graph, nodes=nodes, shapes=shapes) if changed else graph

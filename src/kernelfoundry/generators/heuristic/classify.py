"""Classification of reference operations into the kinds the proposer generates code for.

heavy      library ops kept in torch behind the glue (matmul, linear, bmm, conv, modules holding them)
pointwise  elementwise ops and broadcasts (one output element from the same-index input elements)
reduction  sum / mean / amax / amin / logsumexp over contiguous dimensions
rowop      normalisations over rows: softmax, log-softmax, layer norm, group norm
pooling    max / average / adaptive / power-average pooling windows: kept in torch behind the glue
pool       a fixed max / average window pools.py marked for generation beside generated ops
other      everything else (views, indexing, ...): kept in torch behind the glue

Pure tables; must never import torch.
"""

from __future__ import annotations

KINDS = ("heavy", "pointwise", "reduction", "rowop", "pooling", "pool", "other")
KEPT_IN_TORCH = frozenset({"heavy", "pooling", "other"})  # run by the glue; generated parts sit between them

POINTWISE_OPS = frozenset(
    {
        "add", "sub", "rsub", "mul", "div", "neg", "maximum", "minimum", "pow", "relu", "sigmoid", "tanh",
        "gelu", "exp", "log", "sqrt", "rsqrt", "abs", "clamp", "hardtanh", "leaky_relu", "elu", "selu",
        "softplus", "silu", "mish", "hardswish", "hardsigmoid", "erf", "batch_norm", "square", "relu6",
    }
)  # fmt: skip
REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin", "logsumexp"})
ROW_OPS = frozenset({"softmax", "log_softmax", "layer_norm", "group_norm"})
POOLING_OPS = frozenset(
    {
        f"{kind}_pool{d}d"
        for kind in ("max", "avg", "adaptive_max", "adaptive_avg", "lp", "fractional_max")
        for d in (1, 2, 3)
    }
)
HEAVY_OPS = frozenset(
    {
        "matmul",
        "bmm",
        "linear",
        "addmm",
        "baddbmm",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose2d",
        "module",
    }
)


def classify_op(op: str) -> str:
    if op in POINTWISE_OPS:
        return "pointwise"
    if op in REDUCTION_OPS:
        return "reduction"
    if op in ROW_OPS:
        return "rowop"
    if op in HEAVY_OPS:
        return "heavy"
    if op in POOLING_OPS:
        return "pooling"
    return "other"

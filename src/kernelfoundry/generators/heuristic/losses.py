"""Losses written as the pointwise ops and reductions they are made of, so the fused emitters
generate them: smooth L1 / Huber, MSE and the triplet margin loss (mean reduction).

`decompose_loss` appends synthetic nodes (no fx node: they never go back to torch one by one) and
ends with the loss's own fx node as a `mean`, so the rest of the graph reads it by its name. Other
settings (sum / none reductions, p-norms other than 2, swap) raise UnsupportedGraph and the loss
stays in torch. Pure: graph building only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernelfoundry.generators.heuristic.graph import Operand, Ref, Shape, UnsupportedGraph

Synth = Callable[[str, str, Sequence[Operand], Mapping[str, Any], Shape], Ref]
Final = Callable[[str, Sequence[Operand], Mapping[str, Any]], None]

LOSSES = ("smooth_l1_loss", "huber_loss", "mse_loss", "triplet_margin_loss")


def _broadcast(*shapes: Shape) -> Shape:
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise UnsupportedGraph(f"loss operands of shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def decompose_loss(
    name: str,
    loss: str,
    operands: Sequence[Ref],
    shapes: Mapping[str, Shape],
    settings: Mapping[str, Any],
    synth: Synth,
    final: Final,
) -> None:
    """Append the loss's nodes; `final` adds the last one (a mean over everything) under `name`."""
    if settings.get("reduction", "mean") != "mean":
        raise UnsupportedGraph(f"`{name}`: only the mean reduction of `{loss}` is generated")
    mean = {"dim": None, "keepdim": False}
    if loss in ("smooth_l1_loss", "huber_loss", "mse_loss"):
        a, b = operands
        shape = _broadcast(shapes[a.name], shapes[b.name])
        d = synth(f"{name}_diff", "sub", [a, b], {}, shape)
        if loss == "mse_loss":
            final(name, [synth(f"{name}_sq", "mul", [d, d], {}, shape)], mean)
            return
        # 0.5 m^2 / beta + (|d| - m), m = min(|d|, beta): 0.5 d^2 / beta below beta, |d| - beta / 2 above
        beta = float(settings.get("beta", settings.get("delta", 1.0)))
        if beta <= 0:
            raise UnsupportedGraph(f"`{name}`: beta {beta} is not positive")
        ad = synth(f"{name}_abs", "abs", [d], {}, shape)
        m = synth(f"{name}_min", "clamp", [ad], {"max": beta}, shape)
        sq = synth(f"{name}_sq", "mul", [m, m], {}, shape)
        quad = synth(f"{name}_quad", "mul", [sq, 0.5 / beta], {}, shape)
        lin = synth(f"{name}_lin", "sub", [ad, m], {}, shape)
        total = synth(f"{name}_sum", "add", [quad, lin], {}, shape)
        if loss == "huber_loss":
            total = synth(f"{name}_scaled", "mul", [total, beta], {}, shape)
        final(name, [total], mean)
        return
    anchor, positive, negative = operands
    if float(settings.get("p", 2.0)) != 2.0 or settings.get("swap", False):
        raise UnsupportedGraph(f"`{name}`: only the 2-norm without swap is generated")
    eps = float(settings.get("eps", 1e-6))
    margin = float(settings.get("margin", 1.0))
    distances = []
    for tag, other in (("pos", positive), ("neg", negative)):
        shape = _broadcast(shapes[anchor.name], shapes[other.name])
        d = synth(f"{name}_{tag}_diff", "sub", [anchor, other], {}, shape)
        e = synth(f"{name}_{tag}_eps", "add", [d, eps], {}, shape)
        sq = synth(f"{name}_{tag}_sq", "mul", [e, e], {}, shape)
        total = synth(f"{name}_{tag}_sum", "sum", [sq], {"dim": -1, "keepdim": False}, shape[:-1])
        distances.append(synth(f"{name}_{tag}_dist", "sqrt", [total], {}, shape[:-1]))
    shape = shapes[distances[0].name]
    gap = synth(f"{name}_gap", "sub", distances, {}, shape)
    shifted = synth(f"{name}_margin", "add", [gap, margin], {}, shape)
    final(name, [synth(f"{name}_hinge", "relu", [shifted], {}, shape)], mean)

"""Losses written as the pointwise ops and reductions they are made of, so the fused emitters
generate them: smooth L1 / Huber, MSE and the triplet margin loss (mean reduction), and the KL
divergence (mean, batchmean or sum reduction, probabilities or log-probabilities as target).

`decompose_loss` appends synthetic nodes (no fx node: they never go back to torch one by one) and
ends with the loss's own fx node as a `mean`, so the rest of the graph reads it by its name. Other
settings (sum / none reductions, p-norms other than 2, swap) raise UnsupportedGraph and the loss
stays in torch. Pure: graph building only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernelfoundry.generators.heuristic.graph import Operand, Ref, Shape, UnsupportedGraph, broadcast_shapes

Synth = Callable[[str, str, Sequence[Operand], Mapping[str, Any], Shape], Ref]
Final = Callable[[str, Sequence[Operand], Mapping[str, Any]], None]

LOSSES = ("smooth_l1_loss", "huber_loss", "mse_loss", "triplet_margin_loss", "kl_div")

# The smallest normal float: log of it is finite, so t * log(max(t, FLT_MIN)) is 0 where t is 0 (xlogy)
FLT_MIN = 1.1754943508222875e-38


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
    mean = {"dim": None, "keepdim": False}
    if loss == "kl_div":
        _kl_div(name, operands, shapes, settings, synth, lambda term: final(name, [term], mean))
        return
    if settings.get("reduction", "mean") != "mean":
        raise UnsupportedGraph(f"`{name}`: only the mean reduction of `{loss}` is generated")
    if loss in ("smooth_l1_loss", "huber_loss", "mse_loss"):
        a, b = operands
        shape = broadcast_shapes(shapes[a.name], shapes[b.name])
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
        shape = broadcast_shapes(shapes[anchor.name], shapes[other.name])
        d = synth(f"{name}_{tag}_diff", "sub", [anchor, other], {}, shape)
        e = synth(f"{name}_{tag}_eps", "add", [d, eps], {}, shape)
        sq = synth(f"{name}_{tag}_sq", "mul", [e, e], {}, shape)
        total = synth(f"{name}_{tag}_sum", "sum", [sq], {"dim": -1, "keepdim": False}, shape[:-1])
        distances.append(synth(f"{name}_{tag}_dist", "sqrt", [total], {}, shape[:-1]))
    shape = shapes[distances[0].name]
    gap = synth(f"{name}_gap", "sub", distances, {}, shape)
    shifted = synth(f"{name}_margin", "add", [gap, margin], {}, shape)
    final(name, [synth(f"{name}_hinge", "relu", [shifted], {}, shape)], mean)


def _kl_div(
    name: str,
    operands: Sequence[Ref],
    shapes: Mapping[str, Shape],
    settings: Mapping[str, Any],
    synth: Synth,
    final: Callable[..., None],
) -> None:
    """torch's kl_div: xlogy(t, t) - t * input per element (exp(t) * (t - input) with log_target), then
    the mean; sum is the mean scaled by numel, batchmean the sum over input.size(0)."""
    reduction = settings.get("reduction", "mean")
    if reduction not in ("mean", "batchmean", "sum"):
        raise UnsupportedGraph(f"`{name}`: the {reduction} reduction of `kl_div` is not generated")
    inp, tgt = operands
    shape = broadcast_shapes(shapes[inp.name], shapes[tgt.name])
    if settings.get("log_target", False):
        e = synth(f"{name}_exp", "exp", [tgt], {}, shapes[tgt.name])
        d = synth(f"{name}_diff", "sub", [tgt, inp], {}, shape)
        term = synth(f"{name}_term", "mul", [e, d], {}, shape)
    else:
        positive = synth(f"{name}_tpos", "clamp", [tgt], {"min": FLT_MIN}, shapes[tgt.name])
        log = synth(f"{name}_tlog", "log", [positive], {}, shapes[tgt.name])
        d = synth(f"{name}_diff", "sub", [log, inp], {}, shape)
        term = synth(f"{name}_term", "mul", [tgt, d], {}, shape)
    in_shape = shapes[inp.name]
    numel = 1
    for size in shape:
        numel *= size
    # torch: batchmean of a 0-d input is its sum
    scale = {"mean": 1, "sum": numel, "batchmean": numel / in_shape[0] if in_shape else numel}[reduction]
    if scale != 1:
        term = synth(f"{name}_scaled", "mul", [term, float(scale)], {}, shape)
    final(term)

"""Scalar C expressions for pointwise ops, shared by the C++/OpenMP and CUDA templates.

`expression(op, operands, attrs)` turns one pointwise op into a float expression over operand
expressions; math goes through the `kf_*` helpers of the prelude so the CPU build can use inlinable,
vectorisable approximations (KF_FAST_MATH) and CUDA its device intrinsics. Pure string building; must
never compile anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def literal(x: float) -> str:
    """A float literal C and CUDA accept (inf as INFINITY)."""
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    if math.isnan(x):
        return "NAN"
    return f"{float(x)!r}f"


def expression(op: str, a: Sequence[str], attrs: Mapping[str, Any]) -> str:
    x = a[0]
    match op:
        case "add":
            return f"({a[0]} + {a[1]})"
        case "sub":
            return f"({a[0]} - {a[1]})"
        case "rsub":
            return f"({a[1]} - {a[0]})"
        case "mul":
            return f"({a[0]} * {a[1]})"
        case "div":
            return f"({a[0]} / {a[1]})"
        case "maximum":
            return f"kf_max({a[0]}, {a[1]})"
        case "minimum":
            return f"kf_min({a[0]}, {a[1]})"
        case "neg":
            return f"(-{x})"
        case "square":
            return f"({x} * {x})"
        case "pow":
            e = float(attrs["exponent"])
            if e == 2.0:
                return f"({x} * {x})"
            if e == 1.0:
                return x
            if e == 0.5:
                return f"kf_sqrt({x})"
            if e == 3.0:
                return f"({x} * {x} * {x})"
            return f"powf({x}, {literal(e)})"
        case "relu":
            return f"kf_max({x}, 0.0f)"
        case "relu6":
            return f"kf_min(kf_max({x}, 0.0f), 6.0f)"
        case "sigmoid":
            return f"kf_sigmoid({x})"
        case "tanh":
            return f"kf_tanh({x})"
        case "gelu":
            if attrs.get("approximate", "none") == "tanh":
                return f"kf_gelu_tanh({x})"
            return f"kf_gelu({x})"
        case "erf":
            return f"kf_erf({x})"
        case "exp":
            return f"kf_exp({x})"
        case "log":
            return f"logf({x})"
        case "sqrt":
            return f"kf_sqrt({x})"
        case "rsqrt":
            return f"(1.0f / kf_sqrt({x}))"
        case "abs":
            return f"fabsf({x})"
        case "clamp" | "hardtanh":
            lo = attrs.get("min", attrs.get("min_val", -1.0 if op == "hardtanh" else None))
            hi = attrs.get("max", attrs.get("max_val", 1.0 if op == "hardtanh" else None))
            out = x
            if lo is not None:
                out = f"kf_max({out}, {literal(float(lo))})"
            if hi is not None:
                out = f"kf_min({out}, {literal(float(hi))})"
            return out
        case "leaky_relu":
            slope = literal(float(attrs.get("negative_slope", 0.01)))
            return f"({x} > 0.0f ? {x} : {x} * {slope})"
        case "elu":
            alpha = literal(float(attrs.get("alpha", 1.0)))
            return f"({x} > 0.0f ? {x} : {alpha} * (kf_exp({x}) - 1.0f))"
        case "selu":
            return f"(1.0507009873554805f * ({x} > 0.0f ? {x} : 1.6732632423543772f * (kf_exp({x}) - 1.0f)))"
        case "softplus":
            beta = float(attrs.get("beta", 1.0))
            thr = literal(float(attrs.get("threshold", 20.0)))
            bx = f"({x} * {literal(beta)})"
            return f"({bx} > {thr} ? {x} : kf_log1p(kf_exp({bx})) / {literal(beta)})"
        case "silu":
            return f"({x} * kf_sigmoid({x}))"
        case "mish":
            return f"({x} * kf_tanh({x} > 20.0f ? {x} : kf_log1p(kf_exp({x}))))"
        case "hardswish":
            return f"({x} * kf_min(kf_max({x} + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f))"
        case "hardsigmoid":
            return f"(kf_min(kf_max({x} + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f))"
        case "batch_norm":
            eps = literal(float(attrs["eps"]))
            norm = f"(({a[0]} - {a[1]}) / kf_sqrt({a[2]} + {eps}))"
            return f"({norm} * {a[3]} + {a[4]})" if attrs.get("affine") else norm
    raise KeyError(f"no expression for pointwise op `{op}`")

"""Output phases of a strided transposed conv: which taps reach which output pixels.

A transposed conv of stride S reads input (o + P - k * D) / S for output o at tap k, where that divides.
Along an axis, only the taps with k * D = r + P (mod S) reach the outputs o = r + S j of phase r, and for
them the input is j + (r + P - k * D) / S. Computing every tap and discarding those that do not divide
spends (1 - 1 / S^dims) of a conv's multiplies on zeros (7 in 8 for a 3-D conv of stride 2); computed
phase by phase, each output phase multiplies only its own taps. The conv families bake these tables
(cuda_conv_phases.py on CUDA). Pure.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cpu_conv.py bakes these tables too
    from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan

PhaseTap = tuple[int, int, int, int]  # (the filter's tap index, input offset along D, H, W)


def phased(plan: ConvPlan) -> bool:
    """Whether the conv is computed phase by phase: a transposed conv with a stride above 1."""
    return plan.transposed and any(s > 1 for s in plan.stride)


def axis_taps(k: int, s: int, p: int, d: int, r: int) -> list[tuple[int, int]]:
    """Along one axis, phase r's taps and each one's input offset: (tap, (r + p - tap * d) / s)."""
    return [(t, (r + p - t * d) // s) for t in range(k) if (r + p - t * d) % s == 0]


def phase_counts(plan: ConvPlan, axes: tuple[bool, bool, bool] = (True, True, True)) -> tuple[int, ...]:
    """Phases along each axis: its stride where it is phased, else one."""
    return tuple(s if on else 1 for s, on in zip(plan.stride, axes, strict=True))


def phase_taps(plan: ConvPlan, axes: tuple[bool, bool, bool] = (True, True, True)) -> list[list[PhaseTap]]:
    """Every phase's taps (phase (rd, rh, rw) at index (rd * PH + rh) * PW + rw, P the phase counts;
    taps in (d, h, w) order): the filter's tap index (kd * KH + kh) * KW + kw and the input offsets per
    axis. An axis left unphased (`axes`) has one phase holding every tap at offset -k * D: there the
    position o + P - k * D must still divide by the stride."""
    _, kh, kw = plan.kernel
    geometry = list(zip(plan.kernel, plan.stride, plan.padding, plan.dilation, axes, strict=True))

    def taps(k: int, s: int, p: int, d: int, on: bool, r: int) -> list[tuple[int, int]]:
        return axis_taps(k, s, p, d, r) if on else [(t, -t * d) for t in range(k)]

    phases: list[list[PhaseTap]] = []
    for rd, rh, rw in itertools.product(*(range(n) for n in phase_counts(plan, axes))):
        per_axis = [taps(*g, r) for g, r in zip(geometry, (rd, rh, rw), strict=True)]
        phases.append(
            [
                ((td * kh + th) * kw + tw, od, oh, ow)
                for (td, od), (th, oh), (tw, ow) in itertools.product(*per_axis)
            ]
        )
    return phases

"""Mutation operators: the kinds of change a generation request asks for, and which axis each moves.

The heuristic proposer implements each operator directly; an LLM receives it as the request's intent.
Proposal weights (operator -> weight, tuned by the meta-prompter) bias which operator is asked for.

This module must never perform I/O or read a clock; randomness comes only from a passed random.Random.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from kernelfoundry.domain.descriptors import DESCRIPTOR_AXES
from kernelfoundry.domain.transitions import STAY, Direction

OPERATORS: tuple[str, ...] = ("fusion", "reduction", "tiling", "vectorize", "parallel", "retune")

# Which operators can move a kernel along each axis; STAY (same strategy) means re-tuning.
AXIS_OPERATORS: dict[str, tuple[str, ...]] = {
    **{axis.name: axis.operators for axis in DESCRIPTOR_AXES},
    "stay": ("retune",),
}


def default_weights() -> dict[str, float]:
    return dict.fromkeys(OPERATORS, 1.0)


def operators_for(direction: Direction) -> tuple[str, ...]:
    return AXIS_OPERATORS[direction[0]] if direction != STAY else AXIS_OPERATORS["stay"]


def direction_weight(direction: Direction, weights: Mapping[str, float]) -> float:
    """Mean proposal weight of the operators that realise `direction`, relative to the mean of all."""
    overall = sum(weights.get(op, 1.0) for op in OPERATORS) / len(OPERATORS)
    ops = operators_for(direction)
    mean = sum(weights.get(op, 1.0) for op in ops) / len(ops)
    return mean / overall if overall > 0 else 1.0


def choose_operator(direction: Direction, weights: Mapping[str, float], rng: random.Random) -> str:
    """Pick one operator realising `direction`, in proportion to its proposal weight."""
    ops = operators_for(direction)
    w = [max(weights.get(op, 1.0), 0.0) for op in ops]
    if sum(w) <= 0:
        w = [1.0] * len(ops)
    return rng.choices(ops, weights=w, k=1)[0]

"""Parent selection over the archive: uniform, or guided by the transition statistics.

Guided selection weights each filled cell by how good its elite is times how likely a move out of it
improves fitness (the posterior of transitions.TransitionStats), adds a visit-count bonus (UCB-style:
cells that have bred few children gain weight as others are used) and mixes in an epsilon floor, so no
filled cell ever has zero probability. The direction to move is then drawn by Thompson sampling over the
cell's legal directions, scaled by the proposal weights of the operators that realise each direction.

This module must never perform I/O or read a clock; randomness comes only from a passed random.Random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kernelfoundry.domain.archive import Archive, Cell, Elite
from kernelfoundry.domain.operators import direction_weight
from kernelfoundry.domain.transitions import Direction, TransitionStats, legal_directions


@dataclass(frozen=True)
class ParentChoice:
    elite: Elite
    direction: Direction
    probability: float  # the chance this cell had of being picked


class ParentSelector(Protocol):
    def choose(
        self,
        archive: Archive,
        stats: TransitionStats,
        rng: random.Random,
        operator_weights: Mapping[str, float] | None = None,
    ) -> ParentChoice | None: ...


class UniformSelector:
    """Every filled cell equally likely; every legal direction equally likely (the baseline)."""

    def choose(
        self,
        archive: Archive,
        stats: TransitionStats,
        rng: random.Random,
        operator_weights: Mapping[str, float] | None = None,
    ) -> ParentChoice | None:
        elites = archive.elites()
        if not elites:
            return None
        elite = rng.choice(elites)
        direction = rng.choice(legal_directions(elite.cell))
        return ParentChoice(elite, direction, 1.0 / len(elites))


@dataclass
class GuidedSelector:
    """Fitness x improvement-probability weights, with a visit bonus and an epsilon floor."""

    epsilon: float = 0.1  # share of the probability mass spread uniformly over filled cells
    exploration: float = 0.3  # weight of the visit-count bonus
    sharpness: float = 2.0  # how strongly elite fitness (relative to the best) is preferred

    def weights(self, archive: Archive, stats: TransitionStats) -> dict[Cell, float]:
        """Selection probability of every filled cell (sums to 1)."""
        elites = archive.elites()
        if not elites:
            return {}
        best = max(e.speedup for e in elites)
        total_children = sum(stats.children(e.cell) for e in elites)
        raw: dict[Cell, float] = {}
        for e in elites:
            quality = (e.speedup / best) ** self.sharpness * stats.best_probability(e.cell)
            bonus = self.exploration * math.sqrt(math.log(total_children + 1) / (stats.children(e.cell) + 1))
            raw[e.cell] = quality + bonus
        norm = sum(raw.values())
        n = len(raw)
        return {c: (1 - self.epsilon) * w / norm + self.epsilon / n for c, w in raw.items()}

    def choose_direction(
        self,
        cell: Cell,
        stats: TransitionStats,
        rng: random.Random,
        operator_weights: Mapping[str, float] | None = None,
    ) -> Direction:
        best: tuple[float, Direction] | None = None
        for direction in legal_directions(cell):
            score = stats.sample(cell, direction, rng)
            if operator_weights:
                score *= direction_weight(direction, operator_weights)
            if best is None or score > best[0]:
                best = (score, direction)
        assert best is not None
        return best[1]

    def choose(
        self,
        archive: Archive,
        stats: TransitionStats,
        rng: random.Random,
        operator_weights: Mapping[str, float] | None = None,
    ) -> ParentChoice | None:
        weights = self.weights(archive, stats)
        if not weights:
            return None
        cells = list(weights)
        cell = rng.choices(cells, weights=[weights[c] for c in cells], k=1)[0]
        elite = archive.elite(cell)
        assert elite is not None
        direction = self.choose_direction(cell, stats, rng, operator_weights)
        return ParentChoice(elite, direction, weights[cell])

"""Transition history and gradient signals over the archive's cells.

Every parent cell -> child cell move is recorded with its fitness change. From these moves the module
estimates, per cell and per direction (one axis up or down, or staying in the cell), how likely a move
improves fitness: a Beta posterior whose prior is the same direction's pooled rate over all cells
(empirical Bayes), so a cell with few children borrows strength from the rest of the map. It also keeps
level-to-level statistics per axis, from which it writes short mutation hints for a generation request
("moving parallelism from block barriers to warp/sub-group primitives improved 3 of 4 times").

This module must never perform I/O or read a clock; randomness comes only from a passed random.Random.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from kernelfoundry.domain.descriptors import AXES, DESCRIPTOR_AXES, LEVELS, Cell

Direction = tuple[str, int]  # (axis, +1 | -1), or STAY
STAY: Direction = ("stay", 0)
DEFAULT_IMPROVEMENT_THRESHOLD = 0.02

LEVEL_NAMES: dict[str, tuple[str, ...]] = {axis.name: axis.levels for axis in DESCRIPTOR_AXES}


def legal_directions(cell: Cell) -> list[Direction]:
    """Directions that stay inside the grid from `cell`, STAY included."""
    out: list[Direction] = [STAY]
    for i, axis in enumerate(AXES):
        if cell[i] + 1 < LEVELS:
            out.append((axis, +1))
        if cell[i] - 1 >= 0:
            out.append((axis, -1))
    return out


def step(cell: Cell, direction: Direction) -> Cell:
    """The cell one step from `cell` along `direction` (clamped to the grid)."""
    if direction == STAY:
        return cell
    axis, sign = direction
    i = AXES.index(axis)
    moved = list(cell)
    moved[i] = min(LEVELS - 1, max(0, moved[i] + sign))
    return tuple(moved)


def directions_between(parent: Cell, child: Cell) -> list[Direction]:
    """The axis moves a parent -> child transition made (a jump over several axes credits each)."""
    moved = [(axis, 1 if c > p else -1) for axis, p, c in zip(AXES, parent, child, strict=True) if c != p]
    return moved or [STAY]


@dataclass(frozen=True)
class Transition:
    parent_cell: Cell
    child_cell: Cell
    parent_fitness: float
    child_fitness: float  # 0.0 when the child failed
    improved: bool


class _Tally:
    __slots__ = ("improved", "total")

    def __init__(self, improved: int = 0, total: int = 0) -> None:
        self.improved = improved
        self.total = total

    def add(self, improved: bool) -> None:
        self.total += 1
        self.improved += int(improved)


class TransitionStats:
    """Counts of improving moves per (cell, direction), per direction overall, and per level change."""

    def __init__(
        self, improvement_threshold: float = DEFAULT_IMPROVEMENT_THRESHOLD, prior_strength: float = 2.0
    ) -> None:
        self.improvement_threshold = improvement_threshold
        self.prior_strength = prior_strength
        self._by_cell: dict[tuple[Cell, Direction], _Tally] = {}
        self._by_direction: dict[Direction, _Tally] = {}
        self._by_level: dict[tuple[str, int, int], _Tally] = {}
        self._children: dict[Cell, int] = {}
        self.recorded = 0

    def record(
        self, parent_cell: Cell, child_cell: Cell, parent_fitness: float, child_fitness: float
    ) -> Transition:
        """Record one move; a child counts as improved only when it beats the parent by the threshold."""
        improved = child_fitness > 0 and child_fitness > parent_fitness * (1 + self.improvement_threshold)
        for direction in directions_between(parent_cell, child_cell):
            self._by_cell.setdefault((parent_cell, direction), _Tally()).add(improved)
            self._by_direction.setdefault(direction, _Tally()).add(improved)
            if direction != STAY:
                i = AXES.index(direction[0])
                key = (direction[0], parent_cell[i], child_cell[i])
                self._by_level.setdefault(key, _Tally()).add(improved)
        self._children[parent_cell] = self._children.get(parent_cell, 0) + 1
        self.recorded += 1
        return Transition(parent_cell, child_cell, parent_fitness, child_fitness, improved)

    # -- estimates -----------------------------------------------------------------------------
    def counts(self, cell: Cell, direction: Direction) -> tuple[int, int]:
        """(improved, total) for moves out of `cell` along `direction`."""
        t = self._by_cell.get((cell, direction))
        return (t.improved, t.total) if t else (0, 0)

    def pooled_rate(self, direction: Direction) -> float:
        """Laplace-smoothed improvement rate of `direction` over every cell."""
        t = self._by_direction.get(direction)
        improved, total = (t.improved, t.total) if t else (0, 0)
        return (improved + 1) / (total + 2)

    def _posterior(self, cell: Cell, direction: Direction) -> tuple[float, float]:
        improved, total = self.counts(cell, direction)
        prior = self.pooled_rate(direction)
        alpha = improved + self.prior_strength * prior
        beta = (total - improved) + self.prior_strength * (1 - prior)
        return alpha, beta

    def probability(self, cell: Cell, direction: Direction) -> float:
        """Posterior mean probability that a move from `cell` along `direction` improves fitness."""
        alpha, beta = self._posterior(cell, direction)
        return alpha / (alpha + beta)

    def sample(self, cell: Cell, direction: Direction, rng: random.Random) -> float:
        """A Thompson draw from the same posterior."""
        alpha, beta = self._posterior(cell, direction)
        return rng.betavariate(alpha, beta)

    def best_probability(self, cell: Cell) -> float:
        return max(self.probability(cell, d) for d in legal_directions(cell))

    def children(self, cell: Cell) -> int:
        """How many children were bred from parents in `cell`."""
        return self._children.get(cell, 0)

    def level_counts(self, axis: str, from_level: int, to_level: int) -> tuple[int, int]:
        t = self._by_level.get((axis, from_level, to_level))
        return (t.improved, t.total) if t else (0, 0)

    # -- hints ---------------------------------------------------------------------------------
    def hints(self, cell: Cell, limit: int = 3) -> list[str]:
        """Short hint strings for a parent in `cell`, most informative first."""
        scored: list[tuple[float, int, str]] = []
        for direction in legal_directions(cell):
            if direction == STAY:
                improved, total = self.counts(cell, STAY)
                if total:
                    text = f"re-tuning within this strategy improved {improved} of {total} times"
                    scored.append((_informativeness(improved, total), total, text))
                continue
            axis, sign = direction
            i = AXES.index(axis)
            src, dst = cell[i], cell[i] + sign
            improved, total = self.level_counts(axis, src, dst)
            if not total:
                continue
            names = LEVEL_NAMES[axis]
            text = f"moving {axis} from {names[src]} to {names[dst]} improved {improved} of {total} times"
            scored.append((_informativeness(improved, total), total, text))
        scored.sort(key=lambda s: (-s[0], -s[1], s[2]))
        return [text for _, _, text in scored[:limit]]

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "improvement_threshold": self.improvement_threshold,
            "prior_strength": self.prior_strength,
            "recorded": self.recorded,
            "by_cell": [
                [list(c), list(d), t.improved, t.total] for (c, d), t in sorted(self._by_cell.items())
            ],
            "by_direction": [[list(d), t.improved, t.total] for d, t in sorted(self._by_direction.items())],
            "by_level": [[list(k), t.improved, t.total] for k, t in sorted(self._by_level.items())],
            "children": [[list(c), n] for c, n in sorted(self._children.items())],
        }


def _cell(value: list[int]) -> Cell:
    return tuple(int(v) for v in value)


def _informativeness(improved: int, total: int) -> float:
    """How far the smoothed rate is from a coin flip, weighted by evidence: decisive hints come first."""
    rate = (improved + 1) / (total + 2)
    return abs(rate - 0.5) * total / (total + 1)

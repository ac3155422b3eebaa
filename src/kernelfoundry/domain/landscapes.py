"""Synthetic fitness landscapes over the archive's cells, and a simulated generator, for testing the engine.

A landscape gives every cell a speedup. The simulated generator answers a `GenerationPlan` the way a
real generator roughly behaves: it moves in the asked direction with probability `follow` (else a random
legal step), fails to compile with probability `failure_rate`, and its speedup is the cell's value with
log-normal timing noise. `simulate` drives the real `EvolutionEngine` until the landscape's best cell
holds an elite; the benchmark (bench/landscape_bench.py) and the unit tests compare guided and uniform
selection with it. Nothing here is used in a real run. Cells named below list the memory, algorithm and
parallelism levels; an axis added after them is at level 0 in each (`cell_of`).

This module must never perform I/O or read a clock; randomness comes only from a passed random.Random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from kernelfoundry.domain.archive import ALL_CELLS, Cell
from kernelfoundry.domain.budgets import Budget
from kernelfoundry.domain.descriptors import AXES, Descriptors
from kernelfoundry.domain.engine import EngineConfig, EvolutionEngine, GenerationPlan
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo
from kernelfoundry.domain.transitions import legal_directions, step


def cell_of(*levels: int) -> Cell:
    """A cell from its first levels, the remaining axes at level 0."""
    return (*levels, *(0,) * (len(AXES) - len(levels)))


ORIGIN = cell_of()
RIDGE_PEAK = cell_of(3, 2, 3)
DECEPTIVE_PEAK = cell_of(3, 3, 3)
DECEPTIVE_TRAP = cell_of(2, 0, 0)
RUGGED_PEAK = cell_of(3, 1, 2)


@dataclass(frozen=True)
class Landscape:
    name: str
    values: dict[Cell, float]

    def __call__(self, cell: Cell) -> float:
        return self.values[cell]

    @property
    def best_cell(self) -> Cell:
        return max(ALL_CELLS, key=lambda c: (self.values[c], tuple(-v for v in c)))

    @classmethod
    def from_function(cls, name: str, f: Callable[[Cell], float]) -> Landscape:
        return cls(name, {c: f(c) for c in ALL_CELLS})

    @classmethod
    def ridge(cls, peak: Cell = RIDGE_PEAK, top: float = 4.0, decay: float = 0.7) -> Landscape:
        """One smooth peak: every step towards it pays."""
        return cls.from_function(
            "ridge", lambda c: top * decay ** sum(abs(a - b) for a, b in zip(c, peak, strict=True))
        )

    @classmethod
    def deceptive(cls, peak: Cell = DECEPTIVE_PEAK, trap: Cell = DECEPTIVE_TRAP) -> Landscape:
        """A local optimum near the start and a higher, narrow global one far away."""

        def f(c: Cell) -> float:
            to_trap = sum(abs(a - b) for a, b in zip(c, trap, strict=True))
            to_peak = sum(abs(a - b) for a, b in zip(c, peak, strict=True))
            return max(2.0 * 0.75**to_trap, 5.0 * 0.6**to_peak, 0.5)

        return cls.from_function("deceptive", f)

    @classmethod
    def rugged(cls, seed: int = 7, peak: Cell = RUGGED_PEAK) -> Landscape:
        """A trend towards a peak with seeded random bumps on every cell."""
        rng = random.Random(seed)
        bumps = {c: math.exp(rng.gauss(0, 0.25)) for c in ALL_CELLS}
        base = cls.ridge(peak, top=4.0, decay=0.75).values
        values = {c: base[c] * bumps[c] for c in ALL_CELLS}
        values[peak] = max(values.values()) * 1.2
        return cls("rugged", values)


@dataclass(frozen=True)
class SimulatedGenerator:
    follow: float = 0.6  # probability the child lands where the plan asked
    failure_rate: float = 0.15
    repair_success: float = 0.5
    noise: float = 0.05
    seed_cell: Cell = ORIGIN

    def respond(
        self,
        plan: GenerationPlan,
        candidate_id: str,
        landscape: Landscape,
        rng: random.Random,
        intended: dict[str, Cell],
    ) -> tuple[CandidateInfo, EvaluationInfo]:
        if plan.repair is not None:
            cell = intended.get(plan.repair.candidate_id, self.seed_cell)
            fails = rng.random() >= self.repair_success
        else:
            if plan.parent is None or plan.direction is None:
                cell = self.seed_cell
            elif rng.random() < self.follow:
                cell = step(plan.parent.cell, plan.direction)
            else:
                cell = step(plan.parent.cell, rng.choice(legal_directions(plan.parent.cell)))
            fails = rng.random() < self.failure_rate
        intended[candidate_id] = cell
        candidate = CandidateInfo(
            candidate_id=candidate_id,
            parent_id=plan.parent.candidate_id if plan.parent else None,
            descriptors=Descriptors(*cell),
            generation=plan.generation,
            island=plan.island,
            operator=plan.operator,
            prompt_variant_id=plan.prompt_variant_id,
            repair_of=plan.repair.candidate_id if plan.repair else None,
        )
        if fails:
            evaluation = EvaluationInfo(
                candidate_id,
                False,
                failure_reason="compile_error",
                message="error: simulated compile failure",
            )
        else:
            speedup = landscape(cell) * math.exp(rng.gauss(0, self.noise))
            evaluation = EvaluationInfo(candidate_id, True, speedup=speedup, runtime_s=1e-3 / speedup)
        return candidate, evaluation


@dataclass(frozen=True)
class SimulationResult:
    reached_best: bool
    evaluations: int  # evaluations spent until the best cell held an elite (or the cap)
    best_speedup: float
    cells_filled: int


def simulate(
    landscape: Landscape,
    config: EngineConfig,
    seed: int,
    max_evaluations: int = 1000,
    generator: SimulatedGenerator | None = None,
) -> SimulationResult:
    """Run the engine on `landscape` until its best cell holds an elite or `max_evaluations` are spent."""
    generator = generator or SimulatedGenerator()
    rng = random.Random(seed)
    engine = EvolutionEngine(config, Budget(iterations=None, evaluations=max_evaluations))
    intended: dict[str, Cell] = {}
    target = landscape.best_cell
    evaluations = 0
    while evaluations < max_evaluations:
        plans = engine.plan_generation(now=0.0, rng=rng)
        if not plans:
            break
        for plan in plans:
            evaluations += 1
            candidate, evaluation = generator.respond(plan, f"c{evaluations}", landscape, rng, intended)
            engine.record_evaluation(candidate, evaluation)
            if engine.merged_archive().elite(target) is not None:
                best = engine.best()
                return SimulationResult(
                    True, evaluations, best.speedup if best else 0.0, len(engine.merged_archive())
                )
            if evaluations >= max_evaluations:
                break
    best = engine.best()
    return SimulationResult(False, evaluations, best.speedup if best else 0.0, len(engine.merged_archive()))

"""Budgets and stopping: generations, wall time, evaluations, patience (generations without a new best),
and a search that has nothing new to try (BARREN_GENERATIONS generations in a row that brought no new
kernel, only ones already evaluated or none: asking again would spend requests, and a model's tokens,
on nothing).

`Budget` is what a task asks for (kernelfoundry.tasks.model.Task.budget holds one); `BudgetTracker`
follows a run against it. Time is always passed in (`now`, seconds on any monotonic scale shared with
`started_at`); the tracker never reads a clock. The first limit reached names the stop reason.

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Budget:
    iterations: int = 8
    wall_time_s: float | None = None
    evaluations: int | None = None
    patience: int | None = None  # stop after this many generations without improvement


BARREN_GENERATIONS = 3


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str | None = None  # iterations | wall_time | evaluations | patience | nothing_new

    def __bool__(self) -> bool:
        return self.stop


class BudgetTracker:
    def __init__(self, budget: Budget, started_at: float) -> None:
        self.budget = budget
        self.started_at = started_at
        self.generations = 0
        self.evaluations = 0
        self.best_fitness = 0.0
        self.stale_generations = 0  # generations started since the best last improved
        self._improved_since_generation = False
        self.barren_generations = 0  # generations in a row that brought no new candidate

    def generation_ended(self, new_candidates: int) -> None:
        """The last generation's outcome: how many candidates it sent for evaluation (new ones only)."""
        self.barren_generations = 0 if new_candidates else self.barren_generations + 1

    def generation_started(self) -> None:
        if self.generations > 0:
            if self._improved_since_generation:
                self.stale_generations = 0
            else:
                self.stale_generations += 1
        self._improved_since_generation = False
        self.generations += 1

    def evaluation_finished(self, fitness: float) -> bool:
        """Count an evaluation; return True when it raised the best fitness of the run."""
        self.evaluations += 1
        if fitness > self.best_fitness:
            self.best_fitness = fitness
            self._improved_since_generation = True
            return True
        return False

    def evaluations_left(self, in_flight: int = 0) -> int | None:
        """How many more candidates may be sent for evaluation with `in_flight` already out; None
        without an evaluation budget. The budget is a hard cap, not a check between generations."""
        if self.budget.evaluations is None:
            return None
        return max(0, self.budget.evaluations - self.evaluations - in_flight)

    def check(self, now: float) -> StopDecision:
        b = self.budget
        if b.iterations is not None and self.generations >= b.iterations:
            return StopDecision(True, "iterations")
        if b.wall_time_s is not None and now - self.started_at >= b.wall_time_s:
            return StopDecision(True, "wall_time")
        if b.evaluations is not None and self.evaluations >= b.evaluations:
            return StopDecision(True, "evaluations")
        if b.patience is not None and self.stale_generations >= b.patience:
            return StopDecision(True, "patience")
        if self.barren_generations >= BARREN_GENERATIONS:
            return StopDecision(True, "nothing_new")
        return StopDecision(False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "generations": self.generations,
            "evaluations": self.evaluations,
            "best_fitness": self.best_fitness,
            "stale_generations": self.stale_generations,
            "barren_generations": self.barren_generations,
            "improved_since_generation": self._improved_since_generation,
        }

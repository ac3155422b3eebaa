"""Budgets and stopping: generations, wall time, evaluations, and patience (generations without a new best).

Time is always passed in (`now`, seconds on any monotonic scale shared with `started_at`); the tracker
never reads a clock. The first limit reached names the stop reason.

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelfoundry.tasks.model import Budget


@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str | None = None  # iterations | wall_time | evaluations | patience

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
        return StopDecision(False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "generations": self.generations,
            "evaluations": self.evaluations,
            "best_fitness": self.best_fitness,
            "stale_generations": self.stale_generations,
            "improved_since_generation": self._improved_since_generation,
        }

    @classmethod
    def from_dict(cls, budget: Budget, data: Mapping[str, Any]) -> BudgetTracker:
        tracker = cls(budget, float(data["started_at"]))
        tracker.generations = int(data["generations"])
        tracker.evaluations = int(data["evaluations"])
        tracker.best_fitness = float(data["best_fitness"])
        tracker.stale_generations = int(data["stale_generations"])
        tracker._improved_since_generation = bool(data["improved_since_generation"])
        return tracker

"""Outcome of every evaluated child, and the counts a run reports.

A child is `failed:<reason>` when its evaluation failed; otherwise `new_cell` when it opened a cell,
`elite_replaced` when it displaced a cell's elite, and else `improvement`, `neutral` or `regression`
measured against its parent's fitness (a band around 1.0 counts as neutral: timings are noisy).

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from kernelfoundry.domain.archive import Placement
from kernelfoundry.domain.evaluation import EvaluationInfo

DEFAULT_NEUTRAL_BAND = 0.02


class OutcomeKind(StrEnum):
    IMPROVEMENT = "improvement"
    NEUTRAL = "neutral"
    REGRESSION = "regression"
    NEW_CELL = "new_cell"
    ELITE_REPLACED = "elite_replaced"
    FAILED = "failed"


# The outcomes that credit a generator with progress (an ensemble weighs its members by them).
IMPROVING = frozenset({OutcomeKind.IMPROVEMENT, OutcomeKind.NEW_CELL, OutcomeKind.ELITE_REPLACED})


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    fitness: float  # 0.0 for a failure, never positive
    parent_fitness: float | None = None
    reason: str | None = None  # the failure reason code, for FAILED only
    global_best: bool = False  # this child raised the run's best fitness

    @property
    def label(self) -> str:
        return f"failed:{self.reason}" if self.kind is OutcomeKind.FAILED else self.kind.value

    @property
    def relative_change(self) -> float:
        """Fitness change relative to the parent (or to the reference, speedup 1.0, for a seed)."""
        base = self.parent_fitness if self.parent_fitness else 1.0
        return self.fitness / base - 1.0


def classify_outcome(
    evaluation: EvaluationInfo,
    placement: Placement,
    parent_fitness: float | None,
    neutral_band: float = DEFAULT_NEUTRAL_BAND,
    global_best: bool = False,
) -> Outcome:
    if evaluation.failed:
        return Outcome(OutcomeKind.FAILED, 0.0, parent_fitness, evaluation.reason)
    fitness = evaluation.fitness
    if placement is Placement.NEW_CELL:
        kind = OutcomeKind.NEW_CELL
    elif placement is Placement.ELITE_REPLACED:
        kind = OutcomeKind.ELITE_REPLACED
    elif parent_fitness is None or parent_fitness <= 0:
        kind = OutcomeKind.NEUTRAL
    elif fitness > parent_fitness * (1 + neutral_band):
        kind = OutcomeKind.IMPROVEMENT
    elif fitness < parent_fitness * (1 - neutral_band):
        kind = OutcomeKind.REGRESSION
    else:
        kind = OutcomeKind.NEUTRAL
    return Outcome(kind, fitness, parent_fitness, None, global_best)


class OutcomeCounts:
    """How many children ended each way, keyed by outcome label. Mergeable across islands and runs."""

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts: Counter[str] = Counter(dict(counts or {}))

    def add(self, outcome: Outcome | str) -> None:
        self._counts[outcome.label if isinstance(outcome, Outcome) else outcome] += 1

    def merge(self, other: OutcomeCounts) -> OutcomeCounts:
        return OutcomeCounts(self._counts + other._counts)

    def __getitem__(self, label: str) -> int:
        return self._counts.get(label, 0)

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    @property
    def failed(self) -> int:
        return sum(n for label, n in self._counts.items() if label.startswith("failed:"))

    def to_dict(self) -> dict[str, int]:
        return dict(sorted(self._counts.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutcomeCounts) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"OutcomeCounts({self.to_dict()})"

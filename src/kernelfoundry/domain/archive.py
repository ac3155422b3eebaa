"""The MAP-Elites archive: one elite per behavioural cell (one level per descriptor axis: memory x
algorithm x parallelism, 64 cells).

Each cell keeps its elite - the correct candidate with the highest speedup that landed there - and the
history of every candidate that landed there (failed ones included, so a client can see where the search
struggles). An incorrect or failed candidate never becomes an elite; a tie never displaces the incumbent.
The archive is rebuilt exactly by replaying (candidate, evaluation) records in order (`Archive.replay`),
and its state reads as plain data (`to_dict`) for comparison.

This module must never perform I/O, read a clock or draw random numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kernelfoundry.domain.descriptors import AXES, LEVELS, Cell, Descriptors
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo
from kernelfoundry.domain.kernel import TunableValue

ALL_CELLS: tuple[Cell, ...] = tuple(itertools.product(range(LEVELS), repeat=len(AXES)))


class Placement(StrEnum):
    NEW_CELL = "new_cell"  # first elite of an empty cell
    ELITE_REPLACED = "elite_replaced"  # beat the cell's incumbent
    NOT_BETTER = "not_better"  # correct, but the incumbent stays
    REJECTED = "rejected"  # failed or incorrect: never an elite


@dataclass(frozen=True)
class Elite:
    candidate_id: str
    cell: Cell
    speedup: float
    generation: int = 0
    parent_id: str | None = None
    params: Mapping[str, TunableValue] = field(default_factory=dict)
    shape: str = "default"

    @property
    def descriptors(self) -> Descriptors:
        return Descriptors(*self.cell)

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id,
            "cell": list(self.cell),
            "speedup": self.speedup,
            "generation": self.generation,
            "parent_id": self.parent_id,
            "params": dict(self.params),
            "shape": self.shape,
        }


@dataclass(frozen=True)
class CellVisit:
    """One candidate that landed in a cell: its speedup (None when it failed) and what became of it."""

    candidate_id: str
    speedup: float | None
    placement: Placement
    reason: str | None = None


def _cell(value: Iterable[int]) -> Cell:
    return Descriptors.from_cell(value).cell


class Archive:
    """One MAP-Elites grid. `history_limit` caps the visits kept per cell (None keeps all)."""

    def __init__(self, history_limit: int | None = 256) -> None:
        self.history_limit = history_limit
        self._elites: dict[Cell, Elite] = {}
        self._history: dict[Cell, list[CellVisit]] = {}
        self._visits: dict[Cell, int] = {}

    # -- updates -------------------------------------------------------------------------------
    def offer(self, candidate: CandidateInfo, evaluation: EvaluationInfo) -> Placement:
        """Place an evaluated candidate; return what happened to it."""
        cell = candidate.descriptors.cell
        if evaluation.failed:
            self._remember(
                cell, CellVisit(candidate.candidate_id, None, Placement.REJECTED, evaluation.reason)
            )
            return Placement.REJECTED
        elite = Elite(
            candidate_id=candidate.candidate_id,
            cell=cell,
            speedup=evaluation.fitness,
            generation=candidate.generation,
            parent_id=candidate.parent_id,
            params=dict(candidate.params),
            shape=candidate.shape,
        )
        return self.offer_elite(elite)

    def offer_elite(self, elite: Elite) -> Placement:
        """Place an already-correct entry (a migrant from another island, or a restored elite)."""
        if not elite.speedup > 0:
            self._remember(elite.cell, CellVisit(elite.candidate_id, None, Placement.REJECTED, "no_timing"))
            return Placement.REJECTED
        incumbent = self._elites.get(elite.cell)
        if incumbent is None:
            placement = Placement.NEW_CELL
        elif elite.speedup > incumbent.speedup:
            placement = Placement.ELITE_REPLACED
        else:
            placement = Placement.NOT_BETTER
        if placement is not Placement.NOT_BETTER:
            self._elites[elite.cell] = elite
        self._remember(elite.cell, CellVisit(elite.candidate_id, elite.speedup, placement))
        return placement

    def _remember(self, cell: Cell, visit: CellVisit) -> None:
        self._visits[cell] = self._visits.get(cell, 0) + 1
        history = self._history.setdefault(cell, [])
        history.append(visit)
        if self.history_limit is not None and len(history) > self.history_limit:
            del history[: len(history) - self.history_limit]

    # -- queries -------------------------------------------------------------------------------
    def elite(self, cell: Cell) -> Elite | None:
        return self._elites.get(cell)

    def elites(self) -> list[Elite]:
        return [self._elites[c] for c in sorted(self._elites)]

    def best(self) -> Elite | None:
        if not self._elites:
            return None
        # highest speedup; the lowest cell breaks ties so the answer is deterministic
        return max(self.elites(), key=lambda e: (e.speedup, tuple(-v for v in e.cell)))

    def history(self, cell: Cell) -> tuple[CellVisit, ...]:
        return tuple(self._history.get(cell, ()))

    def visits(self, cell: Cell) -> int:
        return self._visits.get(cell, 0)

    def top(self, n: int) -> list[Elite]:
        return sorted(self.elites(), key=lambda e: (-e.speedup, e.cell))[:n]

    def __len__(self) -> int:
        return len(self._elites)

    def summary(self) -> dict[str, Any]:
        """Everything a client needs to draw the 4x4x4 map."""
        best = self.best()
        return {
            "axes": list(AXES),
            "levels": LEVELS,
            "cells_total": len(ALL_CELLS),
            "cells_filled": len(self._elites),
            "coverage": len(self._elites) / len(ALL_CELLS),
            "best": best.to_dict() if best else None,
            "cells": [
                {
                    "cell": list(e.cell),
                    "speedup": e.speedup,
                    "candidate_id": e.candidate_id,
                    "visits": self.visits(e.cell),
                }
                for e in self.elites()
            ],
        }

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "history_limit": self.history_limit,
            "elites": [e.to_dict() for e in self.elites()],
            "visits": [[list(c), n] for c, n in sorted(self._visits.items())],
            "history": [
                [
                    list(c),
                    [[v.candidate_id, v.speedup, v.placement.value, v.reason] for v in visits],
                ]
                for c, visits in sorted(self._history.items())
            ],
        }

    @classmethod
    def replay(
        cls, records: Iterable[tuple[CandidateInfo, EvaluationInfo]], history_limit: int | None = 256
    ) -> Archive:
        """Rebuild an archive from the recorded (candidate, evaluation) pairs, in their order."""
        archive = cls(history_limit=history_limit)
        for candidate, evaluation in records:
            archive.offer(candidate, evaluation)
        return archive
